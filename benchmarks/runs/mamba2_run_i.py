"""Ninth GPU pass on the cuTile SSD: the latency hints of the three-kernel pass's state kernel
(``ssd.STATE_LATENCY``: its loads of x, of B and of the step sizes, and its stores of the
states), on the two shapes with few sequences (TileGym autotuned beat us on (1, 65536, 64));
TileGym's own state kernel tunes such hints (4 or 6 on x, 2 or 4 on B and the step sizes, 2 on
its stores). Chunks 64 and 128, occupancy 2, each shape with the state tile ``ssd.state_tile``
picks for it ((64, 32) for 64 sequences, (64, 16) for 32: the hints are data by tile, so each
shape sets its own). One line a result; M2OUT names a folder for results_i.csv.

    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_i.py
"""
import csv, faulthandler, itertools, os, sys, time, traceback
faulthandler.dump_traceback_later(int(os.environ.get("WD", "500")), exit=True)
import torch
sys.path.insert(0, ".")
from kernels.mamba2 import ssd
from benchmarks.mamba2 import make_inputs, measure, reference

OUT = os.environ.get("M2OUT", "/tmp")
t0 = time.time()
rows = []
HINTS = sorted({(lx, lb, lb, ls) for lx, lb, ls in itertools.product((0, 2, 4, 6), (0, 2, 4), (0, 2))} | {(2, 2, 0, 0)})


def say(*a):
    print(f"[{time.time() - t0:5.0f}s]", *a, flush=True)


def timed(shape, args, kw, ref, chunk, tile, hints):
    """The suite's measurement (benchmarks.mamba2.measure) of the three-kernel pass under one set of hints."""
    base_tile, base_lat = ssd.state_tile, ssd.STATE_LATENCY
    try:
        ssd.state_tile = lambda p, n, work: tile
        ssd.STATE_LATENCY = {(16, tile[1]): hints}
        row = dict(shape=shape, chunk=chunk, tile=tile, hints=hints, **measure("ours_fused", args, kw, chunk, ref, 15))
        row.pop("kernels", None)  # names unreliable across rebuilds in one process (run F)
        say(*(f"{k}={v}" for k, v in row.items()))
        rows.append(row)
    except Exception:
        say(shape, chunk, tile, hints, "FAIL", traceback.format_exc()[-600:])
    finally:
        ssd.state_tile, ssd.STATE_LATENCY = base_tile, base_lat
        torch.cuda.empty_cache()


for shape in ((1, 65536, 64, 64, 128, 1), (4, 16384, 8, 64, 128, 1)):
    args, kw = make_inputs(*shape, torch.bfloat16, seed=1)
    ref = reference(args, kw)
    for chunk in (64, 128):
        tile = ssd.state_tile(shape[3], shape[4], shape[0] * shape[2])
        for hints in HINTS:
            timed(shape, args, kw, ref, chunk, tile, hints)
    del args, kw, ref
    with open(os.path.join(OUT, "results_i.csv"), "w", newline="") as f:  # after each shape
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["shape"])
        w.writeheader(); w.writerows(rows)
say("done")

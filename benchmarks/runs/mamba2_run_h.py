"""Eighth GPU pass on the cuTile SSD: how the three-kernel pass's state kernel walks the chunks
(``state_kernel``'s WALK: 0 each chunk's loads in its own step, 1 a chunk ahead, 2 two chunks a
step), on the two shapes with few sequences, where the state kernel is the one sequential
part and TileGym autotuned beat us on (1, 65536, 64); chunks 64 and 128, occupancy 2 and 4,
the state tile ``ssd.state_tile`` picks. One line a result; M2OUT names a folder for
results_h.csv.

    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_h.py
"""
import csv, faulthandler, os, sys, time, traceback
faulthandler.dump_traceback_later(int(os.environ.get("WD", "400")), exit=True)
import torch
sys.path.insert(0, ".")
from kernels.mamba2 import ssd
from benchmarks.mamba2 import make_inputs, measure, reference

OUT = os.environ.get("M2OUT", "/tmp")
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s]", *a, flush=True)


def timed(shape, args, kw, ref, chunk, walk, occupancy):
    """The suite's measurement (benchmarks.mamba2.measure) of the three-kernel pass under one walk."""
    try:
        ssd.STATE_WALK[16] = walk
        ssd.set_hints("state", 16, occupancy=occupancy)
        row = dict(shape=shape, chunk=chunk, walk=walk, occupancy=occupancy,
                   **measure("ours_fused", args, kw, chunk, ref, 15))
        row.pop("kernels", None)  # names unreliable across rebuilds in one process (run F)
        say(*(f"{k}={v}" for k, v in row.items()))
        rows.append(row)
    except Exception:
        say(shape, chunk, walk, occupancy, "FAIL", traceback.format_exc()[-600:])
    finally:
        ssd.STATE_WALK.pop(16, None)
        ssd.set_hints("state", 16, occupancy=ssd.STATE_OCCUPANCY)
        torch.cuda.empty_cache()


for shape in ((4, 16384, 8, 64, 128, 1), (1, 65536, 64, 64, 128, 1)):
    args, kw = make_inputs(*shape, torch.bfloat16, seed=1)
    ref = reference(args, kw)
    for chunk in (64, 128):
        for walk in (0, 1, 2):
            for occupancy in (2, 4):
                timed(shape, args, kw, ref, chunk, walk, occupancy)
    del args, kw, ref
with open(os.path.join(OUT, "results_h.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["shape"])
    w.writeheader(); w.writerows(rows)
say("done")

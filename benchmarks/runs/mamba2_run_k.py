"""Eleventh GPU pass on the cuTile SSD, on (1, 65536, 64) at chunk 64: the state kernel with the
smaller (64, 16) tile (512 blocks) at occupancy 2 and 4, under the latency hints that did best in
runs I and J, against the (64, 32) tile with run J's best. One line a result; M2OUT names a
folder for results_k.csv.

    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_k.py
"""
import csv, faulthandler, os, sys, time, traceback
faulthandler.dump_traceback_later(int(os.environ.get("WD", "300")), exit=True)
import torch
sys.path.insert(0, ".")
from kernels.mamba2 import ssd
from benchmarks.mamba2 import make_inputs, measure, reference

OUT = os.environ.get("M2OUT", "/tmp")
SHAPE, CHUNK = (1, 65536, 64, 64, 128, 1), 64
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s]", *a, flush=True)


def timed(tile, occupancy, hints):
    base_tile, base_lat = ssd.state_tile, ssd.STATE_LATENCY
    try:
        ssd.state_tile = lambda p, n, work: tile
        ssd.STATE_LATENCY = {(16, tile[1]): hints}
        ssd.set_hints("state", 16, occupancy=occupancy)
        row = dict(tile=tile, occupancy=occupancy, state_hints=hints, **measure("ours_fused", args, kw, CHUNK, ref, 15))
        say(*(f"{k}={v}" for k, v in row.items()))
        rows.append(row)
    except Exception:
        say(tile, occupancy, hints, "FAIL", traceback.format_exc()[-600:])
    finally:
        ssd.state_tile, ssd.STATE_LATENCY = base_tile, base_lat
        ssd.set_hints("state", 16, occupancy=ssd.STATE_OCCUPANCY)
        torch.cuda.empty_cache()


args, kw = make_inputs(*SHAPE, torch.bfloat16, seed=1)
ref = reference(args, kw)
timed((64, 32), 2, (6, 4, 4, 2))
for occupancy in (4, 2):
    for hints in ((2, 4, 4, 2), (6, 4, 4, 2), (4, 4, 4, 2), (2, 2, 2, 2), (0, 4, 4, 0), (7, 4, 4, 3), (2, 2, 0, 0), (0, 0, 0, 0)):
        timed((64, 16), occupancy, hints)
timed((64, 32), 2, (6, 4, 4, 2))
with open(os.path.join(OUT, "results_k.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["tile"])
    w.writeheader(); w.writerows(rows)
say("done")

"""Sixth GPU pass on the cuTile SSD (prepared, not yet run): the three-kernel pass's state kernel
on the two shapes with few sequences, where TileGym autotuned beats us (chapter 10, section 7).
Its state tile (ours picks (64, 16) there), its occupancy hint, and the load-latency hint of its
loads of x and B (``tiles.STATE_LOAD_LATENCY``, read when the kernels compile: one process per
value, given as M2LAT, "none" for the compiler's choice). Chunks 64 and 128. One line a result;
M2OUT names a folder for results_<M2LAT>.csv.

    for lat in none 2; do M2LAT=$lat bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_f.py; done

Without a GPU (export_cubins, (1, 65536, 64, 64, 128) chunk 64): with latency 2 the state kernel
grows from 9856 to 14336 bytes of code and from 27.1 to 46.4 KiB of shared memory a block (deeper
load buffering is our reading of it); 4, 6 and 8 keep the size of no hint, and at the default
tile and occupancy 6 compiles to the same code as none, so they are left out. Estimated (not
measured) at about 110 s a value on the H200 (24 measurements and two float64 references).
"""
import csv, faulthandler, os, sys, time, traceback
faulthandler.dump_traceback_later(int(os.environ.get("WD", "280")), exit=True)
import torch
sys.path.insert(0, ".")
LAT = os.environ.get("M2LAT", "none")
import kernels.mamba2.tiles as tiles
tiles.STATE_LOAD_LATENCY = None if LAT == "none" else int(LAT)
from kernels.mamba2 import ssd
from benchmarks.mamba2 import make_inputs, measure, reference

OUT = os.environ.get("M2OUT", "/tmp")
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s] lat={LAT}", *a, flush=True)


def timed(shape, args, kw, ref, chunk, tile, occupancy):
    """The suite's measurement (benchmarks.mamba2.measure: first call, errors against float64,
    median time, per-kernel times) of the three-kernel pass under one state-kernel variant."""
    base_tile = ssd.state_tile
    try:
        ssd.state_tile = lambda p, n, work: tile
        ssd.set_hints("state", 16, occupancy=occupancy)
        row = dict(latency=LAT, shape=shape, chunk=chunk, tile=tile, occupancy=occupancy,
                   **measure("ours_fused", args, kw, chunk, ref, 15))
        say(*(f"{k}={v}" for k, v in row.items()))
        rows.append(row)
    except Exception:
        say(shape, chunk, tile, occupancy, "FAIL", traceback.format_exc()[-600:])
    finally:
        ssd.state_tile = base_tile
        ssd.set_hints("state", 16, occupancy=4)
        torch.cuda.empty_cache()


for shape in ((4, 16384, 8, 64, 128, 1), (1, 65536, 64, 64, 128, 1)):
    args, kw = make_inputs(*shape, torch.bfloat16, seed=1)
    ref = reference(args, kw)
    for chunk in (64, 128):
        for tile in ((64, 16), (64, 32), (64, 64)):
            for occupancy in (4, 2):
                timed(shape, args, kw, ref, chunk, tile, occupancy)
    del args, kw, ref
with open(os.path.join(OUT, f"results_{LAT}.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["latency"])
    w.writeheader(); w.writerows(rows)
say("done")

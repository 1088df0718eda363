"""Sixth GPU pass on the cuTile SSD (prepared, not yet run): the three-kernel pass's state kernel
on the two shapes with few sequences, where TileGym autotuned beats us (chapter 10, section 7).
Its state tile (ours picks (64, 16) there), its occupancy hint, and the load-latency hint of its
loads of x and B (``tiles.STATE_LOAD_LATENCY``, read when the kernels compile: one process per
value, given as M2LAT, "none" for the compiler's choice). Chunks 64 and 128. One line a result;
M2OUT names a folder for results_<M2LAT>.csv.

    for lat in none 6 4; do M2LAT=$lat python benchmarks/runs/mamba2_run_f.py; done
"""
import csv, faulthandler, os, sys, time, traceback
faulthandler.dump_traceback_later(int(os.environ.get("WD", "280")), exit=True)
import torch
sys.path.insert(0, ".")
LAT = os.environ.get("M2LAT", "none")
import kernels.mamba2.tiles as tiles
tiles.STATE_LOAD_LATENCY = None if LAT == "none" else int(LAT)
from kernels.mamba2 import ssd, reference as R
from benchmarks import harness as H
from benchmarks.mamba2 import make_inputs, rel_err, kernel_times

OUT = os.environ.get("M2OUT", "/tmp")
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s] lat={LAT}", *a, flush=True)


def timed(shape, chunk, tile, occupancy, check=False):
    base_tile = ssd.state_tile
    try:
        ssd.state_tile = lambda p, n, work: tile
        ssd.set_hints("state", 16, occupancy=occupancy)
        args, kw = make_inputs(*shape, torch.bfloat16, seed=1)
        x, dt, A, B, C = args
        fn = lambda: ssd.mamba_chunk_scan_combined(x, dt, A, B, C, chunk, **kw, return_final_states=True,
                                                   impl="fused")
        t = time.time(); o, f = fn(); torch.cuda.synchronize(); first = time.time() - t
        err = ""
        if check:
            ref = R.ssd_reference(x.double(), dt, A, B.double(), C.double(), 64, **kw, return_final_states=True)
            err = "err %.2e/%.2e" % (rel_err(o, ref[0]), rel_err(f, ref[1]))
            del ref
        del o, f
        us = H.time_ms(fn, warmup=3, rep=15) * 1e3
        ks = kernel_times(fn, 2)
        say(shape, chunk, tile, f"occ {occupancy}", f"{us:.1f} us", err, f"first {first:.1f}s", ks[:160])
        rows.append(dict(latency=LAT, shape=shape, chunk=chunk, tile=tile, occupancy=occupancy, us=round(us, 1),
                         err=err, kernels=ks))
    except Exception:
        say(shape, chunk, tile, occupancy, "FAIL", traceback.format_exc()[-600:])
    finally:
        ssd.state_tile = base_tile
        ssd.set_hints("state", 16, occupancy=4)
        torch.cuda.empty_cache()


for shape in ((4, 16384, 8, 64, 128, 1), (1, 65536, 64, 64, 128, 1)):
    for chunk in (64, 128):
        for tile in ((64, 16), (64, 32), (64, 64)):
            for occupancy in (4, 2):
                timed(shape, chunk, tile, occupancy, check=(chunk == 64 and tile == (64, 32) and occupancy == 2
                                                            and shape[0] == 4))
with open(os.path.join(OUT, f"results_{LAT}.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["latency"])
    w.writeheader(); w.writerows(rows)
say("done")

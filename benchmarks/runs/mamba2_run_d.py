"""Fourth GPU pass on the cuTile SSD: variants of the one-kernel pass (which stages a prep launch
takes over, steps a block, occupancy) and of the three-kernel pass (state tile, chunk) on the main
shape (8, 4096, 64, 64, 128, 1) bf16 and the two long-sequence shapes; then TileGym's cuTile
forward at chunk 64 on the main shape (its autotuning timed). One line a result; M2OUT names a
folder for results.csv."""
import faulthandler, os, sys, time, traceback, csv
faulthandler.dump_traceback_later(int(os.environ.get("WD", "500")), exit=True)
import torch
sys.path.insert(0, ".")
from kernels.mamba2 import ssd, reference as R
from benchmarks import harness as H
from benchmarks import peers_mamba2 as peers
from benchmarks.mamba2 import make_inputs, rel_err, kernel_times, as_tilegym_features
OUT = os.environ.get("M2OUT", "/tmp")
t0 = time.time()
rows = []
def say(*a):
    print(f"[{time.time()-t0:5.0f}s]", *a, flush=True)

def timed(tag, shape, impl, Q=64, scan=None, hints=None, tile=None, check=False):
    base_scan, base_tile = dict(ssd.SCAN), ssd.state_tile
    try:
        ssd.SCAN.update(scan or {})
        for k, h in (hints or {}).items():
            ssd.set_hints(k, 16, **h)
        if tile is not None:
            ssd.state_tile = lambda p, n, work: tile
        args, kw = make_inputs(*shape, torch.bfloat16, seed=1)
        x, dt, A, B, C = args
        fn = lambda: ssd.mamba_chunk_scan_combined(x, dt, A, B, C, Q, **kw, return_final_states=True, impl=impl)
        t = time.time(); o, f = fn(); torch.cuda.synchronize(); first = time.time() - t
        err = ""
        if check:
            ref = R.ssd_reference(x.double(), dt, A, B.double(), C.double(), 64, **kw, return_final_states=True)
            err = "err %.2e/%.2e" % (rel_err(o, ref[0]), rel_err(f, ref[1]))
            del ref
        del o, f
        us = H.time_ms(fn, warmup=3, rep=15) * 1e3
        ks = kernel_times(fn, 2)
        say(tag, shape, impl, Q, scan, hints, tile, f"{us:.1f} us", err, f"first {first:.1f}s", ks[:160])
        rows.append(dict(tag=tag, shape=shape, impl=impl, chunk=Q, scan=scan, hints=hints, tile=tile, us=round(us, 1),
                         err=err, kernels=ks))
    except Exception:
        say(tag, shape, impl, scan, hints, tile, "FAIL", traceback.format_exc()[-600:])
    finally:
        ssd.SCAN.clear(); ssd.SCAN.update(base_scan)
        ssd.state_tile = base_tile
        for k in (hints or {}):
            ssd.set_hints(k, 16, **({"occupancy": 4} if k != "scan" else {}))
        torch.cuda.empty_cache()

main = (8, 4096, 64, 64, 128, 1)
P, PB = dict(pre_cs=True), dict(pre_cs=True, pre_cb=True)
timed("single", main, "single", 64, P, check=True)
timed("single", main, "single", 64, PB, check=True)
timed("single", main, "single", 64, dict(pre_cb=True))
timed("single", main, "single", 64, PB, {"scan": {"occupancy": 2}})
timed("single", main, "single", 64, P, {"scan": {"occupancy": 2}})
timed("single", main, "single", 128, dict(steps=128))
timed("single", main, "single", 128, dict(steps=128, **PB), check=True)
timed("fused", main, "fused", 64, tile=(64, 128))
timed("fused", main, "fused", 64, hints={"state": {"occupancy": 2}})
timed("fused", main, "fused", 64, hints={"chunk_scan": {"occupancy": 2}})
timed("fused", main, "fused", 128)
timed("fused", main, "fused", 256)
for shape in ((4, 16384, 8, 64, 128, 1), (1, 65536, 64, 64, 128, 1), (8, 4096, 80, 64, 128, 1), (8, 4096, 64, 64, 128, 8)):
    timed("other", shape, "fused", 64)
    timed("other", shape, "fused", 128)
    timed("other", shape, "single", 64, PB)
with open(os.path.join(OUT, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["tag"])
    w.writeheader(); w.writerows(rows)
# TileGym at chunk 64, main shape, autotuned
try:
    args, kw = make_inputs(*main, torch.bfloat16, seed=1)
    targs, tkw = as_tilegym_features(args, kw)
    f = peers.tilegym_forward()
    ta = peers.tilegym_args(*targs, 64, **tkw)
    t = time.time(); f(*ta); f(*ta); torch.cuda.synchronize(); first = time.time() - t
    us = H.time_ms(lambda: f(*ta), warmup=3, rep=15) * 1e3
    say("tilegym", main, 64, f"{us:.1f} us", f"first (autotune) {first:.1f}s", kernel_times(lambda: f(*ta), 2)[:300])
except Exception:
    say("tilegym FAIL", traceback.format_exc()[-600:])
say("done")

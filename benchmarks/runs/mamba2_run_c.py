"""Third GPU pass on the cuTile SSD: the one-kernel pass (impl="single").

1. Correctness of "single" against the float64 reference (bf16 and fp32; ragged L; g = 1, 2, h;
   chunk 16/64/256; every optional input).
2. The main shape (8, 4096, 64, 64, 128, 1) bf16: "single" under its compiler-hint and
   state-tile variants, against "fused" (three kernels), per-kernel times from the profiler.
3. The long-sequence shapes (4, 16384, 8, ...) and (1, 65536, 64, ...): "single" with state tiles
   of 64/32/16 columns against "fused", to set scan_tile's rule.
Prints one line a result; M2OUT names a folder for results.csv."""
import faulthandler, os, sys, time, traceback, csv
faulthandler.dump_traceback_later(int(os.environ.get("WD", "400")), exit=True)
import torch
sys.path.insert(0, ".")
from kernels.mamba2 import ssd, reference as R
from benchmarks import harness as H
from benchmarks.mamba2 import make_inputs, rel_err, kernel_times
OUT = os.environ.get("M2OUT", "/tmp")
t0 = time.time()
rows = []
def say(*a):
    print(f"[{time.time()-t0:5.0f}s]", *a, flush=True)

def run(args, kw, Q, impl):
    x, dt, A, B, C = args
    return ssd.mamba_chunk_scan_combined(x, dt, A, B, C, Q, **kw, return_final_states=True, impl=impl)

# 1. correctness
for shape, dtype in [((2, 1000, 8, 64, 128, 1), torch.bfloat16), ((2, 1000, 8, 64, 128, 2), torch.float32),
                     ((1, 300, 16, 32, 64, 16), torch.bfloat16), ((3, 777, 8, 128, 128, 8), torch.bfloat16),
                     ((1, 4096, 4, 64, 256, 1), torch.bfloat16)]:
    for Q in (16, 64, 256):
        try:
            args, kw = make_inputs(*shape, dtype, seed=Q)
            x, dt, A, B, C = args
            ref = R.ssd_reference(x.double(), dt, A, B.double(), C.double(), 64, **kw, return_final_states=True)
            for impl in ("single", "fused"):
                o, f = run(args, kw, Q, impl)
                say("check", shape, str(dtype)[6:], Q, impl, "out %.2e state %.2e" % (rel_err(o, ref[0]), rel_err(f, ref[1])))
        except Exception:
            say("check", shape, str(dtype)[6:], Q, "FAIL", traceback.format_exc()[-600:])

def timed(tag, shape, impl, Q=64, hints=None, bp=None, dtype=torch.bfloat16):
    base = ssd.scan_tile
    try:
        if hints is not None:
            ssd.set_hints("scan", 16, **hints)
        if bp is not None:
            ssd.scan_tile = lambda p, work: bp
        args, kw = make_inputs(*shape, dtype, seed=1)
        fn = lambda: run(args, kw, Q, impl)
        t = time.time(); fn(); torch.cuda.synchronize(); first = time.time() - t
        us = H.time_ms(fn, warmup=3, rep=15) * 1e3
        ks = kernel_times(fn, 2)
        say(tag, shape, str(dtype)[6:], impl, Q, hints, bp, f"{us:.1f} us", f"first {first:.1f}s", ks[:200])
        rows.append(dict(tag=tag, shape=shape, impl=impl, chunk=Q, hints=hints, bp=bp, us=round(us, 1), kernels=ks))
    except Exception:
        say(tag, shape, impl, hints, bp, "FAIL", traceback.format_exc()[-600:])
    finally:
        ssd.scan_tile = base
        ssd.set_hints("scan", 16)
        torch.cuda.empty_cache()

# 2. main shape
main = (8, 4096, 64, 64, 128, 1)
timed("main", main, "fused", 64)
for hints in ({}, {"occupancy": 1}, {"occupancy": 2}):
    timed("main", main, "single", 64, hints)
timed("main", main, "single", 64, {}, 32)
timed("main", main, "single", 64, {"occupancy": 2}, 32)
timed("main-fp32", main, "fused", 64, dtype=torch.float32)
timed("main-fp32", main, "single", 64, dtype=torch.float32)
# 3. long sequences
for shape in ((4, 16384, 8, 64, 128, 1), (1, 65536, 64, 64, 128, 1)):
    timed("long", shape, "fused", 64)
    for bp in (64, 32, 16):
        timed("long", shape, "single", 64, {}, bp)
    timed("long", shape, "single", 64, {"occupancy": 2}, 16)
with open(os.path.join(OUT, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["tag"])
    w.writeheader(); w.writerows(rows)
say("done")

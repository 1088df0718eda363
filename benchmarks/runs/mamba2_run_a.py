import faulthandler, os, sys, time, statistics, traceback
faulthandler.dump_traceback_later(int(os.environ.get("WD", "200")), exit=True)
import torch
sys.path.insert(0, ".")
from kernels.mamba2 import ssd
from torch.profiler import profile, ProfilerActivity

def tms(fn, rep=10):
    for _ in range(2): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rep):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)

def per_kernel(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(); torch.cuda.synchronize()
    ks = {}
    for ev in prof.events():
        if ev.device_type.name == "CUDA":
            k = ev.name.split("_kernel")[0][:20]
            ks[k] = ks.get(k, 0) + ev.device_time
    return {k: round(v, 1) for k, v in ks.items()}

g = torch.Generator(device="cuda").manual_seed(0)
b, L, h, p, n = 8, 4096, 64, 64, 128
x = torch.randn(b, L, h, p, device="cuda", generator=g).bfloat16()
B = torch.randn(b, L, 1, n, device="cuda", generator=g).bfloat16(); C = torch.randn_like(B)
dt = torch.randn(b, L, h, device="cuda", generator=g) * 0.5 - 1
A = -torch.rand(h, device="cuda") - 0.5; D = torch.randn(h, device="cuda"); bias = torch.randn(h, device="cuda") * 0.1
init = torch.randn(b, h, p, n, device="cuda")
t0 = time.time()
for occ in (None, 2, 4):
    for k in ("state", "chunk_scan", "bmm"):
        ssd.set_hints(k, **({} if occ is None else {"occupancy": occ}))
    for Q in (64, 128, 256):
        for impl in (("fused", "staged") if occ is None else ("fused",)):
            try:
                f = lambda: ssd.mamba_chunk_scan_combined(x, dt, A, B, C, Q, D=D, initial_states=init, dt_bias=bias,
                                                          dt_softplus=True, return_final_states=True, impl=impl)
                us = tms(f)
                print(f"[{time.time()-t0:5.0f}s] occ={occ} Q={Q} {impl} {us:.1f} us", per_kernel(f), flush=True)
            except Exception:
                print("FAIL", occ, Q, impl, traceback.format_exc()[-500:], flush=True)
try:
    from benchmarks.peers_mamba2 import mamba_ssm_triton
    tri = mamba_ssm_triton()
    for Q in (64, 128, 256):
        f = lambda: tri(x, dt, A, B, C, Q, D=D, initial_states=init, dt_bias=bias, dt_softplus=True, return_final_states=True)
        f(); f()
        print(f"[{time.time()-t0:5.0f}s] triton Q={Q} {tms(f):.1f} us", per_kernel(f), flush=True)
except Exception:
    print("triton FAIL", traceback.format_exc()[-600:], flush=True)

"""One norm backward kernel alone, for a sanitizer or a repeat test: RMSNorm's ("rms") or
LayerNorm's ("ln") at N, dtype and M rows, optionally in clusters of ``--cluster`` blocks of
``--threads`` threads (default: the table's); prints the error against float64 and, with
``--reps R``, how many of R - 1 more runs gave the first run's bits.

    compute-sanitizer --tool synccheck --report-api-errors no python -m benchmarks.norm_backward_check rms 50257 fp32 37
    python -m benchmarks.norm_backward_check ln 262144 fp32 64 --reps 300
"""
import argparse, math, dataclasses, torch, kernels
from kernels.config import row_config
from kernels.norm_backward import rmsnorm_backward_out, layernorm_backward_out
p = argparse.ArgumentParser()
p.add_argument("op"); p.add_argument("n", type=int); p.add_argument("dtype"); p.add_argument("m", type=int)
p.add_argument("--cluster", type=int, default=0); p.add_argument("--threads", type=int, default=0)
p.add_argument("--reps", type=int, default=1)
a = p.parse_args()
dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
bits = torch.finfo(dt).bits
cfg = None
table = "rmsnorm_bwd" if a.op == "rms" else "layernorm_bwd"
if a.cluster or a.threads:
    c0 = row_config(table, a.n, bits)
    c, t = a.cluster or c0.cluster_n, a.threads or c0.threads_per_row
    cfg = dataclasses.replace(c0, cluster_n=c, threads_per_row=t, threads_per_block=t,
                              vecs_per_thread=math.ceil(a.n / (c * t * c0.vec)))
torch.manual_seed(0)
x = torch.randn(a.m, a.n, device="cuda", dtype=dt); w = torch.randn(a.n, device="cuda", dtype=dt)
dy = torch.randn_like(x)
xf = x.double(); rstd = torch.rsqrt(xf.pow(2).mean(-1) + 1e-6)
mean, var = xf.mean(-1), xf.var(-1, unbiased=False); lrstd = torch.rsqrt(var + 1e-5)
def run():
    dx = torch.empty_like(x)
    if a.op == "rms":
        dw = rmsnorm_backward_out(dy, x, w, rstd.float(), dx, config=cfg); return dx, (dw,)
    dw, db = layernorm_backward_out(dy, x, w, mean.float(), lrstd.float(), dx, config=cfg); return dx, (dw, db)
dx0, g0 = run(); torch.cuda.synchronize()
# reference
if a.op == "rms":
    xh = xf * rstd[:, None]; g = dy.double() * w.double()
    rdx = rstd[:, None] * (g - xh * (g * xh).mean(-1, keepdim=True)); rg = ((dy.double() * xh).sum(0),)
else:
    xh = (xf - mean[:, None]) * lrstd[:, None]; g = dy.double() * w.double()
    rdx = lrstd[:, None] * (g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True))
    rg = ((dy.double() * xh).sum(0), dy.double().sum(0))
err = (dx0.double() - rdx).abs().max().item() / rdx.abs().max().item()
gerr = max(((a_.double() - b_).abs().max() / b_.abs().max()).item() for a_, b_ in zip(g0, rg))
same = 0
for _ in range(a.reps - 1):
    dx, g = run()
    same += int(torch.equal(dx, dx0) and all(torch.equal(u, v) for u, v in zip(g, g0)))
torch.cuda.synchronize()
print(f"{a.op} n={a.n} {a.dtype} m={a.m} cfg={cfg} dx_relerr={err:.2e} dw_relerr={gerr:.2e} bitwise_same={same}/{a.reps-1}", flush=True)

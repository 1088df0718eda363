"""One norm backward kernel alone, for a sanitizer or a repeat test: RMSNorm's ("rms") or
LayerNorm's ("ln") at N, dtype and M rows, optionally in clusters of ``--cluster`` blocks of
``--threads`` threads (default: the table's); prints the error against float64 and, with
``--reps R``, how many of R - 1 more runs gave the first run's bits.

    compute-sanitizer --tool synccheck --report-api-errors no python -m benchmarks.norm_backward_check rms 50257 fp32 37
    python -m benchmarks.norm_backward_check ln 262144 fp32 64 --reps 300

The saved statistics and the float64 reference are computed on the host, so that a sanitizer
sees no kernel but the one checked.
"""
import argparse
import dataclasses
import math
import sys

import torch

from kernels.config import row_config
from kernels.norm_backward import layernorm_backward_out, rmsnorm_backward_out

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def config(op: str, n: int, bits: int, cluster: int, threads: int):
    """The table's shape for the row, with ``cluster`` and ``threads`` in place of its own (None:
    the table's, as the public call takes it)."""
    if not (cluster or threads):
        return None
    c0 = row_config("rmsnorm_bwd" if op == "rms" else "layernorm_bwd", n, bits)
    c, t = cluster or c0.cluster_n, threads or c0.threads_per_row
    return dataclasses.replace(c0, cluster_n=c, threads_per_row=t, threads_per_block=t,
                               vecs_per_thread=math.ceil(n / (c * t * c0.vec)))


def reference(op: str, dy, x, w, mean, rstd):
    """(dx, dweight[, dbias]) in float64 (the inputs float64, on any device)."""
    xhat = (x - mean[:, None]) * rstd[:, None] if op == "ln" else x * rstd[:, None]
    g = dy * w
    if op == "rms":
        return rstd[:, None] * (g - xhat * (g * xhat).mean(-1, keepdim=True)), (dy * xhat).sum(0)
    dx = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (dy * xhat).sum(0), dy.sum(0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("op", choices=("rms", "ln"))
    p.add_argument("n", type=int)
    p.add_argument("dtype", choices=list(DTYPES))
    p.add_argument("m", type=int)
    p.add_argument("--cluster", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--reps", type=int, default=1)
    a = p.parse_args(argv)
    dt = DTYPES[a.dtype]
    cfg = config(a.op, a.n, torch.finfo(dt).bits, a.cluster, a.threads)
    torch.manual_seed(0)
    x, dy = torch.randn(a.m, a.n, device="cuda", dtype=dt), torch.randn(a.m, a.n, device="cuda", dtype=dt)
    w = torch.randn(a.n, device="cuda", dtype=dt)
    x64, dy64, w64 = x.double().cpu(), dy.double().cpu(), w.double().cpu()
    if a.op == "rms":
        mean, rstd = torch.zeros(a.m, dtype=torch.float64), torch.rsqrt(x64.pow(2).mean(-1) + 1e-6)
        stats = (rstd.float().cuda(),)
    else:
        mean, rstd = x64.mean(-1), torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5)
        stats = (mean.float().cuda(), rstd.float().cuda())
    want = reference(a.op, dy64, x64, w64, mean, rstd)

    def run():
        dx = torch.empty_like(x)
        if a.op == "rms":
            return dx, (rmsnorm_backward_out(dy, x, w, *stats, dx, config=cfg),)
        return dx, tuple(layernorm_backward_out(dy, x, w, *stats, dx, config=cfg))
    dx0, g0 = run()
    torch.cuda.synchronize()
    rel = lambda got, ref: ((got.double().cpu() - ref).abs().max() / ref.abs().max()).item()
    same = 0
    for _ in range(a.reps - 1):
        dx, g = run()
        same += int(torch.equal(dx, dx0) and all(torch.equal(u, v) for u, v in zip(g, g0)))
    torch.cuda.synchronize()
    print(f"{a.op} n={a.n} {a.dtype} m={a.m} cfg={cfg} dx_relerr={rel(dx0, want[0]):.2e} "
          f"dw_relerr={max(rel(u, v) for u, v in zip(g0, want[1:])):.2e} bitwise_same={same}/{a.reps - 1}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

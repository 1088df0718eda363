"""Every forward and backward kernel once, at ragged and cluster row lengths (odd N included,
and views that start inside a 16-byte word: the rows' aligned windows and their edges), for
compute-sanitizer (``bash benchmarks/h200.sh sanitize`` runs it under memcheck, racecheck and
synccheck, with ``--report-api-errors no``: the DSL probes driver symbols, which the sanitizer
would report as host API errors that are not kernel errors).

    compute-sanitizer --tool memcheck --report-api-errors no python -m benchmarks.sanitize [--n 3001 ...]
        [--dtype bf16 ...]

``--n``, ``--dtype`` and ``--offset`` run a slice of the points, so that the slices run side by
side (the sanitizer's instrumentation is slow on the host: racecheck over every point took past
170 s, and at N = 262144 one (N, dtype) slice of three offsets past 370 s).
"""
import argparse
import sys

import torch

import kernels
from kernels.cross_entropy import cross_entropy_backward_out
from kernels.norm_backward import layernorm_backward_out, rmsnorm_backward_out
from kernels.softmax import softmax_backward_out

NS = (1, 3001, 50257, 131071, 262144)
#: Offsets (elements) of the misaligned views, each at every N.
OFFSETS = (0, 1, 7)


def run(n: int, dt: torch.dtype, offset: int = 0) -> None:
    m = 3 if n > 65536 else 37
    x = torch.randn(m * n + offset, device="cuda", dtype=dt)[offset:].view(m, n)
    # the weight and bias start where x does in their 16-byte words, and 3 elements later
    w = torch.randn(n + offset, device="cuda", dtype=dt)[offset:]
    b = torch.randn(n + offset + 3, device="cuda", dtype=dt)[offset + 3:]
    t = torch.randint(0, n, (m,), device="cuda")
    if offset == 0 and x.numel() % 8 == 0:  # copy takes aligned tensors whose size is a multiple of 16 bytes
        kernels.copy(x)
    kernels.reduce_rows(x)
    y = kernels.rmsnorm(x, w)
    kernels.layernorm(x, w, b)
    p = kernels.softmax(x)
    loss, lse = kernels.cross_entropy(x, t, reduction="none", return_lse=True)
    kernels.cross_entropy(x, t)
    dy = torch.randn_like(y)
    softmax_backward_out(dy, p, torch.empty_like(p))
    cross_entropy_backward_out(torch.ones(m, device="cuda"), x, t, lse, torch.empty_like(x))
    # the saved statistics computed on the host: racecheck reports PyTorch's own reduction
    # kernels (its mean and var over a row), whose warp-synchronous exchanges it cannot see
    # through, and this script checks ours
    xf = x.double().cpu()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + 1e-6).float().cuda()
    rmsnorm_backward_out(dy, x, w, rstd, torch.empty_like(x))
    mean, var = xf.mean(-1), xf.var(-1, unbiased=False)
    layernorm_backward_out(dy, x, w, mean.float().cuda(), torch.rsqrt(var + 1e-5).float().cuda(),
                           torch.empty_like(x))
    torch.cuda.synchronize()
    kernels.check_errors()


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=list(NS))
    p.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--offset", type=int, nargs="+", default=list(OFFSETS), choices=list(OFFSETS))
    a = p.parse_args(argv)
    for n in a.n:
        for dt in (DTYPES[d] for d in a.dtype):
            for offset in a.offset:
                run(n, dt, offset)
            print(f"ran every kernel at N = {n}, {dt}, views at offsets {tuple(a.offset)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

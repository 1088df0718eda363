"""Every forward and backward kernel once, at ragged and cluster row lengths (odd N included,
and views that start inside a 16-byte word: the rows' aligned windows and their edges), for
compute-sanitizer (``bash benchmarks/h200.sh sanitize`` runs it under memcheck, racecheck and
synccheck, with ``--report-api-errors no``: the DSL probes driver symbols, which the sanitizer
would report as host API errors that are not kernel errors).

    compute-sanitizer --tool memcheck --report-api-errors no python -m benchmarks.sanitize
"""
import sys

import torch

import kernels
from kernels.cross_entropy import cross_entropy_backward_out
from kernels.norm_backward import layernorm_backward_out, longest, rmsnorm_backward_out
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
    if n <= longest(dt):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
        rmsnorm_backward_out(dy, x, w, rstd, torch.empty_like(x))
        xf = x.float()
        layernorm_backward_out(dy, x, w, xf.mean(-1), torch.rsqrt(xf.var(-1, unbiased=False) + 1e-5),
                               torch.empty_like(x))
    torch.cuda.synchronize()
    kernels.check_errors()


def main() -> int:
    for n in NS:
        for dt in (torch.bfloat16, torch.float32):
            for offset in OFFSETS:
                run(n, dt, offset)
            print(f"ran every kernel at N = {n}, {dt}, views at offsets {OFFSETS}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

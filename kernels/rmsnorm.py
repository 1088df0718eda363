"""RMSNorm forward: y = x / sqrt(mean(x^2) + eps) * weight, row by row.

Bytes that must move: read x (M*N), read weight (N, once; it stays in L2), write y
(M*N). On top of the row reduction the op adds the sum of squares as what is folded
and ``x * rstd * w`` as the epilogue; the row is kept in registers between the two,
so x is read from memory exactly once.
"""
from __future__ import annotations

import torch

import cutlass.cute as cute
from cutlass import Float32

from . import validate
from .compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector
from .config import RowConfig, row_config
from .reduce import SUMSQ
from .rowkernel import RowKernel


class RMSNorm(RowKernel):
    op = SUMSQ
    keep_row = True
    #: A staged row's copies in two commit groups, its fold starting on the first half: 96.5%
    #: of the copy ceiling against 96.1% at bf16 64k, 96.4 against 96.2 at 128k, 94.0 against
    #: 93.8 at fp32 256k, each faster in all three rounds; 95.2 either way at bf16 256k
    #: (benchmarks/runs/stage_groups.py, book/data/stage_groups.csv, H200). Softmax gained
    #: nothing from it (-0.1 to +0.2 points) and keeps one group.
    stage_groups = 2

    def row_epilogue(self, x, result, w, eps):
        rstd = cute.math.rsqrt(result[0] / self.n + eps, fastmath=True)
        y = x * rstd
        if w is not None:
            y = y * w
        return y


def compile_rmsnorm(dtype: torch.dtype, n: int, has_weight: bool = True, *, config: RowConfig | None = None,
                    vec: int | None = None):
    cfg = config or row_config(n, torch.finfo(dtype).bits, keep_row=True, vec=vec, op="rmsnorm")
    ct = TORCH_TO_CUTE[dtype]
    key = ("rmsnorm", str(dtype), n, cfg, has_weight)
    return compile_once(key, lambda: (RMSNorm(ct, n, cfg), (
        fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), fake_vector(ct, n, cfg.vec) if has_weight else None,
        None, None, Float32(1e-6), fake_stream())))


def rmsnorm_out(x: torch.Tensor, weight: torch.Tensor | None, out: torch.Tensor, eps: float = 1e-6,
                config: RowConfig | None = None) -> torch.Tensor:
    """Validate, then write rmsnorm(x) into ``out`` (same shape and dtype as x)."""
    validate.check_rows(x, cuda=False)
    n = x.shape[-1]
    if weight is not None:
        if not isinstance(weight, torch.Tensor) or weight.shape != (n,):
            raise ValueError(f"weight must have shape ({n},), got {tuple(getattr(weight, 'shape', ()))}")
        validate.check_same_device(x, weight, "weight")
        if weight.dtype != x.dtype:
            raise TypeError(f"weight dtype {weight.dtype} must match x dtype {x.dtype}")
        if not weight.is_contiguous():
            raise ValueError("weight must be contiguous")
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError("out must have x's shape, dtype and device")
    validate.check_cuda(x, "x")
    rows, orows = validate.as_rows(x), validate.as_rows(out, "out")
    if rows.shape[0] == 0:
        return out
    vec = validate.access_width(n, (rows, orows), () if weight is None else (weight,))
    kernel = compile_rmsnorm(x.dtype, n, weight is not None, config=config, vec=vec)
    kernel(rows, orows, weight, None, None, float(eps))
    return out


def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *,
            config: RowConfig | None = None) -> torch.Tensor:
    """RMSNorm over the last dim of x (fp32, bf16 or fp16; any leading shape)."""
    validate.check_rows(x, cuda=False)
    return rmsnorm_out(x, weight, torch.empty_like(x, memory_format=torch.contiguous_format), eps, config)


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return y * weight.double() if weight is not None else y

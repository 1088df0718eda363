"""Softmax forward over the last dim, in one pass over memory.

Bytes that must move: read x, write y (2 * M * N elements). The row is loaded once
into registers; the toolkit reduces the pair (max, sum of exp(x - max)) in a single
exchange per tier (an *online* softmax); the epilogue writes exp(x - max) / sum from
the registers. A three-pass design (max, then sum, then write, each reading x from
memory) moves twice the bytes.
"""
from __future__ import annotations

import torch

import cutlass.cute as cute
from cutlass import Float32

from . import validate
from .compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream
from .config import RowConfig, row_config
from .reduce import LOGSUMEXP, exp_minus
from .rowkernel import RowKernel


class Softmax(RowKernel):
    op = LOGSUMEXP
    keep_row = True

    def row_epilogue(self, x, result, w, scalar):
        row_max, denom = result
        e = exp_minus(x, row_max)  # subtract first, as the fold does
        return e * cute.arch.rcp_approx(denom)


def compile_softmax(dtype: torch.dtype, n: int, *, config: RowConfig | None = None, vec: int | None = None):
    cfg = config or row_config(n, torch.finfo(dtype).bits, keep_row=True, vec=vec, op="softmax")
    ct = TORCH_TO_CUTE[dtype]
    key = ("softmax", str(dtype), n, cfg)
    return compile_once(key, lambda: (Softmax(ct, n, cfg), (
        fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), None, None, None, Float32(0.0), fake_stream())))


def softmax_out(x: torch.Tensor, out: torch.Tensor, config: RowConfig | None = None) -> torch.Tensor:
    validate.check_rows(x)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError("out must have x's shape, dtype and device")
    rows, orows = validate.as_rows(x), validate.as_rows(out, "out")
    if rows.shape[0] == 0:
        return out
    n = x.shape[-1]
    vec = validate.access_width(n, (rows, orows))
    compile_softmax(x.dtype, n, config=config, vec=vec)(rows, orows, None, None, None, 0.0)
    return out


def softmax(x: torch.Tensor, dim: int = -1, *, config: RowConfig | None = None) -> torch.Tensor:
    """Softmax of x along ``dim`` (only the last dim is supported)."""
    validate.check_rows(x, cuda=False)
    if dim not in (-1, x.dim() - 1):
        raise ValueError(f"softmax supports only the last dim (dim=-1), got dim={dim}")
    return softmax_out(x, torch.empty_like(x, memory_format=torch.contiguous_format), config)


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)

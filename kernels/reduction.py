"""Row reductions: ``reduce_rows(x, "sum" | "max")`` -> one fp32 per row.

The kernel that chapters 3-6 take apart: the row is loaded once with 128-bit loads
into registers and reduced tier by tier. ``max_tier`` caps the highest tier used,
so a chapter can show what each tier buys. A reduction needs its row only once, so
by default (``stream=True``) it folds the row pass by pass; ``stream=False`` holds
the whole row in registers at once, as RMSNorm and softmax must (and shows where a
tier runs out of registers).
"""
from __future__ import annotations

import torch

from . import validate
from .compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector
from .config import RowConfig, row_config
from .reduce import MAX, SUM, Combine
from .rowkernel import RowKernel

import cutlass.cute as cute
from cutlass import Float32

OPS = {"sum": SUM, "max": MAX}


class RowReduce(RowKernel):
    writes_rows = False

    def __init__(self, dtype, n: int, cfg: RowConfig, op: Combine, keep_row: bool):
        self.op, self.keep_row = op, keep_row
        super().__init__(dtype, n, cfg)

    @cute.jit
    def scalar_epilogue(self, result, row, mX, mT, mErr, scalar, pre):
        return result[0]


def reduce_config(n: int, dtype: torch.dtype, *, max_tier: str = "cluster", stream: bool = True,
                  vec: int | None = None) -> RowConfig:
    # A kept reduction holds its row in registers: it never reads the row again, so
    # staging it in shared memory would buy nothing (and chapters 5-6 show its registers).
    return row_config(n, torch.finfo(dtype).bits, keep_row=not stream, vec=vec, max_tier=max_tier,
                      stage=None if stream else "reg", op="row_sum" if stream else None)


def compile_reduce(dtype: torch.dtype, n: int, op: str = "sum", *, max_tier: str = "cluster",
                   stream: bool = True, config: RowConfig | None = None, vec: int | None = None):
    """Compile (once) the row reduction for rows of n elements; usable without a GPU."""
    if op not in OPS:
        raise ValueError(f"op must be one of {sorted(OPS)}, got {op!r}")
    cfg = config or reduce_config(n, dtype, max_tier=max_tier, stream=stream, vec=vec)
    ct = TORCH_TO_CUTE[dtype]
    key = ("reduce_rows", op, str(dtype), n, cfg, stream)
    return compile_once(key, lambda: (RowReduce(ct, n, cfg, OPS[op], keep_row=not stream), (
        fake_rows(ct, n, cfg.vec), fake_vector(Float32, cute.sym_int()), None, None, None, Float32(0.0),
        fake_stream())))


def reduce_rows(x: torch.Tensor, op: str = "sum", *, max_tier: str = "cluster", stream: bool = True,
                config: RowConfig | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce each row of x (..., N) with ``op`` ("sum" or "max"); returns fp32 of shape x.shape[:-1]."""
    validate.check_rows(x)
    rows = validate.as_rows(x)
    m, n = rows.shape
    if out is None:
        out = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    elif out.dtype != torch.float32 or out.shape != x.shape[:-1] or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous float32 tensor of shape {tuple(x.shape[:-1])}")
    if m == 0:
        return out
    vec = validate.access_width(n, (rows,))
    kernel = compile_reduce(x.dtype, n, op, max_tier=max_tier, stream=stream, config=config, vec=vec)
    kernel(rows, out.view(-1), None, None, None, 0.0)
    return out


def reduce_rows_reference(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """The float64 reference."""
    x64 = x.double()
    return x64.sum(-1) if op == "sum" else x64.amax(-1)

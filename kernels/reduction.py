"""Row reductions: ``reduce_rows(x, "sum" | "max")`` -> one fp32 per row.

The kernel that chapters 3-6 take apart: the row is loaded once with 128-bit loads and
reduced tier by tier. ``max_tier`` caps the highest tier used, so a chapter can show what
each tier buys. A reduction needs its row only once, so by default (``stream=True``) it folds
the row pass by pass; ``stream=False`` holds the whole row in registers at once, as RMSNorm
and softmax must (and shows where a tier runs out of registers).
"""
from __future__ import annotations

import torch

from . import validate
from .config import row_config
from .reduce import MAX, SUM
from .rowkernel import RowOp

OPS = {"sum": SUM, "max": MAX}


class RowReduce(RowOp):
    """options: (reduction name, max_tier, stream)."""

    row_out = ("out",)
    default_present = ("out",)
    default_options = ("sum", "cluster", True)

    def __init__(self, dtype, n, cfg, present, in_dtypes, op: str, max_tier: str, stream: bool):
        self.reductions = (OPS[op],)
        super().__init__(dtype, n, cfg, present, in_dtypes)

    @classmethod
    def configure(cls, n, elem_bits, vec, options, head=False):
        op, max_tier, stream = options
        return row_config("row_reduce" if stream else "row_reduce_kept", n, elem_bits, vec=vec, max_tier=max_tier,
                          head=head)

    def row_values(self, io, b, results, pre):
        return {"out": results[0][0]}


def reduce_config(n: int, dtype: torch.dtype, *, max_tier: str = "cluster", stream: bool = True,
                  vec: int | None = None):
    """The configuration ``reduce_rows`` takes for rows of n elements."""
    return RowReduce.configure(n, torch.finfo(dtype).bits, vec, ("sum", max_tier, stream))


def compile_reduce(dtype: torch.dtype, n: int, op: str = "sum", *, max_tier: str = "cluster",
                   stream: bool = True, config=None, vec: int | None = None):
    """Compile (once) the row reduction for rows of n elements; usable without a GPU."""
    return RowReduce.compile(dtype, n, vec, config=config, options=_options(op, max_tier, stream))


def _options(op, max_tier, stream):
    if op not in OPS:
        raise ValueError(f"op must be one of {sorted(OPS)}, got {op!r}")
    return (op, max_tier, bool(stream))


def reduce_rows(x: torch.Tensor, op: str = "sum", *, max_tier: str = "cluster", stream: bool = True,
                config=None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce each row of x (..., N) with ``op`` ("sum" or "max"); returns fp32 of shape x.shape[:-1]."""
    if (op == "sum" and max_tier == "cluster" and stream and config is None and out is None and type(x) is torch.Tensor
            and x.ndim == 2 and x.shape[0] and not (x.requires_grad and torch.is_grad_enabled())):
        fn = RowReduce.fast.get((x.dtype, x.shape[1]))  # the fast path: see kernels.functional._plain
        if fn is not None:
            out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
            try:
                fn((x, out))
                return out
            except (ValueError, TypeError):
                out = None
    rows = validate.rows(x, cuda=False)
    validate.no_autograd("reduce_rows", x)
    validate.on_cuda(x)
    options = _options(op, max_tier, stream)
    if out is None:
        out = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    elif not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or out.shape != x.shape[:-1] \
            or not out.is_contiguous() or out.device != x.device:
        raise ValueError(f"out must be a contiguous float32 tensor of shape {tuple(x.shape[:-1])} on {x.device}")
    if rows.shape[0]:
        RowReduce.launch(rows, config, options, rows=(rows,), row_out=(out.view(-1),),
                         remember=(x.dtype, x.shape[-1]) if options == ("sum", "cluster", True) and config is None
                         else None)
    return out


def reduce_rows_reference(x: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """The float64 reference."""
    x64 = x.double()
    return x64.sum(-1) if op == "sum" else x64.amax(-1)

"""Softmax forward over the last dim, in one pass over memory.

Bytes that must move: read x, write y (2 * M * N elements). The row is loaded once and kept
on chip; the toolkit reduces the pair (max, sum of exp(x - max)) in a single exchange per
tier (an *online* softmax); the epilogue writes exp(x - max) / sum. A three-pass design (max,
then sum, then write, each reading x from memory) moves twice the bytes.
"""
from __future__ import annotations

import torch

import cutlass.cute as cute

from . import validate
from .reduce import LOGSUMEXP, exp_minus
from .rowkernel import RowOp


class Softmax(RowOp):
    table = "softmax"
    out = ("y",)
    reductions = (LOGSUMEXP,)

    def epilogue(self, v, results, s):
        row_max, denom = results[0]
        e = exp_minus(v.x, row_max)  # subtract first, as the fold does
        return {"y": e * cute.arch.rcp_approx(denom)}


def softmax_out(x: torch.Tensor, out: torch.Tensor, *, config=None) -> torch.Tensor:
    """Write softmax(x) over the last dim into ``out`` (x's shape and dtype)."""
    rows = validate.rows(x, cuda=False)
    validate.like(x, out)
    validate.no_autograd("kernels.softmax.softmax_out", x)
    validate.on_cuda(x)
    if rows.shape[0]:
        Softmax.launch(rows, config, rows=(rows,), out=(validate.rows(out, "out"),))
    return out


def softmax(x: torch.Tensor, dim: int = -1, *, config=None) -> torch.Tensor:
    """Softmax of x along ``dim`` (only the last dim is supported)."""
    if dim != -1 and isinstance(x, torch.Tensor) and dim != x.dim() - 1:
        raise ValueError(f"softmax supports only the last dim (dim=-1), got dim={dim}")
    rows = validate.rows(x, cuda=False)
    validate.no_autograd("kernels.softmax.softmax", x)
    validate.on_cuda(x)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if rows.shape[0]:
        Softmax.launch(rows, config, rows=(rows,), out=(out.view(rows.shape),))
    return out


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)

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
from .reduce import LOGSUMEXP, SUM, exp_minus
from .rowkernel import RowOp


class Softmax(RowOp):
    table = "softmax"
    out = ("y",)
    reductions = (LOGSUMEXP,)

    def epilogue(self, v, results, s):
        row_max, denom = results[0]
        e = exp_minus(v.x, row_max)  # subtract first, as the fold does
        return {"y": e * cute.arch.rcp_approx(denom)}


class SoftmaxBackward(RowOp):
    """dx = y (dy - sum(dy y)) over each row: reads y and dy, writes dx (3 M N elements)."""

    table = "softmax_bwd"
    rows = ("y", "dy")
    out = ("dx",)
    reductions = (SUM,)

    def fold_input(self, v, i, results):
        return v.y * v.dy

    def epilogue(self, v, results, s):
        return {"dx": v.y * (v.dy - results[0][0])}


def softmax_backward_out(dy: torch.Tensor, y: torch.Tensor, dx: torch.Tensor, *, config=None,
                         remember=None) -> torch.Tensor:
    """Write the gradient of softmax over the last dim into ``dx``, from the forward's output y and
    the gradient dy of the output (all three the same shape and dtype). ``remember``: the key
    under which a fast path of ``kernels.functional`` finds the kernel (``RowOp.fast``)."""
    yrows = validate.rows(y, "y", cuda=False)
    validate.like(y, dy, "dy")
    validate.like(y, dx, "dx")
    validate.on_cuda(y, "y")
    if yrows.shape[0]:
        SoftmaxBackward.launch(yrows, config, rows=(yrows, validate.rows(dy, "dy")), out=(validate.rows(dx, "dx"),),
                               remember=remember if config is None else None)
    return dx


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
        Softmax.launch(rows, config, rows=(rows,), out=(out if rows is x else out.view(rows.shape),),
                       remember=(x.dtype, x.shape[-1]) if config is None else None)
    return out


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def softmax_backward_reference(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dx = y (dy - sum(dy y)) over each row, in PyTorch (float64)."""
    y64, dy64 = y.double(), dy.double()
    return y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))

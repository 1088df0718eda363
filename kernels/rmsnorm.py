"""RMSNorm forward: y = x / sqrt(mean(x^2) + eps) * weight, row by row.

Bytes that must move: read x (M*N), read weight (N, once; it stays in L2), write y (M*N).
On top of the template the op adds the sum of squares as what is reduced and ``x * rstd * w``
as the epilogue; the row is kept on chip between the two, so x is read from memory once.
"""
from __future__ import annotations

import torch

import cutlass.cute as cute
from cutlass import Float32

from . import validate
from .reduce import SUMSQ
from .rowkernel import RowOp


class RMSNorm(RowOp):
    table = "rmsnorm"
    cols = ("weight",)
    out = ("y",)
    row_out = ("rstd",)
    scalars = {"eps": Float32}
    reductions = (SUMSQ,)
    default_present = ("weight",)

    def rstd(self, results, s):
        return cute.math.rsqrt(results[0][0] / self.n + s.eps, fastmath=True)

    def epilogue(self, v, results, s):
        y = v.x * self.rstd(results, s)
        return {"y": y * v.weight if v.weight is not None else y}

    def row_values(self, io, b, results, pre):
        return {"rstd": self.rstd(results, io.s)}


def _launch(x, rows, weight, out, eps, rstd, config, remember=None):
    if weight is not None:
        validate.column(weight, x, "weight")
    if rstd is not None:
        validate.per_row(rstd, rows.shape[0], x.device, "rstd")
    validate.no_autograd("kernels.rmsnorm.rmsnorm", x, weight)
    validate.on_cuda(x)
    if rows.shape[0]:
        RMSNorm.launch(rows, config, rows=(rows,), out=(out,), cols=(weight,), row_out=(rstd,), scalars=(float(eps),),
                       remember=remember)


def rmsnorm_out(x: torch.Tensor, weight: torch.Tensor | None, out: torch.Tensor, eps: float = 1e-6, *,
                rstd: torch.Tensor | None = None, config=None, remember=None) -> torch.Tensor:
    """Write rmsnorm(x) into ``out`` (x's shape and dtype), and 1 / sqrt(mean(x^2) + eps) of each
    row into ``rstd`` (fp32, contiguous, M elements for the M rows of x) if given. ``remember``:
    the key under which a fast path of ``kernels.functional`` finds the kernel (``RowOp.fast``)."""
    rows = validate.rows(x, cuda=False)
    validate.like(x, out)
    _launch(x, rows, weight, validate.rows(out, "out", cuda=False), eps, rstd, config,
            remember if config is None else None)
    return out


def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6, *,
            config=None) -> torch.Tensor:
    """RMSNorm over the last dim of x (fp32, bf16 or fp16; any leading shape)."""
    rows = validate.rows(x, cuda=False)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _launch(x, rows, weight, out if rows is x else out.view(rows.shape), eps, None, config,
            (x.dtype, x.shape[-1], weight is not None) if config is None else None)
    return out


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6) -> torch.Tensor:
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return y * weight.double() if weight is not None else y


"""LayerNorm forward: y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps), row by row.

Bytes that must move: read x, write y (2 * M * N elements), read weight and bias once (they stay
in L2). The template keeps the row on chip; the op reduces it once, to its count, sum and sum of
squares about the mean (``MEAN_VAR``: accurate when the mean is far from zero, where the sum of
squares less the squared sum would cancel), so a row pays one exchange, as RMSNorm's does.
"""
from __future__ import annotations

import torch

import cutlass.cute as cute
from cutlass import Float32

from . import validate
from .reduce import MEAN_VAR
from .rowkernel import RowOp


class LayerNorm(RowOp):
    table = "layernorm"
    cols = ("weight", "bias")
    out = ("y",)
    row_out = ("mean", "rstd")
    scalars = {"eps": Float32}
    reductions = (MEAN_VAR,)  # (count, sum, sum of squares about the mean)
    default_present = ("weight", "bias")

    def stats(self, results, s):
        return results[0][1] / self.n, cute.math.rsqrt(results[0][2] / self.n + s.eps, fastmath=True)

    def epilogue(self, v, results, s):
        mean, rstd = self.stats(results, s)
        y = (v.x - mean) * rstd
        y = y * v.weight if v.weight is not None else y
        return {"y": y + v.bias if v.bias is not None else y}

    def row_values(self, io, b, results, pre):
        mean, rstd = self.stats(results, io.s)
        return {"mean": mean, "rstd": rstd}


def layernorm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
              eps: float = 1e-5, *, return_stats: bool = False, config=None):
    """LayerNorm over the last dim of x (fp32, bf16 or fp16; any leading shape), as
    ``torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)``. With ``return_stats``,
    also each row's mean and rstd (fp32, x.shape[:-1])."""
    rows = validate.rows(x, cuda=False)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            validate.column(t, x, name)
    validate.no_autograd("kernels.layernorm.layernorm", x, weight, bias)
    validate.on_cuda(x)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    mean = rstd = None
    if return_stats:
        mean, rstd = (torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) for _ in range(2))
    if rows.shape[0]:
        LayerNorm.launch(rows, config, rows=(rows,), out=(out if rows is x else out.view(rows.shape),), cols=(weight, bias),
                         row_out=(mean if mean is None else mean.view(-1), rstd if rstd is None else rstd.view(-1)),
                         scalars=(float(eps),), remember=None if config is not None else
                         (x.dtype, x.shape[-1], weight is not None, bias is not None) + ("stats",) * return_stats)
    return (out, mean, rstd) if return_stats else out


def layernorm_reference(x, weight=None, bias=None, eps=1e-5):
    w = None if weight is None else weight.double()
    b = None if bias is None else bias.double()
    return torch.nn.functional.layer_norm(x.double(), x.shape[-1:], w, b, eps)

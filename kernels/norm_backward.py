"""RMSNorm's and LayerNorm's backward: the input's gradient row by row, and the weight's (and
bias's) gradient summed over the rows.

Bytes that must move: read x and dy, write dx (3 M N elements), read the weight once; the saved
per-row statistics (rstd, and LayerNorm's mean) are M floats. The sums over rows are what is
new: each block of a *persistent* kernel walks rows bidx, bidx + P, ... (P blocks, as many as
the GPU holds at once), adds each row's terms into fp32 registers, and writes one partial row;
the P partial rows are added up after (``sum(0)``, a fixed order), so the result is the same bit
for bit from run to run and no float atomics are used.
"""
from __future__ import annotations

import torch

import cutlass.cute as cute
from cutlass import Float32, Int32

from . import validate
from .config import row_config
from .reduce import SUM, SUM2
from .rowkernel import RowOp, one_row_a_block

#: The longest row the kernels take (one block a row, kept in registers).
MAX_N = 8192


class NormBackward(RowOp):
    rows = ("x", "dy")
    cols = ("weight",)
    out = ("dx",)
    scalars = {"blocks": Int32}
    fold_uses_columns = True
    default_present = ("weight",)

    @classmethod
    def configure(cls, n, elem_bits, vec, options):
        return one_row_a_block(row_config(cls.table, n, elem_bits, vec=vec), n)

    @cute.jit
    def row_inputs(self, io, b):
        values = {name: Float32(0.0) for name in self.row_in}
        row = b.row
        if row < b.m:
            for name in self.row_in:
                values[name] = Float32(io.row_in[name][row])
        return values

    def g(self, v):
        return v.dy * v.weight if v.weight is not None else v.dy


class RMSNormBackward(NormBackward):
    """dx = rstd (g - xhat mean(g xhat)) with g = dy * weight and xhat = x * rstd (rstd saved by
    the forward); dweight = the sum over rows of dy * xhat."""

    table = "rmsnorm_bwd"
    row_in = ("rstd",)
    col_out = ("dweight",)
    reductions = (SUM,)  # sum(g x)

    def fold_input(self, v, i, results):
        return self.g(v) * v.x

    def epilogue(self, v, results, s):
        return {"dx": (self.g(v) - v.x * (v.rstd * v.rstd * results[0][0] / self.n)) * v.rstd}

    def col_values(self, v, results, s):
        return {"dweight": v.dy * v.x * v.rstd}


class LayerNormBackward(NormBackward):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * weight and xhat = (x - mean)
    rstd (mean and rstd saved by the forward); dweight and dbias = the sums over rows of dy * xhat
    and dy."""

    table = "layernorm_bwd"
    row_in = ("mean", "rstd")
    col_out = ("dweight", "dbias")
    reductions = (SUM2,)  # sum(g) and sum(g xhat), one exchange

    def fold_input(self, v, i, results):
        g = self.g(v)
        return g, g * ((v.x - v.mean) * v.rstd)

    def epilogue(self, v, results, s):
        sum_g, sum_gx = results[0]
        xhat = (v.x - v.mean) * v.rstd
        return {"dx": (self.g(v) - sum_g / self.n - xhat * (sum_gx / self.n)) * v.rstd}

    def col_values(self, v, results, s):
        return {"dweight": v.dy * ((v.x - v.mean) * v.rstd), "dbias": v.dy}


_SMS: dict = {}


def persistent_blocks(device: torch.device, cfg) -> int:
    """Blocks of a persistent kernel: as many as the device's SMs hold at once by threads (up to
    2048 threads and 32 blocks an SM)."""
    index = device.index
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index] * min(32, 2048 // cfg.threads_per_block)


def _launch(op, dy, x, weight, stats, dx, config):
    rows = validate.rows(x, cuda=False)
    m, n = rows.shape
    if n > MAX_N:
        raise NotImplementedError(f"{op.__name__} takes rows of up to {MAX_N} elements, got {n}")
    validate.like(x, dy, "dy")
    validate.like(x, dx, "dx")
    if weight is not None:
        validate.column(weight, x, "weight")
    for name, t in zip(op.row_in, stats):
        validate.per_row(t, m, x.device, name)
    validate.on_cuda(x)
    partials = []

    def late(cfg):
        blocks = persistent_blocks(x.device, cfg)
        partials.extend(torch.empty(blocks, n, dtype=torch.float32, device=x.device) for _ in op.col_out)
        return tuple(partials), (blocks,)
    op.launch(rows, config, rows=(rows, validate.rows(dy, "dy")), out=(validate.rows(dx, "dx"),), cols=(weight,),
              row_in=tuple(stats), late=late)
    return [p.sum(0) for p in partials]


def rmsnorm_backward_out(dy, x, weight, rstd, dx, *, config=None):
    """Write RMSNorm's input gradient into ``dx`` from dy, the forward's x and rstd (fp32, one a
    row); returns the weight's gradient (fp32, N; None without a weight)."""
    (dw,) = _launch(RMSNormBackward, dy, x, weight, (rstd,), dx, config)
    return dw if weight is not None else None


def layernorm_backward_out(dy, x, weight, mean, rstd, dx, *, config=None):
    """Write LayerNorm's input gradient into ``dx`` from dy, the forward's x, mean and rstd; returns
    the weight's and the bias's gradients (fp32, N; the weight's None without a weight)."""
    dw, db = _launch(LayerNormBackward, dy, x, weight, (mean, rstd), dx, config)
    return (dw if weight is not None else None), db

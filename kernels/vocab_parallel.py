"""Cross-entropy over one shard of the vocabulary: the kernels a vocabulary-parallel loss runs
on each GPU (``kernels.distributed`` combines what they write across the GPUs).

Under tensor parallelism a language model's output layer is split by columns: GPU r of W holds
the logits of a slice [start, start + n) of the N classes, an (M, n) shard. The loss of a row
needs the logsumexp over all N classes, but only through the (max, sum of exp) pair that the
single-GPU kernel already merges across warps, blocks and clusters; two shards' pairs merge the
same way. So each GPU reads its shard once and writes a few fp32 numbers a row, its *partials*,
as the rows of one (k, M) fp32 buffer:

    row 0  big:          fl(max of the shard's row * log2 e), the max in log2 units
    row 1  sum:          sum over the shard's row of 2^(x log2 e - big)
    row 2  target_logit: x[target - start] where the target falls in this shard, else 0 (the
                         shards' values summed give the row's target logit: exactly one holds it)
    row 3  logit_sum:    with label smoothing only (k = 4): the sum of the row's logits
                         (logits of -inf left out, as the single-GPU kernel does)

The shard's own logsumexp is ``big ln 2 + ln sum``. Bytes that must move: the shard once
(M n elements) and 4 k bytes a row, against 2 M N bytes a GPU for gathering bf16 logits.
``VocabShard`` is cross-entropy's forward kernel with the loss left out: the same streamed
configuration (the "cross_entropy" table, at the shard's width), the same reduction.

The backward of a shard needs no communication: dlogits = (exp(x - lse) - (1 - e) onehot -
e / N) g, where lse is the row's logsumexp over all N classes (the combine's), the one-hot is
the target's column when it lies in this shard, and e / N spreads label smoothing over all N
classes. ``VocabShardBackward`` is ``CrossEntropyBackward`` with the target shifted by the
shard's start and N the global class count, both run-time scalars.

Each kernel has a PyTorch twin (``*_torch``: CPU tensors, any device, fp32 at least), which is
what ``kernels.distributed`` runs on CPU tensors (gloo) and what the GPU tests compare with.
"""
from __future__ import annotations

import math

import torch

import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr

from . import validate
from .cross_entropy import CrossEntropyBackward, SplitTarget, backward_launch
from .reduce import LOG2_E, LOGSUMEXP2, LOGSUMEXP2_SUM
from .rowkernel import RowOp

#: The rows of a shard's partials buffer, in order (``logit_sum`` with label smoothing only).
PARTIALS = ("big", "sum", "target_logit", "logit_sum")


class VocabShard(SplitTarget, RowOp):
    """The partials of each row of an (M, n) shard whose first column is class ``start`` of the
    vocabulary (a run-time scalar: one compiled kernel serves every rank). With ``logit_sum``
    present (label smoothing) the row's sum is reduced beside the pair, in the same exchange."""

    table = "cross_entropy"
    row_in = ("target",)
    row_out = PARTIALS
    scalars = {"start": Int64}
    reductions = (LOGSUMEXP2,)
    default_present = ("big", "sum", "target_logit")

    def __init__(self, dtype, n, cfg, present, in_dtypes):
        self.smoothing = "logit_sum" in present
        if self.smoothing:
            self.reductions = (LOGSUMEXP2_SUM,)
        super().__init__(dtype, n, cfg, present, in_dtypes)

    @cute.jit
    def target_column(self, io, row):
        """Row ``row``'s target as a column of this shard (Int64): in [0, n) where the shard holds
        it, outside that range where another shard does (or the row is past M, or ignored)."""
        col = Int64(-1)
        if row < io.x.shape[0]:
            col = Int64(io.row_in["target"][row]) - io.s.start
        return col

    @cute.jit
    def target_logit(self, io, col, row):
        x_t = Float32(0.0)
        if col >= 0 and col < self.n:
            x_t = Float32(io.x[row, Int32(col)])
        return x_t

    # The configuration's target order, as cross-entropy's (SplitTarget)
    target_key = target_column
    logit_at = target_logit

    def before_loads(self, io, b):
        return self.split_target(io, b)

    def after_fold(self, io, b, col):
        return self.split_logit(io, b, col)

    @cute.jit
    def row_values(self, io, b, results, x_t):
        if const_expr(x_t is None):
            x_t = self.target_logit(io, self.target_column(io, b.row), b.row)
        values = {"big": results[0][0], "sum": results[0][1], "target_logit": x_t}
        if const_expr(self.smoothing):
            values["logit_sum"] = results[0][2]
        return values


class VocabShardBackward(CrossEntropyBackward):
    """``CrossEntropyBackward`` over a shard: the target's column is ``target - start``, and
    label smoothing's share e / N is over ``classes``, the vocabulary's N (both run-time
    scalars), where the single-GPU kernel takes the row's own N for both."""

    scalars = {**CrossEntropyBackward.scalars, "start": Int32, "classes": Float32}

    def row_inputs(self, io, b):
        values = super().row_inputs(io, b)
        values["target"] = values["target"] - io.s.start  # outside [0, n): no column of this shard
        return values

    def classes(self, s):
        return s.classes  # e / N over the whole vocabulary


def _check_partials(partials, m, device, smoothing):
    k = 4 if smoothing else 3
    if (not isinstance(partials, torch.Tensor) or partials.shape != (k, m) or partials.dtype != torch.float32
            or partials.device != device or not partials.is_contiguous()):
        raise ValueError(f"partials must be a contiguous float32 tensor of shape ({k}, {m}) on {device}, got "
                         f"{getattr(partials, 'dtype', None)} {tuple(getattr(partials, 'shape', ()))}")


def shard_partials_out(logits_shard: torch.Tensor, target: torch.Tensor, start: int, partials: torch.Tensor, *,
                       config=None) -> torch.Tensor:
    """Write the partials of each row of ``logits_shard`` (M, n), classes [start, start + n) of
    the vocabulary, into ``partials`` ((3, M) fp32, or (4, M) for label smoothing: the rows of
    :data:`PARTIALS`), with the kernel. ``target`` (M,) holds the rows' classes in the whole
    vocabulary."""
    rows = validate.rows(logits_shard, "logits_shard", cuda=False)
    m = rows.shape[0]
    validate.per_row(target, m, logits_shard.device, "target", (torch.int64, torch.int32))
    smoothing = isinstance(partials, torch.Tensor) and partials.shape[:1] == (4,)
    _check_partials(partials, m, logits_shard.device, smoothing)
    validate.on_cuda(logits_shard, "logits_shard")
    validate.no_autograd("kernels.vocab_parallel.shard_partials_out", logits_shard)
    if m:
        VocabShard.launch(rows, config, rows=(rows,), row_in=(target,),
                          row_out=(partials[0], partials[1], partials[2], partials[3] if smoothing else None),
                          scalars=(int(start),))
    return partials


def shard_partials_torch(logits_shard: torch.Tensor, target: torch.Tensor, start: int,
                         smoothing: bool = False) -> torch.Tensor:
    """``shard_partials_out`` in PyTorch, on any device: the same (3 or 4, M) fp32 partials, the
    sum of exponentials formed in float64 against the same ``big`` (so that it is exact to fp32)."""
    x = logits_shard.float()
    n = x.shape[-1]
    big = x.amax(-1) * LOG2_E
    shift = torch.where(big == -math.inf, 0.0, big.double())  # nothing but -inf: no NaN
    total = torch.exp2(x.double() * LOG2_E - shift.unsqueeze(-1)).sum(-1)
    col = target.long() - start
    held = (col >= 0) & (col < n)
    x_t = torch.where(held, x.gather(-1, col.clamp(0, n - 1).unsqueeze(-1)).squeeze(-1), 0.0)
    parts = [big, total.float(), x_t]
    if smoothing:
        parts.append(torch.where(x == -math.inf, 0.0, x.double()).sum(-1).float())
    return torch.stack(parts)


def shard_partials(logits_shard: torch.Tensor, target: torch.Tensor, start: int,
                   smoothing: bool = False) -> torch.Tensor:
    """The shard's partials, (3, M) or (4, M) fp32: the kernel on CUDA tensors, PyTorch on others."""
    if not logits_shard.is_cuda:
        return shard_partials_torch(logits_shard, target, start, smoothing)
    partials = torch.empty(4 if smoothing else 3, logits_shard.shape[0], dtype=torch.float32,
                           device=logits_shard.device)
    return shard_partials_out(logits_shard, target, start, partials)


def shard_backward_out(g: torch.Tensor, logits_shard: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                       dlogits: torch.Tensor, start: int, classes: int, ignore_index: int = -100, *,
                       label_smoothing: float = 0.0, lse_square_scale: float = 0.0, config=None) -> torch.Tensor:
    """Write the gradient of the rows' losses with respect to ``logits_shard`` (M, n), classes
    [start, start + n) of a vocabulary of ``classes``, into ``dlogits`` (its shape and dtype; the
    shard itself for an in-place backward), with the kernel. ``g`` holds each row's share of the
    loss's gradient, (M,) or one for all (1,); ``lse`` (M,) fp32 the logsumexp over the whole
    vocabulary."""
    return backward_launch(VocabShardBackward, g, logits_shard, target, lse, dlogits, ignore_index, label_smoothing,
                           lse_square_scale, config, names=("logits_shard", "g"), more=(int(start), float(classes)))


def shard_backward_torch(g: torch.Tensor, logits_shard: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                         start: int, classes: int, ignore_index: int = -100, *, label_smoothing: float = 0.0,
                         lse_square_scale: float = 0.0) -> torch.Tensor:
    """``shard_backward_out`` in PyTorch (fp32), on any device; returns the gradient in the
    shard's dtype."""
    x = logits_shard.float()
    n = x.shape[-1]
    lse = lse.float().unsqueeze(-1)
    p = torch.exp(x - lse)
    if lse_square_scale:
        p = p * (1.0 + 2.0 * lse_square_scale * lse)
    p = p - label_smoothing / classes
    col = target.long() - start
    onehot = (torch.arange(n, device=x.device) == col.unsqueeze(-1)) & (target != ignore_index).unsqueeze(-1)
    p = p - (1.0 - label_smoothing) * onehot
    g = torch.where(target != ignore_index, g.float().reshape(-1).expand(target.shape), 0.0)
    return (p * g.unsqueeze(-1)).to(logits_shard.dtype)


def shard_backward(g, logits_shard, target, lse, start: int, classes: int, ignore_index: int = -100, *,
                   label_smoothing: float = 0.0, lse_square_scale: float = 0.0) -> torch.Tensor:
    """The shard's gradient: the kernel on CUDA tensors, PyTorch on others."""
    kw = dict(label_smoothing=label_smoothing, lse_square_scale=lse_square_scale)
    if not logits_shard.is_cuda:
        return shard_backward_torch(g, logits_shard, target, lse, start, classes, ignore_index, **kw)
    return shard_backward_out(g, logits_shard, target, lse, torch.empty_like(logits_shard), start, classes,
                              ignore_index, **kw)

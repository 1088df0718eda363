"""Vocabulary-parallel cross-entropy over ``torch.distributed``: the tier beyond the cluster.

With tensor parallelism a language model's output layer splits the vocabulary's N classes
across the W ranks of a process group, so rank r holds an (M, n_r) shard of the logits, classes
[start_r, start_r + n_r) (Megatron-LM computes the loss this way, without ever forming the full
logits on one GPU: Shoeybi et al., 2019, arXiv:1909.08053). Gathering the logits would move
2 M N bytes of bf16 to every rank (2 GiB for 8,192 tokens of a 128k vocabulary). The loss needs
far less: for each row, the logsumexp over all N classes and the target's logit, and the
logsumexp comes from the (max, sum of exp) pair that ``kernels.reduce`` merges across a
cluster. The same merge works across GPUs, with a collective instead of distributed shared
memory:

1. each rank reduces its shard to its *partials* (``kernels.vocab_parallel``: a (k, M) fp32
   buffer, the pair with its max in log2 units, the target's logit where the shard holds it, and
   the sum of the logits for label smoothing): one read of the shard, the kernel of the
   single-GPU loss without its loss;
2. the ranks combine them, by one of two protocols (``protocol=``):

   "allreduce"  all-reduce the row maxima (MAX); rescale the local sums of exp to the global
                max; all-reduce the rescaled sums, target logits and logit sums (SUM), one
                tensor. Two collectives over 4 k M bytes a rank, whatever W (a ring sends
                about twice that);
   "allgather"  all-gather every rank's partials, (W, k, M), and merge them locally in rank
                order. One collective; each rank receives 4 k M (W - 1) bytes.

   Which is faster depends on M, W and the interconnect (two collectives' latencies against
   W times the bytes): ``benchmarks`` measures it;
3. every rank forms the same per-row losses from the combined partials (in float64: M numbers)
   and reduces them as torch does ("mean" over the rows not ignored, "sum", "none").

The backward needs no communication: each rank writes its own shard's gradient from the global
logsumexp saved by the forward (``VocabShardBackward``, one more pass over the shard).

Every rank must pass the same ``target`` (M,) and the same M; the widths n_r may differ (an
uneven split). The widths are gathered once a call (one small all-gather, then a host sync to
read them) unless ``shard_widths`` gives them. Inputs are checked before any kernel launch or
collective; a rank that raises leaves the others waiting in their first collective, as any
program of collectives would (the process group's timeout ends it).

CUDA tensors take the kernels and need a backend that reduces CUDA tensors (NCCL); CPU tensors
take the kernels' PyTorch twins, with gloo, which is how the tests run the protocol on a machine
without GPUs. Our multi-GPU runs keep NVLink multicast off (``NCCL_NVLS_ENABLE=0`` in the
environment, before the process group starts). A target outside [0, N) that is not
``ignore_index`` makes its row's loss NaN and is flagged, without a wait, in the word the
single-GPU op flags (``kernels.errors``): ``check_errors()`` raises it on every rank, since every
rank holds the same target (a rank's next call does not check the word, as the single-GPU op
does: ranks reach that point at different times, and one that raised would leave the others
in a collective). CPU tensors raise at once, on every rank.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from . import errors, validate
from .cross_entropy import REDUCTIONS, row_gradients
from .vocab_parallel import shard_backward, shard_partials

LN_2 = math.log(2.0)
PROTOCOLS = ("allreduce", "allgather")


def _safe(big: torch.Tensor) -> torch.Tensor:
    """The max to rescale against: -inf (a row of nothing but -inf) becomes 0, so that the
    rescaled sums are 0 and never NaN."""
    return torch.where(big == -math.inf, 0.0, big)


def rescale(partials: torch.Tensor, big: torch.Tensor) -> torch.Tensor:
    """``partials`` (k, M) of one rank against the global maxima ``big`` (M,): row 0 becomes
    ``big``, the sum of exp is multiplied by 2^(its own big - big); the other rows are kept.
    Summing the ranks' rescaled partials (rows 1 on) gives the combined ones."""
    out = partials.clone()
    out[0] = big
    out[1] = partials[1] * torch.exp2(partials[0] - _safe(big))
    return out


def merge(gathered: torch.Tensor) -> torch.Tensor:
    """Combine the partials of every rank, ``gathered`` (W, k, M), into one (k, M): the maxima's
    max, then each rank's rows rescaled to it and added up in rank order."""
    big = gathered[:, 0].amax(0)
    out = rescale(gathered[0], big)
    for r in range(1, gathered.shape[0]):
        out[1:] += rescale(gathered[r], big)[1:]
    return out


def _all_gather(out: torch.Tensor, tensor: torch.Tensor, group) -> None:
    """Every rank's ``tensor`` into ``out``, concatenated along dim 0 in rank order (the name
    torch took in 2.13, all_gather_into_tensor before)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, tensor, group=group)


def combine(partials: torch.Tensor, group=None, protocol: str = "allreduce") -> torch.Tensor:
    """This rank's partials (k, M) combined with those of every rank of ``group``, by
    ``protocol`` (:data:`PROTOCOLS`); every rank gets the same (k, M)."""
    if protocol == "allreduce":
        big = partials[0].clone()
        dist.all_reduce(big, dist.ReduceOp.MAX, group=group)
        out = rescale(partials, big)
        dist.all_reduce(out[1:], dist.ReduceOp.SUM, group=group)  # rows 1.. of a (k, M) tensor: contiguous
        return out
    world = dist.get_world_size(group)
    gathered = torch.empty((world * partials.shape[0], partials.shape[1]), dtype=partials.dtype,
                           device=partials.device)
    _all_gather(gathered, partials, group)
    return merge(gathered.view(world, *partials.shape))


def row_losses(combined: torch.Tensor, target: torch.Tensor, classes: int, ignore_index: int = -100,
               label_smoothing: float = 0.0, lse_square_scale: float = 0.0):
    """(loss, lse), fp32 (M,) each, from the combined partials (k, M) of a vocabulary of
    ``classes``: lse = big ln 2 + ln sum; loss = lse - x_t, with label smoothing e
    (1 - e) (lse - x_t) + e (lse - sum(x) / N), plus z lse^2; 0 for ignored rows, NaN for a
    target outside [0, N). Formed in float64 (big is exact there, and lse - x_t loses nothing)."""
    big, total, x_t = combined[0].double(), combined[1].double(), combined[2].double()
    lse = big * LN_2 + torch.log(total)
    loss = lse - x_t
    if label_smoothing:
        loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - combined[3].double() / classes)
    if lse_square_scale:
        loss = loss + lse_square_scale * lse * lse
    keep = target != ignore_index
    bad = keep & ((target < 0) | (target >= classes))
    errors.report(errors.CROSS_ENTROPY_TARGET, bad)
    loss = torch.where(bad, math.nan, torch.where(keep, loss, 0.0))
    return loss.float(), lse.float()


def reduce_losses(loss: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str) -> torch.Tensor:
    """The per-row losses reduced as torch's cross-entropy reduces them (fp32)."""
    if reduction == "none":
        return loss
    total = loss.double().sum()
    if reduction == "mean":
        total = total / (target != ignore_index).sum()
    return total.float()


def check_inputs(logits_shard, target, ignore_index, reduction, label_smoothing, protocol) -> None:
    """Everything that can be checked on this rank alone, before any collective."""
    rows = validate.rows(logits_shard, "logits_shard", cuda=False)
    if rows is not logits_shard:
        raise ValueError(f"logits_shard must be 2-D (M, n), got shape {tuple(logits_shard.shape)}")
    validate.per_row(target, logits_shard.shape[0], logits_shard.device, "target", (torch.int64, torch.int32))
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if not -(2**31) <= ignore_index < 2**31:
        raise ValueError("ignore_index must fit in int32")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")


def check_group(logits_shard, group):
    """(rank, world) of this process in ``group``, after checking that torch.distributed is up
    and that its backend can reduce tensors of the logits' device."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("vocab_parallel_cross_entropy needs torch.distributed: call "
                           "torch.distributed.init_process_group first")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise ValueError("this process is not a member of the group")
    if dist.get_backend(group) == "nccl" and not logits_shard.is_cuda:
        raise ValueError(f"the group's backend is NCCL, which reduces CUDA tensors; logits_shard is on "
                         f"{logits_shard.device}")
    return rank, world


def shard_layout(logits_shard, group, rank: int, world: int, shard_widths=None):
    """(start, classes): this rank's first class and the vocabulary's size N, from every rank's
    shard width, gathered (with each rank's M, which must agree) or given as ``shard_widths``."""
    m, n = logits_shard.shape
    if shard_widths is not None:
        widths = [int(w) for w in shard_widths]
        if len(widths) != world:
            raise ValueError(f"shard_widths has {len(widths)} widths for a group of {world} ranks")
        if widths[rank] != n:
            raise ValueError(f"shard_widths[{rank}] = {widths[rank]} but this rank's logits_shard has {n} columns")
    else:
        mine = torch.tensor([n, m], dtype=torch.int64, device=logits_shard.device)
        table = torch.empty(2 * world, dtype=torch.int64, device=logits_shard.device)
        _all_gather(table, mine, group)
        table = table.view(world, 2).tolist()
        widths = [w for w, _ in table]
        if any(rows != m for _, rows in table):
            # every rank sees the same table, so every rank raises
            raise ValueError(f"the ranks' logits shards have different row counts: {[r for _, r in table]}")
    if min(widths) < 1:
        raise ValueError(f"every rank must hold at least one class, got widths {widths}")
    classes = sum(widths)
    if classes >= 2**31:
        raise ValueError(f"a vocabulary of {classes} classes does not fit in int32")
    return sum(widths[:rank]), classes


def _forward(logits_shard, target, group, ignore_index, reduction, label_smoothing, lse_square_scale, protocol,
             start, classes):
    """(the reduced loss, the rows' lse): partials, combine, losses."""
    m = logits_shard.shape[0]
    if m == 0:  # every rank has no rows (the gathered M agree): nothing to combine
        lse = torch.empty(0, dtype=torch.float32, device=logits_shard.device)
        return reduce_losses(lse, target, ignore_index, reduction), lse
    partials = shard_partials(logits_shard, target, start, smoothing=label_smoothing != 0)
    combined = combine(partials, group, protocol)
    loss, lse = row_losses(combined, target, classes, ignore_index, label_smoothing, lse_square_scale)
    return reduce_losses(loss, target, ignore_index, reduction), lse


class VocabParallelCrossEntropy(torch.autograd.Function):
    """The loss of a shard, differentiable in the shard: the forward saves the global lse, the
    backward writes the shard's gradient from it (no collective)."""

    @staticmethod
    def forward(ctx, logits_shard, target, group, ignore_index, reduction, label_smoothing, lse_square_scale,
                protocol, start, classes):
        out, lse = _forward(logits_shard, target, group, ignore_index, reduction, label_smoothing,
                            lse_square_scale, protocol, start, classes)
        ctx.save_for_backward(logits_shard, target, lse)
        ctx.args = (ignore_index, reduction, label_smoothing, lse_square_scale, start, classes)
        return out

    @staticmethod
    def backward(ctx, dloss):
        logits_shard, target, lse = ctx.saved_tensors
        ignore_index, reduction, label_smoothing, lse_square_scale, start, classes = ctx.args
        # contiguous: autograd passes an expanded (stride 0) dloss for loss.sum(), which the kernel refuses
        g = row_gradients(dloss.float(), target, ignore_index, reduction).contiguous()
        dlogits = shard_backward(g, logits_shard, target, lse, start, classes, ignore_index,
                                 label_smoothing=label_smoothing, lse_square_scale=lse_square_scale)
        return (dlogits,) + (None,) * 9


def vocab_parallel_cross_entropy(logits_shard: torch.Tensor, target: torch.Tensor, group=None,
                                 ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                                 *, lse_square_scale: float = 0.0, protocol: str = "allreduce",
                                 shard_widths=None) -> torch.Tensor:
    """Cross-entropy of logits split by classes across the ranks of ``group`` (default: the
    world), as ``kernels.cross_entropy`` of the full logits: this rank's ``logits_shard`` (M, n_r)
    holds classes [start_r, start_r + n_r), the ranks in order; ``target`` (M,) the same classes
    on every rank. Returns the same loss on every rank (fp32: (M,) for "none", else a scalar),
    differentiable in the shard. ``protocol`` picks the combine (module docstring);
    ``shard_widths`` (every rank's n_r, in rank order) skips the gather of the widths and its host
    sync, the caller vouching that every rank passes the same."""
    check_inputs(logits_shard, target, ignore_index, reduction, label_smoothing, protocol)
    rank, world = check_group(logits_shard, group)
    start, classes = shard_layout(logits_shard, group, rank, world, shard_widths)
    args = (logits_shard, target, group, ignore_index, reduction, float(label_smoothing), float(lse_square_scale),
            protocol, start, classes)
    if torch.is_grad_enabled() and logits_shard.requires_grad:
        return VocabParallelCrossEntropy.apply(*args)
    return _forward(*args)[0]

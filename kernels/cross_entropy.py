"""Cross-entropy forward: loss[i] = logsumexp(logits[i]) - logits[i, target[i]].

Bytes that must move: read the logits once (M * N), read the targets and write one fp32 per
row (or, reduced, one number). The logits are never needed again, so the kernel *streams* the
row: each pass folds a few 128-bit accesses per thread into a running (max, sum of exp) pair,
and the toolkit merges the pairs across warp, block and cluster in one exchange. Accumulation
is fp32 whatever the input dtype. The pair carries its max in log2 units
(``kernels.reduce.LOGSUMEXP2``: one fma a term), and a bf16 pass is folded from its registers
as they were loaded.

``reduction="mean"`` and ``"sum"`` are finished in the same launch: each block adds up its
rows' losses (and counts the rows not ignored), and the last block to finish adds up the
blocks' partials in a fixed order, so the result is the same bit for bit from run to run.

A target outside [0, N) that is not ``ignore_index`` gives a NaN loss and is reported without
a host sync (``kernels.errors``): by the next call, or by ``kernels.check_errors()``.
"""
from __future__ import annotations

import math

import torch

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr

from . import errors, validate
from .compile import fake_vector
from .reduce import LOG2_E, LOGSUMEXP2, LOGSUMEXP2_SUM, Combine, exp_minus, warp_reduce
from .rowkernel import RowOp

LN_2 = math.log(2.0)
REDUCTIONS = ("mean", "sum", "none")


class SplitTarget:
    """The target order of an op that reads one target a row (``config.TARGET_ORDERS``):
    "split" reads the target before the row's loads and its logit after the fold (while the
    exchange runs), by the thread that writes the row's values; "late" reads both after the
    reduction. The op says how to read them: ``target_key(io, row)`` and ``logit_at(io, key,
    row)``."""

    @cute.jit
    def split_target(self, io, b):
        key = None
        if const_expr(self.cfg.targets == "split"):
            key = self.target_key(io, b.row)
        return key

    @cute.jit
    def split_logit(self, io, b, key):
        x_t = None
        if const_expr(self.cfg.targets == "split"):
            x_t = Float32(0.0)
            if b.tidx % self.cfg.threads_per_row == 0 and b.rank == 0 and b.row < b.m:
                x_t = self.logit_at(io, key, b.row)
        return x_t


class CrossEntropy(SplitTarget, RowOp):
    """options: (reduction, smoothing, zloss). For "mean" and "sum", ``work`` holds the result
    (element 0), then each block's partial sum and then its count of rows not ignored (at most M
    of each), the groups' partials, and last the count of rows not ignored (fp32: the count a
    mean's backward divides by); ``counter`` counts the blocks done. With ``smoothing`` the loss is torch's with
    label smoothing e, (1 - e) (lse - x_t) + e (lse - mean(x)), the row's sum reduced in the same
    exchange (logits of -inf left out of it, where torch's loss would be infinite); with
    ``zloss`` it adds z lse^2 (PaLM's z-loss)."""

    table = "cross_entropy"
    row_in = ("target",)
    row_out = ("loss", "lse", "valid")  # valid: 1.0 where the row counts in a mean, else 0.0
    extra = ("work", "counter")
    scalars = {"ignore_index": Int32, "flag": Int64, "smoothing": Float32, "z": Float32}
    reductions = (LOGSUMEXP2,)
    default_present = ("work", "counter")
    default_options = ("mean", False, False)

    def __init__(self, dtype, n, cfg, present, in_dtypes, reduction: str, smoothing: bool, zloss: bool):
        self.reduction, self.smoothing, self.zloss = reduction, smoothing, zloss
        if smoothing:
            self.reductions = (LOGSUMEXP2_SUM,)
        super().__init__(dtype, n, cfg, present, in_dtypes)

    def fake_extra(self, m):
        return (fake_vector(Float32, cute.sym_int()), fake_vector(Int32, cute.sym_int())) if "work" in self.present else ()

    @cute.jit
    def target(self, io, row):
        """Row ``row``'s target (ignore_index past M), as a 64-bit integer."""
        target = Int64(io.s.ignore_index)
        if row < io.x.shape[0]:
            target = Int64(io.row_in["target"][row])
        return target

    @cute.jit
    def target_logit(self, target, row, mX):
        """Row ``row``'s logit of class ``target`` where the target names a class, else 0."""
        x_t = Float32(0.0)
        if target >= 0 and target < self.n:
            x_t = Float32(mX[row, Int32(target)])
        return x_t

    def target_key(self, io, row):
        return self.target(io, row)

    def logit_at(self, io, target, row):
        return self.target_logit(target, row, io.x)

    @cute.jit
    def before_loads(self, io, b):
        if const_expr(self.reduction != "none"):
            rows, warps = self.cfg.rows_per_block, self.cfg.threads_per_block // 32
            sums = b.smem.allocate_tensor(Float32, cute.make_layout(max(rows, warps)), byte_alignment=16)
            counts = b.smem.allocate_tensor(Int32, cute.make_layout(max(rows, warps)), byte_alignment=16)
            b.sums, b.counts = sums, counts
            b.last = b.smem.allocate_tensor(Int32, cute.make_layout(1), byte_alignment=4)
            tidx = b.tidx
            if tidx % self.cfg.threads_per_row == 0:  # rows past M add nothing
                sums[tidx // self.cfg.threads_per_row] = Float32(0.0)
                counts[tidx // self.cfg.threads_per_row] = Int32(0)
        return self.split_target(io, b)  # (SplitTarget: the configuration's target order)

    @cute.jit
    def after_fold(self, io, b, target):
        pre = None
        x_t = self.split_logit(io, b, target)
        if const_expr(x_t is not None):
            pre = (target, x_t)
        return pre

    def loss(self, result, x_t):
        """The loss from the row's reduced pair, (M, s) with M = fl(max log2 e) and
        s = sum of exp2(x log2 e - M), and its target's logit: ln 2 (M - x_t log2 e) + ln s,
        the first term one fma (x_t log2 e exact inside it), so that M's rounding, which
        scales every term of s alike, cancels; with x_t the max it leaves ln s alone."""
        big, denom = result[0], result[1]
        return cute.math.fma(x_t, Float32(-LOG2_E), big) * LN_2 + cute.math.log(denom, fastmath=False)

    def lse(self, result):
        return result[0] * LN_2 + cute.math.log(result[1], fastmath=False)

    @cute.jit
    def row_values(self, io, b, results, pre):
        ignore_index, result = Int64(io.s.ignore_index), results[0]
        target, x_t = Int64(0), Float32(0.0)
        if const_expr(pre is None):
            target = self.target(io, b.row)
            x_t = self.target_logit(target, b.row, io.x)
        else:
            target, x_t = pre
        flag = cute.make_tensor(cute.make_ptr(Int32, io.s.flag, cute.AddressSpace.gmem, assumed_align=4),
                                cute.make_layout(1))
        loss = Float32(0.0)
        counted = Int32(0)
        if target != ignore_index:
            counted = Int32(1)
            if target >= 0 and target < self.n:
                loss = self.loss(result, x_t)
                if const_expr(self.smoothing):
                    e = io.s.smoothing
                    loss = (1.0 - e) * loss + e * (self.lse(result) - result[2] / self.n)
                if const_expr(self.zloss):
                    lse = self.lse(result)
                    loss = loss + io.s.z * lse * lse
            else:
                loss = Float32(math.nan)
                flag[0] = Int32(1)
        if const_expr(self.reduction != "none"):
            b.sums[b.tidx // self.cfg.threads_per_row] = loss
            b.counts[b.tidx // self.cfg.threads_per_row] = counted
        return {"loss": loss, "lse": self.lse(result), "valid": Float32(counted)}

    @cute.jit
    def finish(self, io, b):
        """"mean" or "sum", in two levels so that no block adds up more than a few values a
        thread: each block writes its partial (the rows' losses and the count of rows not
        ignored); the last block of each GROUP blocks (a counter a group) adds up the group's; the
        last group to close (one more counter) adds up the groups' and writes the result. The
        order of every sum is fixed, whichever blocks finish last."""
        if const_expr(self.reduction != "none"):
            cfg = self.cfg
            work, counter = io.extra["work"], io.extra["counter"]
            sums, counts, last = b.sums, b.counts, b.last
            tidx, bidx, m = b.tidx, b.bidx, b.m
            blocks = cute.arch.grid_dim()[0]
            groups = (blocks + GROUP - 1) // GROUP
            group = bidx // GROUP
            in_group = cutlass.min(GROUP, blocks - group * GROUP)
            at_groups = 1 + 2 * m  # work: [0] result, [1, 1 + m) block sums, then counts, groups', the count last
            if b.rank == 0:  # a cluster's other blocks write no losses
                cute.arch.barrier()
                if tidx == 0:
                    total, count = Float32(0.0), Int32(0)
                    for r in cutlass.range(cfg.rows_per_block):
                        total, count = total + sums[r], count + counts[r]
                    work[1 + bidx] = total
                    work[1 + m + bidx] = count.bitcast(Float32)
                    done = cute.arch.atomic_add((counter.iterator + 1 + group), Int32(1), sem="acq_rel", scope="gpu")
                    last[0] = Int32(done == in_group - 1)
                cute.arch.barrier()
                if last[0] != 0:  # this block closes its group
                    cute.arch.fence_acq_rel_gpu()
                    total, count = self.block_sum(b, work, 1 + group * GROUP, 1 + m + group * GROUP, in_group)
                    if tidx == 0:
                        work[at_groups + group] = total
                        work[at_groups + groups + group] = count.bitcast(Float32)
                        counter[1 + group] = Int32(0)  # for the next launch on this stream
                        done = cute.arch.atomic_add(counter.iterator, Int32(1), sem="acq_rel", scope="gpu")
                        last[0] = Int32(done == groups - 1)
                    cute.arch.barrier()
                    if last[0] != 0:  # and the last group: the result
                        cute.arch.fence_acq_rel_gpu()
                        total, count = self.block_sum(b, work, at_groups, at_groups + groups, groups)
                        if tidx == 0:
                            if const_expr(self.reduction == "mean"):
                                total = total / Float32(count)
                            work[0] = total
                            work[cute.size(work) - 1] = Float32(count)
                            counter[0] = Int32(0)

    @cute.jit
    def block_sum(self, b, work, at_sums, at_counts, n):
        """The sum of the ``n`` sums at ``work[at_sums:]`` and of the ``n`` counts at
        ``work[at_counts:]`` (fp32 bits of int32), in a fixed order: a stride of the block's
        threads each, then each warp, then the warps; thread 0 holds the result."""
        total, count = Float32(0.0), Int32(0)
        for i in cutlass.range(b.tidx, n, self.cfg.threads_per_block):
            total, count = total + work[at_sums + i], count + work[at_counts + i].bitcast(Int32)
        total, count = warp_reduce((total, count), SUM_PAIR)
        sums, counts = b.sums, b.counts
        # warp_idx() is a shfl.sync that names the whole warp: every lane must run it, so it
        # stays out of the lane-0 branch (inside, lane 0 waits for lanes that never come)
        warp = cute.arch.warp_idx()
        cute.arch.barrier()  # the slots may still be read by the level before
        if cute.arch.lane_idx() == 0:
            sums[warp] = total
            counts[warp] = count
        cute.arch.barrier()
        total, count = Float32(0.0), Int32(0)
        if b.tidx == 0:
            for w in cutlass.range(self.cfg.threads_per_block // 32):
                total, count = total + sums[w], count + counts[w]
        return total, count


#: Blocks whose partials one block of cross-entropy's reduced loss adds up (the first level).
GROUP = 128
#: The most rows whose mean or sum is finished in the kernel's own launch: past this, the
#: partials cost more than PyTorch's sum of the per-row losses (TUNING.md#cross-entropy-mean).
IN_LAUNCH_MAX_ROWS = 2048


def work_buffer(m: int, device) -> torch.Tensor:
    """The fp32 buffer a mean or sum of m rows finished in the launch needs (``CrossEntropy``):
    the result, the blocks' and the groups' partials, and the count last."""
    return torch.empty(2 + 2 * m + 2 * (m // GROUP + 1), dtype=torch.float32, device=device)


class CrossEntropyBackward(RowOp):
    """dlogits = (exp(x - lse) - onehot(target)) g over each row, from the forward's logsumexp:
    reads the logits, writes their gradient (in place, over the logits, if asked); nothing to
    reduce. g is the row's share of the loss's gradient (``dloss``: one a row, or one for all),
    0 where the target is ignore_index. options (per_row, smoothing, zloss): with label smoothing
    e the one-hot becomes (1 - e) onehot + e / N, with the z-loss p gains a factor 1 + 2 z lse."""

    table = "cross_entropy_bwd"
    row_in = ("target", "lse", "dloss")
    out = ("dx",)
    scalars = {"ignore_index": Int32, "smoothing": Float32, "z": Float32}
    needs_columns = True
    default_options = (True, False, False)

    def __init__(self, dtype, n, cfg, present, in_dtypes, per_row: bool, smoothing: bool, zloss: bool):
        self.per_row, self.smoothing, self.zloss = per_row, smoothing, zloss
        super().__init__(dtype, n, cfg, present, in_dtypes)

    def row_in_extent(self, name, m):
        return m if self.per_row or name != "dloss" else 1

    @cute.jit
    def row_inputs(self, io, b):
        ignore = Int64(io.s.ignore_index)
        target, lse, g = ignore, Float32(0.0), Float32(0.0)
        row = b.row
        if row < b.m:
            target = Int64(io.row_in["target"][row])
            lse = Float32(io.row_in["lse"][row])
            g = Float32(io.row_in["dloss"][row if const_expr(self.per_row) else 0])
        if target == ignore:
            g = Float32(0.0)
        return {"target": Int32(target), "lse": lse, "g": g}

    def epilogue(self, v, results, s):
        p = exp_minus(v.x, v.lse)
        if self.zloss:
            p = p * (1.0 + 2.0 * s.z * v.lse)
        hit = 1.0 - s.smoothing if self.smoothing else 1.0
        if self.smoothing:
            p = p - s.smoothing / self.classes(s)
        return {"dx": cute.where(v.col == v.target, p - hit, p) * v.g}

    def classes(self, s):
        """The classes smoothing spreads e over: the row's N (a vocabulary shard's: all of them)."""
        return self.n


def cross_entropy_backward_out(dloss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                               dlogits: torch.Tensor, ignore_index: int = -100, *, label_smoothing: float = 0.0,
                               lse_square_scale: float = 0.0, config=None, remember=None) -> torch.Tensor:
    """Write the gradient of the per-row losses into ``dlogits`` (the logits' shape and dtype; the
    logits themselves for an in-place backward): ``dloss`` holds one gradient a row (M,) or one
    for every row (1,), already divided by the count for a mean; ``lse`` is the forward's.
    ``remember``: the key under which a fast path of ``kernels.functional`` finds the kernel."""
    return backward_launch(CrossEntropyBackward, dloss, logits, target, lse, dlogits, ignore_index, label_smoothing,
                           lse_square_scale, config, remember=remember)


def backward_launch(op, dloss, logits, target, lse, dlogits, ignore_index, label_smoothing, lse_square_scale, config,
                    names=("logits", "dloss"), more=(), remember=None):
    """Check the backward's inputs (``names``: what the logits and the loss's gradient are
    called in errors) and launch ``op`` (``CrossEntropyBackward`` or an op of its signature with
    the scalars ``more`` after its own)."""
    rows = validate.rows(logits, names[0], cuda=False)
    m = rows.shape[0]
    validate.like(logits, dlogits, "dlogits")
    validate.per_row(target, m, logits.device, "target", (torch.int64, torch.int32))
    validate.per_row(lse, m, logits.device, "lse")
    per_row = dloss.numel() != 1 or m == 1
    validate.per_row(dloss.reshape(-1), m if per_row else 1, logits.device, names[1])
    validate.on_cuda(logits, names[0])
    if m:
        op.launch(rows, config, (per_row, label_smoothing != 0, lse_square_scale != 0), rows=(rows,),
                  row_in=(target, lse, dloss.reshape(-1)), out=(validate.rows(dlogits, "dlogits"),),
                  scalars=(ignore_index, float(label_smoothing), float(lse_square_scale)) + tuple(more),
                  remember=remember if config is None else None)
    return dlogits


#: Adds (sum, count) pairs (the warp tier of the last block).
SUM_PAIR = Combine("sum_pair", (0.0, 0), lambda a, b: (a[0] + b[0], a[1] + b[1]), None, 0.0)

_COUNTERS: dict = {}


def _counter(device: torch.device) -> torch.Tensor:
    """The block counters of the launches on the current stream of ``device`` (the groups done,
    then one a group, for up to ``IN_LAUNCH_MAX_ROWS`` rows): zeroed once, and back at zero after
    every launch (its last blocks reset them). One buffer a stream, so that launches on two
    streams never share one."""
    index = device.index
    key = (index, torch._C._cuda_getCurrentRawStream(index))
    c = _COUNTERS.get(key)
    if c is None:
        c = _COUNTERS[key] = torch.zeros(2 + IN_LAUNCH_MAX_ROWS // GROUP, dtype=torch.int32, device=device)
    return c


def _remembered_as(logits, target, in_launch, counted, return_lse):
    """The key under which a checked call of the default mean remembers its kernel for
    :func:`mean_fast`: the public call's (the mean in the launch, nothing else written), and a
    training forward's, which also writes each row's lse (the mean in the launch, or past
    ``IN_LAUNCH_MAX_ROWS`` rows the rows' losses and counts, added up after)."""
    key = (logits.dtype, logits.shape[1], target.dtype)
    if not return_lse:
        return key if in_launch == "mean" else None
    return key + ("lse",) if in_launch == "mean" else key + ("rows", "lse") if counted else None


def mean_fast(logits, target, ignore_index, with_lse: bool = False):
    """The default mean of (M, N) ``logits`` through the kernel a checked call remembered
    (``_remembered_as``), with only what the compiled signature cannot check done here: the report
    of an earlier bad target, the targets' M against the logits' (the signature checks each tensor
    alone), the row count the mean takes, and its buffers. Returns the mean, or with ``with_lse``
    (a training forward) (the mean, each row's lse, the count of rows not ignored), which may share
    a buffer; past ``IN_LAUNCH_MAX_ROWS`` rows (with ``with_lse`` only) the per-row losses and
    counts are added up by one PyTorch sum. None where there is no such kernel or its signature
    refuses the tensors: the checked path then says why."""
    m, n = logits.shape
    in_launch = m <= IN_LAUNCH_MAX_ROWS
    if not (in_launch or with_lse) or m > 2**24 or target.shape != (m,):
        return None
    fn = CrossEntropy.fast.get(_remembered_as(logits, target, "mean" if in_launch else "none", True, with_lse))
    if fn is None:
        return None
    errors.FLAGS.raise_if_set(errors.CROSS_ENTROPY_TARGET)  # raises: a report is never swallowed below
    if not (with_lse or logits.is_cuda):  # (a training forward's logits are CUDA's: ``functional._eager``)
        return None
    device = logits.device
    lse = torch.empty(m, dtype=torch.float32, device=device) if with_lse else None
    flag = errors.FLAGS.address(errors.CROSS_ENTROPY_TARGET)
    if in_launch:
        work = work_buffer(m, device)
        args = mean_args(logits, target, ignore_index, work, _counter(device), flag, lse)
    else:
        per_row = torch.empty(2, m, dtype=torch.float32, device=device)  # (the counts, the losses)
        args = (logits, target, per_row[1], lse, per_row[0], ignore_index, flag, 0.0, 0.0)
    try:
        fn(args)
    except (ValueError, TypeError):  # refused before launching: the checked path says why
        return None
    if not with_lse:
        return work[0]
    if in_launch:
        return work[0], lse, work[-1:]
    sums = per_row.sum(1)
    return sums[1] / sums[0], lse, sums[:1]


def mean_args(logits, target, ignore_index, work, counter, flag_address, lse=None):
    """The compiled mean kernel's arguments, in the order ``RowOp.launch`` passes them (rows,
    per-row inputs, the present row outputs and extra tensors, scalars; no label smoothing, no
    z-loss)."""
    return (logits, target) + ((lse,) if lse is not None else ()) + (work, counter, ignore_index, flag_address, 0.0, 0.0)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  reduction: str = "mean", *, label_smoothing: float = 0.0, lse_square_scale: float = 0.0,
                  return_lse: bool = False, config=None, return_count: bool = False):
    """Cross-entropy of logits (M, N) against integer targets (M,), as torch's
    ``F.cross_entropy`` (fp32 accumulation; a fp32 loss per row for "none", else a scalar), with
    torch's ``label_smoothing`` and PaLM's z-loss (``lse_square_scale`` times lse^2 a row).
    With ``return_lse``, also each row's logsumexp (fp32, M). No host sync: a target outside
    [0, N) that is not ignore_index makes its row's loss NaN and is reported by a later call or
    by ``kernels.check_errors()`` (:mod:`kernels.errors`). With ``return_count`` (for the
    backward of a mean), (loss, lse or None, the count of rows not ignored: fp32, (1,))."""
    rows = validate.rows(logits, "logits", cuda=False)
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D (M, N), got shape {tuple(logits.shape)}")
    m = rows.shape[0]
    validate.per_row(target, m, logits.device, "target", (torch.int64, torch.int32))
    if not -(2**31) <= ignore_index < 2**31:
        raise ValueError("ignore_index must fit in int32")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    validate.on_cuda(logits, "logits")
    validate.no_autograd("kernels.cross_entropy.cross_entropy", logits)
    errors.FLAGS.raise_if_set(errors.CROSS_ENTROPY_TARGET)
    device = logits.device
    # many rows: the per-row losses, added up by PyTorch after (TUNING.md#cross-entropy-mean); for
    # a mean, each row's 1.0 or 0.0 (counted or ignored) beside them, both added up by one sum
    # (fp32 counts are exact up to 2^24 rows; past that the targets are counted as integers)
    in_launch = reduction if m <= IN_LAUNCH_MAX_ROWS else "none"
    counted = reduction == "mean" and in_launch == "none" and m <= 2**24
    per_row = torch.empty(2 if counted else 1, m, dtype=torch.float32, device=device) if in_launch == "none" else None
    # (the counts first: the count the backward takes is then sums[:1], aligned as a custom op's output must be)
    loss = None if per_row is None else per_row[1 if counted else 0]
    lse = torch.empty(m, dtype=torch.float32, device=device) if return_lse else None
    work = counter = None
    if in_launch != "none":
        work = work_buffer(m, device)
        counter = _counter(device)
    if m:
        CrossEntropy.launch(rows, config, (in_launch, label_smoothing != 0, lse_square_scale != 0), rows=(rows,),
                            row_in=(target,), row_out=(loss, lse, per_row[0] if counted else None),
                            extra=(work, counter),
                            scalars=(ignore_index, errors.FLAGS.address(errors.CROSS_ENTROPY_TARGET),
                                     float(label_smoothing), float(lse_square_scale)),
                            remember=_remembered_as(logits, target, in_launch, counted, return_lse)
                            if config is None and reduction == "mean" and not label_smoothing
                            and not lse_square_scale else None)
    elif work is not None:
        work[0], work[-1] = (0.0 if reduction == "sum" else math.nan), 0.0
    count = None
    if in_launch == reduction:
        out = loss if reduction == "none" else work[0]
        if reduction == "mean" and return_count:  # (a copy: a custom op's outputs may not alias)
            count = work[-1:].clone()
    elif reduction == "sum":
        out = loss.sum()
    elif counted:
        sums = per_row.sum(1)  # (the counts, the losses)
        count, out = sums[:1], sums[1] / sums[0]
    else:
        count = counted_rows(target, ignore_index)
        out = loss.sum() / count[0]
    if return_count:  # (the kernel's count for a mean; without a mean counted here, only when asked)
        return out, lse, counted_rows(target, ignore_index) if count is None else count
    return (out, lse) if return_lse else out


def counted_rows(target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """The rows a mean divides by, those whose target is not ``ignore_index``: fp32, (1,)."""
    return (target != ignore_index).sum(dtype=torch.float32).reshape(1)


def cross_entropy_reference(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                            reduction: str = "mean", label_smoothing: float = 0.0,
                            lse_square_scale: float = 0.0) -> torch.Tensor:
    x64 = logits.double()
    loss = torch.nn.functional.cross_entropy(x64, target.long(), ignore_index=ignore_index, reduction="none",
                                             label_smoothing=label_smoothing)
    keep = target != ignore_index
    loss = loss + torch.where(keep, lse_square_scale * torch.logsumexp(x64, -1) ** 2, 0.0)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / keep.sum()


def row_gradients(dloss: torch.Tensor, target: torch.Tensor, ignore_index: int, reduction: str,
                  count: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's share of the loss's gradient, as ``cross_entropy_backward_out`` takes it: one a
    row for "none"; one for all rows for "sum"; for "mean" that one over the rows not ignored
    (``count``, the forward's, where given)."""
    if reduction == "none":
        return dloss.reshape(-1)
    g = dloss.reshape(1)
    if reduction != "mean":
        return g
    return g / (count if count is not None else counted_rows(target, ignore_index))


def cross_entropy_backward_reference(dloss, logits, target, ignore_index: int = -100, reduction: str = "mean",
                                     label_smoothing: float = 0.0, lse_square_scale: float = 0.0):
    """dlogits in PyTorch (float64): (softmax (1 + 2 z lse) - (1 - e) onehot - e / N) times each
    row's share of dloss, zero for ignored rows."""
    keep = target != ignore_index
    g = row_gradients(dloss.double(), target, ignore_index, reduction).double().expand(target.shape)
    g = torch.where(keep, g, torch.zeros_like(g))
    x64 = logits.double()
    p = torch.softmax(x64, -1) * (1 + 2 * lse_square_scale * torch.logsumexp(x64, -1, keepdim=True))
    onehot = torch.nn.functional.one_hot(torch.where(keep, target, 0).long(), logits.shape[-1]).double()
    e = label_smoothing
    return (p - (1 - e) * onehot - e / logits.shape[-1]) * g.unsqueeze(-1)

"""The reduction toolkit: one mechanism for every row kernel in this package.

A row of N elements is spread over the registers of many threads. We reduce it
where the data already is and climb the memory hierarchy only with what is left:

    tier     who combines                  through                       PTX
    thread   one thread's own registers    nothing (TensorSSA.reduce)    add/max
    warp     the 32 lanes of a warp        butterfly shuffles            shfl.sync.bfly
    block    the warps of a block          a shared-memory buffer        st.shared, bar.sync
    cluster  the blocks of a cluster       every peer's shared memory    mapa, st.async, mbarrier

What is reduced is a tuple of fp32 values combined by a :class:`Combine`, an
associative operation with an identity. Sum and max are one-element tuples;
softmax and cross-entropy reduce the pair (running max, sum of exp(x - max)) in one
pass, so one exchange per tier serves them all (cross-entropy carries the max in log2
units, ``LOGSUMEXP2``, and folds bf16 straight from its registers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
from cutlass.cute.arch import inline_ptx

WARP_SIZE = 32
LOG2_E = math.log2(math.e)


@dataclass(frozen=True)
class Combine:
    """An associative combine of fp32 tuples, with its identity and the thread-level
    reduction that folds a vector of values into one such tuple."""

    name: str
    identity: Tuple[float, ...]
    combine: Callable  # (tuple, tuple) -> tuple, traced inside kernels
    fold: Callable  # (TensorSSA of fp32) -> tuple: the thread tier
    pad: float  # value of an element outside the row, neutral for ``fold``
    #: (register fragment of bf16) -> tuple: the same thread tier from the raw registers, for
    #: an op whose fold gains from never widening them all (None: widen, then ``fold``)
    fold_bf16: Callable | None = None
    #: Whether ``fold`` counts the elements of the row: it then takes the pair (values, part),
    #: part None where every element is in the row, else its ``count`` and ``only(values)`` (the
    #: values with the padding set to 0; ``rowkernel.Part``): a mean and a variance count them
    weighted: bool = False

    @property
    def width(self) -> int:
        return len(self.identity)


def _sum_fold(x):
    return (x.reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0),)


def _max_fold(x):
    return (x.reduce(cute.ReductionOp.MAX, init_val=-math.inf, reduction_profile=0),)


def _sumsq_fold(x):
    return ((x * x).reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0),)


def _finite_or_zero(m):
    """The max to subtract: a max of -inf (nothing but -inf seen yet) becomes 0, so that
    exp(-inf - m) is exp(-inf) = 0 and never exp(-inf + inf) = NaN."""
    return Float32(cutlass.select_(m == -math.inf, Float32(0.0), m))


def exp_minus(x, m):
    """exp(x - m) as exp2, for a value or a tensor of them: (x - m) first, which is exact for x
    near m, so the terms that matter keep full precision even for logits far from 0
    (x * log2e - m * log2e would round each product: errors of |m| * 2^-24)."""
    return cute.math.exp2((x - m) * LOG2_E, fastmath=True)


def _online_combine(a, b, exp_of=exp_minus):
    """Merge two (max, sum of exp(x - max)) pairs (``exp_of(x, m)``: the pair's exp(x - m))."""
    m = cute.arch.fmax(a[0], b[0])
    m_safe = _finite_or_zero(m)
    return (m, a[1] * exp_of(a[0], m_safe) + b[1] * exp_of(b[0], m_safe))


def _online_fold(x):
    m = x.reduce(cute.ReductionOp.MAX, init_val=-math.inf, reduction_profile=0)
    e = exp_minus(x, _finite_or_zero(m))
    return (m, e.reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0))


SUM = Combine("sum", (0.0,), lambda a, b: (a[0] + b[0],), _sum_fold, 0.0)
#: Two sums in one exchange: its fold takes a pair of value tensors.
SUM2 = Combine("sum2", (0.0, 0.0), lambda a, b: (a[0] + b[0], a[1] + b[1]),
               lambda xs: (_sum_fold(xs[0])[0], _sum_fold(xs[1])[0]), 0.0)
SUMSQ = Combine("sumsq", (0.0,), lambda a, b: (a[0] + b[0],), _sumsq_fold, 0.0)
MAX = Combine("max", (-math.inf,), lambda a, b: (cute.arch.fmax(a[0], b[0]),), _max_fold, -math.inf)
LOGSUMEXP = Combine("logsumexp", (-math.inf, 0.0), _online_combine, _online_fold, -math.inf)


# A row's mean and variance in one exchange: each part of the row is the triple (count n, sum s,
# M2 = the sum of squares about the part's mean), and two parts merge exactly (Chan, Golub and
# LeVeque, 1979): M2 gains (s_a n_b - s_b n_a)^2 / (n_a n_b n), the squared difference of the
# means weighted by n_a n_b / n. Squares are taken about a part's own mean, never as
# E[x^2] - E[x]^2: a row far from zero keeps most of its variance (each merge rounds a difference
# of partial sums, an error that grows with |mean| / sigma; a second pass about the row's mean,
# two exchanges, would round less). The difference is formed as
# max - min of the two products, the same bits whichever part a lane holds (a butterfly's two
# lanes then agree); an empty part (0, 0, 0) is the identity. Where no element is padding, every
# part of a tier holds as many as the next, the counts are numbers known when the kernel is
# traced (no tier moves them, see ``known``), and the merge is (s_a - s_b)^2 / n.
def _mean_var_combine(a, b):
    n = a[0] + b[0]
    if known(a[0]) and known(b[0]) and a[0] == b[0]:
        d = a[1] - b[1]
        return (n, a[1] + b[1], (a[2] + b[2]) + d * d * (1.0 / n))
    u, v = a[1] * b[0], b[1] * a[0]
    t = cute.arch.fmax(u, v) - cute.arch.fmin(u, v)
    # (t times t / (n_a n_b n), not t^2 / (...): t^2 overflows fp32 once t passes 1.8e19; the
    # weight is a constant where both counts are known, e.g. a staged row's accesses merged in turn)
    if known(a[0]) and known(b[0]):
        w = 1.0 / max(a[0] * b[0] * n, 1.0)
    else:
        w = cute.arch.rcp_approx(cute.arch.fmax(a[0] * b[0] * n, Float32(1.0)))
    return (n, a[1] + b[1], (a[2] + b[2]) + t * (t * w))


def _mean_var_fold(xw):
    """(x, part): part None where the part holds no padding (its count is then its size)."""
    x, part = xw  # (x is the padding, 0.0, outside the row)
    s = x.reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)
    if part is None:
        n = float(cute.size(x.shape))
        d = x - s * (1.0 / n)
    else:
        n = part.count
        d = part.only(x - s * cute.arch.rcp_approx(cute.arch.fmax(n, Float32(1.0))))
    return (n, s, (d * d).reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0))


MEAN_VAR = Combine("mean_var", (0.0, 0.0, 0.0), _mean_var_combine, _mean_var_fold, 0.0, weighted=True)


# The same pair with its max in log2 units, M = fl(max * log2 e): each term is then
# exp2(fma(x, log2 e, -M)), one fused multiply-add (the product exact inside it) where
# exp_minus takes a subtraction and a product. M's rounding shifts every term of a row alike
# and cancels in anything formed against the same M (cross-entropy's loss: see
# CrossEntropy.loss). Cross-entropy gains from it, softmax does not (TUNING.md#log2-pair).
def exp2_from(x, big):
    """exp2(x log2 e - big) for a value or a tensor of them, ``big`` a max in log2 units
    (-inf, nothing seen yet, counts as 0)."""
    shift = -_finite_or_zero(big)
    if isinstance(x, cute.TensorSSA):
        return cute.math.exp2(cute.math.fma(x, cute.full_like(x, LOG2_E), cute.full_like(x, shift)), fastmath=True)
    return cute.math.exp2(cute.math.fma(x, Float32(LOG2_E), shift), fastmath=True)


def _log2_combine(a, b):
    """Merge two (max log2 e, sum of exp2(x log2 e - max log2 e)) pairs: the online merge,
    with the maxima's difference already in log2 units."""
    return _online_combine(a, b, exp_of=lambda big, safe: cute.math.exp2(big - safe, fastmath=True))


def _log2_fold(x):
    big = x.reduce(cute.ReductionOp.MAX, init_val=-math.inf, reduction_profile=0) * LOG2_E
    return (big, exp2_from(x, big).reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0))


def _tree(vals, f):
    """Fold a list pairwise, so that the dependent chain is log2(len) deep."""
    while len(vals) > 1:
        vals = [f(vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
    return vals[0]


def _bf16x2_max(a, b):
    """Max of two words of two bf16 each, lane by lane (exact; NaN wins, as FMNMX.NAN's does)."""
    return inline_ptx("max.NaN.bf16x2 {$w0}, {$r0}, {$r1};", write_only_types=[Int32], read_only_args=[a, b])


def _bf16_low(w):
    """The word's first bf16 as an fp32: its 16 bits become the fp32's top half."""
    return inline_ptx("shl.b32 {$w0}, {$r0}, 16;", write_only_types=[Float32], read_only_args=[w])


def _bf16_high(w):
    """The word's second bf16 as an fp32: the word with its low half cleared."""
    return inline_ptx("and.b32 {$w0}, {$r0}, -65536;", write_only_types=[Float32], read_only_args=[w])


def _log2_fold_bf16(buf):
    """``_log2_fold`` from a fragment of bf16 in registers, two to a 32-bit word: the max over
    the words as bf16 pairs (half the instructions, no widening: a max of bf16 is a bf16),
    then each element widened by one shift or mask (the compiler's conversion takes a byte
    permute more for every second one) into its term, the terms summed as a tree."""
    words = cute.recast_tensor(buf, Int32)
    words = [words[i] for i in range(cute.size(words))]
    pair = _tree(words, _bf16x2_max)
    big = cute.arch.fmax(_bf16_low(pair), _bf16_high(pair)) * LOG2_E
    terms = [exp2_from(half(w), big) for w in words for half in (_bf16_low, _bf16_high)]
    return (big, _tree(terms, lambda a, b: a + b))


LOGSUMEXP2 = Combine("logsumexp2", (-math.inf, 0.0), _log2_combine, _log2_fold, -math.inf, _log2_fold_bf16)


def _log2_sum_fold(x):
    """``_log2_fold`` and the row's plain sum (elements of -inf, the padding among them, left
    out of the sum)."""
    return (*_log2_fold(x), cute.where(x == -math.inf, cute.full_like(x, 0.0), x).reduce(
        cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0))


#: LOGSUMEXP2's pair and the row's sum, in one exchange (cross-entropy with label smoothing).
LOGSUMEXP2_SUM = Combine("logsumexp2_sum", (-math.inf, 0.0, 0.0),
                         lambda a, b: (*_log2_combine(a[:2], b[:2]), a[2] + b[2]), _log2_sum_fold, -math.inf)



def known(v) -> bool:
    """Is ``v`` a number known when the kernel is traced (not a value in registers)? Every thread
    runs the same trace, so it is the same in every thread: the tiers pass it on without moving it."""
    return isinstance(v, (int, float))


def thread_reduce(x: cute.TensorSSA, op: Combine):
    """Thread tier: fold this thread's registers into one tuple (no communication)."""
    return op.fold(x)


def warp_reduce(vals, op: Combine, group: int = WARP_SIZE):
    """Warp tier: butterfly over aligned groups of ``group`` lanes (a power of two
    <= 32). After log2(group) xor-shuffles every lane holds the group's result."""
    offset = group // 2
    while offset > 0:
        others = tuple(v if known(v) else cute.arch.shuffle_sync_bfly(v, offset=offset) for v in vals)
        vals = op.combine(vals, others)
        offset //= 2
    return vals


def _read_slots(buf: cute.Tensor, row, n_slots: int, op: Combine, parked):
    """Fold the ``n_slots`` partials (a power of two) of ``buf[row, :, :]`` so that every
    lane of the warp ends with the result: with fewer slots than lanes, each aligned
    group of ``n_slots`` lanes reads all of them and reduces among itself; with more,
    each lane folds every 32nd slot first. A value ``known`` in ``parked`` (what this warp
    parked) is every slot's, and is not read."""
    lane = cute.arch.lane_idx()

    def slot(i):
        return tuple(v if known(v) else buf[row, i, k] for k, v in enumerate(parked))
    if n_slots <= WARP_SIZE:
        return warp_reduce(slot(lane % n_slots), op, n_slots)
    vals = slot(lane)
    for i in range(1, n_slots // WARP_SIZE):
        vals = op.combine(vals, slot(lane + i * WARP_SIZE))
    return warp_reduce(vals, op, WARP_SIZE)


@cute.jit
def block_reduce(vals, op: cutlass.Constexpr, buf: cute.Tensor, warps_per_row: cutlass.Constexpr[int]):
    """Block tier: lane 0 of each warp parks its warp's result in shared memory
    ``buf[row_in_block, warp_in_row, k]``; after one barrier each warp folds the
    ``warps_per_row`` partials of its row."""
    warp = cute.arch.warp_idx()
    row, col = warp // warps_per_row, warp % warps_per_row
    if cute.arch.lane_idx() == 0:
        for k in cutlass.range_constexpr(op.width):
            if const_expr(not known(vals[k])):
                buf[row, col, k] = vals[k]
    cute.arch.barrier()
    return _read_slots(buf, row, warps_per_row, op, vals)


@cute.jit
def cluster_reduce_setup(mbar: cute.Pointer, count: cutlass.Constexpr[int] = 1):
    """Before any block of the cluster may write into a peer: each block arms its own
    ``count`` mbarriers (one per exchange; one arrival each: the local expect_tx), fences the
    init so the async proxy sees it, and signals the cluster barrier. ``cluster_wait`` comes
    later, as late as possible, so the wait hides behind the loads."""
    if cute.arch.thread_idx()[0] == 0:
        for i in cutlass.range_constexpr(count):
            cute.arch.mbarrier_init(mbar + i, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.cluster_arrive_relaxed()


@cute.jit
def cluster_reduce(
    vals,
    op: cutlass.Constexpr,
    buf: cute.Tensor,
    mbar: cute.Pointer,
    warps_per_row: cutlass.Constexpr[int],
    cluster_n: cutlass.Constexpr[int],
    slot_width: cutlass.Constexpr[int],
    phase=0,
):
    """Cluster tier: every warp sends its partial to slot
    ``rank * warps_per_row + warp_in_row`` of ``buf[row]`` in *every* block of the
    cluster with ``st.async`` (lane i writes to peer i). Each store adds its bytes to
    the receiving block's mbarrier transaction count; a block waits until all
    ``warps_per_row * cluster_n`` partials of each of its rows have landed, then
    folds them locally. One exchange, no second round trip. A kernel that exchanges again through
    the same mbarrier (row after row) waits for its ``phase`` (0, 1, 0, ...) each time."""
    warp = cute.arch.warp_idx()
    lane = cute.arch.lane_idx()
    rows_per_block = cute.size(buf, mode=[0])
    row, col = warp // warps_per_row, warp % warps_per_row
    rank = cute.arch.block_idx_in_cluster()
    if warp == 0:
        with cute.arch.elect_one():
            n_bytes = rows_per_block * warps_per_row * cluster_n * slot_width * 4
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, n_bytes)
    if lane < cluster_n:
        words = [Int32(0) if known(vals[k]) else vals[k].bitcast(Int32) for k in range(op.width)]
        words += [Int32(0)] * (slot_width - op.width)
        dst = buf.iterator + cute.crd2idx((row, rank * warps_per_row + col, 0), buf.layout)
        cute.arch.store_async_dsmem(dst, words[0] if slot_width == 1 else tuple(words), mbar, lane)
    cute.arch.mbarrier_wait(mbar, phase)
    return _read_slots(buf, row, warps_per_row * cluster_n, op, vals)


def slot_width(op: Combine) -> int:
    """st.async moves 1, 2 or 4 words: pad the tuple to the next of those."""
    return {1: 1, 2: 2, 3: 4, 4: 4}[op.width]


@cute.jit
def row_reduce(
    vals,
    op: cutlass.Constexpr,
    threads_per_row: cutlass.Constexpr[int],
    cluster_n: cutlass.Constexpr[int],
    buf,
    mbar,
    first: cutlass.Constexpr[bool] = True,
    phase=0,
):
    """Climb the tiers above the thread: warp, then block or cluster, using only
    those the configuration needs. ``vals`` is this thread's folded tuple; every
    thread of the row gets the row's result. A kernel that reduces twice a row passes each
    exchange its own ``buf`` and ``mbar``; the first waits for the cluster's setup (a kernel that
    reuses them row after row waits for it once itself, and passes the mbarrier's ``phase``)."""
    vals = warp_reduce(vals, op, min(threads_per_row, WARP_SIZE))
    warps_per_row = const_expr(max(1, threads_per_row // WARP_SIZE))
    if const_expr(cluster_n > 1):
        if const_expr(first):
            cute.arch.cluster_wait()
        vals = cluster_reduce(vals, op, buf, mbar, warps_per_row, cluster_n, slot_width(op), phase)
    elif const_expr(warps_per_row > 1):
        vals = block_reduce(vals, op, buf, warps_per_row)
    return vals

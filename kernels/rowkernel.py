"""One row-kernel template for every op in this package.

Each block (or cluster of blocks) owns ``rows_per_block`` rows. For each row it

1. loads its part of the row once, with 128-bit loads, straight into registers
   (predicated on N and M, out-of-row elements set to the op's neutral value);
2. folds its registers (thread tier), then climbs warp, block or cluster tiers
   with what is left (``kernels.reduce``);
3. runs the op's epilogue: write a row back (RMSNorm, softmax), or one number per
   row (row reductions, cross-entropy).

An op supplies only what differs: the :class:`~kernels.reduce.Combine` to reduce
with, whether it needs the row again (``keep_row``), and its epilogue.

A kept row waits for the epilogue in registers (``stage="reg"``, as fp32), or, for the
longest rows, in shared memory (``stage="smem"``): step 1 then copies the block's tile
of rows into shared memory with ``cp.async`` (the input dtype, no registers held), the
fold and the epilogue each read it back one access at a time. Registers then no longer
grow with the row, and more blocks fit an SM.
"""
from __future__ import annotations

import math
from typing import Optional

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import Float32, Int64, const_expr

from .config import RowConfig
from .reduce import Combine, cluster_reduce_setup, row_reduce, slot_width

#: Load a weight row before the reduction only when a thread holds at most this many
#: elements (registers to spare); otherwise after it.
PREFETCH_WEIGHT_MAX_ELEMS = 32
#: A row staged in shared memory reads the weight this many accesses ahead of the one the
#: epilogue works on (four registers each): a load may not pass the output's stores
#: (the compiler cannot tell that they never alias), so without this every access would
#: wait for its own round trip to L2. A thread of at least WEIGHT_ALL_FROM accesses loads
#: every access of its weight before the exchange instead, so that the round trips hide behind
#: it: RMSNorm measured 96.4% of the copy ceiling against 95.8% at bf16 128k, 95.2% against
#: 93.4% at bf16 256k and 94.0% against 92.7% at fp32 256k (8 accesses, 50 registers against
#: 32), and at bf16 64k (4 accesses) 95.9% against 96.1% (benchmarks/runs/weight_ahead.py,
#: book/data/weight_ahead.csv, H200).
WEIGHT_AHEAD = 2
WEIGHT_ALL_FROM = 8


def make_row_copy(dtype, cfg: RowConfig, coalesced: bool = True) -> cute.TiledCopy:
    """The thread-value layout of a row tile: threads ``(rows_per_block, threads_per_row)``
    row-major, each owning ``vec`` consecutive elements per access, so that a warp's
    32 accesses are 32 neighbouring pieces of one row (coalesced).

    ``coalesced=False`` numbers the threads column-major instead: neighbouring lanes
    then sit in different rows, a whole row apart, and each warp-wide access touches
    32 separate memory segments (the anti-pattern chapter 2 measures)."""
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=cfg.vec * dtype.width)
    order = (1, 0) if coalesced else (0, 1)
    thr_layout = cute.make_ordered_layout((cfg.rows_per_block, cfg.threads_per_row), order=order)
    val_layout = cute.make_layout((1, cfg.vec))
    return cute.make_tiled_copy_tv(atom, thr_layout, val_layout)


def make_stage_copy(dtype, vec: int) -> cute.CopyAtom:
    """The atom that copies a row from global into shared memory: ``cp.async`` of the
    access width (16 bytes: ``.cg``, past L1; 4 or 8 bytes: ``.ca``). ``cp.async`` moves
    at least 4 bytes, so single 16-bit elements (a ragged bf16 row) go through a register
    instead (``ld.global`` then ``st.shared``)."""
    bits = vec * dtype.width
    if bits < 32:
        return cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=bits)
    mode = cute.nvgpu.LoadCacheMode.GLOBAL if bits == 128 else cute.nvgpu.LoadCacheMode.ALWAYS
    return cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=mode), dtype, num_bits_per_copy=bits)


@cute.jit
def column_predicate(tXcX: cute.Tensor, n: cutlass.Constexpr[int]) -> cute.Tensor:
    """One flag per 128-bit access: does it start inside the row? (N is a multiple of
    the vector width, so an access is either wholly in or wholly out.)"""
    tXpX = cute.make_rmem_tensor(
        cute.make_layout(
            (cute.size(tXcX, mode=[0, 1]), cute.size(tXcX, mode=[1]), cute.size(tXcX, mode=[2])),
            stride=(cute.size(tXcX, mode=[2]), 0, 1),
        ),
        cutlass.Boolean,
    )
    for v in cutlass.range(tXpX.shape[0], unroll_full=True):
        for k in cutlass.range(tXpX.shape[2], unroll_full=True):
            tXpX[v, 0, k] = cute.elem_less(tXcX[(0, v), 0, k][1], n)
    return tXpX


class RowKernel:
    """Template of a row kernel. Subclasses set ``op`` and ``keep_row`` and override
    ``row_epilogue`` (returns the output row) or ``scalar_epilogue`` (one fp32 per row).
    """

    op: Combine
    keep_row: bool = True
    writes_rows: bool = True  # False: one fp32 per row
    #: Issue ``scalar_prologue``'s loads right after the row's first loads, so that their
    #: round trips overlap the row's instead of following the reduction (False: just before
    #: the epilogue, by the one thread that writes the row's result). "split": in two steps,
    #: ``scalar_prologue_index`` before the row's loads and ``scalar_prologue_gather`` (which
    #: may depend on it) after the row is folded, before the exchange, by the writing thread.
    early_prologue: bool | str = False
    #: A row staged in shared memory: how many of the weight's accesses are loaded ahead
    #: (None: WEIGHT_AHEAD, or all of them from WEIGHT_ALL_FROM accesses a thread).
    weight_ahead: int | None = None
    #: A row staged in shared memory: how many cp.async commit groups its copies are split
    #: into (the fold waits for each in turn before its first access; 1: one group, all waited
    #: for before the fold starts); where it does not divide ``vecs_per_thread``, their greatest
    #: common divisor.
    stage_groups: int = 1

    def __init__(self, dtype, n: int, cfg: RowConfig):
        cfg.check(n, dtype.width)
        if cfg.stage == "smem" and not (self.keep_row and self.writes_rows):
            raise ValueError(f"{type(self).__name__} does not read its row again after reducing it: "
                             "stage='smem' buys nothing, use stage='reg'")
        self.dtype, self.n, self.cfg = dtype, n, cfg

    # ---- hooks -------------------------------------------------------------------
    def transform(self, x):
        """Elementwise map before folding (fp32 in, fp32 out)."""
        return x

    def row_epilogue(self, x, result, w, scalar):
        raise NotImplementedError

    def scalar_prologue(self, row, m, mX, mT, scalar):
        """Whatever a scalar epilogue loads besides the reduction (e.g. cross-entropy's target
        and its logit), handed to it as ``pre``; None by default."""
        return None

    def scalar_prologue_index(self, row, m, mT, scalar):
        """early_prologue "split": the first step of ``scalar_prologue``, issued before the
        row's loads."""
        raise NotImplementedError

    def scalar_prologue_gather(self, index, row, m, mX, tidx, rank):
        """early_prologue "split": the second step, from the first's result, issued after the
        row's fold by the thread that writes the row (the first of the row's threads, in the
        cluster's first block); returns ``pre``."""
        raise NotImplementedError

    def scalar_epilogue(self, result, row, mX, mT, mErr, scalar, pre):
        raise NotImplementedError

    def block_start(self, tidx, bidx, rank):
        """Called first thing in every block (``rank``: the block's place in its cluster). No code
        by default: ``benchmarks/runs/timeline.py`` writes the global timer here and in
        ``block_end``, to see when each block of a launch starts and ends."""
        return None

    def block_end(self, tidx, bidx, rank):
        """Called last thing in every block. No code by default."""
        return None

    def row_view(self, gX, cX, tile, thr, even_n):
        """This thread's view of column tile ``tile`` of its rows: global source, coordinates
        and per-access predicate (None when N fills every tile)."""
        tXgX = thr.partition_S(gX[None, None, tile])
        tXcX = thr.partition_S(cX[None, None, tile])
        return tXgX, tXcX, None if even_n else column_predicate(tXcX, self.n)

    def row_tile(self, gX, cX, tile, thr, even_n):
        """``row_view`` and a register fragment that holds the op's neutral value wherever
        the load is predicated off."""
        tXgX, tXcX, tXpX = self.row_view(gX, cX, tile, thr, even_n)
        tXrX = cute.make_rmem_tensor_like(tXgX)
        if not even_n:
            tXrX.fill(self.op.pad)
        return tXgX, tXcX, tXpX, tXrX

    def weight_tile(self, mW, shape, tiler_mn, bidx, tile, thr):
        """This thread's share of a length-N weight in global memory: the weight viewed
        as an (M, N) tensor with row stride 0, partitioned exactly like the input."""
        mW2 = cute.make_tensor(mW.iterator, cute.make_layout(shape, stride=(0, 1)))
        return thr.partition_S(cute.local_tile(mW2, tiler_mn, (bidx, None))[None, None, tile])

    def load_weight(self, mW, shape, tiler_mn, bidx, tile, thr, load, tXpX):
        """This thread's share of a length-N weight, as fp32."""
        tXgW = self.weight_tile(mW, shape, tiler_mn, bidx, tile, thr)
        tXrW = cute.make_rmem_tensor_like(tXgW)
        cute.copy(load, tXgW, tXrW, pred=tXpX)
        return tXrW.load().to(Float32)

    def load_access(self, tXsX, tXpX, k, load, pad=None):
        """Access ``k`` of this thread's partition ``tXsX`` (shared or global memory), in
        registers; predicated off (``tXpX``, None when N fills every tile), it holds ``pad``,
        or whatever the registers held when ``pad`` is None."""
        tXrX = cute.make_rmem_tensor_like(tXsX[None, None, k])
        if pad is not None and tXpX is not None:
            tXrX.fill(pad)
        cute.copy(load, tXsX[None, None, k], tXrX, pred=None if tXpX is None else tXpX[None, None, k])
        return tXrX

    def fold_buffer(self, buf):
        """The thread tier over one pass's register buffer: from the bf16 registers themselves
        where the op has a fold for them (``Combine.fold_bf16``), accesses are whole 32-bit
        words (an even ``vec``) and no transform applies; else over the buffer widened to fp32."""
        if const_expr(self.op.fold_bf16 is not None and buf.element_type is cutlass.BFloat16
                      and self.cfg.vec % 2 == 0 and type(self).transform is RowKernel.transform):
            return self.op.fold_bf16(buf)
        return self.op.fold(self.transform(buf.load().to(Float32)))

    @cute.jit
    def load_pass(self, buf, p, gX, cX, rank, thr, even_n, m, load):
        """Issue pass ``p``'s loads into the register buffer ``buf`` (refilled with the op's
        neutral value first where the loads are predicated off: the buffer is reused)."""
        tXgX_p, tXcX_p, tXpX_p = self.row_view(gX, cX, p * self.cfg.cluster_n + rank, thr, even_n)
        if const_expr(not even_n):
            buf.fill(self.op.pad)
        if tXcX_p[0][0] < m:
            cute.copy(load, tXgX_p, buf, pred=tXpX_p)

    @cute.jit
    def stream_ahead(self, buf0, gX, cX, rank, thr, even_n, m, load):
        """A streamed row whose pass p + 1 is loaded before pass p is folded (``cfg.ahead``):
        two buffers, even passes in ``buf0`` (pass 0 already issued there), odd ones in
        ``buf1``, two passes an iteration so that each buffer stays put."""
        op, passes = self.op, self.cfg.passes
        buf1 = cute.make_rmem_tensor_like(buf0)
        self.load_pass(buf1, 1, gX, cX, rank, thr, even_n, m, load)
        state = self.fold_buffer(buf0)  # pass 0
        for p in cutlass.range(1, passes - 1, 2):  # folds passes p (odd) and p + 1
            self.load_pass(buf0, p + 1, gX, cX, rank, thr, even_n, m, load)
            state = op.combine(state, self.fold_buffer(buf1))
            if p + 2 < passes:
                self.load_pass(buf1, p + 2, gX, cX, rank, thr, even_n, m, load)
            state = op.combine(state, self.fold_buffer(buf0))
        if const_expr(passes % 2 == 0):  # the last pass, odd, is in buf1
            state = op.combine(state, self.fold_buffer(buf1))
        return state

    # ---- host side ---------------------------------------------------------------
    @cute.jit
    def __call__(self, mX: cute.Tensor, mO: cute.Tensor, mW: Optional[cute.Tensor],
                 mT: Optional[cute.Tensor], mErr: Optional[cute.Tensor], scalar, stream):
        cfg = self.cfg
        tiled_copy = make_row_copy(mX.element_type, cfg)
        tiler_mn = (cfg.rows_per_block, cfg.cols_per_pass)
        self.kernel(mX, mO, mW, mT, mErr, scalar, tiled_copy, tiler_mn).launch(
            grid=[cute.ceil_div(mX.shape[0], cfg.rows_per_block), cfg.cluster_n, 1],
            block=[cfg.threads_per_block, 1, 1],
            cluster=[1, cfg.cluster_n, 1] if const_expr(cfg.cluster_n > 1) else None,
            stream=stream,
        )

    # ---- device side -------------------------------------------------------------
    @cute.kernel
    def kernel(self, mX: cute.Tensor, mO: cute.Tensor, mW: Optional[cute.Tensor],
               mT: Optional[cute.Tensor], mErr: Optional[cute.Tensor], scalar,
               tiled_copy: cute.TiledCopy, tiler_mn: cute.Shape):
        cfg, op, n = self.cfg, self.op, self.n
        tidx, _, _ = cute.arch.thread_idx()
        bidx, rank, _ = cute.arch.block_idx()
        if const_expr(cfg.cluster_n == 1):
            rank = 0
        m = mX.shape[0]
        row = bidx * cfg.rows_per_block + tidx // cfg.threads_per_row  # this thread's row
        pre = None
        self.block_start(tidx, bidx, rank)

        # Partials of the block / cluster tiers live in shared memory.
        smem = cutlass.memory.SmemAllocator()
        warps_per_row = cfg.warps_per_row
        buf, mbar = None, None
        if const_expr(cfg.cluster_n > 1 or warps_per_row > 1):
            buf = smem.allocate_tensor(
                Float32,
                cute.make_ordered_layout(
                    (cfg.rows_per_block, warps_per_row * cfg.cluster_n, slot_width(op)), order=(2, 1, 0)),
                byte_alignment=16,
            )
        if const_expr(cfg.cluster_n > 1):
            mbar = smem.allocate_array(Int64, num_elems=1)
            cluster_reduce_setup(mbar)
        # A kept row staged in shared memory: the block's (rows_per_block, cols_per_pass)
        # tile in the input dtype, row-major, so that a warp's 16-byte accesses are 512
        # contiguous bytes (no bank conflicts); 128-byte aligned for cp.async.
        staged = const_expr(cfg.stage == "smem")
        sX = None
        if const_expr(staged):
            sX = smem.allocate_tensor(mX.element_type, cute.make_ordered_layout(tiler_mn, order=(1, 0)),
                                      byte_alignment=128)

        gX = cute.local_tile(mX, tiler_mn, (bidx, None))
        cX = cute.local_tile(cute.make_identity_tensor(mX.shape), tiler_mn, (bidx, None))
        thr = tiled_copy.get_slice(tidx)
        even_n = const_expr(n == cfg.cols_covered)
        load = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), mX.element_type,
                                   num_bits_per_copy=cfg.vec * mX.element_type.width)

        split = const_expr(self.early_prologue == "split" and not self.writes_rows)
        index = None
        if const_expr(split):
            index = self.scalar_prologue_index(row, m, mT, scalar)

        # 1. load the row into registers and fold it (thread tier). A kept row is one
        # pass; a streamed row loops over passes, carrying only the folded tuple.
        tile = rank
        if const_expr(staged):
            # 1'. or copy it into shared memory and fold it from there, one access at a
            # time. Rows past M are not copied (and never stored); accesses past N are
            # zero-filled by cp.async (or skipped), and read back as the op's neutral value.
            tXgX, tXcX, tXpX = self.row_view(gX, cX, tile, thr, even_n)
            tXsX = thr.partition_D(sX)
            groups = math.gcd(self.stage_groups, cfg.vecs_per_thread)
            per_group = cfg.vecs_per_thread // groups
            if const_expr(groups == 1):
                if tXcX[0][0] < m:
                    cute.copy(make_stage_copy(mX.element_type, cfg.vec), tXgX, tXsX, pred=tXpX)
                cute.arch.cp_async_commit_group()
            else:  # one commit group per `per_group` accesses, so the fold can start on the first
                stage_copy = make_stage_copy(mX.element_type, cfg.vec)
                for g in cutlass.range_constexpr(groups):
                    if tXcX[0][0] < m:
                        for k in cutlass.range_constexpr(g * per_group, (g + 1) * per_group):
                            cute.copy(stage_copy, tXgX[None, None, k], tXsX[None, None, k],
                                      pred=None if const_expr(tXpX is None) else tXpX[None, None, k])
                    cute.arch.cp_async_commit_group()
            # wait_group makes this thread's own cp.async writes visible to this thread.
            # Every thread reads back exactly the elements it copied (the same partition
            # of the same tile, in the fold and in the epilogue), so no barrier is needed.
            state = None
            for k in cutlass.range_constexpr(cfg.vecs_per_thread):
                if const_expr(k % per_group == 0):  # the groups up to k's have landed
                    cute.arch.cp_async_wait_group(groups - 1 - k // per_group)
                part = op.fold(self.transform(self.load_access(tXsX, tXpX, k, load, op.pad).load().to(Float32)))
                state = part if k == 0 else op.combine(state, part)
        else:
            tXgX, tXcX, tXpX, tXrX = self.row_tile(gX, cX, tile, thr, even_n)
            if tXcX[0][0] < m:
                cute.copy(load, tXgX, tXrX, pred=tXpX)
            if const_expr(self.early_prologue is True and not self.writes_rows):
                pre = self.scalar_prologue(row, m, mX, mT, scalar)
            if const_expr(cfg.ahead and cfg.passes > 1):
                state = self.stream_ahead(tXrX, gX, cX, rank, thr, even_n, m, load)
            else:
                if const_expr(self.writes_rows):  # the epilogue reads the row again
                    x = self.transform(tXrX.load().to(Float32))
                    state = op.fold(x)
                else:
                    state = self.fold_buffer(tXrX)
                for p in cutlass.range(1, cfg.passes, unroll=2):
                    tXrX_p = cute.make_rmem_tensor_like(tXrX)  # a fresh buffer a pass
                    self.load_pass(tXrX_p, p, gX, cX, rank, thr, even_n, m, load)
                    state = op.combine(state, self.fold_buffer(tXrX_p))

        if const_expr(split):
            pre = self.scalar_prologue_gather(index, row, m, mX, tidx, rank)

        # The weight (a row broadcast over M). With few elements a thread it is loaded
        # before the reduction, its latency hidden behind the exchange; with many, after
        # it, so that it holds no registers across the exchange (fp32 rows at N = 256k
        # would otherwise need 64 more registers a thread). A staged row reads it in the
        # epilogue, one access at a time.
        prefetch_w = const_expr(cfg.elems_per_thread <= PREFETCH_WEIGHT_MAX_ELEMS and not staged)
        w = None
        if const_expr(mW is not None and prefetch_w):
            w = self.load_weight(mW, mX.shape, tiler_mn, bidx, tile, thr, load, tXpX)
        tXgW, tXrW = None, []
        w_ahead = self.weight_ahead if self.weight_ahead is not None else (
            cfg.vecs_per_thread if cfg.vecs_per_thread >= WEIGHT_ALL_FROM else WEIGHT_AHEAD)
        if const_expr(mW is not None and staged):
            tXgW = self.weight_tile(mW, mX.shape, tiler_mn, bidx, tile, thr)
            tXrW = [self.load_access(tXgW, tXpX, k, load) for k in range(min(w_ahead, cfg.vecs_per_thread))]

        # 2. the tiers above the thread
        result = row_reduce(state, op, cfg.threads_per_row, cfg.cluster_n, buf, mbar)

        # 3. epilogue
        if const_expr(staged):
            # Read the row back from shared memory, one access at a time: transform, the
            # op's epilogue (with the weight's access), a 128-bit store.
            tXgO = thr.partition_D(cute.local_tile(mO, tiler_mn, (bidx, None))[None, None, tile])
            for k in cutlass.range_constexpr(cfg.vecs_per_thread):
                if const_expr(mW is not None and k + w_ahead < cfg.vecs_per_thread):
                    tXrW.append(self.load_access(tXgW, tXpX, k + w_ahead, load))
                w_k = None if const_expr(mW is None) else tXrW[k].load().to(Float32)
                x_k = self.transform(self.load_access(tXsX, tXpX, k, load).load().to(Float32))
                tXrO_k = cute.make_rmem_tensor_like(tXgO[None, None, k])
                tXrO_k.store(self.row_epilogue(x_k, result, w_k, scalar).to(mO.element_type))
                if tXcX[0][0] < m:
                    cute.copy(load, tXrO_k, tXgO[None, None, k], pred=None if tXpX is None else tXpX[None, None, k])
        elif const_expr(self.writes_rows):
            if const_expr(mW is not None and not prefetch_w):
                w = self.load_weight(mW, mX.shape, tiler_mn, bidx, tile, thr, load, tXpX)
            y = self.row_epilogue(x, result, w, scalar)
            tXgO = thr.partition_D(cute.local_tile(mO, tiler_mn, (bidx, None))[None, None, tile])
            tXrO = cute.make_rmem_tensor_like(tXgO)
            tXrO.store(y.to(mO.element_type))
            if tXcX[0][0] < m:
                cute.copy(load, tXrO, tXgO, pred=tXpX)
        else:
            if tidx % cfg.threads_per_row == 0 and rank == 0 and row < m:
                # without early_prologue, the thread that writes loads what the epilogue needs here
                mO[row] = self.scalar_epilogue(result, row, mX, mT, mErr, scalar, pre if const_expr(
                    self.early_prologue is True or split) else self.scalar_prologue(row, m, mX, mT, scalar))
        self.block_end(tidx, bidx, rank)

"""One row-kernel template for every row op in this package.

Each block (or cluster of blocks) owns ``rows_per_block`` rows of an (M, N) input. For each
row it

1. loads its share of the row once, with 128-bit loads (predicated on N and M; elements
   outside the row hold the reduction's neutral value);
2. folds what it holds (thread tier), then climbs the warp, block or cluster tiers with what is
   left (``kernels.reduce``), once for every reduction the op declares;
3. runs the op's epilogue: rows written back (RMSNorm, softmax) and values written per row
   (rstd, the loss).

An op *declares* what it reads and writes, by name, and supplies only what differs: what it
reduces and its epilogue. A new row op is a short file (``kernels/layernorm.py``)::

    class RMSNorm(RowOp):
        table = "rmsnorm"                 # its rows in kernels/config.py
        cols = ("weight",)                # (N,) inputs, broadcast over the rows; optional
        out = ("y",)                      # (M, N) outputs
        row_out = ("rstd",)               # (M,) fp32 outputs; optional
        scalars = {"eps": Float32}
        reductions = (SUMSQ,)             # one exchange a row

        def epilogue(self, v, results, s):
            rstd = ...
            return {"y": v.x * rstd * v.weight}

Where the row waits between the reduction and the epilogue is the configuration's *stage*,
and each stage is a strategy below: :class:`InRegisters`, :class:`Staged` (shared memory,
filled with ``cp.async``) and :class:`Streamed` (not kept: folded pass by pass).
"""
from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import cutlass.memory
import torch
from cutlass import Float32, Int32, Int64, const_expr

from . import validate
from .compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector
from .config import row_config, vector_width
from .layout import access_atom, column_predicate, make_row_copy, make_stage_copy
from .reduce import cluster_reduce_setup, row_reduce, slot_width

#: Column inputs (a weight, a bias) of a row kept in registers are loaded before the reduction
#: when a thread holds at most this many elements of them, all inputs together (their latency
#: hides behind the exchange), else in the epilogue, as a staged row's always are: all of them
#: would hold registers across the exchange, beside the row's (TUNING.md#weight-prefetch,
#: TUNING.md#epilogue-by-access). The epilogue then loads them ``COLUMNS_AHEAD`` accesses ahead
#: of the one it works on, or all of them before the exchange from ``COLUMNS_ALL_FROM`` accesses
#: a thread while they take at most ``COLUMNS_ALL_MAX_REGS`` registers (TUNING.md#weight-ahead).
COLUMNS_EARLY_MAX_ELEMS = 32
COLUMNS_AHEAD = 2
COLUMNS_ALL_FROM = 8
COLUMNS_ALL_MAX_REGS = 32


class RowOp:
    """Base of every row op. Subclasses declare their inputs and outputs by name and override
    the hooks they need; the template below is the same for all of them.

    rows:       (M, N) inputs, read with the row's accesses (the first sets the dtype)
    cols:       (N,) inputs broadcast over the rows (a weight, a bias); each may be absent
    row_in:     (M,) inputs, one value a row (a target)
    out:        (M, N) outputs, in the input dtype
    row_out:    (M,) fp32 outputs (rstd, mean, loss); each may be absent
    extra:      other 1-D tensors the op's hooks use (``fake_extra`` makes their fakes)
    col_out:    (P, N) fp32 outputs summed over rows (a weight's gradient): each block (or
                cluster) walks row after row (a *persistent* kernel, one row at a time, P of
                them, the ``blocks`` scalar; ``walk_rows`` with the row in registers,
                ``walk_staged`` with it staged), adds each row's ``col_values`` into registers
                and writes its sum as row P of each; the caller adds the P rows up
    scalars:    run-time scalars, name -> DSL type
    reductions: the Combines reduced a row, in order, one exchange each
    """

    table: str
    rows: tuple = ("x",)
    cols: tuple = ()
    row_in: tuple = ()
    out: tuple = ()
    row_out: tuple = ()
    extra: tuple = ()
    col_out: tuple = ()
    scalars: dict = {}
    reductions: tuple = ()
    #: Whether the epilogue wants each value's column index (``v.col``, Int32).
    needs_columns: bool = False
    #: Whether the fold reads the column inputs (they are then loaded with the row).
    fold_uses_columns: bool = False
    #: The optional tensors the op's public function passes by default (what ``compile``
    #: builds when it is not told).
    default_present: tuple = ()
    #: The options the op's public function passes by default (the per-row inputs' dtypes by
    #: default: int64 for a "target", fp32 for the others).
    default_options: tuple = ()

    #: (a call's key) -> the compiled function its last checked call launched (with ``late``, the
    #: pair of it and its last scalars), for the fast paths of the public functions and of
    #: training calls (``kernels.functional``); each subclass has its own.
    fast: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.fast = {}

    @classmethod
    def walks_staged(cls, cfg) -> bool:
        """Does a block of ``cfg`` walk its rows staged (:class:`StagedWalk`): an op that sums over
        rows, its row in shared memory?"""
        return bool(cls.col_out) and cfg.stage == "smem"

    @classmethod
    def buffers(cls, cfg) -> int:
        """A staged walk's ``cfg.buffers`` (two: each row input's next row copied while this one is
        worked; one: the first row input's only, the others refilled access by access), else one."""
        return cfg.buffers if cls.walks_staged(cfg) else 1

    @classmethod
    def footprint(cls, cfg) -> tuple[int, int]:
        """(exchange slot sets, staged row tiles) a block of ``cfg`` allocates in shared memory, as
        :meth:`~kernels.config.RowConfig.smem_bytes` counts them: a staged walk exchanges in two
        slot sets, row by row in turn, and holds two tiles of its first row input."""
        slots, rows = max(1, len(cls.reductions)), len(cls.rows)
        if not cls.walks_staged(cfg):
            return slots, rows
        return 2 * slots, 2 * rows if cls.buffers(cfg) == 2 else rows + 1

    def __init__(self, dtype, n: int, cfg, present: frozenset, in_dtypes: tuple = ()):
        stages, tiles = self.footprint(cfg)
        cfg.check(n, dtype.width, stages=stages, tiles=tiles)
        if self.out and self.reductions and cfg.stage == "stream":
            raise ValueError(f"{type(self).__name__} writes rows it reduces: its row must be kept (stage 'reg' "
                             "or 'smem')")
        if cfg.stage == "stream" and len(self.rows) > 1:
            raise ValueError(f"{type(self).__name__} reads {len(self.rows)} rows: a streamed op reads one")
        if self.col_out and cfg.head:
            raise ValueError(f"{type(self).__name__} sums over rows, column by column: its rows cannot take "
                             "windows of their own (head=True)")
        if self.col_out and (cfg.stage == "stream" or cfg.rows_per_block != 1 or (cfg.stage == "reg" and cfg.cluster_n != 1)):
            raise ValueError(f"{type(self).__name__} sums over rows: it takes one row a block, kept in "
                             f"registers (no cluster) or staged in shared memory (a cluster may split it); got {cfg}")
        if any(c.weighted for c in self.reductions) and (cfg.stage == "stream" or self.col_out
                                                          or any(c.weighted for c in self.reductions[1:])):
            raise ValueError(f"{type(self).__name__}: a fold that weighs its elements (a mean and variance) "
                             "is the first reduction of a row kept in registers or shared memory")
        if not self.out and cfg.stage == "smem" and not self.col_out:
            raise ValueError(f"{type(self).__name__} does not read its row again after reducing it: "
                             "stage='smem' buys nothing, use stage='reg'")
        self.dtype, self.n, self.cfg, self.present, self.in_dtypes = dtype, n, cfg, present, in_dtypes

    # ---- what an op overrides --------------------------------------------------------
    @classmethod
    def configure(cls, n: int, elem_bits: int, vec: int, options: tuple, head: bool = False):
        """The configuration for rows of n elements (default: the op's table); ``head``: for
        the rows' aligned windows."""
        return row_config(cls.table, n, elem_bits, vec=vec, head=head)

    def fold_input(self, v, i: int, results):
        """What reduction ``i`` folds, elementwise, as fp32: by default the first row input.
        ``v`` holds this thread's values by name (rows and columns), ``results`` the
        reductions before this one. Elements outside the row must fold to the identity."""
        return getattr(v, self.rows[0])

    def epilogue(self, v, results, s) -> dict:
        """The rows written back, name -> fp32 values, elementwise from ``v`` (this thread's
        row values and columns) and the row's ``results``; ``s`` holds the scalars."""
        return {}

    def row_values(self, io, b, results, pre) -> dict:
        """The values written per row (row ``b.row``), name -> Float32, by the row's first thread."""
        return {}

    def before_loads(self, io, b):
        """Loads an op issues before the row's (returns ``pre``, handed to the next hooks)."""
        return None

    def row_inputs(self, io, b) -> dict:
        """Per-row values every thread of the row needs (name -> a scalar, e.g. a saved rstd),
        loaded before the row's loads; the fold and the epilogue see them in ``v``."""
        return {}

    def after_fold(self, io, b, pre):
        """Loads an op issues after the thread tier, before the exchange (returns ``pre``)."""
        return pre

    def finish(self, io, b):
        """Called by every thread of every block last, after the per-row outputs are written."""
        return None

    def col_values(self, v, results, s) -> dict:
        """Each value's contribution to the ``col_out`` sums (name -> fp32 values)."""
        return {}

    def fake_extra(self, m):
        return ()

    def row_in_extent(self, name: str, m):
        """The length of per-row input ``name`` in the compiled signature: M (the rows'
        symbolic count) by default; an op whose input holds one value for every row says 1."""
        return m

    # ---- host side -------------------------------------------------------------------
    @classmethod
    def launch(cls, x, config=None, options=(), *, rows, cols=(), row_in=(), out=(), row_out=(), extra=(),
               scalars=(), late=None, remember=None):
        """Launch the op on (M, N) ``rows`` (x among them), each slot's tensors in declared
        order (None for an absent optional one), compiling it on the first call for its key.
        ``late(compiled)``, if given, returns the ``col_out`` tensors and the last scalars, which
        depend on the compiled kernel (how many blocks it fits on the GPU at once). ``remember``, if given, is the public
        call's key under which ``fast`` keeps the compiled function (with ``late``, the pair of it
        and those last scalars), when this call got the
        widest accesses N allows (a later call with the same key skips the checks above and
        calls it directly: the compiled signature itself refuses any tensor it was not built
        for, before launching, and that call then comes back here)."""
        # (the hot path of every call: a few attribute reads, integer arithmetic and one lookup)
        n = x.shape[1]
        eb = x.element_size()
        optional = cols + row_out + extra
        present_cols = tuple([c for c in cols if c is not None]) if cols else ()
        vec = validate.access_width(n, eb, rows + out, present_cols)
        natural = (n * eb | 16) & -(n * eb | 16)  # the widest access N itself allows, in bytes
        # Narrower than 16 bytes (an odd N, a misaligned view): each row's aligned window
        # instead, 16-byte accesses in its body (RowConfig.head), where the op allows it.
        head = config.head if config is not None else cls.takes_window(n, eb, vec)
        if head:
            vec = 16 // eb
            if present_cols:  # a window kernel cuts its columns out of their 16-byte words
                present_cols = tuple([c if not c.data_ptr() & 15 else c.clone() for c in present_cols])
        present = tuple([t is not None for t in optional]) if optional else ()
        in_dtypes = tuple([t.dtype for t in row_in]) if row_in else ()
        key = (cls, x.dtype, n, vec, head, present, in_dtypes, config, options)
        hit = _LAUNCH.get(key)
        if hit is None:
            validate.check_arch(x.device)
            hit = cls.compile(x.dtype, n, vec, present, in_dtypes, config, options, head=head)
            _LAUNCH[key] = hit
        col_out, more = late(hit) if late is not None else ((), ())
        # (a window kernel is right for any row alignment; a plain one only for what N allows)
        if remember is not None and (natural < 16 if head else vec * eb == natural):
            cls.fast[remember] = hit.fn if late is None else (hit.fn, more)
        hit.fn(rows + out + present_cols + row_in
               + tuple([t for t in row_out + extra if t is not None]) + col_out + scalars + more)

    @classmethod
    def takes_window(cls, n: int, elem_bytes: int, vec: int) -> bool:
        """Whether rows of n elements whose tensors allow accesses of ``vec`` elements at most
        (what N, the strides and the base addresses share) take their aligned windows instead
        (:class:`~kernels.config.RowConfig`'s ``head``): where that is narrower than 16 bytes,
        the row holds two words at least, and the op does not sum over rows column by column."""
        return vec * elem_bytes < 16 and n >= 32 // elem_bytes and not cls.col_out

    @classmethod
    def compile(cls, dtype, n: int, vec: int | None = None, present=None, in_dtypes=None, config=None,
                options=None, head: bool = False):
        """Compile (once) the kernel for rows of n elements of ``dtype`` (a torch dtype), with
        the optional tensors of ``present`` (one flag each for cols, row_out and extra, in
        order; default: those the public function passes) and ``options`` (default: the public
        function's); with ``head``, for rows of any alignment (their aligned windows,
        :class:`~kernels.config.RowConfig`). Usable without a GPU."""
        options = cls.default_options if options is None else tuple(options)
        if in_dtypes is None:
            in_dtypes = tuple(torch.int64 if name == "target" else torch.float32 for name in cls.row_in)
        bits = torch.finfo(dtype).bits
        head = config.head if config is not None else head
        vec = vec or (128 // bits if head else vector_width(n, bits))
        slots = cls.cols + cls.row_out + cls.extra
        present = tuple(present) if present is not None else tuple(name in cls.default_present for name in slots)
        if len(present) != len(slots):
            raise ValueError(f"{cls.__name__}: {len(slots)} optional tensors, got {len(present)} flags")
        in_dtypes = tuple(in_dtypes)
        key = (cls.__name__, str(dtype), n, vec, head, present, tuple(map(str, in_dtypes)), config, options)

        def build():
            # (an op's configure takes ``head`` where its rows can take windows at all)
            cfg = config or (cls.configure(n, bits, vec, options, head=True) if head else
                             cls.configure(n, bits, vec, options))
            ct = TORCH_TO_CUTE[dtype]
            op = cls(ct, n, cfg, frozenset(name for name, p in zip(slots, present) if p), in_dtypes, *options)
            m = cute.sym_int()
            align = 1 if cfg.head else cfg.vec  # a window kernel takes rows of any stride and base
            args = [fake_rows(ct, n, align) for _ in cls.rows + cls.out]
            # (and its column inputs 16-byte aligned: ``launch`` copies one that is not)
            args += [fake_vector(ct, n, cfg.vec) for name in cls.cols if name in op.present]
            args += [fake_vector(TORCH_TO_CUTE[d], op.row_in_extent(name, m)) for name, d in zip(cls.row_in, in_dtypes)]
            args += [fake_vector(Float32, m) for name in cls.row_out if name in op.present]
            args += list(op.fake_extra(m))
            args += [fake_rows(Float32, n, 1) for _ in cls.col_out]
            args += [t(0) for t in cls.scalars.values()]
            return op, (tuple(args), fake_stream()), cfg
        return compile_once(key, build)

    def bind(self, args):
        """The flat argument tuple (rows, out, cols, row_in, row_out, extra, scalars: the
        present tensors of each slot in declared order), by name (None where absent)."""
        it = iter(args)
        take = lambda names, optional: {k: (next(it) if not optional or k in self.present else None) for k in names}
        rows = take(self.rows, False)
        out = take(self.out, False)
        cols = take(self.cols, True)
        row_in = take(self.row_in, False)
        row_out = take(self.row_out, True)
        extra = take(self.extra, True)
        col_out = take(self.col_out, False)
        scalars = {k: next(it) for k in self.scalars}
        return SimpleNamespace(rows=rows, cols=cols, row_in=row_in, out=out, row_out=row_out, extra=extra,
                               col_out=col_out, s=SimpleNamespace(**scalars), x=next(iter(rows.values())))

    @cute.jit
    def __call__(self, args, stream):
        cfg = self.cfg
        mX = args[0]
        tiled_copy = make_row_copy(mX.element_type, cfg)
        tiler_mn = (cfg.rows_per_block, cfg.cols_per_pass)
        grid = cute.ceil_div(mX.shape[0], cfg.rows_per_block)
        if const_expr(len(self.col_out) > 0):
            grid = self.bind(args).s.blocks
        self.kernel(args, tiled_copy, tiler_mn).launch(
            grid=[grid, cfg.cluster_n, 1],
            block=[cfg.threads_per_block, 1, 1],
            cluster=[1, cfg.cluster_n, 1] if const_expr(cfg.cluster_n > 1) else None,
            stream=stream,
        )

    # ---- device side -----------------------------------------------------------------
    @cute.kernel
    def kernel(self, args, tiled_copy: cute.TiledCopy, tiler_mn: cute.Shape):
        io = self.bind(args)
        b = Block(self, io, tiled_copy, tiler_mn)
        if const_expr(self.walks_staged(self.cfg)):
            self.walk_staged(args, b)
        elif const_expr(len(self.col_out) > 0):
            self.walk_rows(args, b)
        else:
            self.row_tile(io, b)

    @cute.jit
    def row_tile(self, io, b):
        """One tile of rows: load and fold, the tiers, the epilogue, the per-row values."""
        cfg = self.cfg
        strategy = STRATEGIES[cfg.stage](self, io, b)
        pre = self.before_loads(io, b)
        strategy.row_values = self.row_inputs(io, b)
        state = strategy.load_and_fold()
        pre = self.after_fold(io, b, pre)
        strategy.early_columns()
        results = []
        for i in cutlass.range_constexpr(len(self.reductions)):
            if const_expr(i > 0):
                state = strategy.refold(i, results)
            results.append(row_reduce(state, self.reductions[i], cfg.threads_per_row, cfg.cluster_n,
                                      b.bufs[i], None if b.mbar is None else b.mbar + i, first=i == 0))
        strategy.write_rows(results)
        self.write_row_values(io, b, results, pre)
        self.finish(io, b)
        return strategy, results

    @cute.jit
    def walk_rows(self, args, b):
        """The persistent kernel of an op with ``col_out``: block ``bidx`` of ``blocks`` takes rows
        bidx, bidx + blocks, ..., adds each row's ``col_values`` into fp32 registers, and at the
        end writes them as row bidx of each ``col_out`` (zero for a block with no rows)."""
        # (each step binds the arguments afresh: a value the tracer carries through the loop's
        # body must not stand in for the argument after it)
        io = self.bind(args)
        block, m, blocks = b.bidx, b.m, io.s.blocks
        tXgX, tXcX, tXpX = b.view(io.x, 0)
        acc = [cute.make_rmem_tensor_like(tXgX, Float32) for _ in self.col_out]
        for frag in acc:
            frag.fill(0.0)
        for row in cutlass.range(block, m, blocks):
            self.add_row(args, b, acc, row)
        b.at(block)
        self.write_partials(args, b, acc, block)

    @cute.jit
    def add_row(self, args, b, acc, row):
        io = self.bind(args)
        b.at(row)
        strategy, results = self.row_tile(io, b)
        adds = self.col_values(strategy.values(strategy.x, strategy.cols), results, io.s)
        for name, frag in zip(self.col_out, acc):
            frag.store(frag.load() + adds[name])
        cute.arch.barrier()  # the block tier's slots are written again by the next row

    @cute.jit
    def walk_staged(self, args, b):
        """The persistent kernel of an op with ``col_out`` whose row is staged (stage "smem"):
        block (or cluster) ``bidx`` of ``blocks`` takes rows bidx, bidx + blocks, ... as
        ``walk_rows`` does, but the next row's copies are in flight while row r is folded,
        exchanged and written (:class:`StagedWalk`), so that a block always has loads in flight;
        the column inputs (a weight) are loaded once, for every row. In a cluster each block
        walks its column tile of the rows."""
        io = self.bind(args)
        block, m, blocks = b.bidx, b.m, io.s.blocks
        self.walk = StagedWalk(self, io, b)  # (kept on the op: the loop's body takes no object of its own)
        acc = [cute.make_rmem_tensor_like(self.walk.tXgX, Float32) for _ in self.col_out]
        for frag in acc:
            frag.fill(0.0)
        self.walk.issue(0, block, first=True)
        if const_expr(self.cfg.cluster_n > 1):
            cute.arch.cluster_wait()  # the peers' mbarriers are armed
        for row in cutlass.range(block, m, 2 * blocks):
            self.walk_pair(acc, row, block, blocks, m)
        cute.arch.cp_async_wait_group(0)
        b.at(block)
        self.write_partials(args, b, acc, block)
        if const_expr(self.cfg.cluster_n > 1):
            # no block leaves while a peer may still reach into its shared memory
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()

    @cute.jit
    def walk_pair(self, acc, row, block, blocks, m):
        """Rows ``row`` (buffer 0) and ``row + blocks`` (buffer 1): row + blocks is copied while
        row is worked, and each buffer is refilled as soon as it is worked (with one buffer, the
        row inputs after the first are refilled access by access by the epilogue before, see
        :class:`StagedWalk`). Each buffer's exchange has its own slots, written again two rows
        later once every peer has sent the row between (its mbarrier's phase flips with each use)."""
        phase = ((row - block) // (2 * blocks)) % 2
        self.walk.issue(1, row + blocks)
        self.walk.work(0, row, acc, phase, row + blocks)
        self.walk.issue(0, row + 2 * blocks)
        if row + blocks < m:
            self.walk.work(1, row + blocks, acc, phase, row + 2 * blocks)

    @cute.jit
    def write_partials(self, args, b, acc, block):
        io = self.bind(args)
        _, tXcX, _ = b.view(io.x, b.rank)
        for name, frag in zip(self.col_out, acc):
            mP = io.col_out[name]
            for i in cutlass.range(cute.size(frag), unroll_full=True):
                col = tXcX[i][1]
                if col < self.n:
                    mP[block, col] = frag[i]

    @cute.jit
    def write_row_values(self, io, b, results, pre):
        """The row's first thread (in the cluster's first block) writes its per-row values."""
        if b.tidx % self.cfg.threads_per_row == 0 and b.rank == 0 and b.row < b.m:
            values = self.row_values(io, b, results, pre)
            for name in self.row_out:
                if const_expr(io.row_out[name] is not None):
                    io.row_out[name][b.row] = values[name]


def one_row_a_block(cfg, n: int):
    """``cfg`` with one row a block (at least a warp of threads, the rest of a short row's threads
    idle): what a kernel that sums over rows takes."""
    tpr = max(32, cfg.threads_per_row)
    vecs = math.ceil(n // cfg.vec / (tpr * cfg.cluster_n))
    return replace(cfg, threads_per_row=tpr, threads_per_block=tpr, vecs_per_thread=vecs)


_LAUNCH: dict = {}


class Block:
    """What every thread of a block knows about its rows (a trace-time namespace): its
    indices, the row, the partials buffers of the tiers above the warp, and its partition."""

    def __init__(self, op: RowOp, io, tiled_copy, tiler_mn):
        cfg = op.cfg
        self.tidx, _, _ = cute.arch.thread_idx()
        self.bidx, rank, _ = cute.arch.block_idx()
        self.rank = 0 if const_expr(cfg.cluster_n == 1) else rank
        mX = io.x
        self.m = mX.shape[0]
        self.rows_per_block, self.threads_per_row, self.n = cfg.rows_per_block, cfg.threads_per_row, op.n
        self.row = self.bidx * cfg.rows_per_block + self.tidx // cfg.threads_per_row  # this thread's row
        self.tiler_mn = tiler_mn
        # Partials of the block / cluster tiers live in shared memory, a buffer per reduction.
        self.smem = cutlass.memory.SmemAllocator()
        stages = op.footprint(cfg)[0]  # (a staged persistent walk exchanges two rows' partials at once)
        self.bufs = [None] * stages
        self.mbar = None
        if const_expr(cfg.cluster_n > 1 or cfg.warps_per_row > 1):
            self.bufs = [self.smem.allocate_tensor(
                Float32,
                cute.make_ordered_layout((cfg.rows_per_block, cfg.warps_per_row * cfg.cluster_n, slot_width(c)),
                                         order=(2, 1, 0)),
                byte_alignment=16) for _ in range(stages // max(1, len(op.reductions))) for c in op.reductions] or [None]
        if const_expr(cfg.cluster_n > 1 and len(op.reductions) > 0):  # (a map's cluster only splits its row)
            self.mbar = self.smem.allocate_array(Int64, num_elems=stages)
            cluster_reduce_setup(self.mbar, stages)
        self.thr = tiled_copy.get_slice(self.tidx)
        self.m_shape = mX.shape
        self.head = const_expr(cfg.head)
        # A window's coordinates run over its columns, N + h of them; the row's are those less h.
        self.c_shape = (mX.shape[0], cfg.cols_covered) if const_expr(cfg.head) else mX.shape
        self.cX = cute.local_tile(cute.make_identity_tensor(self.c_shape), tiler_mn, (self.bidx, None))
        self.even_n = const_expr(op.n == cfg.cols_covered)
        self.load = access_atom(mX.element_type, cfg.vec)
        self.load_vec = cfg.vec
        self.h, self.aligned = Int32(0), True
        if const_expr(cfg.head):
            self.h, self.aligned = self.row_head(list(io.rows.values()))

    def at(self, tile):
        """Move to row tile ``tile`` (a persistent kernel walks them)."""
        self.bidx = tile
        self.row = tile * self.rows_per_block + self.tidx // self.threads_per_row
        self.cX = cute.local_tile(cute.make_identity_tensor(self.c_shape), self.tiler_mn, (tile, None))

    # ---- the aligned window of a row (RowConfig.head) -------------------------------------
    def row_address(self, mT):
        """The byte address of this thread's row of ``mT`` (the last row for a thread past M,
        which never reads or writes it)."""
        row = cutlass.min(self.row, self.m - 1)
        return mT.iterator.toint() + Int64(row) * Int64(mT.stride[0]) * (mT.element_type.width // 8)

    def head_of(self, mT):
        """The elements before this thread's row of ``mT`` in its 16-byte word."""
        return Int32(self.row_address(mT) & 15) // (mT.element_type.width // 8)

    def row_head(self, tensors):
        """(h, aligned): the elements before this thread's row of the first tensor in its
        16-byte word, and whether every tensor's row starts at the same place in its word
        (then their windows line up, and their loads can be whole words)."""
        heads = [self.head_of(mT) for mT in tensors]
        apart = Int32(0)
        for h in heads[1:]:
            apart = apart | (h ^ heads[0])
        return heads[0], apart == 0

    def window(self, mT):
        """This thread's row of ``mT`` from its 16-byte word on, as a (rows_per_block,
        cols_covered) tensor with row stride 0 (each thread of the tile sees its own row)."""
        addr = self.row_address(mT)
        ptr = cute.make_ptr(mT.element_type, addr - (addr & 15), cute.AddressSpace.gmem, assumed_align=16)
        return cute.make_tensor(ptr, cute.make_layout((self.rows_per_block, self.c_shape[1]), stride=(0, 1)))

    def tiles(self, mT):
        """Tensor ``mT`` (M, N) as this block's column tiles: (rows_per_block, cols_per_pass, tile)."""
        if const_expr(self.head):
            return cute.local_tile(self.window(mT), self.tiler_mn, (0, None))
        return cute.local_tile(mT, self.tiler_mn, (self.bidx, None))

    def view(self, mT, tile: int):
        """This thread's accesses of column tile ``tile`` of ``mT``, their coordinates and
        per-access predicate (None when N fills every tile; in a window, an access is on when
        it holds an element of the row)."""
        tXgX = self.thr.partition_S(self.tiles(mT)[None, None, tile])
        tXcX = self.thr.partition_S(self.cX[None, None, tile])
        if const_expr(self.head):
            return tXgX, tXcX, window_predicate(tXcX, self.h + self.n)
        return tXgX, tXcX, None if self.even_n else column_predicate(tXcX, self.n)

    @cute.jit
    def load_rows(self, mT, tXgX, tXrX, tXcX, tXpX):
        """Issue the loads of this thread's accesses ``tXgX`` of ``mT`` into ``tXrX`` (rows past
        M load nothing). A window's whole words where the tensors' rows line up (what lies
        outside the row is masked later, :meth:`mask`), else element by element."""
        if tXcX[0][0] < self.m:
            if const_expr(self.head):
                if self.aligned:
                    cute.copy(self.load, tXgX, tXrX, pred=tXpX)
                else:
                    gather(tXrX, tXcX, self.h, self.n, lambda c: mT[self.row, c])
            else:
                cute.copy(self.load, tXgX, tXrX, pred=tXpX)

    @cute.jit
    def mask(self, frag, tXcX, pad):
        """In a window, set the values of ``frag`` (its accesses, or one access) outside the row
        to ``pad``."""
        if const_expr(self.head):
            if const_expr(cute.rank(frag) == 3):
                for k in cutlass.range_constexpr(cute.size(frag, mode=[2])):
                    mask_access(frag[None, None, k], tXcX[None, None, k], self.h, self.h + self.n, pad, self.load_vec)
            else:
                mask_access(frag, tXcX, self.h, self.h + self.n, pad, self.load_vec)

    def part(self, tXcX, like):
        """This thread's share of the row in a fragment laid out like ``like`` (its accesses, or
        one access; coordinates ``tXcX``), as a weighted fold sees it (:class:`Part`); None where
        the row fills every access."""
        if const_expr(self.even_n and not self.head):
            return None
        return Part(self, tXcX, like)

    @cute.jit
    def store(self, mO, tXrO, tXgO, tXcX, tXpX):
        """Store ``tXrO`` to this thread's accesses ``tXgO`` of ``mO`` (rows past M skipped)."""
        if tXcX[0][0] < self.m:
            if const_expr(self.head):
                for k in cutlass.range_constexpr(cute.size(tXrO, mode=[2])):
                    self.store_access(mO, tXrO[None, None, k], tXgO[None, None, k], tXcX[None, None, k])
            else:
                cute.copy(self.load, tXrO, tXgO, pred=tXpX)

    @cute.jit
    def store_access(self, mO, tXrO_k, tXgO_k, tXcX_k):
        """One access of a window: one 16-byte store when it lies wholly inside the row (and
        the output's row starts where the input's does in its word), else element by element,
        the row's elements only."""
        c0 = tXcX_k[0][1]
        whole = (self.head_of(mO) == self.h) & (c0 >= self.h) & (c0 + self.load_vec <= self.h + self.n)
        if whole:
            cute.copy(self.load, tXrO_k, tXgO_k)
        else:
            scatter(tXrO_k, tXcX_k, self.h, self.n, lambda c, value: mO.__setitem__((self.row, c), value))

    @cute.jit
    def gather_columns(self, mW, like, tXcX):
        """A column input (weight, bias) for values laid out like ``like`` at window columns
        ``tXcX`` (:meth:`window_column`); as fp32."""
        frag = self.window_fragment(like, mW)
        self.window_column(mW, frag, tXcX)
        return frag.load().to(Float32)

    def window_fragment(self, like, mW):
        """Registers for a column input laid out like ``like``, as :meth:`window_column` fills
        them: 32-bit ones zeroed first (their element loads leave what lies outside the row)."""
        frag = cute.make_rmem_tensor_like(like, mW.element_type)
        if const_expr(mW.element_type.width != 16):
            frag.fill(0.0)
        return frag

    @cute.jit
    def window_column(self, mW, frag, tXcX, partial=True):
        """A column input in a window, at the row's shift, into ``frag`` (one access, or all of
        a thread's): 16-bit elements cut out of their words (:meth:`shifted_column`, then with
        ``partial`` :meth:`partial_word`, once every access's words are loaded); 32-bit ones
        element by element (an access holds four, and their loads measured ahead of the words':
        TUNING.md#window-columns)."""
        if const_expr(mW.element_type.width == 16):
            if const_expr(cute.rank(frag) == 3):
                for k in cutlass.range_constexpr(cute.size(frag, mode=[2])):
                    self.shifted_column(mW, frag[None, None, k], tXcX[None, None, k])
                if const_expr(partial):
                    for k in cutlass.range_constexpr(cute.size(frag, mode=[2])):
                        self.partial_word(mW, frag[None, None, k], tXcX[None, None, k])
            else:
                self.shifted_column(mW, frag, tXcX)
                if const_expr(partial):
                    self.partial_word(mW, frag, tXcX)
        else:
            gather(frag, tXcX, self.h, self.n, lambda c: mW[c])

    @cute.jit
    def shifted_column(self, mW, frag, tXcX_k):
        """One access of a column input in a window: ``frag[i] = mW[c0 + i - h]`` for the
        access's window columns c0 + i. A window's columns are the row's shifted by h, so the
        access straddles two of the vector's 16-byte words: both are loaded whole, and the
        access is cut out of the pair a 32-bit word at a time (the words chosen by h, then a
        funnel shift). The elements of the vector's last, partial word (N not a multiple of
        ``vec``) come after, one by one (:meth:`partial_word`). Values outside the row are left
        undefined: no window op's fold reads its columns, and they are never stored. The vector
        is 16-byte aligned (``launch`` copies one that is not)."""
        vec, eb = self.load_vec, mW.element_type.width // 8
        full = self.n // vec  # the vector's whole words (at least 2: a window row holds 2 words)
        per = 4  # 32-bit words in a 16-byte access
        c0 = tXcX_k[0][1]
        last = (full - 1) * vec
        pair = cute.make_rmem_tensor(cute.make_layout((vec, 2), stride=(1, vec)), mW.element_type)
        for w, col in ((0, cutlass.max(cutlass.min(c0 - vec, last), 0)), (1, cutlass.min(c0, last))):
            ptr = cute.make_ptr(mW.element_type, mW.iterator.toint() + Int64(col) * eb, cute.AddressSpace.gmem,
                                assumed_align=16)
            cute.copy(self.load, cute.make_tensor(ptr, cute.make_layout(vec)), pair[None, w])
        words = cute.recast_tensor(pair, cutlass.Uint32)
        x = [words[j] for j in range(2 * per)] + [words[2 * per - 1]] * per
        shift = (vec - self.h) * eb  # bytes into the pair where the access starts: 1 to 16
        q, bits = shift >> 2, (shift & 3) * 8
        for step in (4, 2, 1):  # x[k] <- x[k + q]: a barrel of selects on q's bits
            take = (q & step) != 0
            x = [cutlass.Uint32(cutlass.select_(take, x[k + step], x[k])) for k in range(len(x) - step)]
        out = cute.recast_tensor(frag, cutlass.Uint32)
        for j in cutlass.range_constexpr(per):
            out[j] = cute.arch.shf(x[j], x[j + 1], bits, "r") if const_expr(eb < 4) else x[j]

    @cute.jit
    def partial_word(self, mW, frag, tXcX_k):
        """The rest of :meth:`shifted_column`: the elements of one access that lie in the
        vector's last, partial 16-byte word (N not a multiple of ``vec``), one by one. A branch
        an access (taken by the access that holds them): called once every access's words are
        loaded, so that it keeps no load waiting behind it."""
        vec, full = self.load_vec, self.n // self.load_vec
        if const_expr(mW.element_type.width == 16 and self.n % vec != 0):
            c0 = tXcX_k[0][1]
            if c0 + vec > full * vec:  # the access reaches the vector's partial last word
                for i in cutlass.range_constexpr(vec):
                    c = c0 + i - self.h
                    if c >= full * vec:
                        if c < self.n:
                            frag[i] = mW[c]

    def column(self, mW, tile: int):
        """This thread's share of a length-N column input: the vector viewed as an (M, N)
        tensor with row stride 0, partitioned exactly like the rows."""
        mW2 = cute.make_tensor(mW.iterator, cute.make_layout(self.m_shape, stride=(0, 1)))
        return self.thr.partition_S(self.tiles(mW2)[None, None, tile])

    @cute.jit
    def load_column_access(self, mW, tXgW_k, tXrW_k, tXcX_k):
        """Load one access of a column input (weight, bias) into ``tXrW_k`` without a
        predicate: an access past N reads the row's last whole access instead (always in
        bounds; what it holds is never stored). A predicated load would leave the registers
        undefined on one path, and the compiler then keeps the access converted to fp32 from
        the load on: twice the registers, half the blocks an SM."""
        if const_expr(self.even_n):
            cute.copy(self.load, tXgW_k, tXrW_k)
        else:
            off = cutlass.min(tXcX_k[0][1], self.n - self.load_vec)
            addr = mW.iterator.toint() + Int64(off) * (mW.element_type.width // 8)
            ptr = cute.make_ptr(mW.element_type, addr, cute.AddressSpace.gmem, assumed_align=16)
            cute.copy(self.load, cute.make_tensor(ptr, tXgW_k.layout), tXrW_k)


#: Loops over a thread's accesses are unrolled by the DSL while shorter than this (the code the
#: tables were tuned with), and by the compiler from this length on, where the DSL warns that
#: unrolling them itself would be slow to compile (ragged rows of single-element accesses).
STATIC_UNROLL_MAX = 63
#: A one-buffer walk's refills: a commit group an access up to this many accesses a thread
#: (:class:`StagedWalk`; the table's rows take 8 and 16), one group a row past it.
EACH_ACCESS_MAX = 16


@cute.jit
def over_accesses(start: cutlass.Constexpr[int], stop: cutlass.Constexpr[int], body, carry):
    """``carry = body(k, carry)`` for the accesses k in [start, stop), unrolled (see
    STATIC_UNROLL_MAX); returns the carry."""
    if const_expr(stop - start <= STATIC_UNROLL_MAX):
        for k in cutlass.range_constexpr(start, stop):
            carry = body(k, carry)
    else:
        for k in cutlass.range(start, stop, unroll_full=True):
            carry = body(k, carry)
    return carry


class Part:
    """The elements of a fragment that lie in the row, for a weighted fold: their ``count``
    and ``only(values)``, the values with every other element set to 0. Both come from the
    accesses' first coordinates: in a window only a row's first and last access are partial;
    otherwise an access lies wholly inside N or wholly past it."""

    def __init__(self, b, tXcX, like):
        self.b, self.tXcX, self.like = b, tXcX, like

    def _first_columns(self):
        """The first column of each access."""
        t = self.tXcX
        if const_expr(cute.rank(self.like) == 3):
            return [t[0, 0, k][1] for k in range(cute.size(self.like, mode=[2]))]
        return [t[0][1]]

    @property
    def count(self):
        b, vec = self.b, self.b.load_vec
        n = Int32(0)
        for c0 in self._first_columns():
            if const_expr(b.head):  # the access's columns in [h, h + N)
                n += cutlass.max(cutlass.min(c0 + vec, b.h + b.n) - cutlass.max(c0, b.h), 0)
            else:
                n += cutlass.select_(c0 < b.n, Int32(vec), Int32(0))
        return Float32(n)

    @cute.jit
    def only(self, values):
        frag = cute.make_rmem_tensor_like(self.like, Float32)
        frag.store(values)
        if const_expr(self.b.head):
            self.b.mask(frag, self.tXcX, 0.0)
        elif const_expr(cute.rank(frag) == 3):
            for k in cutlass.range_constexpr(cute.size(frag, mode=[2])):
                if not self.tXcX[0, 0, k][1] < self.b.n:
                    frag[None, None, k].fill(0.0)
        elif not self.tXcX[0][1] < self.b.n:
            frag.fill(0.0)
        return frag.load()


@cute.jit
def window_predicate(tXcX, end):
    """One flag per access of a window: does it hold an element of the row, one before
    ``end`` (h + N)? (Every access starts at or past column 0 and holds elements past h - 1.)"""
    tXpX = cute.make_rmem_tensor(
        cute.make_layout((1, 1, cute.size(tXcX, mode=[2])), stride=(0, 0, 1)), cutlass.Boolean)
    for k in cutlass.range(tXpX.shape[2], unroll_full=True):
        tXpX[0, 0, k] = tXcX[0, 0, k][1] < end
    return tXpX


@cute.jit
def mask_access(frag, tXcX, start, end, pad, vec: cutlass.Constexpr[int]):
    """Set each value of one access ``frag`` (``vec`` values from window column ``tXcX[0]``)
    that lies outside [start, end) to ``pad``; an access wholly inside (all but the row's
    first and last, a test the warp mostly takes together) is left as it is."""
    c0 = tXcX[0][1]
    if (c0 < start) | (c0 + vec > end):
        for i in cutlass.range_constexpr(vec):
            c = c0 + i
            if c < start:
                frag[i] = frag.element_type(pad)
            if c >= end:
                frag[i] = frag.element_type(pad)


@cute.jit
def gather(frag, tXcX, h, n, fetch):
    """``frag[i] = fetch(c)`` for each value whose row column c = window column - h lies in
    [0, n): one element at a time (the rest keep what they hold)."""
    for i in cutlass.range(cute.size(frag), unroll_full=True):
        c = tXcX[i][1] - h
        if c >= 0:
            if c < n:
                frag[i] = frag.element_type(fetch(c))


@cute.jit
def scatter(frag, tXcX, h, n, put):
    """``put(c, frag[i])`` for each value whose row column c = window column - h lies in [0, n)."""
    for i in cutlass.range(cute.size(frag), unroll_full=True):
        c = tXcX[i][1] - h
        if c >= 0:
            if c < n:
                put(c, frag[i])


def load_access(tXsX, tXpX, k, load, pad=None):
    """Access ``k`` of the partition ``tXsX`` (shared or global memory), in registers;
    predicated off (``tXpX``, None when N fills every tile), it holds ``pad``, or whatever the
    registers held when ``pad`` is None."""
    tXrX = cute.make_rmem_tensor_like(tXsX[None, None, k])
    if pad is not None and tXpX is not None:
        tXrX.fill(pad)
    cute.copy(load, tXsX[None, None, k], tXrX, pred=None if tXpX is None else tXpX[None, None, k])
    return tXrX


@cute.jit
def zero_outside(values, like, tXpX):
    """``values`` (fp32, laid out like the fragment ``like``) with every access that lies
    outside the row set to zero."""
    out = values
    if const_expr(tXpX is not None):
        frag = cute.make_rmem_tensor_like(like, Float32)
        frag.store(values)
        for k in cutlass.range(cute.size(frag, mode=[2]), unroll_full=True):
            if not tXpX[0, 0, k]:
                frag[None, None, k].fill(0.0)
        out = frag.load()
    return out


@cute.jit
def columns(tXcX, like):
    """The column index of each value of a fragment laid out like ``like`` whose coordinates
    are ``tXcX``, as Int32 values."""
    frag = cute.make_rmem_tensor_like(like, Int32)
    for i in cutlass.range(cute.size(frag), unroll_full=True):
        frag[i] = tXcX[i][1]
    return frag.load()


class Strategy:
    """Where the row waits. A strategy loads and folds the row, re-folds it for a later
    reduction, loads the column inputs at its moment, and writes the op's output rows."""

    def __init__(self, op: RowOp, io, b: Block):
        self.op, self.io, self.b, self.cfg = op, io, b, op.cfg
        self.tile = b.rank
        self.cols = {}
        self.row_values = {}

    def early_columns(self):
        pass

    def values(self, rows: dict, cols: dict, tXcX=None, like=None):
        """What the op's fold and epilogue see, by name: this thread's row values, column
        inputs and per-row values, and (``needs_columns``) the column index of each value."""
        v = SimpleNamespace(**rows, **cols, **self.row_values)
        if const_expr(self.op.needs_columns and tXcX is not None):
            v.col = columns(tXcX, like) - self.b.h if const_expr(self.b.head) else columns(tXcX, like)
        return v

    def fold(self, i, v, results, where=None):
        """The thread tier of reduction ``i`` over the values ``v``; ``where``: their
        (coordinates, a fragment laid out like them), for a fold that weighs its elements."""
        c = self.op.reductions[i]
        x = self.op.fold_input(v, i, results)
        return c.fold((x, self.b.part(*where)) if const_expr(c.weighted) else x)

    def pad(self):
        """The value accesses past N hold: the first reduction's neutral value."""
        return self.op.reductions[0].pad if self.op.reductions else 0.0

    @cute.jit
    def store_rows(self, ys, tile, tXcX, tXpX):
        """Write the epilogue's values ``ys`` (by output name) to column tile ``tile`` of
        each output row, the rows past M skipped."""
        b = self.b
        for name, mO in self.io.out.items():
            tXgO = b.thr.partition_D(b.tiles(mO)[None, None, tile])
            tXrO = cute.make_rmem_tensor_like(tXgO)
            tXrO.store(ys[name].to(mO.element_type))
            b.store(mO, tXrO, tXgO, tXcX, tXpX)


class InRegisters(Strategy):
    """The row waits in registers, as fp32: loaded once, folded, read again by the epilogue."""

    @cute.jit
    def load_and_fold(self):
        b = self.b
        self.frags, self.x = {}, {}
        for name, mT in self.io.rows.items():
            tXgX, tXcX, tXpX = b.view(mT, self.tile)
            tXrX = cute.make_rmem_tensor_like(tXgX)
            if const_expr(tXpX is not None):
                tXrX.fill(self.pad())
            b.load_rows(mT, tXgX, tXrX, tXcX, tXpX)
            self.frags[name] = tXrX
            self.tXcX, self.tXpX = tXcX, tXpX
        for f in self.frags.values():
            b.mask(f, self.tXcX, self.pad())
        self.x = {k: f.load().to(Float32) for k, f in self.frags.items()}
        if const_expr(self.op.fold_uses_columns):
            self.load_columns()
        state = None
        if const_expr(len(self.op.reductions) > 0):
            state = self.fold(0, self.values(self.x, self.cols), [], (self.tXcX, next(iter(self.frags.values()))))
        return state

    @cute.jit
    def load_columns(self):
        for name, mW in self.io.cols.items():
            if const_expr(mW is not None and self.b.head):
                self.cols[name] = self.b.gather_columns(mW, next(iter(self.frags.values())), self.tXcX)
            elif const_expr(mW is not None):
                tXgW = self.b.column(mW, self.tile)
                tXrW = cute.make_rmem_tensor_like(tXgW)
                if const_expr(self.tXpX is not None and self.op.fold_uses_columns):
                    tXrW.fill(0.0)  # outside the row: a fold that reads the columns must see zeros
                    cute.copy(self.b.load, tXgW, tXrW, pred=self.tXpX)
                else:
                    for k in cutlass.range(cute.size(tXgW, mode=[2]), unroll_full=True):
                        self.b.load_column_access(mW, tXgW[None, None, k], tXrW[None, None, k],
                                                  self.tXcX[None, None, k])
                self.cols[name] = tXrW.load().to(Float32)
            else:
                self.cols[name] = None

    def column_elems(self) -> int:
        """Elements of column inputs a thread holds for its share of the row, all inputs together."""
        return self.cfg.elems_per_thread * sum(mW is not None for mW in self.io.cols.values())

    def by_access(self) -> bool:
        """Does the epilogue walk the row access by access? A staged row always does; a row in
        registers where its column inputs are too many to hold across the exchange, so that
        they take a few accesses of registers, loaded ahead of the one the epilogue works on."""
        return (self.column_elems() > COLUMNS_EARLY_MAX_ELEMS and len(self.op.out) > 0
                and not self.op.fold_uses_columns)

    def like(self):
        """A fragment laid out as this thread's share of a row (all its accesses)."""
        return self.frags[self.op.rows[0]]

    def access(self, k, pad=None):
        """Access k of every row input, as fp32 (already masked, :meth:`load_and_fold`)."""
        return {name: f[None, None, k].load().to(Float32) for name, f in self.frags.items()}

    @cute.jit
    def early_columns(self):
        if const_expr(self.by_access()):
            self.columns_ahead()
        elif const_expr(not self.op.fold_uses_columns):
            self.load_columns()

    @cute.jit
    def refold(self, i, results):
        v = self.values(self.x, self.cols)
        any_frag = next(iter(self.frags.values()))
        c = self.op.reductions[i]
        if const_expr(self.b.head):  # the values outside the row, element by element, fold to nothing
            frag = cute.make_rmem_tensor_like(any_frag, Float32)
            frag.store(self.op.fold_input(v, i, results))
            self.b.mask(frag, self.tXcX, c.pad)
            return c.fold(frag.load())
        return c.fold(zero_outside(self.op.fold_input(v, i, results), any_frag, self.tXpX))

    @cute.jit
    def write_rows(self, results):
        if const_expr(self.by_access()):
            self.write_by_access(results)
        else:
            ys = self.op.epilogue(self.values(self.x, self.cols, self.tXcX, next(iter(self.frags.values()))),
                                  results, self.io.s)
            self.store_rows(ys, self.tile, self.tXcX, self.tXpX)

    @cute.jit
    def columns_ahead(self):
        # Column inputs, ``ahead`` accesses before the one the epilogue works on (all of them
        # from COLUMNS_ALL_FROM accesses a thread while they take at most COLUMNS_ALL_MAX_REGS
        # registers, so that their round trips hide behind the exchange): a load may not pass
        # the output's stores (the compiler cannot tell that they never alias), so without
        # this every access would wait for its own round trip to L2.
        vecs, cfg = self.cfg.vecs_per_thread, self.cfg
        cols = [name for name, mW in self.io.cols.items() if mW is not None]
        regs = vecs * len(cols) * -(-cfg.vec * self.io.x.element_type.width // 32)
        self.ahead = vecs if vecs >= COLUMNS_ALL_FROM and regs <= COLUMNS_ALL_MAX_REGS else COLUMNS_AHEAD
        self.tXgW, self.tXrW = {}, {}
        for name in cols:
            mW = self.io.cols[name]
            if const_expr(self.b.head):  # at the row's shift (Block.window_column)
                tXgW = mW
                tXrW = self.b.window_fragment(self.like(), mW)
            else:
                tXgW = self.b.column(mW, self.tile)
                tXrW = cute.make_rmem_tensor_like(tXgW)
            over_accesses(0, min(self.ahead, vecs), lambda k, _: self.load_column(mW, tXgW, tXrW, k, False), None)
            if const_expr(self.b.head):  # (after every access's loads)
                over_accesses(0, min(self.ahead, vecs),
                              lambda k, _: self.b.partial_word(mW, tXrW[None, None, k], self.tXcX[None, None, k]), None)
            self.tXgW[name], self.tXrW[name] = tXgW, tXrW

    def load_column(self, mW, tXgW, tXrW, k, partial=True):
        """Access k of a column input into ``tXrW`` (in a window, ``tXgW`` is the input itself,
        taken at the row's shift by :meth:`Block.window_column`, with ``partial`` as there)."""
        if const_expr(self.b.head):
            self.b.window_column(tXgW, tXrW[None, None, k], self.tXcX[None, None, k], partial)
        else:
            self.b.load_column_access(mW, tXgW[None, None, k], tXrW[None, None, k], self.tXcX[None, None, k])
        return None

    @cute.jit
    def write_by_access(self, results):
        b, vecs = self.b, self.cfg.vecs_per_thread
        tXgO = {name: b.thr.partition_D(b.tiles(mO)[None, None, self.tile]) for name, mO in self.io.out.items()}

        def write(k, _):
            cols = {name: None for name in self.io.cols}
            for name, tXrW in self.tXrW.items():
                if k + self.ahead < vecs:
                    self.load_column(self.io.cols[name], self.tXgW[name], tXrW, k + self.ahead)
                cols[name] = tXrW[None, None, k].load().to(Float32)
            ys = self.op.epilogue(self.values(self.access(k), cols, self.tXcX[None, None, k],
                                              tXgO[self.op.out[0]][None, None, k]), results, self.io.s)
            for name, mO in self.io.out.items():
                tXrO_k = cute.make_rmem_tensor_like(tXgO[name][None, None, k])
                tXrO_k.store(ys[name].to(mO.element_type))
                if self.tXcX[0][0] < b.m:
                    if const_expr(self.b.head):
                        self.b.store_access(mO, tXrO_k, tXgO[name][None, None, k], self.tXcX[None, None, k])
                    else:
                        cute.copy(b.load, tXrO_k, tXgO[name][None, None, k],
                                  pred=None if self.tXpX is None else self.tXpX[None, None, k])
            return None
        over_accesses(0, vecs, write, None)


class Staged(InRegisters):
    """The row waits in shared memory, in the input dtype: copied there with ``cp.async`` (no
    registers held), folded from there one access at a time, and read back the same way by the
    epilogue. Registers no longer grow with the row, and more blocks fit an SM."""

    @cute.jit
    def load_and_fold(self):
        b, cfg = self.b, self.cfg
        # The block's (rows_per_block, cols_per_pass) tile of each row input, row-major, so that
        # a warp's 16-byte accesses are 512 contiguous bytes (no bank conflicts); 128-byte
        # aligned for cp.async.
        self.staged, tXgX = {}, {}
        groups = cfg.groups
        per_group = cfg.vecs_per_thread // groups
        stage_copy = make_stage_copy(self.io.x.element_type, cfg.vec)
        for name, mT in self.io.rows.items():
            sX = b.smem.allocate_tensor(mT.element_type, cute.make_ordered_layout(b.tiler_mn, order=(1, 0)),
                                        byte_alignment=128)
            tXgX[name], self.tXcX, self.tXpX = b.view(mT, self.tile)
            self.staged[name] = b.thr.partition_D(sX)
        # Rows past M are not copied (and never stored); accesses past N are zero-filled by
        # cp.async (or skipped), and read back as the reduction's neutral value. One commit group
        # per ``per_group`` accesses, so that the fold can start on the first.
        if const_expr(b.head):
            if b.aligned:
                self.stage(tXgX, stage_copy)
            elif self.tXcX[0][0] < b.m:  # rows that do not line up: element by element
                for name, mT in self.io.rows.items():
                    gather(self.staged[name], self.tXcX, b.h, b.n, lambda c: mT[b.row, c])
        else:
            self.stage(tXgX, stage_copy)
        # wait_group makes this thread's own cp.async writes visible to this thread. Every
        # thread reads back exactly the elements it copied (the same partition of the same
        # tile, in the fold and in the epilogue), so no barrier is needed.
        c = self.op.reductions[0]
        cute.arch.cp_async_wait_group(groups - 1)
        state = self.fold(0, self.values(self.access(0, c.pad), {}), [], self.where(0))
        for g in cutlass.range_constexpr(groups):
            if const_expr(g > 0):  # the groups up to g have landed
                cute.arch.cp_async_wait_group(groups - 1 - g)
            state = over_accesses(g * per_group + (1 if g == 0 else 0), (g + 1) * per_group,
                                  lambda k, st: c.combine(st, self.fold(0, self.values(self.access(k, c.pad), {}), [],
                                                                        self.where(k))),
                                  state)
        return state

    @cute.jit
    def stage(self, tXgX, stage_copy):
        """Issue the row's copies into shared memory, in ``groups`` commit groups."""
        b, groups = self.b, self.cfg.groups
        per_group = self.cfg.vecs_per_thread // groups
        for g in cutlass.range_constexpr(groups):
            for name in self.io.rows:
                if self.tXcX[0][0] < b.m:
                    if const_expr(groups == 1):
                        cute.copy(stage_copy, tXgX[name], self.staged[name], pred=self.tXpX)
                    else:
                        for k in cutlass.range_constexpr(g * per_group, (g + 1) * per_group):
                            cute.copy(stage_copy, tXgX[name][None, None, k], self.staged[name][None, None, k],
                                      pred=None if const_expr(self.tXpX is None) else self.tXpX[None, None, k])
            cute.arch.cp_async_commit_group()

    def like(self):
        return self.staged[self.op.rows[0]]

    def by_access(self) -> bool:
        return True

    def where(self, k):
        """Access k's coordinates and a fragment laid out like it (for ``fold``)."""
        return self.tXcX[None, None, k], self.staged[self.op.rows[0]][None, None, k]

    def access(self, k, pad=None):
        """Access k of every staged row input, as fp32 (in a window, the values outside the
        row replaced by ``pad`` where one is given). Outside a window an access past N holds
        ``pad`` or else the fold's: never stored, but defined, so that the compiler need not
        keep its own copy of the row from the fold to the epilogue (TUNING.md#staged-reads-past-n)."""
        out = {}
        for name, sX in self.staged.items():
            frag = load_access(sX, self.tXpX, k, self.b.load, self.pad() if pad is None and not self.b.head else pad)
            if const_expr(pad is not None):
                self.b.mask(frag, self.tXcX[None, None, k], pad)
            out[name] = frag.load().to(Float32)
        return out

    @cute.jit
    def refold(self, i, results):
        c = self.op.reductions[i]

        def part(k, state):
            values = self.op.fold_input(self.values(self.access(k), {}), i, results)
            if const_expr(self.b.head):  # values outside the row, element by element, fold to nothing
                frag = cute.make_rmem_tensor_like(self.staged[self.op.rows[0]][None, None, k], Float32)
                frag.store(values)
                self.b.mask(frag, self.tXcX[None, None, k], c.pad)
                values = frag.load()
            p = c.fold(values)
            if const_expr(self.tXpX is not None and not self.b.head):  # accesses outside the row add nothing
                p = tuple(cutlass.select_(self.tXpX[0, 0, k], v, Float32(e)) for v, e in zip(p, c.identity))
            return c.combine(state, p)
        return over_accesses(0, self.cfg.vecs_per_thread, part, tuple(Float32(e) for e in c.identity))



class StagedWalk(Staged):
    """The row of a persistent walk (:meth:`RowOp.walk_staged`), staged: two shared buffers of
    each row input, filled in turn with ``cp.async`` (``issue``) and worked from (``work``:
    fold, exchange, the epilogue's stores and the rows' sums, access by access); the column
    inputs in registers, loaded once. Every thread reads back only what it copied, so a buffer
    is refilled without a barrier. With ``cfg.buffers == 1`` (rows two of which do not fit),
    only the first row input has two buffers: the others have one, whose every access the
    epilogue refills with the next row's as soon as it has read it (a commit group an access,
    which the next row's fold waits for in turn, up to EACH_ACCESS_MAX accesses a thread; past
    that one group a row), while the first input's next row is in flight through the exchange."""

    def __init__(self, op: RowOp, io, b: Block):
        super().__init__(op, io, b)
        cfg = self.cfg
        self.nbuf = op.buffers(cfg)
        self.stage_copy = make_stage_copy(io.x.element_type, cfg.vec)
        layout = cute.make_ordered_layout(b.tiler_mn, order=(1, 0))
        tile = lambda mT: b.thr.partition_D(b.smem.allocate_tensor(mT.element_type, layout, byte_alignment=128))
        names = list(io.rows)
        #: the inputs copied a row at a time, into buffer 0 or 1; and those refilled access by access
        self.paired = names if self.nbuf == 2 else names[:1]
        self.refilled = [] if self.nbuf == 2 else names[1:]
        #: a commit group a refilled access, which the fold waits for in turn, up to EACH_ACCESS_MAX
        #: accesses a thread (so few groups are ever pending); past that, one group a row
        self.each_access = bool(self.refilled) and cfg.vecs_per_thread <= EACH_ACCESS_MAX
        shared = {name: tile(io.rows[name]) for name in self.refilled}
        self.buffers = [{**{name: tile(io.rows[name]) for name in self.paired}, **shared} for _ in range(2)]
        self.tXgX, self.tXcX, self.tXpX = b.view(io.x, self.tile)
        # each buffer's per-row inputs (a saved rstd), loaded when its row is issued: registers
        # that are read a row later, so that their round trip hides behind the other row's work
        self.pre = cute.make_rmem_tensor(cute.make_layout((2, max(1, len(op.row_in)))), Float32)
        self.resident = {name: None if mW is None else self.load_resident(mW) for name, mW in io.cols.items()}

    @cute.jit
    def load_resident(self, mW):
        tXgW = self.b.column(mW, self.tile)
        tXrW = cute.make_rmem_tensor_like(tXgW)
        over_accesses(0, self.cfg.vecs_per_thread, lambda k, _: self.b.load_column_access(
            mW, tXgW[None, None, k], tXrW[None, None, k], self.tXcX[None, None, k]), None)
        return tXrW

    def columns_at(self, k):
        return {name: None if f is None else f[None, None, k].load().to(Float32) for name, f in self.resident.items()}

    def sources(self, row):
        """Row ``row``'s accesses of every row input (the block moved to it)."""
        self.b.at(row)
        return {name: self.b.view(mT, self.tile)[0] for name, mT in self.io.rows.items()}

    @cute.jit
    def refill(self, sources, row, k):
        """Copy access k of row ``row`` (nothing past M) of the refilled inputs: a commit group
        of its own where the fold waits access by access (:attr:`each_access`)."""
        for name in self.refilled:
            if row < self.b.m:
                cute.copy(self.stage_copy, sources[name][None, None, k], self.buffers[0][name][None, None, k],
                          pred=None if const_expr(self.tXpX is None) else self.tXpX[None, None, k])
        if const_expr(self.each_access):
            cute.arch.cp_async_commit_group()

    @cute.jit
    def refill_row(self, sources, row):
        """``refill`` of every access of row ``row``; without a group an access, one for them."""
        over_accesses(0, self.cfg.vecs_per_thread, lambda k, _: self.refill(sources, row, k), None)
        if const_expr(not self.each_access):
            cute.arch.cp_async_commit_group()

    @cute.jit
    def issue(self, buf: cutlass.Constexpr[int], row, first: cutlass.Constexpr[bool] = False):
        """Copy row ``row`` (nothing past M) of the paired inputs into buffer ``buf`` (one commit
        group, even empty) and load its per-row inputs; the ``first`` row also of the refilled
        inputs (a group an access)."""
        self.b.at(row)
        values = self.op.row_inputs(self.io, self.b)
        for j, name in enumerate(self.op.row_in):
            self.pre[buf, j] = values[name]
        sources = self.sources(row)
        for name in self.paired:
            if row < self.b.m:
                cute.copy(self.stage_copy, sources[name], self.buffers[buf][name], pred=self.tXpX)
        cute.arch.cp_async_commit_group()
        if const_expr(first and len(self.refilled) > 0):
            self.refill_row(sources, row)

    @cute.jit
    def work(self, buf: cutlass.Constexpr[int], row, acc, phase, upcoming):
        """Row ``row`` from buffer ``buf`` (the other buffer's copies may still be in flight);
        the refilled inputs' accesses copied again from row ``upcoming`` once read."""
        b, op, cfg = self.b, self.op, self.cfg
        vecs = cfg.vecs_per_thread
        refilling = len(self.refilled) > 0
        if const_expr(refilling):
            sources = self.sources(upcoming)
        b.at(row)
        self.row_values = {name: self.pre[buf, j] for j, name in enumerate(op.row_in)}
        self.staged = self.buffers[buf]
        each_access = self.each_access
        if const_expr(not each_access):
            cute.arch.cp_async_wait_group(1)  # every group but the other buffer's (in flight)
        pad, stages = self.pad(), len(op.reductions)
        results = []
        for i in cutlass.range_constexpr(stages):
            c = op.reductions[i]

            def fold(k, st, i=i, c=c):
                if const_expr(each_access and i == 0):
                    # landed: this buffer's group and the refills up to access k (after them:
                    # the later refills and the other buffer's group)
                    cute.arch.cp_async_wait_group(vecs - k)
                return c.combine(st, c.fold(op.fold_input(self.values(self.access(k, pad), self.columns_at(k)),
                                                          i, results)))
            state = over_accesses(0, vecs, fold, tuple(Float32(e) for e in c.identity))
            slot = buf * stages + i
            results.append(row_reduce(state, c, cfg.threads_per_row, cfg.cluster_n, b.bufs[slot],
                                      None if b.mbar is None else b.mbar + slot, first=False, phase=phase))
        tXgO = {name: b.thr.partition_D(b.tiles(mO)[None, None, self.tile]) for name, mO in self.io.out.items()}

        def write(k, _):
            # (accesses past N hold the pad, so that what they add to the sums is zero)
            v = self.values(self.access(k, pad), self.columns_at(k), self.tXcX[None, None, k],
                            tXgO[op.out[0]][None, None, k])
            if const_expr(refilling):
                self.refill(sources, upcoming, k)
            ys = op.epilogue(v, results, self.io.s)
            for name, mO in self.io.out.items():
                tXrO_k = cute.make_rmem_tensor_like(tXgO[name][None, None, k])
                tXrO_k.store(ys[name].to(mO.element_type))
                cute.copy(b.load, tXrO_k, tXgO[name][None, None, k],
                          pred=None if self.tXpX is None else self.tXpX[None, None, k])
            adds = op.col_values(v, results, self.io.s)
            for name, frag in zip(op.col_out, acc):
                frag[None, None, k].store(frag[None, None, k].load() + adds[name])
            return None
        over_accesses(0, vecs, write, None)
        if const_expr(refilling and not self.each_access):
            cute.arch.cp_async_commit_group()  # the row's refills, one group


class Streamed(Strategy):
    """The row is not kept: each pass loads a few accesses a thread and folds them into the
    running tuple, which is all that lives across passes. With ``ahead``, pass p + 1 is
    loaded before pass p is folded (two buffers), so that the fold hides behind loads. An op
    that reduces nothing and writes rows (an elementwise map of its row) writes each pass's
    output as the pass is loaded."""

    @cute.jit
    def load_and_fold(self):
        b, cfg = self.b, self.cfg
        mX = self.io.x
        tXgX, tXcX, tXpX = b.view(mX, self.tile)
        self.tXcX, self.tXpX = tXcX, tXpX
        tXrX = cute.make_rmem_tensor_like(tXgX)
        if const_expr(tXpX is not None):
            tXrX.fill(self.pad())
        b.load_rows(mX, tXgX, tXrX, tXcX, tXpX)
        state = None
        if const_expr(len(self.op.reductions) == 0):
            self.map_pass(tXrX, 0)
            for p in cutlass.range(1, cfg.passes, unroll=2):
                tXrX_p = cute.make_rmem_tensor_like(tXrX)
                self.load_pass(tXrX_p, p)
                self.map_pass(tXrX_p, p)
        elif const_expr(cfg.ahead and cfg.passes > 1):
            state = self.stream_ahead(tXrX)
        else:
            state = self.fold_buffer(tXrX)
            for p in cutlass.range(1, cfg.passes, unroll=2):
                tXrX_p = cute.make_rmem_tensor_like(tXrX)  # a fresh buffer a pass
                self.load_pass(tXrX_p, p)
                state = self.op.reductions[0].combine(state, self.fold_buffer(tXrX_p, p))
        return state

    def fold_buffer(self, buf, p=0):
        """The thread tier over pass ``p``'s buffer (in a window, its values outside the row
        set to the neutral value first): from the bf16 registers themselves where the
        reduction has a fold for them (``Combine.fold_bf16``), accesses are whole 32-bit words
        (an even ``vec``) and the op folds its row as it is; else over the buffer widened."""
        c = self.op.reductions[0]
        if const_expr(self.b.head):
            _, tXcX_p, _ = self.b.view(self.io.x, p * self.cfg.cluster_n + self.tile)
            self.b.mask(buf, tXcX_p, c.pad)
        if const_expr(c.fold_bf16 is not None and buf.element_type is cutlass.BFloat16 and self.cfg.vec % 2 == 0
                      and type(self.op).fold_input is RowOp.fold_input):
            return c.fold_bf16(buf)
        return self.fold(0, self.values({self.op.rows[0]: buf.load().to(Float32)}, {}), [])

    @cute.jit
    def map_pass(self, buf, p):
        """The epilogue over pass ``p``'s values in ``buf``, and its stores."""
        b = self.b
        tile = p * self.cfg.cluster_n + self.tile
        _, tXcX_p, tXpX_p = b.view(self.io.x, tile)
        ys = self.op.epilogue(self.values({self.op.rows[0]: buf.load().to(Float32)}, {}, tXcX_p, buf), [],
                              self.io.s)
        self.store_rows(ys, tile, tXcX_p, tXpX_p)

    @cute.jit
    def load_pass(self, buf, p):
        """Issue pass ``p``'s loads into the register buffer ``buf`` (refilled with the neutral
        value first where the loads are predicated off: the buffer is reused)."""
        b = self.b
        tXgX_p, tXcX_p, tXpX_p = b.view(self.io.x, p * self.cfg.cluster_n + self.tile)
        if const_expr(tXpX_p is not None):
            buf.fill(self.pad())
        b.load_rows(self.io.x, tXgX_p, buf, tXcX_p, tXpX_p)

    @cute.jit
    def stream_ahead(self, buf0):
        """Two buffers, even passes in ``buf0`` (pass 0 already issued there), odd ones in
        ``buf1``, two passes an iteration so that each buffer stays put."""
        c, passes = self.op.reductions[0], self.cfg.passes
        buf1 = cute.make_rmem_tensor_like(buf0)
        self.load_pass(buf1, 1)
        state = self.fold_buffer(buf0)  # pass 0
        for p in cutlass.range(1, passes - 1, 2):  # folds passes p (odd) and p + 1
            self.load_pass(buf0, p + 1)
            state = c.combine(state, self.fold_buffer(buf1, p))
            if p + 2 < passes:
                self.load_pass(buf1, p + 2)
            state = c.combine(state, self.fold_buffer(buf0, p + 1))
        if const_expr(passes % 2 == 0):  # the last pass, odd, is in buf1
            state = c.combine(state, self.fold_buffer(buf1, passes - 1))
        return state

    def refold(self, i, results):
        raise NotImplementedError("a streamed row is not kept: it cannot be folded again")

    def write_rows(self, results):
        pass


STRATEGIES = {"reg": InRegisters, "smem": Staged, "stream": Streamed}

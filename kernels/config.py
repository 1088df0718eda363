"""How every row kernel maps a row onto threads, blocks and clusters: one place, as data.

A row kernel gives each row of an (M, N) tensor to ``threads_per_row`` threads of a block,
or to a *cluster* of ``cluster_n`` blocks that share the row through distributed shared
memory. Where the row waits between its reduction and its epilogue is the kernel's
*strategy* (``stage``):

    "reg"     kept in registers, as fp32 (rows an op reads again: RMSNorm, softmax)
    "smem"    staged in shared memory with cp.async, in the input dtype (the longest kept rows)
    "stream"  not kept: folded pass by pass (an op that reads its row once: cross-entropy)

Each op has a table per element width (16 or 32 bits): named rows, the first whose ``n_max``
is >= N wins, its shape stretched over N; where that leaves too many of its accesses idle (an N
just past a row), a rule picks among the neighbouring rows' shapes (:data:`ANY_N`). Every tuned
setting lives here; each table's comment says in a line why, and
``benchmarks/TUNING.md`` holds the measurements behind it.

    >>> from kernels.config import row_config, print_table
    >>> row_config("rmsnorm", 32768, 16)
    RowConfig(threads_per_row=256, threads_per_block=256, cluster_n=8, vec=8, vecs_per_thread=2, stage='smem', groups=2)

Pass ``config=RowConfig(...)`` to any op to override the table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

#: Tiers of the reduction toolkit, lowest first.
TIERS = ("thread", "warp", "block", "cluster")
#: Where a row waits between its reduction and its epilogue (see the module docstring).
STAGES = ("reg", "smem", "stream")
#: When an op's per-row inputs (cross-entropy's target) are loaded: "late", by the thread that
#: writes the row's result, after the reduction; "split", the index before the row's loads and
#: what it points to (the target's logit) after the fold, while the exchange runs.
TARGET_ORDERS = ("late", "split")

#: Hopper: at most 16 blocks in a (non-portable) cluster, 1024 threads per block.
MAX_CLUSTER = 16
MAX_THREADS = 1024
#: The largest row any kernel here accepts.
MAX_N = 262144
#: Shared memory one block may use on Hopper (opt-in maximum: 227 KiB of the SM's 228).
MAX_SMEM_BYTES = 227 * 1024
#: Shared memory of one Hopper SM, and what the driver reserves of it for every resident block.
SM_SMEM_BYTES, SMEM_RESERVED_PER_BLOCK = 228 * 1024, 1024
#: A row kept in registers may not give a thread more elements than this (255 registers in
#: all). A row staged in shared memory is bounded by MAX_SMEM_BYTES instead.
MAX_KEPT_ELEMS = 256


@dataclass(frozen=True)
class Row:
    """One row of a table: the shape every N up to ``n_max`` gets (until the next row).

    threads_per_row, threads_per_block, cluster: as in :class:`RowConfig`
    stage:   "reg", "smem" or "stream" (the strategy)
    vecs:    streamed rows: 128-bit accesses a thread holds per pass (kept rows hold their whole share)
    ahead:   streamed rows: load pass p + 1 before folding pass p
    groups:  staged rows: cp.async commit groups the fold waits for in turn
    buffers: staged rows of an op that sums over rows: rows a block holds at once (see RowConfig)
    targets: "late" or "split" (:data:`TARGET_ORDERS`)
    """

    n_max: int
    threads_per_row: int
    threads_per_block: int
    cluster: int = 1
    stage: str = "reg"
    vecs: int = 0
    ahead: bool = False
    groups: int = 1
    targets: str = "late"
    buffers: int = 2


def _with(table: tuple, *rows: Row, **settings) -> tuple:
    """``table`` with the rows of the same ``n_max`` replaced by ``rows``, and ``settings``
    applied to every row of a stage named by its keys' prefix (``smem_groups=2``)."""
    own = {r.n_max: r for r in rows}
    out = tuple(own.get(r.n_max, r) for r in table)
    for key, value in settings.items():
        stage, name = key.split("_", 1)
        out = tuple(replace(r, **{name: value}) if r.stage == stage else r for r in out)
    return out


# Kept rows (RMSNorm, softmax, LayerNorm, the kept row sum): about four 128-bit accesses a
# thread and more, smaller blocks in a cluster beat fat blocks; from 64k 16-bit elements the row
# is staged in shared memory, so that registers no longer grow with it (TUNING.md#row-config-table).
KEPT = {
    16: (
        Row(1024, 64, 128),
        Row(4096, 64, 128, 2),
        Row(8192, 128, 128, 2),
        Row(16384, 256, 256, 2),
        Row(32768, 128, 128, 8),
        Row(65536, 512, 512, 4, "smem"),
        Row(131072, 512, 512, 4, "smem"),
        Row(262144, 512, 512, 8, "smem"),
    ),
    32: (
        Row(1024, 128, 128),
        Row(4096, 64, 128, 4),
        Row(8192, 64, 128, 8),
        Row(16384, 128, 128, 8),
        Row(32768, 512, 512, 4),
        Row(65536, 512, 512, 8),
        Row(131072, 256, 256, 16),
        Row(262144, 512, 512, 16, "smem"),
    ),
}

# Streamed rows: a few 128-bit accesses a pass, a cluster only where it keeps more blocks busy;
# cross-entropy's cheap fold pays for loading the next pass before folding this one from 16k
# bf16 (TUNING.md#cross-entropy-shapes), and its target is loaded "split" where that measured
# ahead (TUNING.md#target-order).
CROSS_ENTROPY = {
    16: (
        Row(1024, 16, 128, 1, "stream", 4, targets="split"),
        Row(4096, 128, 256, 1, "stream", 2),
        Row(8192, 128, 128, 1, "stream", 4, targets="split"),
        Row(16384, 128, 128, 1, "stream", 4, ahead=True),
        Row(32768, 256, 256, 2, "stream", 4, ahead=True),
        Row(65536, 128, 128, 8, "stream", 4, ahead=True),
        Row(131072, 256, 256, 8, "stream", 4, ahead=True),
        Row(262144, 256, 256, 8, "stream", 8, ahead=True, targets="split"),
    ),
    32: (
        Row(1024, 64, 128, 1, "stream", 4),
        Row(4096, 128, 128, 1, "stream", 8),
        Row(16384, 128, 128, 1, "stream", 8, targets="split"),
        Row(65536, 128, 128, 8, "stream", 8, targets="split"),
        Row(131072, 256, 256, 8, "stream", 4),
        Row(262144, 256, 256, 4, "stream", 8),
    ),
}

TABLES = {
    # The row sum and max of chapters 3-6, streamed: 16-bit rows keep the shapes the sum measured
    # best with (TUNING.md#row-sum-shapes); 32-bit rows share cross-entropy's.
    "row_reduce": {
        16: (
            Row(1024, 64, 128, 1, "stream", 2),
            Row(4096, 128, 128, 1, "stream", 4),
            Row(8192, 128, 128, 1, "stream", 8),
            Row(16384, 128, 128, 1, "stream", 8),
            Row(65536, 128, 128, 4, "stream", 8),
            Row(131072, 128, 128, 8, "stream", 8),
            Row(262144, 512, 512, 4, "stream", 4),
        ),
        32: tuple(replace(r, targets="late") for r in CROSS_ENTROPY[32]),
    },
    # ... and kept whole in registers (``reduce_rows(stream=False)``): the kept table, in registers.
    "row_reduce_kept": {bits: tuple(replace(r, stage="reg") for r in rows) for bits, rows in KEPT.items()},
    "cross_entropy": CROSS_ENTROPY,
    # Softmax folds two values a row across the cluster where RMSNorm folds one: at 16k and 32k it
    # wants smaller blocks over more of them, at 128k a cluster of 8, and fp32 rows past 64k staged
    # (TUNING.md#softmax-own-rows).
    "softmax": {
        16: _with(KEPT[16], Row(16384, 32, 128, 8), Row(32768, 64, 128, 8), Row(131072, 512, 512, 8, "smem")),
        32: _with(KEPT[32], Row(131072, 512, 512, 16, "smem")),
    },
    # RMSNorm stages 16-bit rows from 16k (two commit groups for every staged row, so its fold
    # starts on the first half) and takes its own shapes at bf16 8k and fp32 128k
    # (TUNING.md#rmsnorm-own-rows, TUNING.md#stage-groups).
    "rmsnorm": {
        16: _with(KEPT[16], Row(8192, 64, 128, 4), Row(32768, 256, 256, 8, "smem"), smem_groups=2),
        32: _with(KEPT[32], Row(131072, 512, 512, 8, "smem"), smem_groups=2),
    },
}
# LayerNorm moves the bytes RMSNorm moves, with one exchange a row of three values (MEAN_VAR) where
# RMSNorm's has one: RMSNorm's shapes, but 16-bit rows of 1k, and of 8k, 32k and 64k, give a thread
# 4 and 8 accesses, which spreads the longer tree over more elements (TUNING.md#layernorm-own-rows).
TABLES["layernorm"] = {
    16: _with(TABLES["rmsnorm"][16], Row(1024, 32, 128), Row(8192, 128, 128), Row(32768, 512, 512, 1, "smem", groups=2),
              Row(65536, 256, 256, 4, "smem")),
    32: TABLES["rmsnorm"][32],
}
# Softmax's backward keeps two rows (y and dy) where the forward keeps one: RMSNorm's shapes, which
# stage from 16k 16-bit elements (not swept yet).
TABLES["softmax_bwd"] = TABLES["rmsnorm"]
# RMSNorm's and LayerNorm's backward sum the weight's gradient over the rows: one block a row
# at a time (a persistent kernel), 16 elements a thread, the row staged in shared memory two rows
# at a time; from 16k elements a cluster splits the row, 8,192 (RMSNorm 16-bit) or 4,096
# elements a block. RMSNorm's shortest rows keep theirs in registers, where that measured ahead;
# RMSNorm's 16-bit rows of 64k-128k and LayerNorm's of 128k-256k take the shapes their sweep
# measured best; a 32-bit row of 256k keeps two buffers of x and one of dy, refilled access by
# access (two of each do not fit in shared memory even over 16 blocks; TUNING.md#norm-backward).
def _norm_bwd(per_block: int, in_registers: int = 0) -> tuple:
    rows = [Row(n, n // 16, n // 16, 1, "reg" if n <= in_registers else "smem") for n in (1024, 2048, 4096, 8192)
            if n <= max(per_block, in_registers)]
    rows += [Row(n, per_block // 16, per_block // 16, min(16, n // per_block), "smem")
             for n in (8192, 16384, 32768, 65536, 131072, 262144) if n > max(per_block, in_registers)]
    return tuple(rows)


TABLES["rmsnorm_bwd"] = {
    16: _with(_norm_bwd(8192, in_registers=1024), Row(65536, 256, 256, 8, "smem"), Row(131072, 256, 256, 16, "smem")),
    32: _with(_norm_bwd(4096, in_registers=8192), Row(262144, 512, 512, 16, "smem", buffers=1))}
TABLES["layernorm_bwd"] = {
    16: _with(_norm_bwd(4096), Row(131072, 512, 512, 8, "smem"), Row(262144, 512, 512, 16, "smem")),
    32: _with(_norm_bwd(4096), Row(262144, 256, 256, 16, "smem", buffers=1))}
# Cross-entropy's backward maps its row (nothing to reduce): one block a row up to 4k, 512
# threads a row from 8k, from 64k (16-bit) or 128k (32-bit) a cluster splitting the row over
# more blocks (TUNING.md#cross-entropy-backward).
TABLES["cross_entropy_bwd"] = {
    16: (Row(1024, 64, 128, 1, "stream", 2), Row(4096, 128, 256, 1, "stream", 2), Row(32768, 512, 512, 1, "stream", 2),
         Row(65536, 128, 128, 4, "stream", 2), Row(131072, 512, 512, 2, "stream", 4),
         Row(MAX_N, 512, 512, 4, "stream", 4)),
    32: (Row(1024, 128, 128, 1, "stream", 2), Row(4096, 512, 512, 1, "stream", 2), Row(65536, 512, 512, 1, "stream", 8),
         Row(131072, 512, 512, 2, "stream", 8), Row(MAX_N, 512, 512, 4, "stream", 8)),
}
OPS = tuple(TABLES)

# Between the table's rows. The row N falls in, stretched over N, can leave much of its last
# accesses idle (a cluster of 8 for a 16,467-element row covers 32,768 columns). Where it covers
# less than KEEP_COVERAGE of the row, an op of ANY_N takes instead the shape among its
# neighbours' (:func:`neighbours`) whose accesses cover the most of the row (to 1%); of those,
# the one with the fewest threads a row, then the smallest blocks: fewer threads with more
# accesses each beat the table's wide shapes there, and small blocks fill an SM whose registers
# a 512-thread block would leave partly idle. MAX_VECS bounds a thread's accesses by stage (a
# streamed row's, a pass's). Fitted to book/data/sweep_any_n.csv (TUNING.md#any-n): ANY_N names
# the element widths per op where it was fitted or measured to win (cross-entropy's 32-bit rows
# keep the table: the rule lost at 10 of the shapes suite's 23 row lengths there).
ANY_N = {"rmsnorm": (16, 32), "layernorm": (16, 32), "softmax": (16, 32), "cross_entropy": (16,)}
KEEP_COVERAGE = 0.97
MAX_VECS = {"reg": 8, "smem": 16, "stream": 8}
STREAM_VECS = (4, 8)
# A 16-bit row of RMSNorm or LayerNorm in its window, kept in registers, with its weight cut out
# of the vector's words at every access: no cluster, as few threads a row as give each at most
# ``vecs`` accesses, where that is ``threads`` (lo, hi); a block of one row, or of 128 threads.
# RMSNorm: at most four accesses, 128 to 512 threads (TUNING.md#window-rows); LayerNorm, whose
# three-value tree costs more a row, at most eight, from 32 threads (TUNING.md#layernorm-own-rows).
WINDOW_ROWS = {"rmsnorm": {16: (4, (128, 512))}, "layernorm": {16: (8, (32, 512))}}


@dataclass(frozen=True)
class RowConfig:
    """How one row kernel maps a row onto threads.

    threads_per_row:   threads that share one row inside a block (power of two)
    threads_per_block: threads in a block (a multiple of 32 and of threads_per_row)
    cluster_n:         blocks of a cluster that split one row (1 = no cluster)
    vec:               elements per access (128 bits / element width at most)
    vecs_per_thread:   accesses each thread holds per pass
    passes:            times a block walks over its part of the row ("stream" only)
    stage:             "reg", "smem" or "stream": where the row waits (:data:`STAGES`)
    ahead:             "stream": load pass p + 1 before folding pass p (a second buffer)
    groups:            "smem": cp.async commit groups, the fold waiting for each in turn
    buffers:           "smem", an op that sums over rows (a persistent walk): rows a block holds
                       in shared memory at once; 2, the next row copied while this one is worked;
                       1, each access refilled with the next row's once the epilogue has read it
                       (rows two of which do not fit)
    targets:           "late" or "split": when per-row inputs are loaded (:data:`TARGET_ORDERS`)
    head:              rows may start anywhere in a 16-byte word and N need not be a multiple
                       of ``vec``: the accesses cover each row's *aligned window*, from its
                       start rounded down to ``vec`` elements (a run-time head of h < vec
                       elements) to N + h, at least N + vec - 1 columns
    """

    threads_per_row: int
    threads_per_block: int
    cluster_n: int
    vec: int
    vecs_per_thread: int
    passes: int = 1
    stage: str = "reg"
    ahead: bool = False
    groups: int = 1
    targets: str = "late"
    head: bool = False
    buffers: int = 2

    def __repr__(self) -> str:
        # Fields after vecs_per_thread are shown only where they are not their default.
        shown = [f.name for i, f in enumerate(fields(self)) if i < 5 or getattr(self, f.name) != f.default]
        return f"RowConfig({', '.join(f'{k}={getattr(self, k)!r}' for k in shown)})"

    @property
    def rows_per_block(self) -> int:
        return max(1, self.threads_per_block // self.threads_per_row)

    @property
    def warps_per_row(self) -> int:
        return max(1, self.threads_per_row // 32)

    @property
    def cols_per_pass(self) -> int:
        """Columns one block covers in one pass."""
        return self.threads_per_row * self.vec * self.vecs_per_thread

    @property
    def cols_covered(self) -> int:
        return self.cols_per_pass * self.passes * self.cluster_n

    @property
    def elems_per_thread(self) -> int:
        return self.vec * self.vecs_per_thread

    def smem_bytes(self, elem_bits: int, stages: int = 1, tiles: int = 1) -> int:
        """Shared memory one block needs, an upper bound: the staged tile of
        ``(rows_per_block, cols_per_pass)`` elements for each of ``tiles`` row inputs (stage
        "smem" only), the partials of the block or cluster tier for each of ``stages``
        reductions (at most four fp32 a slot), the cluster's mbarriers, and up to 128 bytes of
        alignment before each."""
        staged = tiles * self.rows_per_block * self.cols_per_pass * elem_bits // 8 if self.stage == "smem" else 0
        partials = self.rows_per_block * self.warps_per_row * self.cluster_n * 16 * stages
        return staged + 128 * tiles + partials + 128 + 8 * stages

    @property
    def max_tier(self) -> str:
        if self.cluster_n > 1:
            return "cluster"
        if self.warps_per_row > 1:
            return "block"
        if self.threads_per_row > 1:
            return "warp"
        return "thread"

    def check(self, n: int, elem_bits: int | None = None, stages: int = 1, tiles: int = 1) -> None:
        """Raise ValueError if this configuration cannot cover a row of n elements (of
        ``elem_bits`` bits: then a staged tile must also fit in shared memory)."""
        p = self.threads_per_row
        if p < 1 or p & (p - 1) or p > MAX_THREADS:
            raise ValueError(f"threads_per_row must be a power of two <= {MAX_THREADS}, got {p}")
        if self.threads_per_block % 32 or self.threads_per_block > MAX_THREADS:
            raise ValueError(f"threads_per_block must be a multiple of 32 <= {MAX_THREADS}")
        if self.threads_per_block % min(p, self.threads_per_block) or p > self.threads_per_block:
            raise ValueError("threads_per_row must divide threads_per_block")
        if not 1 <= self.cluster_n <= MAX_CLUSTER or self.cluster_n & (self.cluster_n - 1):
            raise ValueError(f"cluster_n must be a power of two <= {MAX_CLUSTER}")
        if self.cluster_n > 1 and p < 32:
            # each warp sends the cluster one partial, of one row: a warp holding two rows would
            # send half the bytes its peers wait for, and they would wait forever
            raise ValueError(f"a row split over a cluster takes whole warps: threads_per_row >= 32 "
                             f"with cluster_n = {self.cluster_n}, got {p}")
        if self.cluster_n > 1 and self.warps_per_row * self.cluster_n > 32 * 16:
            raise ValueError("too many partials for one cluster exchange")
        if self.head and elem_bits is not None and self.vec * elem_bits != 128:
            raise ValueError(f"a row's window is counted in 16-byte words: head=True takes vec = {128 // elem_bits}, "
                             f"got vec={self.vec}")
        window = n + self.vec - 1 if self.head else n  # the columns the accesses must cover
        if self.cols_covered < window:
            raise ValueError(f"{self} covers {self.cols_covered} < {window} columns"
                             + (f" (N = {n} and a head of up to {self.vec - 1})" if self.head else ""))
        if self.cluster_n * self.passes > 1 and window <= self.cols_per_pass:
            # the row is then a single column tile, whose tile mode CuTe gives stride 0: a second
            # block or pass would read the first one's columns again instead of none
            raise ValueError(f"{self} gives one block's first pass all {window} columns, leaving the other "
                             "blocks or passes none: use fewer accesses a pass or fewer blocks")
        if n % self.vec and not self.head:
            raise ValueError(f"vec={self.vec} must divide N={n} (or the rows take a head: head=True)")
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {self.stage!r}")
        if self.stage != "stream" and self.passes != 1:
            raise ValueError(f"stage={self.stage!r} keeps the whole row: passes must be 1")
        if self.ahead and self.stage != "stream":
            raise ValueError("ahead applies to streamed rows (stage='stream')")
        if self.groups < 1 or self.vecs_per_thread % self.groups or (self.groups > 1 and self.stage != "smem"):
            raise ValueError("groups must divide vecs_per_thread, and groups > 1 applies to staged rows "
                             "(stage='smem')")
        if self.targets not in TARGET_ORDERS:
            raise ValueError(f"targets must be one of {TARGET_ORDERS}, got {self.targets!r}")
        if self.buffers not in (1, 2):
            raise ValueError(f"buffers must be 1 or 2, got {self.buffers}")
        if self.stage == "reg" and self.elems_per_thread > MAX_KEPT_ELEMS:
            raise ValueError(f"{self} keeps {self.elems_per_thread} elements a thread in registers "
                             f"> {MAX_KEPT_ELEMS}")
        if elem_bits is not None and self.smem_bytes(elem_bits, stages, tiles) > MAX_SMEM_BYTES:
            raise ValueError(
                f"{self} needs {self.smem_bytes(elem_bits, stages, tiles)} bytes of shared memory per block for "
                f"{elem_bits}-bit elements > {MAX_SMEM_BYTES}; use more blocks (cluster_n) or stage='reg'")


def vector_width(n: int, elem_bits: int, row_stride: int | None = None, ptr_align: int = 16) -> int:
    """Widest access (in elements, <= 128 bits) that divides N, the row stride and the
    base pointer's alignment."""
    v = 128 // elem_bits
    while v > 1 and (n % v or (row_stride is not None and row_stride % v) or ptr_align % (v * elem_bits // 8)):
        v //= 2
    return v


def table(op: str, elem_bits: int) -> tuple:
    """The table of ``op`` for elements of ``elem_bits`` bits."""
    if op not in TABLES:
        raise ValueError(f"no configuration table for op {op!r}; the tables are {OPS}")
    return TABLES[op][16 if elem_bits <= 16 else 32]


def lookup(op: str, n: int, elem_bits: int) -> Row:
    """The row of ``op``'s table that a row of n elements takes."""
    rows = table(op, elem_bits)
    for row in rows:
        if n <= row.n_max:
            return row
    raise ValueError(f"N = {n} is past the largest row {op!r} supports ({rows[-1].n_max})")


def accesses(n: int, vec: int, head: bool = False) -> int:
    """The accesses of ``vec`` elements a row of n takes: its N + vec - 1 window columns (rounded
    up) where ``head``, else N / vec."""
    return (n + 2 * vec - 2) // vec if head else n // vec


def _next_pow2(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


def row_config(op: str, n: int, elem_bits: int, *, vec: int | None = None, max_tier: str = "cluster",
               stage: str | None = None, head: bool = False) -> RowConfig:
    """The configuration of ``op`` (a key of :data:`TABLES`) for a row of ``n`` elements of
    ``elem_bits`` bits, with accesses of ``vec`` elements (default: the widest that divides N).

    max_tier: the highest tier of the reduction the kernel may use ("thread", "warp", "block"
              or "cluster"); capping it shows what each tier buys, at the cost of more
              elements per thread (or more passes).
    stage:    a kept row's "reg" or "smem" in place of the table's.
    head:     the rows' aligned windows (:class:`RowConfig`) are covered, N + vec - 1 columns
              (the table's row is still the one N falls in).
    """
    if not 1 <= n <= MAX_N:
        raise ValueError(f"N must be in [1, {MAX_N}], got {n}")
    if max_tier not in TIERS:
        raise ValueError(f"max_tier must be one of {TIERS}, got {max_tier!r}")
    cfg = table_row_config(op, n, elem_bits, vec=vec, max_tier=max_tier, stage=stage, head=head)
    width = 16 if elem_bits <= 16 else 32
    window = WINDOW_ROWS.get(op, {}).get(width)
    if head and window and max_tier == "cluster" and stage is None and cfg.stage == "reg":
        vecs, (lo, hi) = window
        nvec = accesses(n, cfg.vec, head)
        threads = _next_pow2(-(-nvec // vecs))
        if lo <= threads <= hi:
            return RowConfig(threads, max(threads, 128), 1, cfg.vec, -(-nvec // threads), head=True)
    if (width in ANY_N.get(op, ()) and max_tier == "cluster" and stage is None and cfg.vec * elem_bits == 128
            and coverage(cfg, n) < KEEP_COVERAGE):
        # (max keeps the first of equals: the row N falls in before the row below)
        return max(neighbours(op, n, elem_bits, head) or [cfg],
                   key=lambda c: (round(coverage(c, n), 2), -c.threads_per_row * c.cluster_n, -c.threads_per_block))
    return cfg


def table_row_config(op: str, n: int, elem_bits: int, *, vec: int | None = None, max_tier: str = "cluster",
                     stage: str | None = None, head: bool = False) -> RowConfig:
    """The row N falls in, stretched over N with the tiers ``max_tier`` allows: what
    :func:`row_config` gives where the rule for any N does not apply (arguments as there)."""
    entry = lookup(op, n, elem_bits)
    if stage is not None:
        if stage not in ("reg", "smem"):
            raise ValueError(f"stage must be 'reg' or 'smem', got {stage!r}")
        if entry.stage == "stream":
            raise ValueError(f"op {op!r} streams its rows: it has no kept stage to choose")
        # a forced staging takes the commit groups of the op's staged rows
        groups = next((r.groups for r in table(op, elem_bits) if r.stage == "smem"), 1)
        entry = replace(entry, stage=stage, groups=groups if stage == "smem" else 1)
    if head and vec not in (None, 128 // elem_bits):
        raise ValueError(f"a row's window is counted in 16-byte words: head=True takes vec = {128 // elem_bits}")
    vec = vec or (128 // elem_bits if head else vector_width(n, elem_bits))
    nvec = accesses(n, vec, head)
    tpr, tpb, cluster = entry.threads_per_row, entry.threads_per_block, entry.cluster
    cap = TIERS.index(max_tier)
    if cap < 3 and cluster > 1:  # no cluster: one block takes the whole row
        tpr = tpb = min(MAX_THREADS, tpr * cluster)
        cluster = 1
    if cap < 2:  # no block tier: one warp (or less) per row
        tpr, tpb = min(tpr, 32), 128
    if cap < 1:  # no warp tier: one thread per row
        tpr = 1
    # Short rows: no more threads than vectors, no more blocks than needed.
    tpr = min(tpr, _next_pow2(nvec))
    tpb = max(tpb, tpr)
    cluster = min(cluster, _next_pow2(math.ceil(nvec / (tpr))))
    shape = replace(entry, threads_per_row=tpr, threads_per_block=tpb, cluster=cluster)
    if entry.stage != "stream":
        cfg = stretch(shape, n, elem_bits, head, vec=vec)
        if cfg.stage == "reg" and cfg.elems_per_thread > MAX_KEPT_ELEMS:
            raise ValueError(
                f"a row of {n} elements does not fit in registers with max_tier={max_tier!r} "
                f"({cfg.elems_per_thread} elements per thread > {MAX_KEPT_ELEMS}); stream it instead")
        if cfg.stage == "smem" and cfg.smem_bytes(elem_bits) > MAX_SMEM_BYTES:
            raise ValueError(
                f"a row of {n} elements does not fit in shared memory with max_tier={max_tier!r} "
                f"({cfg.smem_bytes(elem_bits)} bytes per block > {MAX_SMEM_BYTES}); stream it instead")
        return cfg
    stream_vecs = max(1, entry.vecs * (128 // elem_bits) // vec)  # the same bytes when vec is narrower
    if tpb > 512:  # 1024-thread blocks get 64 registers a thread: half the bytes in flight
        stream_vecs = max(1, stream_vecs // 2)
    return stretch(shape, n, elem_bits, head, vecs=stream_vecs, vec=vec)


def coverage(cfg: RowConfig, n: int) -> float:
    """The share of ``cfg``'s accesses that hold elements of a row of n (of its aligned window
    where ``cfg.head``): 1.0 where the row fills every access."""
    window = n + cfg.vec - 1 if cfg.head else n
    return -(-window // cfg.vec) / (cfg.cols_covered // cfg.vec)


def stretch(row: Row, n: int, elem_bits: int, head: bool = False, vecs: int | None = None,
            vec: int | None = None) -> RowConfig:
    """``row``'s shape over a row of n elements in accesses of ``vec`` elements (default 128
    bits): kept, as many accesses a thread as cover it; streamed, ``vecs`` accesses a pass
    (default the row's; fewer if fewer cover it) and the passes that do."""
    vec = vec or 128 // elem_bits
    nvec = accesses(n, vec, head)
    blocks = row.threads_per_row * row.cluster
    if row.stage != "stream":
        per = -(-nvec // blocks)
        return RowConfig(row.threads_per_row, row.threads_per_block, row.cluster, vec, per, stage=row.stage,
                         groups=math.gcd(row.groups, per), head=head, buffers=row.buffers)
    per = min(vecs or row.vecs, -(-nvec // blocks))
    passes = -(-nvec // (blocks * per))
    return RowConfig(row.threads_per_row, row.threads_per_block, row.cluster, vec, per, passes, "stream",
                     ahead=row.ahead and passes > 1, targets=row.targets, head=head)


def neighbours(op: str, n: int, elem_bits: int, head: bool = False) -> list:
    """What a row of n between the table's rows chooses from: the shapes of the row N falls in
    and of the row below it, each also with half its cluster and with half its threads a row
    (then blocks of at most four rows, and no larger than the row's), stretched over N (:func:`stretch`; streamed with each of STREAM_VECS accesses a pass), those
    within MAX_VECS and that the template takes, the row N falls in first."""
    rows = table(op, elem_bits)
    i = rows.index(lookup(op, n, elem_bits))
    shapes = []
    for r in (rows[i], rows[i - 1]) if i else (rows[i],):
        for tpr, cluster in ((r.threads_per_row, r.cluster), (r.threads_per_row, r.cluster // 2),
                             (r.threads_per_row // 2, r.cluster)):
            if tpr >= 16 and cluster >= 1:
                shapes.append(replace(r, threads_per_row=tpr, cluster=cluster,
                                      threads_per_block=max(tpr, min(r.threads_per_block, 4 * tpr))))
    out = []
    for r in dict.fromkeys(shapes):
        for vecs in (STREAM_VECS if r.stage == "stream" else (None,)):
            cfg = stretch(r, n, elem_bits, head, vecs)
            if cfg.vecs_per_thread > MAX_VECS[cfg.stage]:
                continue
            try:
                cfg.check(n, elem_bits)
            except ValueError:
                continue
            out.append(cfg)
    return list(dict.fromkeys(out))


def print_table(op: str = "rmsnorm", elem_bits: int = 16, ns=None) -> None:
    """Print the configuration every N gets from ``op``'s table, as a reader would want to see it."""
    ns = ns or [2**k for k in range(6, 19)]
    print(f"{op}, {elem_bits}-bit elements")
    print(f"{'N':>8} {'thr/row':>8} {'thr/blk':>8} {'cluster':>8} {'vec':>4} {'elems/thr':>10} {'passes':>7}"
          f" {'tier':>8} {'stage':>7}")
    for n in ns:
        c = row_config(op, n, elem_bits)
        print(f"{n:>8} {c.threads_per_row:>8} {c.threads_per_block:>8} {c.cluster_n:>8} {c.vec:>4}"
              f" {c.elems_per_thread:>10} {c.passes:>7} {c.max_tier:>8} {c.stage:>7}")

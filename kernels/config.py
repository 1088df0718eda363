"""The one configuration table for every row kernel.

A row kernel gives each row of an (M, N) tensor to ``threads_per_row`` threads of a
block, or to a *cluster* of ``cluster_n`` blocks that share the row through
distributed shared memory. How many threads, how many blocks and how wide each
access is depends only on N, on the element width and on whether the kernel must
keep the whole row on chip (RMSNorm, softmax) or may stream it (row sums,
cross-entropy). All of that lives in the table below, as data:

    >>> from kernels.config import row_config, print_table
    >>> row_config(32768, 16, keep_row=True)
    RowConfig(threads_per_row=128, threads_per_block=128, cluster_n=8, vec=8, vecs_per_thread=4, passes=1)
    >>> row_config(262144, 16, keep_row=True)
    RowConfig(threads_per_row=512, threads_per_block=512, cluster_n=8, vec=8, vecs_per_thread=8, passes=1, stage='smem')

Pass ``config=RowConfig(...)`` to any op to override the choice.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

#: Tiers of the reduction toolkit, lowest first.
TIERS = ("thread", "warp", "block", "cluster")

#: Hopper: at most 16 blocks in a (non-portable) cluster, 1024 threads per block.
MAX_CLUSTER = 16
MAX_THREADS = 1024
#: The largest row any kernel here accepts.
MAX_N = 262144
#: Shared memory one block may use on Hopper (opt-in maximum: 227 KiB of the SM's 228).
MAX_SMEM_BYTES = 227 * 1024
#: Shared memory of one Hopper SM, and what the driver reserves of it for every resident block.
SM_SMEM_BYTES, SMEM_RESERVED_PER_BLOCK = 228 * 1024, 1024
#: Where a kept row waits between its reduction and its epilogue: in registers (fp32) or
#: staged in shared memory (in the input dtype).
STAGES = ("reg", "smem")

# The tables, by element width in bits. Rows are (largest N, threads per row, threads
# per block, cluster size[, stage]) for kept rows and (largest N, threads per row,
# threads per block, cluster size, 128-bit accesses per thread per pass[, ahead]) for
# streamed ones; the first row whose bound is >= N wins. Picked from `python -m benchmarks.sweep`
# on an H200 (book/data/sweep.csv): the best configuration for RMSNorm and softmax
# together (keep) and for cross-entropy (stream) at each N. What the data says: about
# four 128-bit accesses a thread (64 bytes) and more, smaller blocks in a cluster beat
# fat blocks, until a 262144-element row forces 64 elements a thread even with 16 blocks.
#
# The stage (default "reg") says where the kept row waits for its epilogue. In registers
# a 64k-256k row costs 64-127 registers a thread, so only 2-4 blocks fit an SM; staged
# in shared memory (cp.async, read back for the fold and again for the epilogue) it
# costs 16-64 KiB of shared memory a block and few registers, so 512-thread blocks and
# smaller clusters pay off. The long rows are from `python -m benchmarks.sweep --smem`
# (book/data/sweep_smem.csv, the best of RMSNorm and softmax together); fp32 rows of
# 64k and 128k stay in registers, which measured as fast or faster there. A row kept in
# registers where the table stages it (stage="reg": the kept row reduction of chapter 6, or
# an override) takes the same shape, tuned for the staged row; its own best shape there
# has not been swept since (book/data/reduction.csv measures it with these shapes).
KEEP_ROW_TABLE = {
    16: (
        (1024, 64, 128, 1),
        (4096, 64, 128, 2),
        (8192, 128, 128, 2),
        (16384, 256, 256, 2),
        (32768, 128, 128, 8),
        (65536, 512, 512, 4, "smem"),
        (131072, 512, 512, 4, "smem"),
        (262144, 512, 512, 8, "smem"),
    ),
    32: (
        (1024, 128, 128, 1),
        (4096, 64, 128, 4),
        (8192, 64, 128, 8),
        (16384, 128, 128, 8),
        (32768, 512, 512, 4),
        (65536, 512, 512, 8),
        (131072, 256, 256, 16),
        (262144, 512, 512, 16, "smem"),
    ),
}


def _own_rows(own: dict) -> dict:
    """KEEP_ROW_TABLE with an op's own rows ({bits: {bound: row}}) in place of the shared ones."""
    return {bits: tuple(own.get(bits, {}).get(row[0], row) for row in rows) for bits, rows in KEEP_ROW_TABLE.items()}


# Softmax (op "softmax") folds two values a row (max and sum) across the cluster where
# RMSNorm folds one, and at 32k 16-bit elements it wanted a smaller block over more of them
# (`python -m benchmarks.sweep --op softmax rmsnorm --n 32768`, book/data/sweep_keep_mid.csv:
# 64 threads a row, two rows a block, a cluster of 8 at 97.1% of the copy ceiling against
# 92.4% for the shared shape, which gave RMSNorm 97.1% and this one RMSNorm 84.8%). At 128k,
# staged, it wanted a cluster of 8 (4 accesses a thread) where RMSNorm keeps 4, in three runs of
# one timing each: 96.5% against 96.1% (book/data/sweep_smem.csv), 97.0% against 96.4%
# (benchmarks/runs/logs/sweep_smem_softmax_bf16_f0549d9.csv) and 96.9% against 96.0%
# (`--smem --op softmax`, book/data/sweep_smem_softmax_bf16.csv). At 16k it wanted the 32k
# shape's cluster of 8 with 32 threads a row (four rows a block, eight 128-bit accesses a
# thread): 96.76% of the copy ceiling against 96.10% for the shared shape, ahead of QuACK in
# five rounds of five (1.0097x against 1.0028x; benchmarks/runs/near_misses.py with POINTS,
# book/data/near_misses_2.csv, H200, commit 13fc268).
# Softmax's fp32 rows of 65,537-131,072 want staging, 512 threads a row and a cluster of 16 (four
# 128-bit accesses a thread): 97.81% of the copy ceiling against 96.91% for the shared shape (in
# registers, 256 threads, a cluster of 16), ahead of the shared shape and of QuACK in five rounds
# of five (benchmarks/runs/near_misses.py, book/data/near_misses_3.csv, H200, commit 20fb907).
SOFTMAX_OWN_16 = {16384: (16384, 32, 128, 8), 32768: (32768, 64, 128, 8), 131072: (131072, 512, 512, 8, "smem")}
SOFTMAX_OWN_32 = {131072: (131072, 512, 512, 16, "smem")}
SOFTMAX_KEEP = _own_rows({16: SOFTMAX_OWN_16, 32: SOFTMAX_OWN_32})
# RMSNorm (op "rmsnorm") stages its 16-bit rows of 16,385-32,768 in shared memory, 256 threads
# a row and a cluster of 8 (two 128-bit accesses a thread, in two commit groups): 97.24% of the
# copy ceiling against 96.76% for the shared shape (128 threads, a cluster of 8, in registers),
# ahead of QuACK in five rounds of five against it (1.0097x against 1.0047x;
# benchmarks/runs/near_misses.py with POINTS, book/data/near_misses_2.csv, H200, commit 13fc268).
# Its bf16 rows of 4,097-8,192 want 64 threads a row, two rows a block and a cluster of 4 (four
# accesses a thread): 97.81% against 96.76% for the shared shape (128 threads, a cluster of 2),
# 1.0136x QuACK against 1.0027x; and its fp32 rows of 65,537-131,072 staged, 512 threads and a
# cluster of 8 (eight accesses a thread): 97.01% against 96.82%, faster in five rounds of five
# (benchmarks/runs/near_misses.py, book/data/near_misses_3.csv and _4.csv, H200, commit 20fb907).
RMSNORM_OWN_16 = {8192: (8192, 64, 128, 4), 32768: (32768, 256, 256, 8, "smem")}
RMSNORM_OWN_32 = {131072: (131072, 512, 512, 8, "smem")}
RMSNORM_KEEP = _own_rows({16: RMSNORM_OWN_16, 32: RMSNORM_OWN_32})

# Streaming kernels (a reduction that needs the row only once) fold the row in passes
# of a few 128-bit accesses per thread, so a long row needs no cluster to fit in
# registers; the cluster only splits rows when that keeps more blocks busy.
#
# Cross-entropy's 16-bit rows take their shapes from `python -m benchmarks.sweep --prologue
# --ahead --dtype bf16` over its current fold (book/data/sweep_prologue_log2.csv, H200, commit
# eeb62ab: the pair in log2 units, bf16 folded from its registers, 40 registers a thread at
# 64 bytes a pass where the fold before took 64). A cheaper fold made parallelism pay again:
# from 32k up the best shapes split the row over a cluster and load each pass before folding
# the one before (the optional last column, RowConfig.ahead): 95.9% of the read ceiling at 32k
# (2 blocks), 95.9% at 64k and 95.5% at 128k (8 blocks, 4 accesses a pass), 95.0% at 256k
# (8 blocks, 8 accesses), against 94.7 / 94.2 / 93.3 / 74.5% for the one-block shapes the old
# fold had wanted (at 256k those leave 1,024 blocks of 256 threads for six an SM: 1.3 waves).
# At 4k, 128 threads a row in 256-thread blocks, 2 accesses a pass: 96.0% against 95.0%; at
# 16k 4 accesses a pass, loaded ahead: 95.8% against 95.5%. At 1k (16 threads a row, 8 rows a
# block: 94.4%, the best 94.6%) and 8k (the best, 95.6%) the shapes stay. Short rows wanted
# many rows a block (book/data/sweep_prologue_short.csv, commit d9f2933, the fold before: 16
# threads a row took bf16 at 1k from 66.0% to 92.8%): a short row's block waits out the
# target's round trips after its own loads.
STREAM_TABLE = {
    16: (
        (1024, 16, 128, 1, 4),
        (4096, 128, 256, 1, 2),
        (8192, 128, 128, 1, 4),
        (16384, 128, 128, 1, 4, 1),
        (32768, 256, 256, 2, 4, 1),
        (65536, 128, 128, 8, 4, 1),
        (131072, 256, 256, 8, 4, 1),
        (262144, 256, 256, 8, 8, 1),
    ),
    32: (
        (1024, 64, 128, 1, 4),
        (4096, 128, 128, 1, 8),
        (16384, 128, 128, 1, 8),
        (65536, 128, 128, 8, 8),
        (131072, 256, 256, 8, 4),
        (262144, 256, 256, 4, 8),
    ),
}
# Where cross-entropy loads each row's target and the target's logit, by the bound of the
# STREAM_TABLE row an N takes (absent: after the reduction, by the thread that writes the loss,
# False). "split": the target before the row's loads, the logit after the fold and before the
# exchange, the order QuACK's kernel uses (`kernels.cross_entropy`). H200,
# benchmarks/runs/target_split.py (book/data/target_split.csv, 5 alternating rounds beside
# QuACK) and the suite run with "split" at every N right after it (book/data/
# cross_entropy_split_everywhere.csv), as % of the read ceiling,
# "split" against after the reduction: bf16 1k 95.06 / 94.86 against 94.51 (and 94.1 in the
# suite before), 8k 96.26 / 96.21 against 95.87 (QuACK's 96.23: ahead in 3 and 5 rounds of 5),
# 256k 95.29 / 95.24 against 94.90; fp32 8k 98.90 / 98.82 against 98.50 (16k, the same table row:
# 98.15 either way), 32k 98.77 / 98.73 against 98.63 (64k, the same row: 98.48 against 98.41).
# Elsewhere "split" lost, by up to 8.3 points (bf16 64k, 87.6%: clusters of 8 with loads ahead),
# or was within 0.15 points.
CE_TARGET_ORDER = {16: {1024: "split", 8192: "split", 262144: "split"}, 32: {16384: "split", 65536: "split"}}

# An op whose own sweep found other shapes has its own complete table (same layout),
# picked by ``row_config(..., op=...)``:
#
# The plain row reduction (op "row_sum") has no per-row epilogue that reads the row again
# (cross-entropy reads the target logit). At 16 bits it keeps the shapes it measured best
# with (`python -m benchmarks.sweep --reduce`, book/data/sweep_reduce.csv: bf16 at 256k 96.8%
# of the read ceiling against 91.1%; the same shape cost cross-entropy 52% against 91%; at 1k
# its own shape measured 95.57%, 0.05 points below the best, the same 64 threads a row in
# 256-thread blocks, and 16 threads a row 95.1% at best), and from 16k to 128k the shapes it
# shared with cross-entropy until cross-entropy's were swept over these (chapter 6 measures it
# with them). At 32 bits it shares cross-entropy's.
ROW_SUM_STREAM = {
    16: (
        (1024, 64, 128, 1, 2),
        (4096, 128, 128, 1, 4),
        (8192, 128, 128, 1, 8),
        (16384, 128, 128, 1, 8),
        (65536, 128, 128, 4, 8),
        (131072, 128, 128, 8, 8),
        (262144, 512, 512, 4, 4),
    ),
    32: STREAM_TABLE[32],
}
#: The ops with tables of their own.
KEEP_TABLES = {"softmax": SOFTMAX_KEEP, "rmsnorm": RMSNORM_KEEP}
STREAM_TABLES = {"row_sum": ROW_SUM_STREAM}
#: A row kept in registers may not give a thread more elements than this (255 registers
#: in all). A row staged in shared memory is bounded by MAX_SMEM_BYTES instead.
MAX_KEPT_ELEMS = 256


@dataclass(frozen=True)
class RowConfig:
    """How one row kernel maps a row onto threads.

    threads_per_row:  threads that share one row inside a block (power of two)
    threads_per_block: threads in a block (a multiple of 32 and of threads_per_row
                       when threads_per_row < 32)
    cluster_n:        blocks of a cluster that split one row (1 = no cluster)
    vec:              elements per access (128 bits / element width at most)
    vecs_per_thread:  accesses each thread holds per pass
    passes:           times a block walks over its part of the row
    stage:            where a kept row waits for the epilogue: "reg" (registers, as
                      fp32) or "smem" (a shared-memory tile of the block's rows, in
                      the input dtype); only ops that write rows may stage in smem
    ahead:            a streamed row (passes > 1) loads pass p + 1 before it folds
                      pass p (1), or after (0): a second register buffer of
                      vecs_per_thread accesses, so that the fold hides behind loads
    """

    threads_per_row: int
    threads_per_block: int
    cluster_n: int
    vec: int
    vecs_per_thread: int
    passes: int = 1
    stage: str = "reg"
    ahead: int = 0

    def __repr__(self) -> str:
        # The stage and ahead are shown only when they are not the default, so that a
        # configuration without them reads as it always has.
        names = [f.name for f in fields(self) if getattr(self, f.name) != f.default or f.name not in ("stage", "ahead")]
        return f"RowConfig({', '.join(f'{k}={getattr(self, k)!r}' for k in names)})"

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

    def smem_bytes(self, elem_bits: int) -> int:
        """Shared memory one block needs, an upper bound: the staged tile of
        ``(rows_per_block, cols_per_pass)`` elements (stage "smem" only), the partials
        of the block or cluster tier (at most four fp32 a slot), the cluster's
        mbarrier, and up to 128 bytes of alignment before each of the first two."""
        staged = self.rows_per_block * self.cols_per_pass * elem_bits // 8 if self.stage == "smem" else 0
        partials = self.rows_per_block * self.warps_per_row * self.cluster_n * 16
        return staged + 128 + partials + 128 + 8

    @property
    def max_tier(self) -> str:
        if self.cluster_n > 1:
            return "cluster"
        if self.warps_per_row > 1:
            return "block"
        if self.threads_per_row > 1:
            return "warp"
        return "thread"

    def check(self, n: int, elem_bits: int | None = None) -> None:
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
        if self.cluster_n > 1 and self.warps_per_row * self.cluster_n > 32 * 16:
            raise ValueError("too many partials for one cluster exchange")
        if self.cols_covered < n:
            raise ValueError(f"{self} covers {self.cols_covered} < N = {n} columns")
        if self.cluster_n * self.passes > 1 and n <= self.cols_per_pass:
            # the row is then a single column tile, whose tile mode CuTe gives stride 0: a second
            # block or pass would read the first one's columns again instead of none
            raise ValueError(f"{self} gives one block's first pass all N = {n} columns, leaving the other "
                             "blocks or passes none: use fewer accesses a pass or fewer blocks")
        if n % self.vec:
            raise ValueError(f"vec={self.vec} must divide N={n}")
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {self.stage!r}")
        if self.stage == "smem" and self.passes != 1:
            raise ValueError("stage='smem' keeps the whole row: passes must be 1")
        if self.ahead not in (0, 1):
            raise ValueError(f"ahead must be 0 or 1, got {self.ahead!r}")
        if elem_bits is not None and self.smem_bytes(elem_bits) > MAX_SMEM_BYTES:
            raise ValueError(
                f"{self} needs {self.smem_bytes(elem_bits)} bytes of shared memory per block for "
                f"{elem_bits}-bit elements > {MAX_SMEM_BYTES}; use more blocks (cluster_n) or stage='reg'")


def vector_width(n: int, elem_bits: int, row_stride: int | None = None, ptr_align: int = 16) -> int:
    """Widest access (in elements, <= 128 bits) that divides N, the row stride and the
    base pointer's alignment."""
    v = 128 // elem_bits
    while v > 1 and (n % v or (row_stride is not None and row_stride % v) or ptr_align % (v * elem_bits // 8)):
        v //= 2
    return v


def _lookup(table, elem_bits, n) -> tuple:
    """The first row of ``table`` (by element width) whose bound is >= n, bound included."""
    for entry in table[16 if elem_bits <= 16 else 32]:
        if n <= entry[0]:
            return entry
    raise ValueError(f"N = {n} is past the largest supported row ({MAX_N})")


def ce_target_order(n: int, elem_bits: int) -> bool | str:
    """Cross-entropy's target order for rows of n elements (``CE_TARGET_ORDER``), by the bound
    of the STREAM_TABLE row n takes."""
    bound = _lookup(STREAM_TABLE, elem_bits, n)[0]
    return CE_TARGET_ORDER[16 if elem_bits <= 16 else 32].get(bound, False)


def _next_pow2(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


def row_config(
    n: int,
    elem_bits: int,
    *,
    keep_row: bool,
    vec: int | None = None,
    max_tier: str = "cluster",
    stage: str | None = None,
    op: str | None = None,
) -> RowConfig:
    """Pick the configuration for a row of ``n`` elements of ``elem_bits`` bits.

    keep_row: the kernel needs the row again after reducing it (RMSNorm, softmax), so
              the whole row must fit in the registers of one block or cluster.
    max_tier: the highest tier of the reduction the kernel may use ("thread", "warp",
              "block" or "cluster"); capping it shows what each tier buys, at the
              cost of more elements per thread (or more passes).
    stage:    where a kept row waits for its epilogue, "reg" or "smem"; None takes the
              table's choice. A kept row reduction has no epilogue that reads the row
              and asks for "reg".
    op:       an op with a table of its own ("softmax" and "rmsnorm" kept, "row_sum"
              streamed) takes it; any other op (None, "cross_entropy") the shared table.
    """
    if not 1 <= n <= MAX_N:
        raise ValueError(f"N must be in [1, {MAX_N}], got {n}")
    if max_tier not in TIERS:
        raise ValueError(f"max_tier must be one of {TIERS}, got {max_tier!r}")
    vec = vec or vector_width(n, elem_bits)
    nvec = n // vec
    if stage is not None and stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    if keep_row:
        _, tpr, tpb, cluster, *table_stage = _lookup(KEEP_TABLES.get(op, KEEP_ROW_TABLE), elem_bits, n)
        stage = stage or (table_stage[0] if table_stage else "reg")
        stream_vecs = None
    else:
        _, tpr, tpb, cluster, stream_vecs, *ahead = _lookup(STREAM_TABLES.get(op, STREAM_TABLE), elem_bits, n)
        stream_vecs = max(1, stream_vecs * (128 // elem_bits) // vec)  # same bytes when vec is narrower
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
    cluster = min(cluster, _next_pow2(math.ceil(nvec / tpr)))
    if keep_row:
        per_thread = math.ceil(nvec / (tpr * cluster))
        cfg = RowConfig(tpr, tpb, cluster, vec, per_thread, 1, stage)
        if stage == "reg" and per_thread * vec > MAX_KEPT_ELEMS:
            raise ValueError(
                f"a row of {n} elements does not fit in registers with max_tier={max_tier!r} "
                f"({per_thread * vec} elements per thread > {MAX_KEPT_ELEMS}); stream it instead")
        if stage == "smem" and cfg.smem_bytes(elem_bits) > MAX_SMEM_BYTES:
            raise ValueError(
                f"a row of {n} elements does not fit in shared memory with max_tier={max_tier!r} "
                f"({cfg.smem_bytes(elem_bits)} bytes per block > {MAX_SMEM_BYTES}); stream it instead")
        return cfg
    if stage == "smem":
        raise ValueError("stage='smem' is for kept rows (keep_row=True)")
    if tpb > 512:  # 1024-thread blocks get 64 registers a thread: half the bytes in flight
        stream_vecs = max(1, stream_vecs // 2)
    per_thread = min(stream_vecs, math.ceil(nvec / (tpr * cluster)))
    passes = math.ceil(nvec / (tpr * cluster * per_thread))
    return RowConfig(tpr, tpb, cluster, vec, per_thread, passes, ahead=ahead[0] if ahead and passes > 1 else 0)


def with_overrides(cfg: RowConfig, **kw) -> RowConfig:
    return replace(cfg, **kw)


def print_table(elem_bits: int = 16, keep_row: bool = True, ns=None, op: str | None = None) -> None:
    """Print the configuration every N gets (for ``op``'s table, if it has one), as a reader
    would want to see it."""
    ns = ns or [2**k for k in range(6, 19)]
    print(f"{'N':>8} {'thr/row':>8} {'thr/blk':>8} {'cluster':>8} {'vec':>4} {'elems/thr':>10} {'passes':>7} {'tier':>8}"
          f" {'stage':>6}")
    for n in ns:
        c = row_config(n, elem_bits, keep_row=keep_row, op=op)
        print(f"{n:>8} {c.threads_per_row:>8} {c.threads_per_block:>8} {c.cluster_n:>8} {c.vec:>4}"
              f" {c.elems_per_thread:>10} {c.passes:>7} {c.max_tier:>8} {c.stage:>6}")

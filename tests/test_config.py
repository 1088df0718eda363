"""The configuration tables: readable rows, one place; every op and N gets a configuration that
covers the row; overrides are checked."""
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernels import config as C
from kernels.config import MAX_N, MAX_SMEM_BYTES, TIERS, Row, RowConfig, row_config, vector_width
from kernels.reduction import reduce_config

NS = [1, 7, 64, 1000, 1024, 4097, 8192, 16384, 32768, 65536, 131071, 131072, 262144]
KEPT_OPS = ["rmsnorm", "softmax", "layernorm", "row_reduce_kept", "softmax_bwd", "rmsnorm_bwd", "layernorm_bwd"]
STREAMED_OPS = ["cross_entropy", "row_reduce", "cross_entropy_bwd"]


@pytest.mark.parametrize("bits", [32, 16])
@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("n", NS)
def test_table_covers_every_row(n, op, bits):
    """Every table takes every N up to MAX_N (and refuses past it)."""
    with pytest.raises(ValueError, match=r"N must be in \[1, "):
        row_config(op, MAX_N + 1, bits)
    cfg = row_config(op, n, bits)
    cfg.check(n, bits)  # raises if the configuration cannot cover the row
    assert cfg.cols_covered >= n
    assert cfg.vec * bits <= 128 and n % cfg.vec == 0 and cfg.vec == vector_width(n, bits)
    if op in KEPT_OPS:
        assert cfg.passes == 1 and cfg.stage in ("reg", "smem") and cfg.elems_per_thread <= 64
    else:
        assert cfg.stage == "stream"


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("bits", [16, 32])
def test_tables_are_named_rows_in_order(op, bits):
    rows = C.table(op, bits)
    assert all(isinstance(r, Row) for r in rows)
    bounds = [r.n_max for r in rows]
    assert bounds == sorted(set(bounds)) and bounds[-1] == MAX_N
    for r in rows:
        assert r.stage in C.STAGES and r.targets in C.TARGET_ORDERS
        assert (r.vecs > 0) == (r.stage == "stream")
        assert not r.ahead or r.stage == "stream"
        assert r.groups == 1 or r.stage == "smem"


def test_an_unknown_op_raises():
    with pytest.raises(ValueError, match="no configuration table for op 'layer_norm'"):
        row_config("layer_norm", 1024, 16)


@pytest.mark.parametrize("tier", TIERS)
def test_max_tier_caps_the_tier(tier):
    cfg = row_config("row_reduce", 65536, 32, max_tier=tier)
    assert TIERS.index(cfg.max_tier) <= TIERS.index(tier)


@pytest.mark.parametrize("bits", [16, 32])
def test_threads_per_row_times_cluster_grows_with_n(bits):
    """Longer rows get more threads (a bigger cluster) so a thread's share stays small."""
    ns = (1024, 4096, 16384, 65536, 131072, 262144)
    share = [row_config("row_reduce_kept", n, bits) for n in ns]
    threads = [c.threads_per_row * c.cluster_n for c in share]
    assert threads == sorted(threads) and threads[-1] >= 4096
    assert max(c.cluster_n for c in share) > 1


def test_vector_width_respects_stride_and_alignment():
    assert vector_width(4096, 16) == 8
    assert vector_width(4096, 32) == 4
    assert vector_width(4097, 16) == 1
    assert vector_width(4096, 16, row_stride=4100) == 4
    assert vector_width(4096, 16, ptr_align=4) == 2


def test_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match="past the largest|must be in"):
        row_config("rmsnorm", MAX_N + 1, 16)
    with pytest.raises(ValueError, match="does not fit in registers"):
        row_config("rmsnorm", 262144, 16, max_tier="warp", stage="reg")
    with pytest.raises(ValueError, match="does not fit in shared memory"):
        row_config("rmsnorm", 262144, 16, max_tier="warp", stage="smem")
    with pytest.raises(ValueError, match="covers"):
        RowConfig(32, 32, 1, 8, 1).check(1024)
    for cfg in (RowConfig(128, 256, 2, 8, 2), RowConfig(128, 128, 1, 8, 2, passes=2, stage="stream")):
        with pytest.raises(ValueError, match="leaving the other"):
            cfg.check(2048)
    RowConfig(128, 128, 2, 8, 1).check(2048)  # each block of the cluster gets half the row
    RowConfig(128, 128, 2, 8, 2).check(2056)  # the second block gets the last 8 columns
    # a warp holding two rows would send its cluster half the partials they wait for (a hang)
    with pytest.raises(ValueError, match="whole warps"):
        RowConfig(16, 64, 2, 8, 1, passes=12, stage="stream", ahead=True).check(3000)
    RowConfig(32, 64, 2, 8, 1, passes=6, stage="stream", ahead=True).check(3000)
    with pytest.raises(ValueError, match="max_tier"):
        row_config("rmsnorm", 1024, 16, max_tier="grid")
    with pytest.raises(ValueError, match="in registers"):
        RowConfig(32, 32, 1, 8, 40).check(10240)


@pytest.mark.parametrize("bits", [32, 16])
@pytest.mark.parametrize("n", NS + [131000, 262143])
def test_table_stages_the_longest_kept_rows_in_shared_memory(n, bits):
    """Long kept rows wait for the epilogue where the table says (shared memory for the
    longest: 256k always, 64k and up for 16-bit), rows of 16k and less in registers; streamed
    rows and kept row reductions never stage."""
    for op in ("rmsnorm", "softmax"):
        cfg = row_config(op, n, bits)
        if n <= 16384:
            assert cfg.stage == "reg"
        if n > 131072 or (bits == 16 and n > 32768):
            assert cfg.stage == "smem"
        cfg.check(n, bits)  # the staged tile fits in shared memory
        assert cfg.smem_bytes(bits) <= MAX_SMEM_BYTES
        assert row_config(op, n, bits, stage="reg") == replace(cfg, stage="reg", groups=1)
    assert row_config("cross_entropy", n, bits).stage == "stream"
    assert reduce_config(n, torch.float32 if bits == 32 else torch.bfloat16, stream=False).stage == "reg"


def test_smem_bytes_count_the_staged_tile():
    cfg = row_config("rmsnorm", 262144, 16)
    tile = cfg.rows_per_block * cfg.cols_per_pass * 2
    assert tile == 262144 * 2 // cfg.cluster_n  # each block of the cluster stages its share
    partials = replace(cfg, stage="reg", groups=1).smem_bytes(16)
    assert partials < 4096 and cfg.smem_bytes(16) == tile + partials
    assert cfg.smem_bytes(16, stages=2) > cfg.smem_bytes(16)  # LayerNorm's second exchange


def test_settings_are_validated_and_shown_only_when_not_the_default():
    with pytest.raises(ValueError, match="stage"):
        RowConfig(256, 256, 1, 4, 4, stage="tmem").check(4096)
    with pytest.raises(ValueError, match="stage"):
        row_config("rmsnorm", 4096, 16, stage="l2")
    with pytest.raises(ValueError, match="streams its rows"):
        row_config("cross_entropy", 4096, 16, stage="smem")
    with pytest.raises(ValueError, match="passes"):
        RowConfig(256, 256, 1, 4, 4, passes=2, stage="smem").check(8192)
    with pytest.raises(ValueError, match="ahead"):
        RowConfig(256, 256, 1, 4, 4, ahead=True).check(4096)
    with pytest.raises(ValueError, match="groups"):
        RowConfig(256, 256, 1, 4, 4, groups=2).check(4096)
    with pytest.raises(ValueError, match="groups"):
        RowConfig(256, 256, 1, 4, 3, stage="smem", groups=2).check(3072)
    with pytest.raises(ValueError, match="targets"):
        RowConfig(256, 256, 1, 4, 4, stage="stream", targets="early").check(4096)
    with pytest.raises(ValueError, match="shared memory"):  # 256 KiB of fp32 in one block
        RowConfig(1024, 1024, 1, 4, 16, stage="smem").check(65536, 32)
    RowConfig(1024, 1024, 1, 4, 16, stage="smem").check(65536, 16)  # 128 KiB of bf16 fits
    assert "stage" not in repr(RowConfig(256, 256, 1, 4, 4))
    assert "stage='smem'" in repr(RowConfig(256, 256, 1, 4, 4, stage="smem"))


def test_ops_with_their_own_rows():
    """The ops' own rows differ from the shared kept table where their sweeps said so
    (benchmarks/TUNING.md); everywhere else they take the shared rows."""
    assert row_config("row_reduce", 262144, 16) != row_config("cross_entropy", 262144, 16)
    assert row_config("softmax", 32768, 16) != row_config("row_reduce_kept", 32768, 16)
    assert row_config("rmsnorm", 32768, 16).stage == "smem"
    assert row_config("row_reduce_kept", 32768, 16).stage == "reg"
    assert row_config("rmsnorm", 32768, 32) == row_config("softmax", 32768, 32)
    assert row_config("layernorm", 4096, 16) == row_config("rmsnorm", 4096, 16)
    # RMSNorm's staged rows in two commit groups, softmax's in one; forcing the stage keeps them
    assert row_config("rmsnorm", 65536, 16).groups == 2 and row_config("softmax", 65536, 16).groups == 1
    assert row_config("rmsnorm", 8192, 16, stage="smem").groups == 2
    # cross-entropy's target order, by the row an N falls in
    assert row_config("cross_entropy", 1000, 16).targets == "split"
    assert row_config("cross_entropy", 65536, 16).targets == "late"
    assert row_config("cross_entropy", 65536, 32).targets == "split"


def test_no_commit_hashes_in_kernels_and_every_tuning_pointer_resolves():
    """Tuned settings carry a one-line reason pointing into benchmarks/TUNING.md; the
    measurements themselves (and the commits they were made at) live there and in book/data."""
    root = Path(__file__).resolve().parents[1]
    hexes = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
    found = [f"{p.relative_to(root)}:{i}" for p in (root / "kernels").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if hexes.search(line)]
    assert not found, f"commit hashes in kernels/: {found}"
    headings = re.findall(r"^#+\s+(.*)$", (root / "benchmarks" / "TUNING.md").read_text(), re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
    refs = {ref for p in (root / "kernels").rglob("*.py") for ref in re.findall(r"TUNING\.md#([\w-]+)", p.read_text())}
    assert refs and refs <= anchors, f"pointers into TUNING.md without a heading there: {refs - anchors}"


# --- between the table's rows (config.ANY_N) ---------------------------------------------------

def _shape_ns():
    from benchmarks.run import shape_ns
    return shape_ns()


@pytest.mark.parametrize("op", C.ANY_N)
@pytest.mark.parametrize("bits", [16, 32])
def test_the_rule_between_rows_leaves_every_tuned_row(op, bits):
    """At each table row's n_max and every power of two the rule for any N gives the table's own
    shape: the tuned points keep what they were tuned to. An op's widths outside ANY_N keep the
    table at every N."""
    for n in sorted({r.n_max for r in C.table(op, bits)} | {1 << k for k in range(5, 19)}):
        assert row_config(op, n, bits) == C.table_row_config(op, n, bits), n
    if bits not in C.ANY_N[op]:
        for n in _shape_ns():
            head = n % (128 // bits) != 0
            assert row_config(op, n, bits, head=head) == C.table_row_config(op, n, bits, head=head)


@pytest.mark.parametrize("op", C.ANY_N)
@pytest.mark.parametrize("bits", [16, 32])
def test_between_rows_the_accesses_cover_the_row_at_least_as_well(op, bits):
    """At the shapes suite's N (odd ones and vocabularies among them), in their aligned windows:
    a configuration the template takes, within MAX_VECS, covering the row at least as well as
    the row N falls in does, and at least KEEP_COVERAGE where that row covered less and a
    neighbour does."""
    for n in _shape_ns():
        head = n % (128 // bits) != 0
        cfg, table = row_config(op, n, bits, head=head), C.table_row_config(op, n, bits, head=head)
        cfg.check(n, bits)
        window = C.WINDOW_ROWS.get(op, {}).get(bits)
        if head and window and table.stage == "reg" and cfg.cluster_n == 1 \
                and cfg.threads_per_block == max(cfg.threads_per_row, 128) and window[1][0] <= cfg.threads_per_row:
            # the window's own shape: no cluster, at most `vecs` accesses a thread, the fewest
            # threads that give that, a block of one row or of 128 threads
            assert cfg.vecs_per_thread <= window[0] < 2 * cfg.vecs_per_thread, (n, cfg)
            continue
        assert cfg.head == head and cfg.vecs_per_thread <= max(C.MAX_VECS[cfg.stage], table.vecs_per_thread)
        assert C.coverage(cfg, n) >= C.coverage(table, n) - 0.005, (n, cfg, table)
        if C.coverage(table, n) < C.KEEP_COVERAGE and bits in C.ANY_N[op]:
            assert cfg in C.neighbours(op, n, bits, head)


def test_coverage_counts_the_accesses_that_hold_the_row():
    assert C.coverage(RowConfig(256, 256, 8, 8, 2, stage="smem", head=True), 16467) == pytest.approx(2060 / 4096)
    assert C.coverage(RowConfig(128, 128, 1, 8, 4, 2, "stream"), 8192) == 1.0


def test_the_swept_points_take_what_the_sweep_measured_faster():
    """book/data/sweep_any_n.csv (the neighbours' shapes timed on the H200): at every point the
    rule's configuration was among those timed, and ran at least as fast as the table's did (to
    2 points of the ceiling), on average over 20 points faster."""
    import csv
    rows = list(csv.DictReader(open(Path(__file__).resolve().parent.parent / "book/data/sweep_any_n.csv")))
    points = {(r["op"], r["dtype"], int(r["N"])) for r in rows}
    gains = []
    for op, dtype, n in sorted(points):
        bits = 16 if dtype == "bf16" else 32
        cfg = row_config(op, n, bits, head=n % (128 // bits) != 0)
        timed = {r["variant"]: float(r["frac_of_ceiling"]) for r in rows if (r["op"], r["dtype"], int(r["N"])) == (op, dtype, n)}
        table = next(float(r["frac_of_ceiling"]) for r in rows
                     if (r["op"], r["dtype"], int(r["N"])) == (op, dtype, n) and r["picked"] == "True")
        assert repr(cfg) in timed, (op, dtype, n, cfg)
        assert timed[repr(cfg)] >= table - 0.02, (op, dtype, n, timed[repr(cfg)], table)
        gains.append(timed[repr(cfg)] - table)
    assert len(gains) >= 28 and sum(gains) / len(gains) > 0.20


def test_buffers_are_one_or_two_and_the_one_buffer_walk_fits_what_two_would_not():
    """``buffers`` is 1 or 2; a staged walk's footprint holds two slot sets, and two tiles of each
    row input (one buffer: two of the first, one of the others). The 32-bit rows of 262,144 take
    one buffer, whose three tiles fit a block's shared memory where four would not."""
    from kernels.norm_backward import LayerNormBackward, RMSNormBackward
    with pytest.raises(ValueError, match="buffers must be 1 or 2"):
        RowConfig(256, 256, 16, 4, 16, stage="smem", buffers=3).check(262144, 32)
    for op in (RMSNormBackward, LayerNormBackward):
        cfg = row_config(op.table, 262144, 32)
        assert cfg.buffers == 1 and cfg.stage == "smem" and cfg.cluster_n == 16
        slots, tiles = op.footprint(cfg)
        assert (slots, tiles) == (2 * len(op.reductions), len(op.rows) + 1)
        assert cfg.smem_bytes(32, slots, tiles) <= MAX_SMEM_BYTES < cfg.smem_bytes(32, slots, 2 * len(op.rows))
        two = row_config(op.table, 131072, 32)
        assert two.buffers == 2 and op.footprint(two) == (2 * len(op.reductions), 2 * len(op.rows))

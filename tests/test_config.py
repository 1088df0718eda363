"""The one configuration table: every N and tier gets a configuration that covers the row."""
from dataclasses import replace

import pytest
import torch

from kernels.config import MAX_N, MAX_SMEM_BYTES, TIERS, RowConfig, row_config, vector_width
from kernels.reduction import reduce_config

NS = [1, 7, 64, 1000, 1024, 4097, 8192, 16384, 32768, 65536, 131071, 131072, 262144]


@pytest.mark.parametrize("bits", [32, 16])
@pytest.mark.parametrize("keep_row", [True, False])
@pytest.mark.parametrize("n", NS)
def test_table_covers_every_row(n, bits, keep_row):
    cfg = row_config(n, bits, keep_row=keep_row)
    cfg.check(n)  # raises if the configuration cannot cover the row
    assert cfg.cols_covered >= n
    assert cfg.vec * bits <= 128 and n % cfg.vec == 0
    if keep_row:
        assert cfg.passes == 1 and cfg.elems_per_thread <= 64


@pytest.mark.parametrize("tier", TIERS)
def test_max_tier_caps_the_tier(tier):
    cfg = row_config(65536, 32, keep_row=False, max_tier=tier)
    assert TIERS.index(cfg.max_tier) <= TIERS.index(tier)


@pytest.mark.parametrize("bits", [16, 32])
def test_threads_per_row_times_cluster_grows_with_n(bits):
    """Longer rows get more threads (a bigger cluster) so a thread's share stays small."""
    ns = (1024, 4096, 16384, 65536, 131072, 262144)
    share = [row_config(n, bits, keep_row=True) for n in ns]
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
        row_config(MAX_N + 1, 16, keep_row=True)
    with pytest.raises(ValueError, match="does not fit in registers"):
        row_config(262144, 16, keep_row=True, max_tier="warp", stage="reg")
    with pytest.raises(ValueError, match="does not fit in shared memory"):
        row_config(262144, 16, keep_row=True, max_tier="warp", stage="smem")
    with pytest.raises(ValueError, match="covers"):
        RowConfig(32, 128, 1, 8, 1).check(4096)
    # one pass of one block takes the whole row: a second block (or pass) would read it again
    # (found by the GPU test of loads ahead: a loss ln 2 too large, H200, commit b93faf1)
    for cfg in (RowConfig(128, 256, 2, 8, 2), RowConfig(128, 128, 1, 8, 2, passes=2)):
        with pytest.raises(ValueError, match="leaving the other"):
            cfg.check(2048)
    RowConfig(128, 128, 2, 8, 1).check(2048)  # each block of the cluster gets half the row
    RowConfig(128, 128, 2, 8, 2).check(2056)  # the second block gets the last 8 columns
    with pytest.raises(ValueError, match="max_tier"):
        row_config(1024, 16, keep_row=True, max_tier="grid")


@pytest.mark.parametrize("bits", [32, 16])
@pytest.mark.parametrize("n", NS + [131000, 262143])
def test_table_stages_the_longest_kept_rows_in_shared_memory(n, bits):
    """Long kept rows wait for the epilogue where the table says (shared memory for the
    longest: 256k always, 64k and up for 16-bit), rows of 32k and less in registers;
    streamed rows and kept row reductions never stage."""
    cfg = row_config(n, bits, keep_row=True)
    if n <= 32768:
        assert cfg.stage == "reg"
    if n > 131072 or (bits == 16 and n > 32768):
        assert cfg.stage == "smem"
    cfg.check(n, bits)  # the staged tile fits in shared memory
    assert cfg.smem_bytes(bits) <= MAX_SMEM_BYTES
    assert row_config(n, bits, keep_row=False).stage == "reg"
    assert row_config(n, bits, keep_row=True, stage="reg") == replace(cfg, stage="reg")
    assert reduce_config(n, torch.float32 if bits == 32 else torch.bfloat16, stream=False).stage == "reg"


def test_smem_bytes_count_the_staged_tile():
    cfg = row_config(262144, 16, keep_row=True)
    tile = cfg.rows_per_block * cfg.cols_per_pass * 2
    assert tile == 262144 * 2 // cfg.cluster_n  # each block of the cluster stages its share
    partials = replace(cfg, stage="reg").smem_bytes(16)
    assert partials < 4096 and cfg.smem_bytes(16) == tile + partials


def test_stage_is_validated_and_shown_only_when_not_the_default():
    with pytest.raises(ValueError, match="stage"):
        RowConfig(256, 256, 1, 4, 4, stage="tmem").check(4096)
    with pytest.raises(ValueError, match="stage"):
        row_config(4096, 16, keep_row=True, stage="l2")
    with pytest.raises(ValueError, match="kept rows"):
        row_config(4096, 16, keep_row=False, stage="smem")
    with pytest.raises(ValueError, match="passes"):
        RowConfig(256, 256, 1, 4, 4, passes=2, stage="smem").check(8192)
    with pytest.raises(ValueError, match="shared memory"):  # 256 KiB of fp32 in one block
        RowConfig(1024, 1024, 1, 4, 16, stage="smem").check(65536, 32)
    RowConfig(1024, 1024, 1, 4, 16, stage="smem").check(65536, 16)  # 128 KiB of bf16 fits
    assert "stage" not in repr(RowConfig(256, 256, 1, 4, 4))
    assert "stage='smem'" in repr(RowConfig(256, 256, 1, 4, 4, stage="smem"))


def test_ops_with_their_own_tables():
    """The plain row sum, softmax and RMSNorm take their own tables, every other op the shared
    ones (bf16 rows of 256k: cross-entropy's shape cost the sum 5 points, the sum's shape cost
    cross-entropy 40; softmax at 32k bf16: RMSNorm's shape 92.4%, its own 97.1%; RMSNorm at 32k
    bf16: staged 97.24% against 96.76% in registers)."""
    from kernels.config import KEEP_ROW_TABLE, RMSNORM_KEEP, ROW_SUM_STREAM, SOFTMAX_KEEP, STREAM_TABLE
    for bits, dtype in ((16, torch.bfloat16), (32, torch.float32)):
        for table, others, keep, op in ((ROW_SUM_STREAM, STREAM_TABLE, False, "row_sum"),
                                        (SOFTMAX_KEEP, KEEP_ROW_TABLE, True, "softmax"),
                                        (RMSNORM_KEEP, KEEP_ROW_TABLE, True, "rmsnorm")):
            for bound, *shape in table[bits]:
                cfg = row_config(bound, bits, keep_row=keep, op=op)
                assert (cfg.threads_per_row, cfg.threads_per_block, cfg.cluster_n) == tuple(shape[:3])
                assert cfg.stage == (shape[3] if keep and len(shape) > 3 else "reg")
                shared = next(e for e in others[bits] if bound <= e[0])
                cfg = row_config(bound, bits, keep_row=keep, op=None if keep else "cross_entropy")
                assert (cfg.threads_per_row, cfg.threads_per_block, cfg.cluster_n) == shared[1:4]
        for n in (1024, 65536, 262144):
            assert reduce_config(n, dtype) == row_config(n, bits, keep_row=False, op="row_sum")
    # where they differ, on the same N
    assert row_config(262144, 16, keep_row=False, op="row_sum") != row_config(262144, 16, keep_row=False)
    assert row_config(32768, 16, keep_row=True, op="softmax") != row_config(32768, 16, keep_row=True)
    assert row_config(32768, 16, keep_row=True, op="rmsnorm").stage == "smem"
    assert row_config(32768, 16, keep_row=True).stage == "reg"  # the kept row reduction's
    assert row_config(32768, 32, keep_row=True, op="rmsnorm") == row_config(32768, 32, keep_row=True)
    assert row_config(32768, 32, keep_row=True, op="softmax") == row_config(32768, 32, keep_row=True)
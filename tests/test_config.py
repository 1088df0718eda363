"""The one configuration table: every N and tier gets a configuration that covers the row."""
import pytest

from kernels.config import MAX_N, TIERS, RowConfig, row_config, vector_width

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
        row_config(262144, 16, keep_row=True, max_tier="warp")
    with pytest.raises(ValueError, match="covers"):
        RowConfig(32, 128, 1, 8, 1).check(4096)
    with pytest.raises(ValueError, match="max_tier"):
        row_config(1024, 16, keep_row=True, max_tier="grid")

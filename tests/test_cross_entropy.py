"""Cross-entropy on the GPU against a float64 reference: dtypes, ragged N, clusters,
reductions, ignore_index, extreme logits, and out-of-range targets."""
import pytest
import torch

from kernels.cross_entropy import cross_entropy, cross_entropy_reference

from _grid import DTYPES, NS, ms_for
from _gpu import requires_gpu

pytestmark = requires_gpu


def _close(out, ref):
    torch.testing.assert_close(out.double(), ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_cross_entropy(n, dtype):
    for m in ms_for(n):
        x = (torch.randn(m, n, device="cuda") * 4).to(dtype)
        t = torch.randint(0, n, (m,), device="cuda")
        _close(cross_entropy(x, t, reduction="none"), cross_entropy_reference(x, t, reduction="none"))


@pytest.mark.parametrize("early", [False, True, "split"])
@pytest.mark.parametrize("n", [1, 1000, 1024, 4097, 65536, 262144])
def test_target_loaded_early_or_late(n, early):
    """Every place the target and its logit may be loaded (``early_target``: after the
    reduction, with the row's first loads, or split around the row), with ignored rows, and an
    out-of-range target still flagged."""
    m = 37
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    t = torch.randint(0, n, (m,), device="cuda")
    t[::5] = -100
    out = cross_entropy(x, t, reduction="none", early_target=early)
    _close(out, cross_entropy_reference(x, t, reduction="none"))
    assert (out[::5] == 0).all()
    t[3] = n
    with pytest.raises(ValueError, match="ignore_index"):
        cross_entropy(x, t, early_target=early)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [2048, 3000, 32768, 32760, 131072, 262143 - 7])
@pytest.mark.parametrize("cluster", [1, 2])
def test_loads_ahead(n, cluster, dtype):
    """``RowConfig.ahead``: pass p + 1 loaded before pass p is folded, two buffers; odd and
    even pass counts, a ragged last pass (the reused buffer refilled), rows past M, clusters."""
    from dataclasses import replace
    from kernels.config import row_config
    bits = torch.finfo(dtype).bits
    base = row_config(n, bits, keep_row=False)
    for vecs in (1, 2):
        cfg = replace(base, cluster_n=cluster, vecs_per_thread=vecs, ahead=1,
                      passes=-(-n // (base.vec * base.threads_per_row * cluster * vecs)))
        if cluster * cfg.passes > 1 and n <= cfg.cols_per_pass:  # the second block would have no columns
            with pytest.raises(ValueError, match="leaving the other"):
                cross_entropy(torch.randn(1, n, device="cuda").to(dtype), torch.zeros(1, dtype=torch.long,
                                                                                     device="cuda"), config=cfg)
            continue
        for m in (1, 37):
            x = (torch.randn(m, n, device="cuda") * 4).to(dtype)
            t = torch.randint(0, n, (m,), device="cuda")
            _close(cross_entropy(x, t, reduction="none", config=cfg), cross_entropy_reference(x, t, reduction="none"))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_dtype", [torch.int64, torch.int32])
def test_reductions_and_ignore_index(reduction, target_dtype):
    x = torch.randn(301, 32768, device="cuda").to(torch.bfloat16)
    t = torch.randint(0, 32768, (301,), device="cuda")
    t[::7] = -100
    out = cross_entropy(x, t.to(target_dtype), reduction=reduction)
    ref = cross_entropy_reference(x, t, reduction=reduction)
    _close(out, ref)
    if reduction == "none":
        assert (out[::7] == 0).all()


def test_all_rows_ignored_mean_is_nan_like_torch():
    x = torch.randn(8, 1000, device="cuda")
    t = torch.full((8,), 5, device="cuda")
    t[:] = -100
    assert torch.isnan(cross_entropy(x, t)).item()
    assert cross_entropy(x, t, reduction="sum").item() == 0.0


@pytest.mark.parametrize("n", [1000, 131072, 262144])
def test_extreme_logits(n):
    x = torch.randn(6, n, device="cuda") * 1e4
    x[1, :] = -1e4
    x[2, 5] = float("-inf")
    t = torch.randint(0, n, (6,), device="cuda")
    t[2] = 6
    _close(cross_entropy(x, t, reduction="none"), cross_entropy_reference(x, t, reduction="none"))


@pytest.mark.parametrize("n", [1000, 65536])
def test_logits_far_from_zero(n):
    """fp32 rows of 3e4 + noise: the loss is shift-invariant, so it must be as accurate as for the
    noise alone (exp2(x log2e - max log2e) rounds both products: errors near 1e-4 of the loss).
    16-bit rows at 3e4 keep almost none of the noise, so only fp32 is asked."""
    x = 3e4 + torch.randn(64, n, device="cuda") * 4
    t = torch.randint(0, n, (64,), device="cuda")
    _close(cross_entropy(x, t, reduction="none"), cross_entropy_reference(x, t, reduction="none"))


def test_out_of_range_target_raises():
    x = torch.randn(16, 1000, device="cuda")
    t = torch.randint(0, 1000, (16,), device="cuda")
    t[3] = 1000
    with pytest.raises(ValueError, match=r"\[0, 1000\)"):
        cross_entropy(x, t)
    t[3] = -5
    with pytest.raises(ValueError, match="ignore_index"):
        cross_entropy(x, t)
    t[3] = (1 << 32) + 3  # must not wrap around to the valid class 3
    with pytest.raises(ValueError, match="ignore_index"):
        cross_entropy(x, t)
    t[3] = -5
    loss = cross_entropy(x, t, reduction="none", check_target=False)
    assert torch.isnan(loss[3]) and torch.isfinite(loss[torch.arange(16, device="cuda") != 3]).all()


def test_error_flag_clear_after_a_bad_call():
    """The bad-target flag persists between calls (no memset a call): a call that raised, or an
    unchecked call with a bad target, must not make the next good checked call raise."""
    x = torch.randn(16, 1000, device="cuda")
    good = torch.randint(0, 1000, (16,), device="cuda")
    bad = good.clone()
    bad[5] = 1000
    with pytest.raises(ValueError):
        cross_entropy(x, bad)
    _close(cross_entropy(x, good, reduction="none"), cross_entropy_reference(x, good, reduction="none"))
    assert torch.isnan(cross_entropy(x, bad, reduction="none", check_target=False)[5])
    _close(cross_entropy(x, good, reduction="none"), cross_entropy_reference(x, good, reduction="none"))
    with pytest.raises(ValueError):  # and a raised flag is seen again after the clean calls
        cross_entropy(x, bad)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # another stream has its own flag
        _close(cross_entropy(x, good, reduction="none"), cross_entropy_reference(x, good, reduction="none"))
        with pytest.raises(ValueError):
            cross_entropy(x, bad)
    torch.cuda.synchronize()


def test_target_on_cpu():
    with pytest.raises(ValueError, match="device|cuda"):
        cross_entropy(torch.randn(4, 64, device="cuda"), torch.zeros(4, dtype=torch.long))

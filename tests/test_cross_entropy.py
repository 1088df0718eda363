"""Cross-entropy on the GPU against a float64 reference: dtypes, ragged N, clusters,
reductions, ignore_index, extreme logits, and out-of-range targets."""
import pytest
import torch

from kernels import BadInputError, check_errors
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


@pytest.mark.parametrize("order", ["late", "split"])
@pytest.mark.parametrize("n", [1, 1000, 1024, 4097, 65536, 262144])
def test_target_loaded_late_or_split(n, order):
    """Both places the target and its logit may be loaded (``RowConfig.targets``: after the
    reduction, or split around the row), with ignored rows, and an out-of-range target still
    reported."""
    from dataclasses import replace
    from kernels.config import row_config
    cfg = replace(row_config("cross_entropy", n, 16), targets=order)
    m = 37
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    t = torch.randint(0, n, (m,), device="cuda")
    t[::5] = -100
    out = cross_entropy(x, t, reduction="none", config=cfg)
    _close(out, cross_entropy_reference(x, t, reduction="none"))
    assert (out[::5] == 0).all()
    t[3] = n
    assert torch.isnan(cross_entropy(x, t, config=cfg))
    with pytest.raises(BadInputError, match=r"outside \[0, N\)"):
        check_errors()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [2048, 3000, 32768, 32760, 131072, 262143 - 7])
@pytest.mark.parametrize("cluster", [1, 2])
def test_loads_ahead(n, cluster, dtype):
    """``RowConfig.ahead``: pass p + 1 loaded before pass p is folded, two buffers; odd and
    even pass counts, a ragged last pass (the reused buffer refilled), rows past M, clusters."""
    from dataclasses import replace
    from kernels.config import row_config
    bits = torch.finfo(dtype).bits
    base = row_config("cross_entropy", n, bits)
    if cluster > 1:  # (a row split over a cluster takes whole warps)
        tpr = max(32, base.threads_per_row)
        base = replace(base, threads_per_row=tpr, threads_per_block=max(tpr, base.threads_per_block))
    for vecs in (1, 2):
        cfg = replace(base, cluster_n=cluster, vecs_per_thread=vecs, ahead=True,
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
@pytest.mark.parametrize("m,n", [(301, 32768), (100003, 64), (4099, 1000), (3, 262144)])
def test_reductions_and_ignore_index(reduction, target_dtype, m, n):
    """The mean and the sum, finished in the kernel's launch by its last block, against float64:
    one row to many thousand blocks, clusters, ignored rows."""
    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    t = torch.randint(0, n, (m,), device="cuda")
    t[::7] = -100
    out = cross_entropy(x, t.to(target_dtype), reduction=reduction)
    ref = cross_entropy_reference(x, t, reduction=reduction)
    if reduction == "none":
        _close(out, ref)
        assert (out[::7] == 0).all()
    else:
        assert out.shape == () and out.dtype == torch.float32
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_reduced_loss_is_the_same_bit_for_bit(reduction):
    """Whichever block finishes last, it adds the blocks' partials in the same order."""
    x = torch.randn(65537, 512, device="cuda")
    t = torch.randint(0, 512, (65537,), device="cuda")
    first = cross_entropy(x, t, reduction=reduction)
    for _ in range(20):
        assert torch.equal(cross_entropy(x, t, reduction=reduction), first)


def test_return_lse():
    x = torch.randn(129, 5000, device="cuda").to(torch.bfloat16)
    t = torch.randint(0, 5000, (129,), device="cuda")
    loss, lse = cross_entropy(x, t, reduction="none", return_lse=True)
    torch.testing.assert_close(lse.double(), torch.logsumexp(x.double(), -1), rtol=1e-5, atol=1e-5)
    _close(loss, cross_entropy_reference(x, t, reduction="none"))


def test_all_rows_ignored_mean_is_nan_like_torch():
    x = torch.randn(8, 1000, device="cuda")
    t = torch.full((8,), 5, device="cuda")
    t[:] = -100
    assert torch.isnan(cross_entropy(x, t)).item()
    assert cross_entropy(x, t, reduction="sum").item() == 0.0


def test_no_rows():
    x = torch.randn(0, 1000, device="cuda")
    t = torch.zeros(0, dtype=torch.long, device="cuda")
    assert torch.isnan(cross_entropy(x, t)) and cross_entropy(x, t, reduction="sum").item() == 0.0
    assert cross_entropy(x, t, reduction="none").shape == (0,)


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


@pytest.mark.parametrize("bad", [1000, -5, (1 << 32) + 3])
def test_out_of_range_target_is_reported_without_a_sync(bad):
    """A bad target makes its row's loss NaN (the others stay right) and is reported by the next
    call after the kernel finished, or at once by check_errors(); a 64-bit target past the int32
    range never aliases a valid class. The report clears the flag."""
    x = torch.randn(16, 1000, device="cuda")
    t = torch.randint(0, 1000, (16,), device="cuda")
    t[3] = bad
    loss = cross_entropy(x, t, reduction="none")
    keep = torch.arange(16, device="cuda") != 3
    assert torch.isnan(loss[3]) and torch.isfinite(loss[keep]).all()
    torch.cuda.synchronize()
    good = t.clone()
    good[3] = 0
    with pytest.raises(BadInputError, match="cross_entropy"):
        cross_entropy(x, good)  # the next call reports it
    _close(cross_entropy(x, good, reduction="none"), cross_entropy_reference(x, good, reduction="none"))
    check_errors()  # cleared
    assert torch.isnan(cross_entropy(x, t))
    with pytest.raises(BadInputError):
        check_errors()
    check_errors()


def test_bad_target_on_another_stream_is_reported():
    x = torch.randn(16, 1000, device="cuda")
    bad = torch.randint(0, 1000, (16,), device="cuda")
    bad[5] = 1000
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        good = torch.randint(0, 1000, (16,), device="cuda")
        _close(cross_entropy(x, good, reduction="none"), cross_entropy_reference(x, good, reduction="none"))
        cross_entropy(x, bad)
    with pytest.raises(BadInputError):
        check_errors()


def test_target_on_cpu():
    with pytest.raises(ValueError, match="device|cuda"):
        cross_entropy(torch.randn(4, 64, device="cuda"), torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_cross_entropy_backward_kernel(n, dtype):
    """CrossEntropyBackward against float64, one gradient a row and one for all, ignored rows
    zero, and in place over the logits."""
    from kernels.cross_entropy import cross_entropy_backward_out, cross_entropy_backward_reference
    for m in ms_for(n):
        x = (torch.randn(m, n, device="cuda") * 3).to(dtype)
        t = torch.randint(0, n, (m,), device="cuda")
        t[::3] = -100
        _, lse = cross_entropy(x, t, reduction="none", return_lse=True)
        for reduction in ("none", "mean"):
            dloss = torch.randn(m if reduction == "none" else (), device="cuda")
            g = _row_gradients(dloss, t, reduction)
            dx = cross_entropy_backward_out(g, x, t, lse, torch.empty_like(x))
            ref = cross_entropy_backward_reference(dloss, x, t, reduction=reduction)
            # the terms are p g and g (a row's dloss share): rounding is relative to max |g|, also
            # where they cancel to nothing (N = 1: p = 1 less the one-hot's 1)
            size = g.abs().max().item()
            torch.testing.assert_close(dx.double(), ref, rtol=2e-2 if dtype != torch.float32 else 1e-5,
                                       atol=size * (1e-2 if dtype != torch.float32 else 1e-6))
            assert (dx[::3] == 0).all()
        inplace = x.clone()
        cross_entropy_backward_out(g, inplace, t, lse, inplace)
        assert torch.equal(inplace, dx)


def _row_gradients(dloss, t, reduction):
    from kernels.cross_entropy import row_gradients
    return row_gradients(dloss, t, -100, reduction)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [7, 1000, 50257, 131072, 262144])
@pytest.mark.parametrize("smoothing, z", [(0.1, 0.0), (0.0, 1e-4), (0.2, 1e-3)])
def test_label_smoothing_and_z_loss(n, dtype, smoothing, z):
    """Forward (the row's sum reduced beside the pair) and backward against float64, every
    reduction, ignored rows, through autograd too."""
    from kernels.cross_entropy import cross_entropy_backward_out, cross_entropy_backward_reference
    m = 33
    x = (torch.randn(m, n, device="cuda") * 3).to(dtype)
    t = torch.randint(0, n, (m,), device="cuda")
    t[::4] = -100
    kw = dict(label_smoothing=smoothing, lse_square_scale=z)
    for reduction in ("none", "mean", "sum"):
        out = cross_entropy(x, t, reduction=reduction, **kw)
        ref = cross_entropy_reference(x, t, -100, reduction, smoothing, z)
        torch.testing.assert_close(out.double(), ref, rtol=2e-5, atol=2e-5)
    _, lse = cross_entropy(x, t, reduction="none", return_lse=True, **kw)
    dloss = torch.randn(m, device="cuda")
    dx = cross_entropy_backward_out(dloss, x, t, lse, torch.empty_like(x), label_smoothing=smoothing,
                                    lse_square_scale=z)
    ref = cross_entropy_backward_reference(dloss, x, t, -100, "none", smoothing, z)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(dx.double(), ref, rtol=tol, atol=ref.abs().max().item() * tol)
    import kernels
    xg = x.clone().requires_grad_()
    kernels.cross_entropy(xg, t, **kw).backward()
    want = cross_entropy_backward_reference(torch.tensor(1.0, device="cuda"), x, t, -100, "mean", smoothing, z)
    torch.testing.assert_close(xg.grad.double(), want, rtol=tol, atol=want.abs().max().item() * tol)

"""LayerNorm on the GPU against float64: every dtype, ragged N, every strategy, M of 1, odd and
large, with and without weight and bias, the per-row mean and rstd, and rows far from zero."""
import pytest
import torch

from kernels.config import row_config
from kernels.layernorm import layernorm, layernorm_reference

from _grid import DTYPES, NS, STAGES, assert_close, ms_for
from _gpu import requires_gpu

pytestmark = requires_gpu


def _params(n, dtype):
    return torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_layernorm(n, dtype):
    w, b = _params(n, dtype)
    for m in ms_for(n):
        x = (torch.randn(m, n, device="cuda") * 2 + 0.5).to(dtype)
        assert_close(layernorm(x, w, b), layernorm_reference(x, w, b), dtype, f"M={m}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,stage", STAGES)
def test_each_stage(n, stage, dtype):
    cfg = row_config("layernorm", n, torch.finfo(dtype).bits, stage=stage)
    w, b = _params(n, dtype)
    for m in ms_for(n):
        x = torch.randn(m, n, device="cuda").to(dtype)
        assert_close(layernorm(x, w, b, config=cfg), layernorm_reference(x, w, b), dtype, f"M={m}")
    assert_close(layernorm(x, None, None, config=cfg), layernorm_reference(x), dtype, "no weight, no bias")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [7, 1000, 4096, 65536, 131071, 262144])
def test_stats_and_optional_params(n, dtype):
    """return_stats: each row's mean and rstd (fp32, leading shape), as torch's native layer norm
    returns them; weight alone and bias alone."""
    w, b = _params(n, dtype)
    x = (torch.randn(3, 5, n, device="cuda") * 3 - 1).to(dtype)
    y, mean, rstd = layernorm(x, w, b, 1e-5, return_stats=True)
    assert mean.shape == rstd.shape == (3, 5) and mean.dtype == rstd.dtype == torch.float32
    x64 = x.double()
    torch.testing.assert_close(mean.double(), x64.mean(-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rstd.double(), torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5), rtol=1e-4, atol=0)
    assert_close(y, layernorm_reference(x, w, b), dtype)
    assert_close(layernorm(x, w), layernorm_reference(x, w), dtype, "weight only")
    assert_close(layernorm(x, bias=b), layernorm_reference(x, bias=b), dtype, "bias only")


@pytest.mark.parametrize("n", [1000, 65536])
def test_rows_far_from_zero(n):
    """The variance is reduced about the mean, not as E[x^2] - E[x]^2: on fp32 rows of 1e3 + noise
    ours is as accurate as torch's fp32 layer_norm, where the subtraction of squares (computed
    here too, in fp32) loses the noise to cancellation. (No fp32 algorithm matches float64 here:
    the mean itself rounds to fp32, half an ulp of 1e3, 3e-5.)"""
    x = 1e3 + torch.randn(64, n, device="cuda")
    want = layernorm_reference(x)
    ours = (layernorm(x).double() - want).abs().max().item()
    torch_fp32 = (torch.nn.functional.layer_norm(x, (n,)).double() - want).abs().max().item()
    mean = x.mean(-1, keepdim=True)
    naive = (x - mean) * torch.rsqrt((x * x).mean(-1, keepdim=True) - mean * mean + 1e-5)
    naive_err = (naive.double() - want).abs().max().item()
    assert ours <= 2 * torch_fp32 + 1e-5, (ours, torch_fp32)
    assert naive_err > 20 * ours, (naive_err, ours)  # the test tells the two algorithms apart


@pytest.mark.parametrize("n", [10001, 131071, 262143])
def test_large_values_do_not_overflow_the_merge(n):
    """Rows of 1e12 and 0 (fp32, N whose accesses hold padding, so counts are merged at run time):
    the merge's squared difference of cross products, (n/2)^2 * 1e12 and more, passes fp32's range
    if squared before it is divided; the variance must stay finite and right (y = -1 or +1)."""
    x = torch.zeros(4, n, device="cuda")
    x[:, n // 2:] = 1e12
    y, mean, rstd = layernorm(x, return_stats=True)
    assert torch.isfinite(rstd).all() and (rstd > 0).all(), rstd
    torch.testing.assert_close(y.double(), layernorm_reference(x), rtol=1e-4, atol=1e-4)


def test_constant_row_and_eps():
    x = torch.full((4, 4096), 3.0, device="cuda")
    torch.testing.assert_close(layernorm(x, eps=1e-2), torch.zeros_like(x))
    x = torch.randn(9, 2048, device="cuda")
    assert_close(layernorm(x, eps=0.5), layernorm_reference(x, eps=0.5), torch.float32)


def test_matches_torch_layer_norm_module():
    ln = torch.nn.LayerNorm(4096, device="cuda")
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    x = torch.randn(33, 4096, device="cuda")
    torch.testing.assert_close(layernorm(x, ln.weight.detach(), ln.bias.detach()), ln(x).detach(), rtol=1e-4, atol=1e-4)

"""RMSNorm on the GPU against a float64 reference, every dtype, ragged N and cluster size."""
import pytest
import torch

from kernels.config import row_config
from kernels.rmsnorm import rmsnorm, rmsnorm_reference

from _grid import DTYPES, NS, STAGES, assert_close, ms_for
from _gpu import requires_gpu

pytestmark = requires_gpu


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_rmsnorm(n, dtype):
    w = torch.randn(n, device="cuda").to(dtype)
    for m in ms_for(n):
        x = torch.randn(m, n, device="cuda").to(dtype)
        assert_close(rmsnorm(x, w, 1e-6), rmsnorm_reference(x, w, 1e-6), dtype, f"M={m}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,stage", STAGES)
def test_each_stage(n, stage, dtype):
    cfg = row_config("rmsnorm", n, torch.finfo(dtype).bits, stage=stage)
    w = torch.randn(n, device="cuda").to(dtype)
    for m in ms_for(n):
        x = torch.randn(m, n, device="cuda").to(dtype)
        assert_close(rmsnorm(x, w, 1e-6, config=cfg), rmsnorm_reference(x, w, 1e-6), dtype, f"M={m}")
    assert_close(rmsnorm(x, None, 1e-6, config=cfg), rmsnorm_reference(x, None, 1e-6), dtype, "no weight")


@pytest.mark.parametrize("dtype", DTYPES)
def test_no_weight_leading_dims_and_eps(dtype):
    x = torch.randn(2, 3, 4096, device="cuda").to(dtype)
    assert_close(rmsnorm(x, None, 1e-2), rmsnorm_reference(x, None, 1e-2), dtype)


def test_extreme_values():
    x = torch.randn(9, 8192, device="cuda") * 1e4
    x[2] = 0.0  # a zero row: y = 0 * rsqrt(eps), finite
    assert_close(rmsnorm(x), rmsnorm_reference(x), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1000, 8192, 65536, 262144])
def test_rstd_per_row(n, dtype):
    """rmsnorm_out's optional per-row output: 1 / sqrt(mean(x^2) + eps), fp32, against float64."""
    from kernels.rmsnorm import rmsnorm_out
    x = torch.randn(37, n, device="cuda").to(dtype)
    w = torch.randn(n, device="cuda").to(dtype)
    out, rstd = torch.empty_like(x), torch.empty(37, device="cuda")
    rmsnorm_out(x, w, out, 1e-6, rstd=rstd)
    assert_close(out, rmsnorm_reference(x, w, 1e-6), dtype)
    ref = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), ref, rtol=1e-5, atol=0)


def test_weight_on_other_device_or_wrong_shape():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(ValueError, match="device|cuda"):
        rmsnorm(x, torch.randn(64))
    with pytest.raises(ValueError, match="shape"):
        rmsnorm(x, torch.randn(65, device="cuda"))

"""Softmax on the GPU against a float64 reference, with -inf entries and huge logits."""
import pytest
import torch

from kernels.config import row_config
from kernels.softmax import softmax, softmax_reference

from _grid import DTYPES, NS, STAGES, assert_close, ms_for
from _gpu import requires_gpu

pytestmark = requires_gpu


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_softmax(n, dtype):
    for m in ms_for(n):
        x = (torch.randn(m, n, device="cuda") * 3).to(dtype)
        assert_close(softmax(x), softmax_reference(x), dtype, f"M={m}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,stage", STAGES)
def test_each_stage(n, stage, dtype):
    cfg = row_config("softmax", n, torch.finfo(dtype).bits, stage=stage)
    for m in ms_for(n):
        x = (torch.randn(m, n, device="cuda") * 3).to(dtype)
        assert_close(softmax(x, config=cfg), softmax_reference(x), dtype, f"M={m}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1000, 65536, 131000, 262144])
def test_extreme_values(n, dtype):
    x = torch.randn(5, n, device="cuda")
    x[0] *= 1e4  # huge logits: max subtraction keeps exp finite
    x[1, ::3] = float("-inf")  # masked entries get probability 0
    x[2, : n - 1] = float("-inf")  # one survivor gets probability 1
    x = x.to(dtype) if dtype != torch.float16 else x.clamp(-6e4, 6e4).to(dtype)
    y = softmax(x)
    assert_close(y, softmax_reference(x), dtype)
    assert (y[1, ::3] == 0).all() and y[2, -1].item() == 1.0


@pytest.mark.parametrize("n", [1000, 65536])
def test_logits_far_from_zero(n):
    """fp32 rows of 3e4 + noise: softmax is shift-invariant, so the result must be as accurate as
    for the noise alone. Computing exp2(x log2e - max log2e) rounds both products (errors of 2^-9
    in the exponent at 3e4): relative errors near 1e-3, against a tolerance of 2e-5. (16-bit rows
    cannot show it: at 3e4 bf16 and fp16 round the noise away, and their tolerance is looser than
    the error; the H200 run of 2026-11-29 caught it once in chapter 8, on huge fp32 logits.)"""
    x = 3e4 + torch.randn(64, n, device="cuda") * 3
    assert_close(softmax(x), softmax_reference(x), torch.float32)


def test_all_masked_row_is_nan_like_torch():
    x = torch.full((2, 4096), float("-inf"), device="cuda")
    x[1] = 0
    y = softmax(x)
    assert torch.isnan(y[0]).all() and torch.isnan(torch.softmax(x, -1)[0]).all()
    assert torch.allclose(y[1], torch.full_like(y[1], 1 / 4096))


def test_leading_dims():
    x = torch.randn(2, 3, 5, 1000, device="cuda")
    assert_close(softmax(x), softmax_reference(x), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_softmax_backward_kernel(n, dtype):
    """SoftmaxBackward against float64: dx = y (dy - sum(dy y)), both rows kept (registers or
    two staged tiles)."""
    from kernels.softmax import softmax_backward_out, softmax_backward_reference
    for m in ms_for(n):
        y = torch.softmax(torch.randn(m, n, device="cuda") * 2, -1).to(dtype)
        dy = torch.randn(m, n, device="cuda").to(dtype)
        dx = softmax_backward_out(dy, y, torch.empty_like(y))
        ref = softmax_backward_reference(dy, y)
        # rounding is relative to the terms y dy and y sum(dy y), whose difference dx may cancel
        y64, dy64 = y.double(), dy.double()
        scale = (y64 * (dy64.abs() + (dy64 * y64).sum(-1, keepdim=True).abs())).amax(-1, keepdim=True)
        scale = scale.clamp_min(1e-30)
        if dtype == torch.float16:  # below 2^-14 fp16 is subnormal: its step is 2^-24 absolute
            ref = ref.to(dtype).double()
            err = (dx.double() - ref).abs()
            assert (err <= 2e-3 * ref.abs() + 2e-3 * scale + 2 ** -24).all(), f"M={m}: {err.max().item()}"
            continue
        assert_close(dx / scale.to(dx.device), ref / scale, dtype, f"M={m}")

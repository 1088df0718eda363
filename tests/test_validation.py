"""Bad input gets a clear Python error before any launch. These run without a GPU:
every check on dtype, shape and layout happens before the device check."""
import pytest
import torch

from kernels import cross_entropy, layernorm, reduce_rows, rmsnorm, softmax
from kernels.config import MAX_N


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax, layernorm])
def test_cpu_tensor(fn):
    with pytest.raises(ValueError, match="CUDA"):
        fn(torch.randn(4, 64))


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax, layernorm])
@pytest.mark.parametrize("dtype", [torch.int32, torch.float64, torch.int64])
def test_wrong_dtype(fn, dtype):
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        fn(torch.zeros(4, 64, dtype=dtype))


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax, layernorm])
def test_non_contiguous_rows(fn):
    with pytest.raises(ValueError, match="contiguous"):
        fn(torch.randn(64, 4).t())


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax, layernorm])
def test_n_past_maximum(fn):
    with pytest.raises(ValueError, match="maximum"):
        fn(torch.empty(1, MAX_N + 1))


def test_empty_row_rejected():
    with pytest.raises(ValueError, match="empty"):
        softmax(torch.empty(4, 0))


def test_rmsnorm_weight_checks():
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="shape"):
        rmsnorm(x, torch.randn(32))
    with pytest.raises(TypeError, match="dtype"):
        rmsnorm(x, torch.randn(64, dtype=torch.bfloat16))


def test_layernorm_weight_and_bias_checks():
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="bias must have shape"):
        layernorm(x, torch.randn(64), torch.randn(63))
    with pytest.raises(TypeError, match="dtype"):
        layernorm(x, None, torch.randn(64, dtype=torch.float16))
    with pytest.raises(ValueError, match="contiguous"):
        layernorm(x, torch.randn(128)[::2])


def test_rmsnorm_out_checks():
    from kernels.rmsnorm import rmsnorm_out
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="out must have"):
        rmsnorm_out(x, None, torch.empty(4, 32))
    with pytest.raises(ValueError, match="rstd must have shape"):
        rmsnorm_out(x, None, torch.empty(4, 64), rstd=torch.empty(5))
    with pytest.raises(TypeError, match="rstd must be float32"):
        rmsnorm_out(x, None, torch.empty(4, 64), rstd=torch.empty(4, dtype=torch.float16))


def test_softmax_dim():
    with pytest.raises(ValueError, match="last dim"):
        softmax(torch.randn(4, 64), dim=0)


def test_cross_entropy_checks():
    x = torch.randn(4, 64)
    with pytest.raises(TypeError, match="int64 or int32"):
        cross_entropy(x, torch.zeros(4))
    with pytest.raises(ValueError, match="shape"):
        cross_entropy(x, torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy(x, torch.zeros(4, dtype=torch.long), reduction="avg")
    with pytest.raises(ValueError, match="2-D"):
        cross_entropy(torch.randn(2, 4, 64), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="CUDA"):
        cross_entropy(x, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="ignore_index"):
        cross_entropy(x, torch.zeros(4, dtype=torch.long), ignore_index=2**40)
    with pytest.raises(ValueError, match="label_smoothing"):
        cross_entropy(x, torch.zeros(4, dtype=torch.long), label_smoothing=-0.1)

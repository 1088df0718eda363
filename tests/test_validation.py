"""Bad input gets a clear Python error before any launch. These run without a GPU:
every check on dtype, shape and layout happens before the device check."""
import pytest
import torch

from kernels import cross_entropy, reduce_rows, rmsnorm, softmax
from kernels.config import MAX_N


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax])
def test_cpu_tensor(fn):
    with pytest.raises(ValueError, match="CUDA"):
        fn(torch.randn(4, 64))


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax])
@pytest.mark.parametrize("dtype", [torch.int32, torch.float64, torch.int64])
def test_wrong_dtype(fn, dtype):
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        fn(torch.zeros(4, 64, dtype=dtype))


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax])
def test_non_contiguous_rows(fn):
    with pytest.raises(ValueError, match="contiguous"):
        fn(torch.randn(64, 4).t())


@pytest.mark.parametrize("fn", [reduce_rows, rmsnorm, softmax])
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

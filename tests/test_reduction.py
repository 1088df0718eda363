"""reduce_rows on the GPU against a float64 reference, every tier and cluster size."""
import pytest
import torch

from benchmarks.sanitize import PROBES, probe
from kernels.reduction import reduce_config, reduce_rows, reduce_rows_reference

from _grid import DTYPES, NS, ms_for
from _gpu import requires_gpu

pytestmark = requires_gpu


def _check(x, op, **kw):
    out = reduce_rows(x, op, **kw)
    ref = reduce_rows_reference(x, op)
    # fp32 accumulation over N terms of size ~1: error grows like sqrt(N) * 2^-24
    scale = x.double().abs().sum(-1) if op == "sum" else torch.ones_like(ref)
    err = (out.double() - ref).abs()
    assert (err <= 1e-6 * scale + 1e-6).all(), f"max err {err.max().item():.3e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_full_kernel(op, n, dtype):
    for m in ms_for(n):
        _check(torch.randn(m, n, device="cuda").to(dtype), op)


@pytest.mark.parametrize("tier", ["thread", "warp", "block", "cluster"])
@pytest.mark.parametrize("n", [1, 1000, 4097, 65536, 131071, 262144])
@pytest.mark.parametrize("stream", [False, True])
def test_each_tier(tier, n, stream):
    try:
        reduce_config(n, torch.float32, max_tier=tier, stream=stream)
    except ValueError:  # a row this long does not fit in this tier's registers: a clear error
        with pytest.raises(ValueError, match="does not fit"):
            reduce_rows(torch.randn(3, n, device="cuda"), max_tier=tier, stream=stream)
        return
    _check(torch.randn(37, n, device="cuda"), "sum", max_tier=tier, stream=stream)


def test_leading_dims_and_strided_rows():
    x = torch.randn(3, 5, 7, 1000, device="cuda")
    _check(x, "sum")
    big = torch.randn(64, 4096 + 8, device="cuda")
    _check(big[:, :4096], "max")  # rows 4104 apart: stride not a multiple of 16 elements


def test_extreme_values():
    x = torch.randn(17, 5000, device="cuda") * 1e4
    x[3, 17] = float("inf")
    out = reduce_rows(x, "max")
    assert out[3].item() == float("inf")
    _check(x[torch.arange(17, device="cuda") != 3], "sum")


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="contiguous"):
        reduce_rows(torch.randn(8, 64, device="cuda").t())
    with pytest.raises(ValueError, match="op must be"):
        reduce_rows(torch.randn(8, 64, device="cuda"), "mean")


@pytest.mark.parametrize("cluster, clusters, smem", PROBES)
def test_the_sanitizers_probe_is_right_without_the_tool(cluster, clusters, smem):
    """``benchmarks.sanitize --probe``: under synccheck 40 clusters of 16 blocks of 8 KB stop with
    an illegal address; without the tool every block gets its cluster's sum (the exchange is right)."""
    assert probe(cluster, clusters, smem)

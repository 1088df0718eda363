"""Mamba-2 SSD forward (``kernels.mamba2.mamba_chunk_scan_combined``, cuTile) against float64.

On the GPU: chunk 64/128/256 x groups 1/8/h x head dim 64/128 x bf16/fp32, every implementation
("single", a prep launch and one loop kernel; "fused", three kernels; "staged", five), against ``ssd_reference`` in float64: relative error
||out - ref|| / ||ref|| at most 1e-2 (bf16) or 2e-3 (fp32), for the output and the final states,
and no more than twice that of mamba_ssm's Triton kernels on the same inputs. Then every optional
input on and off, and lengths that are not a multiple of the chunk.

Without a GPU, or without cuTile and its compiler (``kernels.mamba2.tile_env.have_tile``), those
tests skip and say why. The bad-input tests run anywhere: the API validates before it imports
cuda.tile, checking shapes first, then dtypes, then devices, so that on a machine without a GPU
CPU tensors reach the shape and dtype checks.
"""
import math
import zlib

import pytest
import torch

import kernels.mamba2

from _gpu import HAS_GPU, requires_gpu
from benchmarks.mamba2 import make_inputs, reference, rel_err  # reference: float64, chunk 64
from kernels.mamba2.tile_env import have_tile

H = 16  # heads: g = 8 needs h divisible by 8, and g = h is the ungrouped case
TOL = {torch.bfloat16: 1e-2, torch.float32: 2e-3}  # relative error (Frobenius) against float64
IMPLS = ["single", "fused", "staged"]
DTYPES = [pytest.param(torch.bfloat16, id="bf16"), pytest.param(torch.float32, id="fp32")]

HAVE_API = hasattr(kernels.mamba2, "mamba_chunk_scan_combined")
TILE_OK, TILE_WHY = have_tile()

needs_api = pytest.mark.skipif(not HAVE_API, reason="kernels.mamba2 exports no mamba_chunk_scan_combined yet (issue 5)")
# Why the launching tests cannot run here, the first missing piece named: a GPU, the API, cuTile.
NO_LAUNCH = next((why for missing, why in [
    (not HAS_GPU, requires_gpu.kwargs["reason"]),
    (not HAVE_API, needs_api.kwargs["reason"]),
    (not TILE_OK, f"cuTile is not usable here: {TILE_WHY}"),
] if missing), None)


def gpu_test(fn):
    """Launches cuTile kernels: needs a GPU, the API and cuTile with its compiler."""
    return pytest.mark.gpu(pytest.mark.skipif(NO_LAUNCH is not None, reason=NO_LAUNCH or "")(fn))


def ssd(*args, **kw):
    from kernels.mamba2 import mamba_chunk_scan_combined

    return mamba_chunk_scan_combined(*args, **kw)


def seed(*key) -> int:
    return zlib.crc32(repr(key).encode())


def check(out, state, ref, dtype, shape, what=""):
    """out in x's dtype and shape, final states fp32 (b, h, p, n), both within TOL of float64."""
    b, L, h, p, n = shape
    assert out.dtype == dtype and out.shape == (b, L, h, p), what
    assert state.dtype == torch.float32 and state.shape == (b, h, p, n), what
    assert torch.isfinite(out).all() and torch.isfinite(state).all(), what
    err, err_state = rel_err(out, ref[0]), rel_err(state, ref[1])
    assert err <= TOL[dtype], f"{what}: output rel err {err:.2e} > {TOL[dtype]:.0e}"
    assert err_state <= TOL[dtype], f"{what}: final state rel err {err_state:.2e} > {TOL[dtype]:.0e}"
    return err, err_state


# ----------------------------------------------------------------------------- the grid

GRID = [pytest.mark.parametrize("impl", IMPLS), pytest.mark.parametrize("dtype", DTYPES),
        pytest.mark.parametrize("p, n", [(64, 128), (128, 64)]), pytest.mark.parametrize("g", [1, 8, H]),
        pytest.mark.parametrize("chunk", [64, 128, 256])]


def grid(fn):
    for mark in GRID:
        fn = mark(fn)
    return gpu_test(fn)


def grid_inputs(chunk, g, p, n, dtype, L=512):
    """b = 2, every optional input on (D, initial states, dt_bias, softplus), as a Mamba-2 layer."""
    return make_inputs(2, L, H, p, n, g, dtype, seed=seed(chunk, g, p, n, dtype, L))


@grid
def test_matches_reference(chunk, g, p, n, dtype, impl):
    args, kw = grid_inputs(chunk, g, p, n, dtype)
    out, state = ssd(*args, chunk, **kw, return_final_states=True, impl=impl)
    check(out, state, reference(args, kw), dtype, (2, 512, H, p, n), f"{impl} chunk={chunk} g={g} p={p}")


_triton_errors = {}


def triton_errors(chunk, g, p, n, dtype):
    """mamba_ssm's Triton errors (output, final states) on grid_inputs(...), once per grid point."""
    key = (chunk, g, p, n, dtype)
    if key not in _triton_errors:
        try:
            from benchmarks.peers_mamba2 import mamba_ssm_triton

            triton = mamba_ssm_triton()
        except ImportError as e:
            pytest.skip(f"mamba_ssm's Triton kernels do not import here ({e}): no error to compare with")
        args, kw = grid_inputs(chunk, g, p, n, dtype)
        ref = reference(args, kw)
        out, state = triton(*args, chunk, D=kw["D"], dt_bias=kw["dt_bias"], initial_states=kw["initial_states"],
                            dt_softplus=kw["dt_softplus"], return_final_states=True)
        _triton_errors[key] = rel_err(out, ref[0]), rel_err(state, ref[1])
    return _triton_errors[key]


@grid
def test_no_worse_than_triton(chunk, g, p, n, dtype, impl):
    """At most twice the error of mamba_ssm's Triton kernels (plus 1e-6, for errors near zero)."""
    t_err, t_err_state = triton_errors(chunk, g, p, n, dtype)
    args, kw = grid_inputs(chunk, g, p, n, dtype)
    ref = reference(args, kw)
    out, state = ssd(*args, chunk, **kw, return_final_states=True, impl=impl)
    err, err_state = rel_err(out, ref[0]), rel_err(state, ref[1])
    assert err <= 2 * t_err + 1e-6, f"output rel err {err:.2e}, Triton's {t_err:.2e}"
    assert err_state <= 2 * t_err_state + 1e-6, f"final state rel err {err_state:.2e}, Triton's {t_err_state:.2e}"


# ----------------------------------------------------------------------------- optional inputs

FLAGS = ("D", "initial_states", "dt_bias", "dt_softplus")


@gpu_test
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("flags", range(16),
                         ids=lambda f: "-".join(k for i, k in enumerate(FLAGS) if f >> i & 1) or "none")
@pytest.mark.parametrize("dtype", DTYPES)
def test_optional_inputs(dtype, flags, impl):
    """D, initial_states, dt_bias and dt_softplus each on or off (every combination)."""
    opts = {k: bool(flags >> i & 1) for i, k in enumerate(FLAGS)}
    args, kw = make_inputs(2, 256, H, 64, 64, 2, dtype, seed=seed(flags, dtype), **opts)
    assert all((kw[k] is not None) == opts[k] for k in ("D", "initial_states", "dt_bias"))
    out, state = ssd(*args, 64, **kw, return_final_states=True, impl=impl)
    check(out, state, reference(args, kw), dtype, (2, 256, H, 64, 64), f"{impl} {opts}")


@gpu_test
@pytest.mark.parametrize("segments", [2, 3, 7])
@pytest.mark.parametrize("L", [700, 1024])
def test_one_kernel_pass_in_segments(L, segments):
    """The one-kernel pass cut into segments (forced here; ``scan_segments`` picks them for few
    long sequences), with every optional input and a partial last block and segment."""
    from dataclasses import replace
    from kernels.mamba2 import ssd as ssd_module
    cfg = replace(ssd_module.DEFAULT, segments=segments)
    args, kw = make_inputs(2, L, H, 64, 64, 2, torch.bfloat16, seed=seed(L, segments), D=True, initial_states=True,
                           dt_bias=True, dt_softplus=True)
    launches = ssd_module.plan(*args, 64, **kw, impl="single", sms=ssd_module.sm_count(args[0].device), cfg=cfg)[0]
    assert [name for name, _, _ in launches] == ["prep", "segment_state", "state_passing", "scan"]
    nblocks = math.ceil(L / 64)
    seg_len = math.ceil(nblocks / segments)  # L = 700, 7 segments asked: 11 blocks in 6 segments of 2
    assert launches[-1][1][2] == math.ceil(nblocks / seg_len)  # the scan's grid: one block row per segment
    out, state = ssd(*args, 64, **kw, return_final_states=True, impl="single", config=cfg)
    check(out, state, reference(args, kw), torch.bfloat16, (2, L, H, 64, 64), f"L={L} segments={segments}")


@gpu_test
@pytest.mark.parametrize("impl", IMPLS)
def test_final_states_only_when_asked(impl):
    args, kw = make_inputs(2, 128, H, 64, 64, 1, torch.bfloat16, seed=3)
    out = ssd(*args, 64, **kw, impl=impl)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 128, H, 64)
    both = ssd(*args, 64, **kw, return_final_states=True, impl=impl)
    assert isinstance(both, tuple) and len(both) == 2
    torch.testing.assert_close(both[0], out)  # the same output either way


@gpu_test
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("L", [100, 300])
@pytest.mark.parametrize("chunk", [64, 128, 256])
def test_length_not_a_multiple_of_the_chunk(chunk, L, impl):
    """The last chunk is partial (L = 100 < chunk 128 and 256: a single partial chunk)."""
    args, kw = make_inputs(2, L, H, 64, 128, 2, torch.float32, seed=seed(chunk, L))
    out, state = ssd(*args, chunk, **kw, return_final_states=True, impl=impl)
    check(out, state, reference(args, kw), torch.float32, (2, L, H, 64, 128), f"{impl} chunk={chunk} L={L}")


# ----------------------------------------------------------------------------- bad input

DEV = "cuda" if HAS_GPU else "cpu"


def good_inputs(device=DEV):
    """Valid shapes and dtypes (b=2, L=128, h=H, p=64, n=128, g=2), on ``device``."""
    return make_inputs(2, 128, H, 64, 128, 2, torch.bfloat16, seed=5, device=device)


def _arg(i, fn):
    return lambda a, k: a.__setitem__(i, fn(a[i]))


def _kw(name, fn):
    return lambda a, k: k.__setitem__(name, fn(k[name]))


@needs_api
@pytest.mark.parametrize("change, chunk, match", [
    (_arg(1, lambda dt: dt[:, :, :3]), 64, r"\bdt\b"),
    (_arg(4, lambda C: C[..., :32]), 64, r"\bC\b"),
    (_arg(3, lambda B: B[:, :64]), 64, r"\bB\b"),
    (lambda a, k: [_arg(i, lambda t: t[:, :, :1].expand(-1, -1, 3, -1))(a, k) for i in (3, 4)], 64, "divide"),
    (_kw("initial_states", lambda s: s.transpose(2, 3)), 64, "initial_states"),
    (_kw("D", lambda d: d[:-1]), 64, r"\bD\b"),
    (_kw("dt_bias", lambda d: d[None]), 64, "dt_bias"),
    (lambda a, k: None, 0, "chunk_size"),
    (_arg(0, lambda x: x.double()), 64, r"(?i)dtype|bf16|fp32"),
    (_arg(0, lambda x: x.to(torch.int32)), 64, r"(?i)dtype|bf16|fp32"),
], ids=["dt-shape", "C-shape", "B-length", "groups", "initial_states", "D", "dt_bias", "chunk0",
        "x-float64", "x-int32"])
def test_bad_input_raises(change, chunk, match):
    args, kw = good_inputs()
    change(args, kw)
    with pytest.raises((ValueError, TypeError), match=match):
        ssd(*args, chunk, **kw)


@needs_api
def test_unknown_impl_raises():
    args, kw = good_inputs()
    with pytest.raises(ValueError, match="impl"):
        ssd(*args, 64, **kw, impl="fastest")


@needs_api
def test_cpu_tensors_raise():
    args, kw = good_inputs("cpu")
    with pytest.raises((ValueError, TypeError), match="(?i)cuda|device"):
        ssd(*args, 64, **kw)


@needs_api
@pytest.mark.gpu
def test_mixed_devices_raise():
    args, kw = good_inputs("cuda")
    kw["initial_states"] = kw["initial_states"].cpu()
    with pytest.raises((ValueError, TypeError), match="(?i)cuda|device"):
        ssd(*args, 64, **kw)

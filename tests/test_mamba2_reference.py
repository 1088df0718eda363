"""The chunked SSD reference against the step-by-step recurrence (float64, CPU), and the byte count."""
import itertools
import zlib

import pytest
import torch

from kernels.mamba2 import ssd_bytes_and_flops, ssd_reference, ssd_sequential
from kernels.mamba2.reference import bmm_chunk, chunk_cumsum, chunk_state

H, P, N = 4, 8, 16
FLAGS = ("D", "initial_states", "dt_bias", "dt_softplus", "return_final_states")


def make_inputs(seed, b=2, L=32, h=H, p=P, n=N, g=1, dtype=torch.float64, D=False, initial_states=False,
                dt_bias=False, dt_softplus=False):
    """Random inputs in Mamba-2's ranges: A < 0, dt > 0 (pre-softplus dt of either sign), decays per
    step of 1e-4 to 0.4 so that chunks and the initial state both matter."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.rand(*shape, generator=gen, dtype=torch.float64)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    A = -torch.exp(torch.empty(h, dtype=torch.float64).uniform_(-3.0, 1.0, generator=gen))
    dt = randn(b, L, h) - 3.0 if dt_softplus else 0.005 + 0.1 * rand(b, L, h)
    kw = dict(
        D=randn(h) if D else None,
        initial_states=randn(b, h, p, n) if initial_states else None,
        dt_bias=(0.5 * randn(h) if dt_softplus else 0.05 * rand(h)) if dt_bias else None,
        dt_softplus=dt_softplus,
    )
    x, B, C = (randn(*shape).to(dtype) for shape in ((b, L, h, p), (b, L, g, n), (b, L, g, n)))
    return [x, dt, A, B, C], kw


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


@pytest.mark.parametrize("flags", list(itertools.product([False, True], repeat=len(FLAGS))),
                         ids=lambda f: "-".join(k for k, on in zip(FLAGS, f) if on) or "plain")
@pytest.mark.parametrize("g", [1, 2, H])
@pytest.mark.parametrize("chunk", [4, 8, 16])
def test_chunked_equals_recurrence(chunk, g, flags):
    opts = dict(zip(FLAGS, flags))
    final = opts.pop("return_final_states")
    L = 64 if chunk == 16 else 32
    args, kw = make_inputs(zlib.crc32(repr((chunk, g, flags)).encode()), L=L, g=g, **opts)
    ref = ssd_sequential(*args, **kw, return_final_states=final)
    out = ssd_reference(*args, chunk, **kw, return_final_states=final)
    if final:
        (out, state), (ref, ref_state) = out, ref
        assert state.shape == (2, H, P, N) and state.dtype == torch.float64
        assert rel_err(state, ref_state) < 1e-10
    assert out.shape == (2, L, H, P) and out.dtype == torch.float64
    assert rel_err(out, ref) < 1e-10


@pytest.mark.parametrize("L", [0, 1, 5, 37])
def test_length_not_a_multiple_of_the_chunk(L):
    """The last chunk is padded with dt = 0 (after bias and softplus): nothing decays or is added."""
    args, kw = make_inputs(100 + L, L=L, g=2, D=True, initial_states=True, dt_bias=True, dt_softplus=True)
    out, state = ssd_reference(*args, 16, **kw, return_final_states=True)
    ref, ref_state = ssd_sequential(*args, **kw, return_final_states=True)
    assert out.shape == (2, L, H, P)
    if L:
        assert rel_err(out, ref) < 1e-10
    assert rel_err(state, ref_state) < 1e-10


def test_initial_state_matters_and_zero_dt_keeps_it():
    """A step of dt = 0 leaves the state alone: y = state_0 @ C_t, final state = state_0."""
    args, kw = make_inputs(7, L=8, initial_states=True)
    args[1] = torch.zeros_like(args[1])
    out, state = ssd_reference(*args, 4, **kw, return_final_states=True)
    s0 = kw["initial_states"]
    torch.testing.assert_close(state, s0, rtol=0, atol=0)
    torch.testing.assert_close(out, torch.einsum("bhpn,bln->blhp", s0, args[4][:, :, 0]), rtol=1e-12, atol=1e-12)


def test_head_reads_group_i_div_h_over_g():
    """h = 4, g = 2: heads 0, 1 read group 0 and heads 2, 3 group 1 (in both algorithms)."""
    args, kw = make_inputs(8, g=2)
    args[3][:, :, 1] = 0.0  # group 1 adds nothing to the state: heads 2 and 3 output 0
    for out in (ssd_reference(*args, 8, **kw), ssd_sequential(*args, **kw)):
        assert (out[:, :, 2:] == 0).all() and (out[:, :, :2] != 0).any()


def test_low_precision_inputs_keep_the_dtype():
    args, kw = make_inputs(3, g=2, dtype=torch.bfloat16, D=True)
    out, state = ssd_reference(*args, 8, **kw, return_final_states=True)
    assert out.dtype == torch.bfloat16 and state.dtype == torch.float64
    ref = ssd_sequential(*args, **kw)
    assert ref.dtype == torch.bfloat16
    # Both are float64 inside, rounded once to bf16 at the end.
    assert rel_err(out.double(), ref.double()) < 1e-2


def test_stages_have_the_documented_shapes():
    args, kw = make_inputs(11, L=32, g=2)
    x, dt, A, B, C = args
    dt_eff, dA_cumsum = chunk_cumsum(dt, A, 8)
    assert dt_eff.shape == dA_cumsum.shape == (2, H, 4, 8)
    # Within a chunk the cumsum decreases (A < 0, dt > 0) and restarts at each chunk.
    assert (dA_cumsum.diff(dim=-1) < 0).all()
    torch.testing.assert_close(dA_cumsum[..., 0], dt_eff[..., 0] * A[:, None])
    xc, Bc, Cc = (t.view(2, 4, 8, *t.shape[2:]) for t in (x, B, C))
    assert chunk_state(Bc, xc, dt_eff, dA_cumsum).shape == (2, 4, H, P, N)
    assert bmm_chunk(Cc, Bc).shape == (2, 4, 2, 8, 8)


def _set(i, fn):
    """Replace positional argument i (x, dt, A, B, C) with fn(it)."""
    return lambda a, k: a.__setitem__(i, fn(a[i]))


def _kw(name, value):
    return lambda a, k: k.__setitem__(name, value)


@pytest.mark.parametrize("change, match", [
    (_set(0, lambda x: x[0]), "x must have shape"),
    (_set(1, lambda dt: dt[:, :, :2]), "dt must have shape"),
    (_set(2, lambda A: A[:2]), "A must have shape"),
    (_set(3, lambda B: B[:, :16]), "B must have shape"),
    (_set(4, lambda C: C[..., :8]), "C must have shape"),
    (lambda a, k: [_set(i, lambda t: t.expand(-1, -1, 3, -1))(a, k) for i in (3, 4)], "must divide"),
    (_kw("D", torch.ones(H, P)), "D must have shape"),
    (_kw("dt_bias", torch.ones(H + 1)), "dt_bias must have shape"),
    (_kw("initial_states", torch.ones(2, H, N, P)), "initial_states must have shape"),
], ids=["x", "dt", "A", "B", "C", "groups", "D", "dt_bias", "initial_states"])
def test_bad_shapes_raise(change, match):
    args, kw = make_inputs(5, g=1)
    change(args, kw)
    with pytest.raises(ValueError, match=match):
        ssd_reference(*args, 8, **kw)
    with pytest.raises(ValueError, match=match):
        ssd_sequential(*args, **kw)


@pytest.mark.parametrize("chunk", [0, -4, 8.0, True])
def test_bad_chunk_size_raises(chunk):
    args, kw = make_inputs(6)
    with pytest.raises(ValueError, match="chunk_size"):
        ssd_reference(*args, chunk, **kw)


def test_unavoidable_bytes_of_the_chapter_shape():
    """(b, L, h, p, n, g) = (8, 4096, 64, 64, 128, 1) in bf16: read x, B, C, dt, write out and the
    fp32 final state: about 0.58 GB."""
    b, L, h, p, n, g = 8, 4096, 64, 64, 128, 1
    cost = ssd_bytes_and_flops(b, L, h, p, n, g, 256, 2)
    by_hand = 2 * (2 * b * L * h * p + 2 * b * L * g * n + b * L * h) + 4 * b * h * p * n
    assert cost.bytes == by_hand == 574_619_648
    assert abs(cost.bytes / 0.58e9 - 1) < 0.05
    # The FLOPs are dominated by the three GEMMs of stages 2 and 5: about 137 GFLOP at chunk 256.
    gemms = 2 * (2 * b * L * h * p * n) + 2 * b * L * h * 256 * p
    assert gemms <= cost.flops < 1.05 * gemms
    assert set(cost.stage_flops) == set(cost.stage_bytes) == {
        "chunk_cumsum", "chunk_state", "state_passing", "bmm_chunk", "chunk_scan"}
    # Five separate kernels move more than the unavoidable bytes.
    assert sum(cost.stage_bytes.values()) > cost.bytes


def test_gemm_flops_match_torch_flop_counter():
    """The GEMM term of each stage equals what torch's FLOP counter sees in the reference's einsums."""
    from torch.utils.flop_counter import FlopCounterMode

    b, L, h, p, n, g, chunk = 2, 32, H, P, N, 2, 8
    c = L // chunk
    args, _ = make_inputs(9, b=b, L=L, g=g)
    x, dt, A, B, C = args
    dt_eff, dA_cumsum = chunk_cumsum(dt, A, chunk)
    xc, Bc, Cc = (t.view(b, c, chunk, *t.shape[2:]) for t in (x, B, C))

    def counted(fn, *a):
        with FlopCounterMode(display=False) as fc:
            fn(*a)
        return fc.get_total_flops()

    cost = ssd_bytes_and_flops(b, L, h, p, n, g, chunk, 8)
    assert counted(bmm_chunk, Cc, Bc) == cost.stage_flops["bmm_chunk"]
    # The counter sees chunk_state's (p, l) x (l, n) GEMMs only, not its elementwise b L h (p + 3).
    assert counted(chunk_state, Bc, xc, dt_eff, dA_cumsum) == 2 * b * L * h * p * n

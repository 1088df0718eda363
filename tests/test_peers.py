"""GPU-free: the torch.compile peer compiles every point of a suite (benchmarks/peers.py)."""
import torch

import pytest

import benchmarks.peers as peers
from benchmarks.peers import fresh_compile
from _gpu import requires_gpu


def test_every_shape_and_dtype_gets_its_own_graph():
    """Sixteen points of one lambda (a suite's 8 N x 2 dtypes): without the reset in
    ``fresh_compile``, Dynamo's recompile limit (8) would run the last eight eagerly."""
    from torch._dynamo.utils import counters
    counters.clear()
    for dt in (torch.float32, torch.bfloat16):
        for n in (8, 16, 24, 32, 40, 48, 56, 64):
            f = fresh_compile(lambda x: torch.softmax(x, -1), backend="eager")
            x = torch.randn(2, n, dtype=dt)
            torch.testing.assert_close(f(x), torch.softmax(x, -1))
            assert counters["stats"]["unique_graphs"] == 1, (dt, n)  # this point was compiled
            counters.clear()


@pytest.mark.parametrize("op", ["rmsnorm", "softmax", "cross_entropy"])
def test_the_suites_torch_compile_entry_compiles_and_matches_eager(op, monkeypatch):
    """The suites' "torch.compile" entry, built as a suite builds it (on CPU tensors, Dynamo's
    eager backend): it compiles one graph and returns eager's values. Its first version failed
    on every point ("'bool' object is not callable": the helper's name was shadowed)."""
    from torch._dynamo.utils import counters
    monkeypatch.setattr(peers, "_x", lambda m, n, dt: torch.randn(m, n, dtype=dt))
    monkeypatch.setattr(peers, "_ce", lambda m, n, dt: (torch.randn(m, n, dtype=dt), torch.randint(0, n, (m,))))
    monkeypatch.setattr(peers, "_rmsnorm", lambda m, n, dt: (torch.randn(m, n, dtype=dt), torch.randn(n, dtype=dt)))
    monkeypatch.setattr(peers, "fresh_compile", lambda f: fresh_compile(f, backend="eager"))
    table = dict(peers.peer_impls(op))
    torch.manual_seed(0)
    compiled = table["torch.compile"](3, 16, torch.float32)
    torch.manual_seed(0)
    eager = table["torch"](3, 16, torch.float32)
    counters.clear()
    torch.testing.assert_close(compiled(), eager())
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize("op", ["rmsnorm", "softmax", "layernorm", "cross_entropy"])
def test_every_suite_times_ours_as_users_call_it(op):
    """The op suites' first implementation is the public function with default arguments."""
    import inspect
    name, make = peers.peer_impls(op)[0]
    assert name == "ours"
    src = inspect.getsource(make)
    assert f"from kernels import {op}" in src and "_out" not in src and "reduction=" not in src


def test_host_latency_covers_every_public_op():
    import kernels
    assert set(peers.HOST_OPS) == set(kernels.__all__) - {"check_errors", "BadInputError"}


def test_sweep_candidates_are_configurations_the_template_takes_or_rejects_clearly():
    from benchmarks.sweep import kept_candidates, streamed_candidates
    for bits in (16, 32):
        for n in (1024, 32768, 262144):
            cands = kept_candidates(n, bits) + streamed_candidates(n, bits, "cross_entropy")
            assert cands
            for cfg in cands:
                try:
                    cfg.check(n, bits)
                except ValueError as e:
                    assert str(e)


def test_sweep_candidates_cover_any_n():
    """At an N between the powers of two, and an odd one, the sweep still has candidates of
    every kind, each covering the row (its window where N is no multiple of the vector) with
    no access layer left empty, so that a rule for any N can be fitted to its data."""
    from benchmarks.sweep import kept_candidates, streamed_candidates
    for bits in (16, 32):
        vec = 128 // bits
        for n in (3000, 3001, 50257, 128256, 131071):
            kept, streamed = kept_candidates(n, bits), streamed_candidates(n, bits, "cross_entropy")
            assert kept and streamed, (n, bits)
            assert any(c.stage == "smem" for c in kept) == (n >= 16384 and any(
                c.stage == "smem" for c in kept_candidates(1 << (n.bit_length() - 1), bits)))
            for cfg in kept + streamed:
                assert cfg.head == (n % vec != 0)
                cfg.check(n, bits)  # covers the row (or its window) and fits
                window = n + vec - 1 if cfg.head else n
                # no access layer (kept) or pass (streamed) left wholly outside the row
                layer = cfg.threads_per_row * cfg.cluster_n * cfg.vec * (cfg.vecs_per_thread if cfg.stage == "stream" else 1)
                assert cfg.cols_covered - window < layer, cfg


def test_backward_suite_counts_the_bytes_a_training_step_moves():
    """RMSNorm, LayerNorm and softmax: 2MN forward, 3MN backward, 5MN both; cross-entropy: MN,
    2MN, 3MN; every op has ours, torch, torch.compile, Liger and QuACK entries."""
    from benchmarks.backward import OPS, PASSES, elements, implementations
    assert [elements("rmsnorm", p) for p in PASSES] == [2, 3, 5]
    assert [elements("cross_entropy", p) for p in PASSES] == [1, 2, 3]
    for op in OPS:
        assert [name for name, _ in implementations(op)] == ["ours", "torch", "torch.compile", "liger", "quack"]


def test_shapes_suite_draws_two_n_an_octave_and_the_vocabularies():
    """The shapes suite's row lengths: two in each octave from 2^10 to 2^18, at least one odd,
    the same on every call (a fixed seed), and the vocabularies of real models (GPT-2's 50257,
    Llama 3's 128256 among them), all within the kernels' range."""
    from benchmarks.run import VOCABULARIES, shape_ns
    from kernels.config import MAX_N
    ns = shape_ns()
    assert ns == shape_ns() == sorted(set(ns))
    assert {50257, 128256} <= set(ns) and set(VOCABULARIES.values()) <= set(ns)
    for k in range(10, 18):
        drawn = [n for n in ns if (1 << k) <= n < (1 << (k + 1)) and n not in VOCABULARIES.values()]
        assert len(drawn) == 2 and any(n % 2 for n in drawn), (k, drawn)
    assert all(1 <= n <= MAX_N for n in ns)
    assert shape_ns(seed=1) != ns  # the seed decides the draw


def test_suite_filters_keep_what_was_asked():
    from types import SimpleNamespace
    from benchmarks.run import _filtered
    ns, dts = _filtered(SimpleNamespace(ns="4097,50257", dtypes="bf16"), [1024, 4097, 50257])
    assert ns == [4097, 50257] and list(dts) == ["bf16"]
    ns, dts = _filtered(SimpleNamespace(ns="", dtypes=""), [1024, 4097])
    assert ns == [1024, 4097] and list(dts) == ["fp32", "bf16"]


def test_profile_step_times_the_host_and_profiles_the_backward_on_its_thread(monkeypatch):
    """benchmarks.profile_step's host measures, without a GPU (the synchronize stood in): the host
    time of a step is what its calls take (a step that sleeps 2 ms takes about that), and the
    host profile's table lists the functions a step's backward calls."""
    import time
    from benchmarks import profile_step as P
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    assert 1500 < P.host_us(lambda: time.sleep(0.002), calls=5) < 20000

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return _the_backward_of_twice(g)

    x = torch.randn(3, requires_grad=True)
    table = P.host_profile(lambda: torch.autograd.grad(Twice.apply(x).sum(), [x]), calls=3)
    assert "_the_backward_of_twice" in table


def _the_backward_of_twice(g):
    return g * 2


@requires_gpu
def test_profile_step_lists_each_kernel_of_a_step_once_a_launch():
    """benchmarks.profile_step's table: softmax's forward is one launch of one kernel a step; a
    step that calls it twice shows it twice."""
    import kernels
    from benchmarks.profile_step import kernel_table
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    once = kernel_table(lambda: kernels.softmax(x), steps=4)
    twice = kernel_table(lambda: (kernels.softmax(x), kernels.softmax(x)), steps=4)
    assert len(once) == 1 and list(once.values())[0][0] == 1.0, once
    assert set(twice) == set(once) and list(twice.values())[0][0] == 2.0, twice
    assert list(once.values())[0][1] > 0
    from benchmarks.profile_step import profile_step
    _, stalls = profile_step(lambda: kernels.softmax(x), steps=4)
    assert not stalls, f"softmax's call waits for the GPU or allocates: {stalls}"
    _, stalls = profile_step(lambda: kernels.softmax(x).sum().item(), steps=4)
    assert any("Synchronize" in k or "Memcpy" in k for k in stalls), stalls

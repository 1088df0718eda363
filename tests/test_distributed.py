"""Vocabulary-parallel cross-entropy (kernels.vocab_parallel, kernels.distributed).

Without a GPU: the shard kernels compile (sm_90a) with the widest loads their width allows and
no spills; shards cut from one tensor, their partials combined in one process by each
protocol's arithmetic, give the unsharded loss and gradient of float64 PyTorch; and the whole
op runs over gloo in two CPU processes, both protocols, an uneven split, inputs refused before
any collective. On a GPU: the shard kernels over shards of one tensor, combined on that GPU,
against the single-GPU kernel and float64. On two GPUs or more: the op over NCCL, one process a
GPU, against the single-GPU op and float64."""
import datetime
import math

import pytest
import torch

from kernels.config import row_config, vector_width
from kernels.cross_entropy import cross_entropy_reference, row_gradients
from kernels.errors import BadInputError
from kernels.distributed import PROTOCOLS, merge, reduce_losses, rescale, row_losses, vocab_parallel_cross_entropy
from kernels.inspect import divergent_shuffles, report
from kernels.vocab_parallel import (VocabShard, VocabShardBackward, shard_backward, shard_backward_torch,
                                    shard_partials, shard_partials_torch)

from _gpu import requires_gpu
from _spawn import spawn

BITS = {"fp32": 32, "bf16": 16, "fp16": 16}
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def split(n: int, world: int) -> list:
    """Near-even widths of n classes over ``world`` ranks, the first ranks one wider."""
    return [n // world + (r < n % world) for r in range(world)]


def starts(widths) -> list:
    return [sum(widths[:r]) for r in range(len(widths))]


def combine_in_process(partials: list, protocol: str) -> torch.Tensor:
    """The ranks' partials combined as ``protocol`` combines them, in one process: "allgather"
    merges the stacked partials; "allreduce" takes the maxima's max (its first all-reduce), then
    adds up each rank's partials rescaled to it (its second)."""
    if protocol == "allgather":
        return merge(torch.stack(partials))
    big = torch.stack([p[0] for p in partials]).amax(0)
    out = rescale(partials[0], big)
    for p in partials[1:]:
        out[1:] += rescale(p, big)[1:]
    return out


def sharded(x, t, widths, dloss, protocol="allreduce", reduction="mean", smoothing=0.0, z=0.0,
            partials_of=shard_partials_torch, backward_of=shard_backward_torch):
    """(loss, lse, dlogits) of x cut into shards of ``widths``, each shard's partials from
    ``partials_of`` combined in one process, each shard's gradient from ``backward_of``."""
    shards = [x[:, a:a + w] for a, w in zip(starts(widths), widths)]
    parts = [partials_of(s, t, a, smoothing != 0) for s, a in zip(shards, starts(widths))]
    combined = combine_in_process(parts, protocol)
    loss, lse = row_losses(combined, t, x.shape[1], -100, smoothing, z)
    g = row_gradients(dloss.float(), t, -100, reduction)
    grads = [backward_of(g, s, t, lse, a, x.shape[1], -100, label_smoothing=smoothing, lse_square_scale=z)
             for s, a in zip(shards, starts(widths))]
    return reduce_losses(loss, t, -100, reduction), lse, torch.cat(grads, dim=1)


def reference(x, t, dloss, reduction="mean", smoothing=0.0, z=0.0):
    """The unsharded loss and its gradient, float64 autograd."""
    x64 = x.detach().double().requires_grad_()
    loss = cross_entropy_reference(x64, t, -100, reduction, smoothing, z)
    (dx,) = torch.autograd.grad(loss, x64, dloss.double())
    return loss.detach(), dx


def _dloss(reduction, m, generator=None):
    return torch.randn(m, generator=generator) if reduction == "none" else torch.tensor(1.7)


def assert_grad_close(got, want, dtype):
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=want.abs().max().item() * tol)


# ---- the kernels compile ----------------------------------------------------------------------------

WIDTHS = [1000, 4096, 32064, 65536, 131072]
KERNELS = {"forward": lambda d, n: VocabShard.compile(d, n),
           "forward, label smoothing": lambda d, n: VocabShard.compile(d, n, present=(True,) * 4),
           "backward, label smoothing": lambda d, n: VocabShardBackward.compile(d, n, options=(True, True, False))}


@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp16"])
@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_shard_kernels_compile_with_128_bit_loads_and_no_spills(kernel, n, dtype):
    """Each shard kernel takes the configuration of its single-GPU twin at the shard's width,
    reads the shard with 128-bit loads, spills nothing and has no shuffle that only some lanes
    reach; the forward writes its 3 (4 with label smoothing) fp32 numbers a row, the backward
    writes the gradient with 128-bit stores and exchanges nothing."""
    rep = report(KERNELS[kernel](DTYPE[dtype], n), kernel, dtype, n)
    bits = BITS[dtype]
    assert rep.frame_bytes == 0 and not rep.has("local memory")
    assert 0 < rep.registers <= 255
    assert not divergent_shuffles(rep.ptx), divergent_shuffles(rep.ptx)
    assert 128 in rep.widths("global loads")
    if kernel.startswith("forward"):
        assert rep.config == row_config("cross_entropy", n, bits)
        assert rep.counts["global stores"] == {"st.global.b32": 4 if "smoothing" in kernel else 3}
        assert rep.has("warp shuffles")
        if rep.config.cluster_n > 1:
            assert rep.has("remote shared stores") and rep.has("mbarrier ops")
    else:
        assert rep.config == row_config("cross_entropy_bwd", n, bits)
        assert rep.widths("global stores") == {128}
        assert not rep.has("warp shuffles") and not rep.has("block barriers")


@pytest.mark.parametrize("n", [25129, 12565])
def test_ragged_shard_compiles(n):
    """An odd shard width (50257 classes over 2 or 4 ranks): single-element accesses, no spills."""
    for kernel, make in KERNELS.items():
        rep = report(make(torch.bfloat16, n))
        assert vector_width(n, 16) == 1 and rep.widths("global loads") <= {16, 32, 64}
        assert rep.frame_bytes == 0 and not divergent_shuffles(rep.ptx), kernel


# ---- shards combined in one process (PyTorch twins, CPU) --------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("widths", [(12,), (5, 7), (3, 3, 3, 3), (1, 10, 1), (40, 33, 27)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shards_combined_give_the_unsharded_loss_and_gradient(widths, protocol, dtype):
    """Every reduction, ignored rows, label smoothing and the z-loss: the loss against float64
    PyTorch of the whole row, the shards' gradients side by side against float64 autograd."""
    n, m = sum(widths), 37
    gen = torch.Generator().manual_seed(n * 10 + len(widths))
    x = (torch.randn(m, n, generator=gen) * 4).to(dtype)
    t = torch.randint(0, n, (m,), generator=gen)
    t[::5] = -100
    for reduction in ("mean", "sum", "none"):
        for smoothing, z in ((0.0, 0.0), (0.1, 0.0), (0.2, 1e-3)):
            dloss = _dloss(reduction, m, gen)
            loss, lse, dx = sharded(x, t, list(widths), dloss, protocol, reduction, smoothing, z)
            want, want_dx = reference(x, t, dloss, reduction, smoothing, z)
            torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(lse.double(), torch.logsumexp(x.double(), -1), rtol=1e-6, atol=1e-6)
            assert_grad_close(dx, want_dx, dtype)
            assert dx.dtype == dtype and (dx[::5] == 0).all()


def test_partials_of_a_shard():
    """The pair is the shard's own logsumexp (max in log2 units); the target's logit where the
    shard holds the target, 0 where another shard does; the row's sum of logits."""
    x = torch.randn(9, 20) * 3
    t = torch.tensor([0, 4, 5, 9, 10, 19, -100, 7, 8])
    p = shard_partials_torch(x[:, 5:10], t, 5, smoothing=True)
    assert p.shape == (4, 9) and p.dtype == torch.float32
    torch.testing.assert_close(p[0], x[:, 5:10].amax(-1) * math.log2(math.e))
    torch.testing.assert_close(p[0].double() * math.log(2) + p[1].double().log(),
                               torch.logsumexp(x[:, 5:10].double(), -1), rtol=1e-6, atol=1e-6)
    held = (t >= 5) & (t < 10)
    assert torch.equal(p[2], torch.where(held, x[torch.arange(9), t.clamp(0, 19)], 0.0))
    torch.testing.assert_close(p[3], x[:, 5:10].sum(-1))
    assert shard_partials_torch(x[:, 5:10], t, 5).shape == (3, 9)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_extreme_rows(protocol):
    """One shard far above the others (their sums vanish when rescaled), a shard of nothing but
    -inf, logits far from zero (the loss is exact in float64 against the same max), every row
    ignored (a mean of NaN, as torch), and a target outside [0, N) (CPU tensors: raised at once)."""
    m, widths = 6, [8, 8, 8]
    x = torch.randn(m, 24) * 2
    x[0, 16:] += 200.0
    x[1, :8] = -math.inf
    x[2] += 3e4
    t = torch.tensor([3, 12, 20, 0, 23, 9])
    dloss = torch.tensor(1.0)
    loss, _, dx = sharded(x, t, widths, torch.ones(m), protocol, "none")
    want, want_dx = reference(x, t, torch.ones(m), "none")
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-5)
    assert_grad_close(dx[[0, 1, 3, 4, 5]], want_dx[[0, 1, 3, 4, 5]], torch.float32)
    ignored = torch.full((m,), -100)
    assert torch.isnan(sharded(x, ignored, widths, dloss, protocol, "mean")[0])
    assert sharded(x, ignored, widths, dloss, protocol, "sum")[0].item() == 0.0
    for wrong in (24, -1):
        bad = t.clone()
        bad[4] = wrong
        with pytest.raises(BadInputError, match="outside"):
            sharded(x, bad, widths, torch.ones(m), protocol, "none")


def test_inputs_are_refused_before_any_collective():
    """Each check raises on this rank alone, with no process group at all: nothing reached a
    collective (the gloo test checks the same with one)."""
    x, t = torch.randn(4, 10), torch.zeros(4, dtype=torch.long)
    cases = [((x, t[:3]), {}, ValueError, "target must have shape"),
             ((x, t.float()), {}, TypeError, "target must be"),
             ((x.long(), t), {}, TypeError, "logits_shard must be float32"),
             ((x.view(2, 2, 10), t), {}, ValueError, "2-D"),
             ((x, t), dict(reduction="avg"), ValueError, "reduction"),
             ((x, t), dict(label_smoothing=1.5), ValueError, "label_smoothing"),
             ((x, t), dict(protocol="ring"), ValueError, "protocol"),
             ((x, t), dict(ignore_index=2**40), ValueError, "int32")]
    for args, kw, error, match in cases:
        with pytest.raises(error, match=match):
            vocab_parallel_cross_entropy(*args, **kw)
    with pytest.raises(RuntimeError, match="init_process_group"):
        vocab_parallel_cross_entropy(x, t)


def test_backward_hands_the_kernel_a_contiguous_gradient(tmp_path, monkeypatch):
    """``loss.sum().backward()`` of reduction="none" gives the backward an expanded gradient
    (stride 0); the shard kernel's entry refuses one ("g must be contiguous", checked before the
    device, so it shows here), so the op must hand it a contiguous (M,) gradient. One gloo rank,
    in this process; the kernel's place taken by its twin behind a check of what it is given."""
    import torch.distributed as dist
    import kernels.distributed as D
    from kernels.vocab_parallel import shard_backward_out
    x, t = torch.randn(6, 10), torch.tensor([0, 3, -100, 9, 4, 5])
    lse = torch.logsumexp(x, -1)
    with pytest.raises(ValueError, match="g must be contiguous"):
        shard_backward_out(torch.ones(1).expand(6), x, t, lse, torch.empty_like(x), 0, 10)
    given = []

    def twin(g, *args, **kw):
        given.append(g.is_contiguous())
        return shard_backward_torch(g, *args, **kw)

    monkeypatch.setattr(D, "shard_backward", twin)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        shard = x.clone().requires_grad_()
        D.vocab_parallel_cross_entropy(shard, t, reduction="none").sum().backward()
    finally:
        dist.destroy_process_group()
    assert given == [True]
    assert_grad_close(shard.grad, reference(x, t, torch.ones(6), "none")[1], torch.float32)


# ---- the protocol over gloo, two CPU processes ------------------------------------------------------

def _gloo_worker(rank: int, store: str):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        _gloo_checks(rank)
    finally:
        dist.destroy_process_group()


def _same_on_every_rank(value: torch.Tensor):
    import torch.distributed as dist
    both = [torch.empty_like(value) for _ in range(2)]
    dist.all_gather(both, value.contiguous())
    assert torch.equal(both[0], both[1]), "the ranks got different losses"


def _gloo_checks(rank: int):
    gen = torch.Generator().manual_seed(7)
    for widths, m, dtype in (([5, 7], 23, torch.float32), ([500, 500], 16, torch.bfloat16)):
        n = sum(widths)
        x = (torch.randn(m, n, generator=gen) * 4).to(dtype)
        t = torch.randint(0, n, (m,), generator=gen)
        t[::4] = -100
        a = starts(widths)[rank]
        for protocol in PROTOCOLS:
            for reduction, smoothing, z in (("mean", 0.0, 0.0), ("sum", 0.1, 0.0), ("none", 0.2, 1e-3)):
                dloss = _dloss(reduction, m, gen)
                shard = x[:, a:a + widths[rank]].clone().requires_grad_()
                loss = vocab_parallel_cross_entropy(shard, t, None, -100, reduction, smoothing, lse_square_scale=z,
                                                    protocol=protocol)
                loss.backward(dloss)
                want, want_dx = reference(x, t, dloss, reduction, smoothing, z)
                torch.testing.assert_close(loss.detach().double(), want, rtol=1e-5, atol=1e-5)
                assert_grad_close(shard.grad, want_dx[:, a:a + widths[rank]], dtype)
                _same_on_every_rank(loss.detach())
                with torch.no_grad():  # no autograd, given widths (no gather): the same loss
                    again = vocab_parallel_cross_entropy(shard, t, reduction=reduction, label_smoothing=smoothing,
                                                         lse_square_scale=z, protocol=protocol, shard_widths=widths)
                torch.testing.assert_close(again, loss.detach(), rtol=1e-6, atol=1e-6)
    shard, t = torch.randn(4, 3 + rank), torch.zeros(4, dtype=torch.long)
    # refused on every rank before any collective: the next call's collectives still pair up
    with pytest.raises(ValueError, match="target must have shape"):
        vocab_parallel_cross_entropy(shard, t[:3])
    with pytest.raises(ValueError, match=r"shard_widths\[\d\]"):
        vocab_parallel_cross_entropy(shard, t, shard_widths=[4, 3])
    full = torch.randn(4, 7, generator=torch.Generator().manual_seed(1))
    want = torch.nn.functional.cross_entropy(full.double(), t, reduction="sum")
    got = vocab_parallel_cross_entropy(full[:, :3] if rank == 0 else full[:, 3:], t, reduction="sum")
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    # ranks that disagree on M: every rank sees the gathered table and raises
    with pytest.raises(ValueError, match="different row counts"):
        vocab_parallel_cross_entropy(torch.randn(4 + rank, 3), torch.zeros(4 + rank, dtype=torch.long))


def test_gloo_two_processes(tmp_path):
    """The op over torch.distributed with gloo, two CPU processes each holding its shard of one
    seeded tensor: both protocols, every reduction, label smoothing and the z-loss, an uneven
    split (5 and 7 classes), loss and shard gradient against float64 of the whole tensor, the
    same loss on both ranks; inputs refused before any collective (the ranks' next collectives
    still pair up), shard widths given or wrong, ranks that disagree on M."""
    spawn(_gloo_worker, (str(tmp_path / "store"),), what="the gloo processes")


# ---- on a GPU: the kernels over shards of one tensor ------------------------------------------------

def _shard_lse(partials):
    return partials[0].double() * math.log(2) + partials[1].double().log()


@requires_gpu
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("n", [50257, 128256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_shard_kernels_on_one_gpu(dtype, n, world):
    """The shard kernels over shards cut from one tensor (views: the rows' stride is N), their
    partials combined on the GPU by each protocol's arithmetic: the loss against the single-GPU
    kernel and float64, each shard's partials against their PyTorch twin, the gradient against
    float64, with ignored rows and label smoothing."""
    import kernels
    from kernels.cross_entropy import cross_entropy_backward_reference
    m = 64
    x = (torch.randn(m, n, device="cuda") * 3).to(dtype)
    t = torch.randint(0, n, (m,), device="cuda")
    t[::5] = -100
    widths = split(n, world)
    for a, w in zip(starts(widths), widths):
        for smoothing in (False, True):
            got = shard_partials(x[:, a:a + w], t, a, smoothing)
            twin = shard_partials_torch(x[:, a:a + w], t, a, smoothing)
            torch.testing.assert_close(_shard_lse(got), _shard_lse(twin), rtol=2e-5, atol=2e-5)
            assert torch.equal(got[2], twin[2])
            if smoothing:
                torch.testing.assert_close(got[3], twin[3], rtol=1e-5, atol=1e-2)
    for protocol in PROTOCOLS:
        for reduction, smoothing in (("none", 0.0), ("mean", 0.0), ("none", 0.1)):
            dloss = torch.randn(m, device="cuda") if reduction == "none" else torch.tensor(1.0, device="cuda")
            loss, lse, dx = sharded(x, t, widths, dloss, protocol, reduction, smoothing,
                                    partials_of=shard_partials, backward_of=shard_backward)
            single = kernels.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
            want = cross_entropy_reference(x, t, -100, reduction, smoothing)
            torch.testing.assert_close(loss.double(), want, rtol=2e-5, atol=2e-5)
            torch.testing.assert_close(loss, single, rtol=2e-5, atol=2e-5)
            want_dx = cross_entropy_backward_reference(dloss, x, t, -100, reduction, smoothing)
            assert dx.dtype == dtype and (dx[::5] == 0).all()
            assert_grad_close(dx, want_dx, dtype)


@requires_gpu
@pytest.mark.parametrize("wrong", [-1, 50257])
def test_a_target_outside_the_vocabulary_is_flagged_on_the_gpu(wrong):
    """A target outside [0, N) on CUDA tensors: its row's loss is NaN, the others are finite, and
    the word of kernels.errors is set without a wait: check_errors() raises it (and clears it)."""
    from kernels.errors import check_errors
    m, n, widths = 16, 50257, split(50257, 2)
    x = torch.randn(m, n, device="cuda")
    t = torch.randint(0, n, (m,), device="cuda")
    check_errors()  # nothing flagged before
    t[3] = wrong
    loss = sharded(x, t, widths, torch.ones(m, device="cuda"), "allreduce", "none",
                   partials_of=shard_partials, backward_of=shard_backward)[0]
    assert torch.isnan(loss[3]) and torch.isfinite(loss[torch.arange(m, device="cuda") != 3]).all()
    with pytest.raises(BadInputError, match="outside"):
        check_errors()
    check_errors()  # cleared: raised once


# ---- on two GPUs or more: one NCCL process a GPU ----------------------------------------------------

GPUS = torch.cuda.device_count()
requires_gpus = pytest.mark.skipif(GPUS < 2, reason="needs 2 or more CUDA GPUs (one NCCL process a GPU); "
                                                    f"this machine has {GPUS}")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nccl_worker(rank: int, port: int):
    import os
    import torch.distributed as dist
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off, before NCCL starts
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=300), device_id=torch.device("cuda", rank))
    try:
        _nccl_checks(rank)
    finally:
        dist.destroy_process_group()


def _nccl_checks(rank: int):
    import kernels
    n, m = 50257, 77
    widths = split(n, 2)  # 25129 and 25128: odd widths, one element an access
    a, w = starts(widths)[rank], widths[rank]
    for dtype in (torch.bfloat16, torch.float32):
        gen = torch.Generator().manual_seed(5)
        x = (torch.randn(m, n, generator=gen) * 3).to(dtype)
        t = torch.randint(0, n, (m,), generator=gen)
        t[::6] = -100
        xc, tc = x.cuda(), t.cuda()
        for protocol in PROTOCOLS:
            for reduction, smoothing, z in (("mean", 0.0, 0.0), ("sum", 0.1, 0.0), ("none", 0.2, 1e-3)):
                dloss = _dloss(reduction, m, gen)
                # bf16: the shard a view of the whole logits (rows N apart); fp32: a tensor of its own
                shard = xc[:, a:a + w] if dtype == torch.bfloat16 else xc[:, a:a + w].clone()
                shard.requires_grad_()
                loss = vocab_parallel_cross_entropy(shard, tc, None, -100, reduction, smoothing, lse_square_scale=z,
                                                    protocol=protocol)
                loss.backward(dloss.cuda())
                full = xc.clone().requires_grad_()
                single = kernels.cross_entropy(full, tc, -100, reduction, label_smoothing=smoothing,
                                               lse_square_scale=z)
                single.backward(dloss.cuda())
                want, want_dx = reference(x, t, dloss, reduction, smoothing, z)
                torch.testing.assert_close(loss.detach(), single.detach(), rtol=2e-5, atol=2e-5)
                torch.testing.assert_close(loss.detach().double().cpu(), want, rtol=1e-5, atol=1e-5)
                assert shard.grad.dtype == dtype and (shard.grad[::6] == 0).all()
                assert_grad_close(shard.grad.cpu(), want_dx[:, a:a + w], dtype)
                assert_grad_close(shard.grad.cpu(), full.grad[:, a:a + w].double().cpu(), dtype)
                _same_on_every_rank(loss.detach().reshape(-1))
        # reduction "none" summed: autograd's expanded gradient; the widths given, no autograd
        shard = xc[:, a:a + w].clone().requires_grad_()
        vocab_parallel_cross_entropy(shard, tc, reduction="none").sum().backward()
        assert_grad_close(shard.grad.cpu(), reference(x, t, torch.ones(m), "none")[1][:, a:a + w], dtype)
        with torch.no_grad():
            again = vocab_parallel_cross_entropy(shard, tc, shard_widths=widths, protocol="allgather")
        torch.testing.assert_close(again.double().cpu(), reference(x, t, torch.tensor(1.0))[0], rtol=1e-5, atol=1e-5)


@requires_gpus
def test_nccl_two_gpus():
    """The op over NCCL, one process on each of two GPUs, NVLink multicast off: GPT-2's 50,257
    classes split 25,129 + 25,128 (odd widths), bf16 (the shard a view of the whole logits) and
    fp32, both protocols, every reduction, label smoothing and the z-loss, ignored rows: the loss
    against the single-GPU kernels.cross_entropy of the whole logits and float64, the shard's
    gradient against both, the same loss on both ranks; a summed "none" loss (an expanded
    gradient) and given widths without autograd."""
    spawn(_nccl_worker, (_free_port(),), seconds=540, what="the NCCL processes")

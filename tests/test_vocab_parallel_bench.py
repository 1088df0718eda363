"""The vocabulary-parallel suite (benchmarks.vocab_parallel) without a GPU: the split of N over W,
the rows a GPU, the bytes a pass must move and the collectives' bytes against values counted by
hand, rows in the suites' schema, the slowest rank's rounds, the scaling column; and, over gloo
in two CPU processes, the check it runs before timing and its plain-torch Megatron-style peer."""
import csv
import datetime
import math

import pytest
import torch

import benchmarks.harness as H
import benchmarks.vocab_parallel as V

from _gpu import requires_gpu
from _spawn import spawn

WORLDS = [1, 2, 3, 4, 5, 8]


@pytest.mark.parametrize("n", [128256, 256000, 50257, 7, 8])
@pytest.mark.parametrize("world", WORLDS)
def test_split_is_as_even_as_possible(n, world):
    widths = V.shard_widths(n, world)
    assert len(widths) == world and sum(widths) == n
    assert max(widths) - min(widths) <= 1 and widths == sorted(widths, reverse=True)


def test_the_suites_vocabularies_split_evenly_over_2_4_8():
    """Liger's and Megatron's shards start at r n: both vocabularies give them every world size."""
    for n in V.VOCABULARIES.values():
        for world in (2, 4, 8):
            assert V.shard_widths(n, world) == [n // world] * world


@pytest.mark.parametrize("n", [128256, 256000, 50257])
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_each_gpu_holds_2_to_the_28_logits(n, world):
    m = V.rows_per_gpu(n, world)
    assert abs(m * n / world - V.TOTAL) <= n / world / 2  # to the nearest row


def test_the_shard_suite_covers_16k_to_128k_columns_at_2_to_the_28():
    """The one-GPU shard suite's points (the issue's 16k-128k shards), each 2^28 logits."""
    pts = V.shard_points()
    assert [n for _, n in pts] == [16384, 32768, 65536, 131072]
    assert all(m * n == V.TOTAL for m, n in pts)


@requires_gpu
def test_the_shard_suite_times_both_kernels(gpu):
    """On a GPU: a partials row and a backward row a width, the bytes the pass must move (M n read;
    2 M n read and written), a positive speed against the ceiling it names."""
    rows = V.shard_suite([16384], ["bf16"], 1, {"read": 4.0, "copy": 4.0}, total=1 << 22)
    assert [r["variant"] for r in rows] == ["partials", "backward"]
    for r, k in zip(rows, (1, 2)):
        assert (r["M"], r["N"]) == (256, 16384) and r["tb_per_s"] > 0
        assert r["tb_per_s"] == pytest.approx(k * 256 * 16384 * 2 / (r["us"] * 1e-6) / 1e12, rel=1e-2)


def test_bytes_by_hand():
    """Llama 3 over 2 GPUs: n = 128256 / 2 = 64128, M = 2^29 / 128256 = 4186.07 -> 4186 rows; bf16.
    Gemma over 4: n = 64000, M = 2^30 / 256000 = 4194.3 -> 4194."""
    assert V.rows_per_gpu(128256, 2) == 4186 and V.rows_per_gpu(256000, 4) == 4194
    # the shard: read once forward (M n 2 bytes), read and written backward, both
    assert V.bytes_shard(4186, 64128, 2, "fwd") == 536_879_616
    assert V.bytes_shard(4186, 64128, 2, "bwd") == 1_073_759_232
    assert V.bytes_shard(4186, 64128, 2, "fwd+bwd") == 1_610_638_848
    assert V.bytes_shard(4194, 64000, 2, "fwd") == 536_832_000
    assert V.bytes_shard(4194, 64000, 4, "fwd+bwd") == 3 * 2 * 536_832_000
    # the collectives: allreduce k M fp32 (k = 3) whatever W, allgather W k M; none backward
    assert V.bytes_collective("allreduce", 2, 4186) == 3 * 4186 * 4 == 50_232
    assert V.bytes_collective("allgather", 2, 4186) == 2 * 3 * 4186 * 4 == 100_464
    assert V.bytes_collective("allreduce", 4, 4194) == 50_328
    assert V.bytes_collective("allgather", 4, 4194) == 4 * 3 * 4194 * 4 == 201_312
    assert V.bytes_collective("allreduce", 4, 4194, "fwd+bwd") == 50_328
    for protocol in V.PROTOCOLS:
        assert V.bytes_collective(protocol, 4, 4194, "bwd") == 0
        assert V.bytes_collective(protocol, 1, 4194) == 0
    assert V.bytes_collective("allreduce", 2, 10, k=4) == 160  # with label smoothing's logit sums
    with pytest.raises(ValueError, match="protocol"):
        V.bytes_collective("ring", 2, 10)


def test_rows_have_the_suites_columns(tmp_path):
    """A row is the harness's row (the columns of every suite, in order, as book/data/backward.csv
    has them) plus the world, protocol, pass and bytes; one with no time (a peer not installed)
    keeps its note."""
    m = V.rows_per_gpu(128256, 2)
    rows = [V.make_row("ours", p, "bf16", 2, 128256, m, pass_, 0.5, 4.0, [0.5, 0.6, 0.4])
            for p in V.PROTOCOLS for pass_ in V.PASSES]
    rows.append(V.make_row("liger", "allreduce", "bf16", 2, 128256, m, "fwd", math.nan, 4.0,
                           note="ImportError: no liger_kernel"))
    rows.append(V.make_row("ours", "none", "bf16", 1, 128256, V.rows_per_gpu(128256, 1), "fwd", 0.45, 4.0))
    r = rows[0]
    assert list(r)[:len(H.COLUMNS)] == H.COLUMNS
    assert r["op"] == V.OP and r["M"] == m and r["N"] == 128256 and r["n_shard"] == 64128 and r["us"] == 500.0
    assert r["bytes_shard"] == 536_879_616 and r["bytes_collective"] == 50_232 and r["collectives"] == 2
    assert r["tb_per_s"] == round(536_879_616 / 0.5e-3 / 1e12, 4) and r["rounds_us"] == "500.00 600.00 400.00"
    gather_bwd = rows[4]
    assert (gather_bwd["protocol"], gather_bwd["pass"], gather_bwd["bytes_collective"]) == ("allgather", "bwd", 0)
    assert rows[6]["us"] != rows[6]["us"] and rows[6]["note"].startswith("ImportError")
    assert rows[7]["collectives"] == 0 and rows[7]["bytes_collective"] == 0
    path = H.write_suite(V.SUITE, rows, {"gpu": "none"}, tmp_path)
    with open(path) as f:
        header = next(csv.reader(f))
    with open(H.DATA / "backward.csv") as f:
        theirs = next(csv.reader(f))
    assert header[:len(H.COLUMNS)] == theirs[:len(H.COLUMNS)] == H.COLUMNS
    assert {"world", "protocol", "pass", "bytes_shard", "bytes_collective", "note", "rounds_us"} <= set(header)
    assert path.name == "vocab_parallel.csv" and (tmp_path / "vocab_parallel.json").exists()


def test_each_round_is_the_slowest_ranks():
    per_rank = [{"a": [1.0, 5.0, 2.0], "b": [3.0]}, {"a": [2.0, 4.0, 2.5], "b": [1.0]}]
    assert V.slowest(per_rank) == {"a": [2.0, 5.0, 2.5], "b": [3.0]}


def test_scaling_against_the_one_gpu_op():
    one = V.make_row("ours", "none", "bf16", 1, 256000, 1049, "fwd", 0.4, 4.0)
    two = V.make_row("ours", "allreduce", "bf16", 2, 256000, 2097, "fwd", 0.5, 4.0)
    bwd = V.make_row("ours", "allreduce", "bf16", 2, 256000, 2097, "bwd", 0.5, 4.0)
    none = V.make_row("liger", "allreduce", "bf16", 2, 256000, 2097, "fwd", math.nan, 4.0, note="absent")
    V.vs_one_gpu([one, two, bwd, none])
    assert two["vs_one_gpu"] == 0.8 and "vs_one_gpu" not in bwd and "vs_one_gpu" not in none
    assert "vs_one_gpu" not in one


def test_without_a_gpu_it_says_what_it_needs(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert V.main(["--gpus", "2"]) == 2
    assert "needs CUDA GPUs" in capsys.readouterr().out


def test_peers_that_cannot_run_a_configuration_say_why():
    impls = {impl: make for impl, _, make in V.implementations([5, 4], 0)}
    for impl in ("liger", "megatron"):
        with pytest.raises(NotImplementedError, match="even split"):
            impls[impl]()
    fp32 = {impl: make for impl, _, make in V.implementations([5, 5], 0, dtype=torch.float32)}
    with pytest.raises(NotImplementedError, match="in place"):
        fp32["megatron"]()


# ---- the check and the torch peer, over gloo in two CPU processes ----------------------------------

def _float64(full, t):
    leaf = full.detach().double().requires_grad_()
    loss = torch.nn.functional.cross_entropy(leaf, t)
    (g,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), g


def _worker(rank, store):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        widths = [5, 4]  # uneven: the torch peer takes any split
        gen = torch.Generator().manual_seed(3)
        x = torch.randn(11, 9, generator=gen) * 3
        t = torch.randint(0, 9, (11,), generator=gen)
        a = sum(widths[:rank])
        shard = x[:, a:a + widths[rank]].contiguous()
        full = V.gather_rows(shard, widths)
        assert (full is None) == (rank == 1)
        if rank == 0:
            assert torch.equal(full, x)
        impls = {(impl, p): make for impl, p, make in V.implementations(widths, rank)}
        for key in (("ours", "allreduce"), ("ours", "allgather"), ("torch", "allreduce")):
            got = V.check(impls[key](), shard, t, widths, "fp32", single=_float64)
            if rank == 0:
                assert got["check"] == "pass", (key, got)
                assert float(got["grad_err"]) < 1e-5 and float(got["loss_err_f64"]) < 1e-6, (key, got)
            else:
                assert got is None
        # a check that fails says so: a loss off by 1 part in 1,000
        off = V.check(lambda s, t_: impls["torch", "allreduce"]()(s, t_) * 1.001, shard, t, widths, "fp32",
                      single=_float64)
        assert rank == 1 or off["check"] == "FAIL"
    finally:
        dist.destroy_process_group()


def test_check_and_torch_peer_over_gloo(tmp_path):
    """The suite's check on two CPU ranks: the shards gathered on rank 0 in rank order (an
    uneven split), ours by each protocol and the plain-torch peer against float64 of the whole
    logits (the single-GPU op's place), and a wrong loss marked FAIL."""
    spawn(_worker, (str(tmp_path / "store"),), what="the gloo processes")

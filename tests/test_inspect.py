"""GPU-free: every kernel compiles for sm_90a, and its PTX and cubin show what the
chapters claim (128-bit accesses, shuffles, shared memory, cluster exchange, no spills)."""

import math
import re

import pytest

from kernels.config import RowConfig, row_config, vector_width
from kernels.cubin import kernel_resources
from kernels.inspect import access_bits, divergent_shuffles, inspect_op, main
from kernels.rowkernel import COLUMNS_ALL_FROM

from _grid import NS  # the GPU tests' row lengths: every kernel they launch is checked here

OPS = ["reduce_sum", "reduce_max", "rmsnorm", "layernorm", "softmax", "cross_entropy", "softmax_backward",
       "cross_entropy_backward"]
BITS = {"fp32": 32, "bf16": 16, "fp16": 16}


def test_divergent_shuffles_finds_a_shuffle_that_one_lane_reaches():
    """The check above, on a kernel it must refuse: warp_idx() (a shfl.sync of the whole warp)
    inside the branch of lane 0, as cross-entropy's in-launch mean once had it."""
    import cutlass.cute as cute
    from cutlass import Float32
    from kernels.compile import compile_once, fake_stream, fake_vector

    @cute.kernel
    def kernel(out: cute.Tensor):
        if cute.arch.lane_idx() == 0:
            out[cute.arch.warp_idx()] = Float32(1.0)

    @cute.jit
    def host(out: cute.Tensor, stream):
        kernel(out).launch(grid=[1, 1, 1], block=[128, 1, 1], stream=stream)

    ptx = compile_once(("divergent_shuffle_example",),
                       lambda: (host, (fake_vector(Float32, 4), fake_stream()), None)).ptx
    found = divergent_shuffles(ptx)
    assert len(found) == 1 and "shfl.sync.idx" in found[0], found
    assert not divergent_shuffles(ptx.replace("%laneid", "%nctaid.x")), "a uniform branch is not divergent"


def test_access_bits():
    assert access_bits("ld.global.v4.b32") == 128
    assert access_bits("st.global.v2.b32") == 64
    assert access_bits("ld.global.b16") == 16


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("op", OPS)
def test_table_configs_compile_without_spills(op, dtype, n):
    rep = inspect_op(op, dtype, n)
    if (op, dtype, n) == ("layernorm", "bf16", 4097):
        # Known: ptxas keeps 8 bytes in local memory for this one shape (128 threads of 5
        # accesses, a block of one row: 96 registers), where 4100 takes 104 and none, and the
        # same shape in blocks of 256 takes 111 and none (TUNING.md#layernorm-own-rows). Strict:
        # this fails once the spill is gone, so that the exception goes with it.
        assert rep.frame_bytes == 8 and rep.config == RowConfig(128, 128, 1, 8, 5, head=True), rep
    else:
        assert rep.frame_bytes == 0, f"{op} {dtype} N={n} uses {rep.frame_bytes} B of local memory: {rep.config}"
        assert not rep.has("local memory")
    assert 0 < rep.registers <= 255
    # every lane reaches each shuffle (one inside a lane-0 branch hung cross-entropy's mean)
    assert not divergent_shuffles(rep.ptx), f"{op} {dtype} N={n}: {divergent_shuffles(rep.ptx)}"
    bits = BITS[dtype]
    # the row is read with 128-bit accesses: those N allows (N a multiple of the vector), or
    # those of the row's aligned window (any other N of two words or more); into registers,
    # or into shared memory (cp.async moves 4 bytes at least)
    width = 128 if rep.config.head else vector_width(n, bits) * bits
    staged = rep.config.stage == "smem"
    assert rep.config.head == (width == 128 and n % (128 // bits) != 0)
    assert width in rep.widths("async copies" if staged and width >= 32 else "global loads")
    cfg = rep.config
    if op == "cross_entropy_backward":  # a map: nothing to exchange (a cluster only splits its row)
        assert not rep.has("warp shuffles") and not rep.has("block barriers")
        assert not rep.has("mbarrier ops") and not rep.has("cluster barriers") and not rep.has("remote shared stores")
        return
    if cfg.threads_per_row > 1:
        assert rep.has("warp shuffles") and all("bfly" in k or "idx" in k for k in rep.counts["warp shuffles"])
    if cfg.cluster_n > 1:
        for fam in ("cluster address maps", "remote shared stores", "mbarrier ops", "cluster barriers"):
            assert rep.has(fam), f"cluster kernel without {fam}"
    elif cfg.warps_per_row > 1:
        assert rep.has("block barriers") and rep.has("shared stores")
    elif op != "cross_entropy":  # (whose mean adds up each block's losses through shared memory)
        assert not rep.has("remote shared stores") and not rep.has("block barriers")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("tier", ["thread", "warp", "block", "cluster"])
@pytest.mark.parametrize("n", [1024, 65536, 262144])
def test_each_tier_compiles(tier, dtype, n):
    rep = inspect_op("reduce_sum", dtype, n, max_tier=tier, stream=True)
    assert rep.config.max_tier in ("thread", "warp", "block", "cluster")
    if tier == "thread":
        assert not rep.has("warp shuffles")
    if tier == "cluster" and rep.config.cluster_n > 1:
        assert rep.has("remote shared stores")
    assert rep.frame_bytes == 0


@pytest.mark.parametrize("n", [131072, 262144, 131000, 262143])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("op", ["rmsnorm", "softmax", "layernorm"])
def test_longest_kept_rows_are_staged_in_shared_memory(op, dtype, n):
    """A row staged in shared memory (the table's choice for the longest rows; asked for
    here, so every dtype is checked) arrives by cp.async (16 bytes when N allows; single
    16-bit elements go through a register), every thread reads back only what it copied
    (no barrier besides the reduction's), nothing spills, and a thread needs fewer registers
    than with the row kept in registers (but for softmax fp32 at odd N = 262143: see below)."""
    rep = inspect_op(op, dtype, n, config=row_config(op, n, BITS[dtype], stage="smem"))
    cfg = rep.config
    assert cfg.stage == "smem"
    assert rep.frame_bytes == 0 and not rep.has("local memory")
    width = cfg.vec * BITS[dtype]
    if width >= 32:
        assert set(rep.async_copy_bytes()) == {width // 8}
        assert sum(rep.async_copy_bytes().values()) == cfg.vecs_per_thread
        # the weight (and bias) arrive by plain loads; softmax reads nothing else
        assert not rep.has("global loads") if op == "softmax" else rep.widths("global loads") == {width}
    else:
        assert not rep.async_copy_bytes() and rep.widths("global loads") == {width}
    # the copies in the op's commit groups, the fold waiting for each in turn (RMSNorm's and
    # LayerNorm's table: two)
    groups = cfg.groups
    assert groups == (1 if op == "softmax" else 2)
    # (with ragged N the compiler may copy a group's commit into both arms of the branch that
    # skips rows past M, so a path still commits `groups` times)
    commits = rep.counts["async copy groups"]["cp.async.commit_group"]
    assert rep.counts["async copy groups"]["cp.async.wait_group"] == groups
    assert commits == groups if n == cfg.cols_covered else groups <= commits <= 2 * groups - 1
    assert [int(w) for w in re.findall(r"cp\.async\.wait_group\s+(\d+)", rep.ptx)] == list(range(groups - 1, -1, -1))
    assert width in rep.widths("shared loads") and width in rep.widths("global stores")
    assert cfg.cluster_n > 1 and not rep.has("block barriers")  # the cluster tier needs no bar.sync
    if op == "layernorm":  # one exchange a row (count, mean and M2 together): one mbarrier
        assert rep.counts["mbarrier ops"]["mbarrier.init.shared.b64"] == 1
        return
    # against the row kept in registers with the shared kept table's shape
    reg = inspect_op(op, dtype, n, config=row_config("row_reduce_kept", n, BITS[dtype]))
    assert reg.config.stage == "reg" and not reg.async_copy_bytes()
    if n == cfg.cols_covered and op == "rmsnorm" and cfg.vecs_per_thread >= COLUMNS_ALL_FROM:
        # the weight's accesses all loaded before the exchange: up to 4 registers each, fewer
        # in all than the row would take
        assert 32 < rep.registers <= 32 + 4 * cfg.vecs_per_thread and rep.registers < reg.registers
    elif n == cfg.cols_covered:  # no ragged tile: 32 registers, a full SM of threads
        assert rep.registers <= 32 < reg.registers
    elif (op, dtype, n) == ("softmax", "fp32", 262143):
        # scalar accesses (odd N) and the exact exponent (the epilogue subtracts the max before
        # scaling by log2 e): 52 registers against 50 kept (32 before the exact exponent)
        assert rep.registers <= reg.registers + 4
    else:  # the ragged tile's predicates cost registers, fewer than the row would
        assert rep.registers < reg.registers


@pytest.mark.parametrize("dtype,n,full", [("bf16", 128256, 131072), ("bf16", 256000, 262144), ("fp32", 128256, 131072),
                                          ("bf16", 32000, 32768)])
def test_a_ragged_tile_costs_the_weight_no_registers(dtype, n, full):
    """RMSNorm's weight where N does not fill the last column tile (N a multiple of the vector):
    every access is loaded unpredicated, from an address clamped into the row, so the staged
    row's thread takes about the registers of the full tile's (predicated loads left the
    compiler holding each access as fp32: 98 registers against 50 at bf16 128256, one block of
    512 threads an SM instead of two; benchmarks/TUNING.md#column-loads-past-n)."""
    rep, ref = inspect_op("rmsnorm", dtype, n), inspect_op("rmsnorm", dtype, full)
    assert rep.config.cols_covered > n and not rep.config.head
    assert rep.config.stage == ref.config.stage
    assert rep.widths("global loads") == {128} and rep.frame_bytes == 0
    assert rep.registers <= ref.registers + 10, (rep.registers, ref.registers)
    if rep.config.threads_per_block == 512:  # two blocks an SM
        assert 2 * 512 * rep.registers <= 65536


@pytest.mark.parametrize("op,dtype,n,full", [("layernorm", "bf16", 128256, 131072), ("layernorm", "bf16", 151936, 262144),
                                             ("layernorm", "bf16", 256000, 262144), ("layernorm", "fp32", 151936, 262144),
                                             ("softmax", "fp32", 256000, 262144)])
def test_a_staged_rows_reads_past_n_cost_no_registers(op, dtype, n, full):
    """A staged row whose last column tile N does not fill: a later reduction and the epilogue
    read the accesses past N back from shared memory as the pad, not as whatever the registers
    held, so the compiler keeps no fp32 copy of the row from the fold to the epilogue (LayerNorm bf16 128256 took 106
    registers, 151936 128: one block of 512 threads an SM; benchmarks/TUNING.md#staged-reads-past-n)."""
    rep, ref = inspect_op(op, dtype, n), inspect_op(op, dtype, full)
    assert rep.config.stage == ref.config.stage == "smem" and rep.config.cols_covered > n and not rep.config.head
    assert rep.frame_bytes == 0 and rep.registers <= ref.registers + 10, (rep.registers, ref.registers)
    assert 2 * rep.config.threads_per_block * rep.registers <= 65536  # two blocks an SM


@pytest.mark.parametrize("n", [1000, 8192, 65536])
def test_shared_memory_stage_compiles_for_any_kept_row(n):
    """Forced by ``config=``, the stage works where the table keeps registers too, including
    blocks of several rows (N = 1000: two rows a block)."""
    for op in ("rmsnorm", "softmax", "layernorm"):
        cfg = row_config(op, n, 16, stage="smem")
        rep = inspect_op(op, "bf16", n, config=cfg)
        assert rep.config == cfg and rep.frame_bytes == 0
        assert set(rep.async_copy_bytes()) == {16}


def test_shared_memory_stage_is_only_for_ops_that_write_rows():
    with pytest.raises(ValueError, match="stage='smem' buys nothing"):
        inspect_op("reduce_sum", "fp32", 262144, stream=False, config=row_config("rmsnorm", 262144, 32))
    with pytest.raises(ValueError, match="stage='smem' buys nothing"):
        inspect_op("cross_entropy", "fp32", 65536, config=row_config("rmsnorm", 65536, 32, stage="smem"))
    with pytest.raises(ValueError, match="writes rows"):
        inspect_op("softmax", "fp32", 65536, config=row_config("cross_entropy", 65536, 32))


def test_a_weighted_fold_is_a_kept_rows_first_reduction():
    """MEAN_VAR counts the row's elements from their coordinates, which only the first fold of a
    kept row is handed: anywhere else the op is refused before it compiles."""
    import torch
    from kernels.layernorm import LayerNorm
    from kernels.reduce import MEAN_VAR, SUM

    class Twice(LayerNorm):
        reductions = (SUM, MEAN_VAR)
    with pytest.raises(ValueError, match="weighs its elements"):
        Twice.compile(torch.bfloat16, 4096)


@pytest.mark.parametrize("n", [1024, 4096, 65536, 131072])
def test_layernorm_reduces_once_a_row(n):
    """LayerNorm's mean and variance take one exchange: the cluster tier's mbarrier once, and each
    partial (count, mean, M2, padded to four words) one 128-bit remote store."""
    rep = inspect_op("layernorm", "bf16", n)
    assert rep.config.cluster_n > 1 or n == 1024
    if rep.config.cluster_n > 1:
        assert rep.counts["mbarrier ops"]["mbarrier.init.shared.b64"] == 1
        assert rep.widths("remote shared stores") == {128}
    assert rep.frame_bytes == 0


@pytest.mark.parametrize("dtype, n, padded", [("bf16", 32768, False), ("bf16", 32000, True), ("fp32", 4096, False),
                                             ("fp32", 4000, True), ("bf16", 1024, False), ("bf16", 1000, True)])
def test_layernorm_moves_its_counts_only_where_they_differ(dtype, n, padded):
    """Where no access holds padding, every part of a tier counts as many elements as the next:
    the counts are numbers known at trace time, which no shuffle moves, so LayerNorm's butterflies
    carry two values (sum, M2) to RMSNorm's one, at the same shape; where some accesses lie past
    N they carry the count too, three (LayerNorm compiled at RMSNorm's shape, where its table's differs)."""
    rms = inspect_op("rmsnorm", dtype, n)
    ln = inspect_op("layernorm", dtype, n, config=rms.config)
    assert (rms.config.cols_covered > n) == padded
    bfly = [r.counts["warp shuffles"]["shfl.sync.bfly.b32"] for r in (rms, ln)]
    assert bfly[1] == (3 if padded else 2) * bfly[0], bfly


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("n", [1000, 1024, 8192, 65536, 262144])
def test_cross_entropy_split_target_order(n, dtype):
    """targets="split" (QuACK's order): the target is the kernel's first global load, before the
    row's 128-bit loads; its logit, the only other scalar load of the row, comes after the fold's
    first exponential and before the warp exchange's first butterfly shuffle; "late" loads both
    after the exchange; neither spills."""
    from dataclasses import replace
    base = row_config("cross_entropy", n, BITS[dtype])
    for order in ("split", "late"):
        rep = inspect_op("cross_entropy", dtype, n, config=replace(base, targets=order))
        body = [ln.strip() for ln in rep.ptx.splitlines()]
        loads = [i for i, ln in enumerate(body) if ln.startswith("ld.global")]
        target = next(i for i in loads if body[i].startswith("ld.global.b64"))
        logit = next(i for i in loads if body[i].startswith("ld.global.b16" if dtype == "bf16" else "ld.global.b32"))
        wide = [i for i in loads if body[i].startswith(("ld.global.v", "ld.global.nc.v"))]
        first_exp = next(i for i, ln in enumerate(body) if ln.startswith("ex2.approx"))
        first_shfl = next(i for i, ln in enumerate(body) if ln.startswith("shfl.sync.bfly"))
        assert rep.frame_bytes == 0
        if order == "split":
            assert target == loads[0] < wide[0], "the target is loaded first"
            assert first_exp < logit < first_shfl
        else:
            assert first_shfl < target < logit


@pytest.mark.parametrize("n, bits, want", [(1024, 16, "split"), (1000, 16, "split"), (8192, 16, "split"),
                                           (65536, 16, "late"), (262144, 16, "split"), (1024, 32, "late"),
                                           (8192, 32, "split"), (16384, 32, "split"), (32768, 32, "split"),
                                           (65536, 32, "split"), (131072, 32, "late"), (262144, 32, "late")])
def test_cross_entropy_target_order_comes_from_the_table(n, bits, want):
    """A row length takes the order of the cross-entropy table's row it falls in."""
    assert row_config("cross_entropy", n, bits).targets == want


@pytest.mark.parametrize("n", [32768, 131072, 262144])
def test_loads_ahead_issue_the_next_pass_before_the_fold(n):
    """RowConfig.ahead: the second pass's 128-bit loads come before the first exp (without
    it, after the first pass's exps), with a second buffer of registers and no spills. One
    block a row, 4 to 32 passes (the table splits these rows over clusters, 2 passes each)."""
    from dataclasses import replace

    def lines(ptx, prefix):
        return [i for i, ln in enumerate(ptx.splitlines()) if ln.strip().startswith(prefix)]
    base = RowConfig(256, 256, 1, 8, 4, passes=n // (256 * 8 * 4), stage="stream")
    assert base.passes >= 4
    regs = {}
    for ahead in (0, 1):
        rep = inspect_op("cross_entropy", "bf16", n, config=replace(base, ahead=ahead))
        assert rep.frame_bytes == 0
        loads, exps = lines(rep.ptx, "ld.global.v4"), lines(rep.ptx, "ex2.approx")
        second_pass = loads[base.vecs_per_thread]  # the first load after pass 0's
        assert (second_pass < exps[0]) == bool(ahead), f"ahead={ahead}: 2nd pass load at {second_pass}, exp at {exps[0]}"
        regs[ahead] = rep.registers
    assert regs[1] > regs[0]  # the second buffer


def test_block_tier_spills_when_a_block_holds_the_whole_row():
    """Chapter 5's claim: one block cannot keep a 256k-element fp32 row in registers."""
    rep = inspect_op("reduce_sum", "fp32", 262144, max_tier="block", stream=False)
    assert rep.frame_bytes > 0


def test_cubin_parser_reads_registers_and_frame():
    rep = inspect_op("softmax", "bf16", 65536)
    from kernels.inspect import compile_op
    res = kernel_resources(compile_op("softmax", "bf16", 65536).cubin)
    assert len(res) == 1 and res[0].registers == rep.registers


def test_cli_prints_a_report(capsys):
    assert main(["rmsnorm", "--dtype", "bf16", "--n", "8192"]) == 0
    out = capsys.readouterr().out
    assert "ld.global.v4.b32" in out and "registers/thread" in out


def test_compiles_for_hopper():
    """Without a GPU the package targets sm_90a (kernels/__init__), not the DSL's default."""
    assert ".target sm_90a" in inspect_op("softmax", "bf16", 4096).ptx


def test_cli_arch_flag_retargets(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "kernels.inspect", "copy", "--n", "4096", "--arch", "sm_90",
                          "--ptx"], capture_output=True, text=True, timeout=300).stdout
    assert ".target sm_90\n" in out


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("n", [4096, 65536, 262144])
def test_backward_kernels_read_and_write_with_128_bit_accesses(n, dtype):
    """Softmax's backward reads two rows (y, dy) and writes one; cross-entropy's reads the logits
    and writes their gradient in passes, with each row's target, lse and dloss (three scalar
    loads) and no exchange at all."""
    sm = inspect_op("softmax_backward", dtype, n)
    width = 128
    if sm.config.stage == "smem":
        assert sum(sm.async_copy_bytes().values()) == 2 * sm.config.vecs_per_thread  # both rows staged
    else:
        assert width in sm.widths("global loads")
    assert width in sm.widths("global stores") and sm.frame_bytes == 0
    ce = inspect_op("cross_entropy_backward", dtype, n)
    assert ce.config.stage == "stream" and ce.widths("global stores") == {width}
    assert width in ce.widths("global loads") and not ce.has("warp shuffles") and not ce.has("block barriers")
    assert ce.frame_bytes == 0


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", [1, 7, 64, 1000, 1024, 4097, 8192, 16384, 65536, 131072, 262143, 262144])
@pytest.mark.parametrize("op", ["rmsnorm_backward", "layernorm_backward"])
def test_norm_backward_kernels_walk_rows_without_spills(op, n, dtype):
    """The persistent kernels: one block (a cluster, for long rows) a row at a time, a loop back
    to the next row; the row staged in shared memory with cp.async where N allows 16-byte
    accesses, the next row's copies issued before this one is worked (three commit groups: the
    first row, and one for each buffer in the loop; a one-buffer walk, 32-bit rows of 256k, also
    one a refilled access); x, dy and the weight read with the widest
    access N allows, one fp32 partial per column written once, nothing spilled."""
    rep = inspect_op(op, dtype, n)
    cfg = rep.config
    assert cfg.rows_per_block == 1 and cfg.stage in ("reg", "smem")
    assert cfg.cluster_n == 1 or cfg.stage == "smem"  # (a row split over a cluster is staged)
    if op == "rmsnorm_backward":  # one block a row up to 8,192 16-bit or 4,096 32-bit elements
        assert (cfg.cluster_n > 1) == (n > 8192 * 16 // BITS[dtype] and cfg.stage == "smem")
    else:  # 4,096 elements a block
        assert (cfg.cluster_n > 1) == (n > 4096)
    if cfg.stage == "reg":  # (RMSNorm's shortest rows: no cp.async, one barrier a row for the slots)
        assert not rep.has("async copies") and op == "rmsnorm_backward" and cfg.cluster_n == 1
        return
    # (LayerNorm's 16-bit rows from 131,072: two sums of 32 columns a thread spill 48-88 bytes, and
    # measured ahead of the shapes that do not; TUNING.md#norm-backward)
    # (and its 32-bit rows of 262,144 in 256 threads, one buffer: 16 bytes, 80.7 against 76.1% of
    # the ceiling at 512 threads without a spill; book/data/norm_backward_fp32_262k.csv)
    if not (op == "layernorm_backward" and (n >= 131072 and BITS[dtype] == 16 or n == 262144)):
        assert rep.frame_bytes == 0 and not rep.has("local memory")
    width = vector_width(n, BITS[dtype]) * BITS[dtype]
    # (one buffer, 32-bit rows of 256k: the first row's dy, and each row's in the loop, a group an
    # access, each waited for in turn, up to EACH_ACCESS_MAX accesses a thread; past it one group
    # a row, and one wait a row: the compiler may copy a commit into both sides of a branch)
    from kernels.rowkernel import EACH_ACCESS_MAX
    v = cfg.vecs_per_thread
    groups = 3 if cfg.buffers == 2 else 3 * (1 + v)
    if cfg.buffers == 1:  # (its 4-byte and wider accesses are all cp.async)
        g = rep.counts["async copy groups"]
        if v <= EACH_ACCESS_MAX:
            assert g["cp.async.commit_group"] == groups and g["cp.async.wait_group"] == 1 + 2 * v
        else:
            assert 6 <= g["cp.async.commit_group"] <= 8 and g["cp.async.wait_group"] == 3
    if width == 128:
        assert rep.counts["async copies"] and rep.counts["async copy groups"]["cp.async.commit_group"] == groups
    else:  # (cp.async moves 4, 8 or 16 bytes: narrower rows are loaded and stored)
        assert width in rep.widths("global loads")
    assert width in rep.widths("global stores")
    assert 32 in rep.widths("global stores")  # the partials, one fp32 a column
    if cfg.cluster_n > 1:
        assert rep.has("remote shared stores") and rep.counts["mbarrier ops"]["mbarrier.try_wait.parity.shared.b64"] == 2
    elif cfg.warps_per_row > 1:
        assert rep.counts["block barriers"]["bar.sync"] >= 2  # each buffer's exchange
    assert re.search(r"bra(\.uni)?\s+\$L__BB0_\d+;", rep.ptx)


# Row lengths of every kind of window: a kept row in registers (one block, then a cluster),
# staged in shared memory over a cluster, streamed (cross-entropy), the longest.
WINDOW_NS = [1001, 3001, 50257, 131071, 262143]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n", WINDOW_NS)
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm", "softmax", "cross_entropy", "softmax_backward",
                                "cross_entropy_backward"])
def test_odd_rows_read_and_write_whole_words(op, dtype, n):
    """An N that is no multiple of the vector (GPT-2's 50257, odd N) still moves the body of
    every row with 128-bit accesses: the row's aligned window, words from the one its first
    element lies in; its edges (and rows whose tensors do not line up) element by element."""
    rep = inspect_op(op, dtype, n)
    cfg = rep.config
    assert cfg.head and cfg.vec == 128 // BITS[dtype] and cfg.cols_covered >= n + cfg.vec - 1, cfg
    assert rep.frame_bytes == 0 and not rep.has("local memory"), f"{op} {dtype} N={n} spills: {cfg}"
    assert not divergent_shuffles(rep.ptx)
    staged = cfg.stage == "smem"
    assert 128 in rep.widths("async copies" if staged else "global loads"), rep
    if op in ("rmsnorm", "layernorm", "softmax", "softmax_backward", "cross_entropy_backward"):
        assert 128 in rep.widths("global stores"), rep  # the body's stores
        # the edges: one element at a time, an element's width
        assert BITS[dtype] in rep.widths("global stores"), rep


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", WINDOW_NS[:4])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_a_window_cuts_its_columns_out_of_whole_words(op, dtype, n):
    """In a row's window the weight (and bias) sit at the row's shift. A 16-bit access loads the
    two 16-byte words of the vector it straddles and cuts itself out of them with a funnel
    shift: its column loads are 128-bit, one or two an access (the compiler may share one),
    element by element only the vector's last, partial word, and at an N that leaves none (a
    misaligned view of 4,096 columns) nothing. A 32-bit access (four elements) loads its
    columns element by element."""
    cols = {"rmsnorm": 1, "layernorm": 2}[op]
    for rep, partial in ((inspect_op(op, dtype, n), n % (128 // BITS[dtype]) != 0),
                         (inspect_op(op, dtype, 4096, head=True), False)):
        cfg = rep.config
        assert cfg.head, cfg
        loads = rep.counts["global loads"]
        wide = sum(c for k, c in loads.items() if access_bits(k) == 128)
        narrow = sum(c for k, c in loads.items() if access_bits(k) < 128)
        x = 0 if cfg.stage == "smem" else cfg.vecs_per_thread  # a staged row comes by cp.async
        if BITS[dtype] == 16:
            assert x + cols * cfg.vecs_per_thread <= wide <= x + 2 * cols * cfg.vecs_per_thread, (cfg, loads)
            assert (narrow > 0) == partial, (cfg, loads)
            assert "shf.r.wrap.b32" in rep.ptx
        else:
            assert wide == x and narrow >= cols * cfg.vecs_per_thread, (cfg, loads)


@pytest.mark.parametrize("n", [3001, 50257])
def test_a_window_kernel_takes_any_stride_and_base(n):
    """The window kernel's signature promises no alignment (it finds each row's place in its
    word at run time), so that one compiled kernel serves every view of N columns; the plain
    kernel's promises 16-byte rows."""
    from kernels.rowkernel import RowOp
    from kernels.softmax import Softmax
    assert Softmax.takes_window(n, 2, 1) and not Softmax.takes_window(4096, 2, 8)
    assert not Softmax.takes_window(15, 2, 1), "a row shorter than two words stays narrow"
    from kernels.norm_backward import RMSNormBackward
    assert not RMSNormBackward.takes_window(n, 2, 1), "sums over rows column by column: no windows"
    plain = inspect_op("softmax", "bf16", n, head=False)
    window = inspect_op("softmax", "bf16", n)
    assert window.config.head and not plain.config.head
    fam = "async copies" if window.config.stage == "smem" else "global loads"
    assert 128 not in plain.widths("global loads") | plain.widths("async copies") and 128 in window.widths(fam)
    assert issubclass(Softmax, RowOp)


def test_a_window_takes_whole_words():
    """h is counted in 16-byte words, so a window's accesses must be words: a narrower vector
    would leave up to 16 bytes of the row's tail uncovered."""
    with pytest.raises(ValueError, match="16-byte words"):
        row_config("softmax", 1021, 16, vec=4, head=True)
    with pytest.raises(ValueError, match="16-byte words"):
        RowConfig(64, 128, 1, 4, 5, head=True).check(1021, 16)
    cfg = row_config("softmax", 1021, 16, head=True)
    assert cfg.vec == 8 and cfg.cols_covered >= 1021 + 7


def test_the_sanitizers_probe_is_one_cluster_exchange():
    """``benchmarks.sanitize --probe`` (the kernel that shows synccheck's limitation with clusters
    of 16) compiles to the toolkit's cluster tier and nothing more: the mbarrier armed and its
    bytes expected, a 4-byte st.async into each peer, the wait on its parity, the cluster barrier."""
    from benchmarks.sanitize import compile_probe
    ptx = compile_probe(16, 40, 8192).ptx
    for instruction in ("mbarrier.init.shared.b64", "mbarrier.arrive.expect_tx.shared.b64",
                        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32",
                        "mbarrier.try_wait.parity.shared.b64", "barrier.cluster.arrive.relaxed", "barrier.cluster.wait"):
        assert instruction in ptx, instruction
    assert "ld.global" not in ptx

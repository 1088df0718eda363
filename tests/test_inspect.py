"""GPU-free: every kernel compiles for sm_90a, and its PTX and cubin show what the
chapters claim (128-bit accesses, shuffles, shared memory, cluster exchange, no spills)."""

import pytest


from kernels.config import vector_width
from kernels.cubin import kernel_resources
from kernels.inspect import access_bits, inspect_op, main

OPS = ["reduce_sum", "reduce_max", "rmsnorm", "softmax", "cross_entropy"]
NS = [1, 7, 64, 1000, 1024, 4097, 8192, 16384, 32768, 65536, 131071, 131072, 262144]


def test_access_bits():
    assert access_bits("ld.global.v4.b32") == 128
    assert access_bits("st.global.v2.b32") == 64
    assert access_bits("ld.global.b16") == 16


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("op", OPS)
def test_table_configs_compile_without_spills(op, dtype, n):
    rep = inspect_op(op, dtype, n)
    assert rep.frame_bytes == 0, f"{op} {dtype} N={n} uses {rep.frame_bytes} B of local memory: {rep.config}"
    assert not rep.has("local memory")
    assert 0 < rep.registers <= 255
    bits = {"fp32": 32, "bf16": 16, "fp16": 16}[dtype]
    # the row is read with the widest access N allows (128 bits when N is a multiple of the vector)
    assert vector_width(n, bits) * bits in rep.widths("global loads")
    if n % (128 // bits) == 0:
        assert 128 in rep.widths("global loads")
    cfg = rep.config
    if cfg.threads_per_row > 1:
        assert rep.has("warp shuffles") and all("bfly" in k or "idx" in k for k in rep.counts["warp shuffles"])
    if cfg.cluster_n > 1:
        for fam in ("cluster address maps", "remote shared stores", "mbarrier ops", "cluster barriers"):
            assert rep.has(fam), f"cluster kernel without {fam}"
    elif cfg.warps_per_row > 1:
        assert rep.has("block barriers") and rep.has("shared stores")
    else:
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

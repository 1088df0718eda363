"""Chapter 1's probes compile without a GPU and measure sane numbers on one."""
import torch

from kernels.hierarchy import compile_chase, compile_read_probe, compile_smem_probe, make_chain, read_probe
from kernels.inspect import _count

from _gpu import requires_gpu


def test_probes_compile_to_the_right_memory_operations():
    from kernels.inspect import access_bits
    assert {access_bits(op) for op in _count(compile_read_probe(torch.float32).ptx)["global loads"]} == {128}
    assert "ld.shared.v4.b32" in _count(compile_smem_probe().ptx)["shared loads"]
    assert "ld.shared.b32" in _count(compile_chase(True, 1024).ptx)["shared loads"]


def test_read_probe_covers_its_rows_in_every_width():
    """One block's pass is one PROBE_WIDTH row whatever the element width (a 16-bit probe with
    fp32's 4 loads a thread covered 8192 columns: a grid of 0 blocks along the row)."""
    from kernels.hierarchy import PROBE_WIDTH
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        c = compile_read_probe(dtype)
        ptx_loads = _count(c.ptx)["global loads"]
        assert sum(ptx_loads.values()) == PROBE_WIDTH // (256 * 128 // torch.finfo(dtype).bits), (dtype, ptx_loads)


def test_chain_is_one_cycle():
    nxt = make_chain(4096, 32, device="cpu")
    seen, i = set(), 0
    for _ in range(4096 // 32):
        seen.add(i)
        i = int(nxt[i])
    assert i == 0 and len(seen) == 4096 // 32


@requires_gpu
def test_chase_follows_the_chain():
    nxt = make_chain(4096, 32)
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    compile_chase(False)(nxt, out, 5)
    i = 0
    for _ in range(5):
        i = int(nxt[i])
    assert out.item() == i


@requires_gpu
def test_read_probe_reads_without_writing():
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(4096 * 64, device="cuda", dtype=dtype)
        out = torch.full((1,), 7.0, device="cuda")
        read_probe(x, out)
        torch.cuda.synchronize()
        assert out.item() == 7.0

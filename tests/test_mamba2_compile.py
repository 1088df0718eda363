"""GPU-free: every cuTile kernel of the SSD forward compiles to an sm_90 cubin, the products
run on Hopper's tensor cores (wgmma), and the bf16 kernels keep their tiles in registers."""
import pytest
import torch

from kernels.cubin import kernel_resources
from kernels.mamba2.tile_env import have_tile

ok, why = have_tile()
pytestmark = pytest.mark.skipif(not ok, reason=why)

SHAPE = (8, 512, 64, 64, 128)  # (b, L, h, p, n): the state tiles of the benchmark shape
MMA_KERNELS = {"prep", "bmm", "chunk_state", "state", "chunk_scan", "scan", "segment_state"}
WANT = {"single": {"prep", "scan"}, "fused": {"prep", "state", "chunk_scan"},
        "staged": {"cumsum", "chunk_state", "state_passing", "bmm", "chunk_scan"},
        "segments": {"prep", "segment_state", "state_passing", "scan"}}


@pytest.mark.parametrize("impl", ["single", "fused", "staged"])
@pytest.mark.parametrize("chunk", [64, 128, 256])
def test_bf16_kernels_compile_to_wgmma_without_spills(impl, chunk):
    from kernels.mamba2 import export_cubins
    cubins = export_cubins(SHAPE, torch.bfloat16, chunk, impl)
    assert set(cubins) == WANT[impl]
    for name, cubin in cubins.items():
        (res,) = kernel_resources(cubin)
        assert res.frame_bytes <= 128, f"{name}: {res.frame_bytes} bytes of local memory a thread"
        if name in MMA_KERNELS:
            assert b"wgmma.mma_async" in cubin, f"{name} does not use wgmma"


def test_fp32_and_options_compile():
    """fp32 inputs (fp32 products on the CUDA cores), groups = heads, no optional inputs, heads not a power of two."""
    from kernels.mamba2 import export_cubins
    assert set(export_cubins((1, 300, 80, 32, 64), torch.bfloat16, 64, "fused", ngroups=80, has_D=False,
                             has_init=False, has_bias=False, dt_softplus=False)) == {"prep", "state", "chunk_scan"}
    fp32 = export_cubins(SHAPE, torch.float32, 64, "fused")
    # fp32 products run as FMAs on the CUDA cores and spill (chapter 10 says so: 4-8 KB a thread);
    # a change that stops the spills should update the chapter
    assert {k: 4096 <= kernel_resources(v)[0].frame_bytes <= 8192 for k, v in fp32.items()} == \
        {"prep": True, "state": True, "chunk_scan": True}
    small = export_cubins((4, 1024, 8, 64, 128), torch.bfloat16, 256, "fused")  # few sequences: thin state tiles
    assert b"wgmma.mma_async" in small["state"]


def test_one_kernel_pass_compiles_for_few_sequences_and_options():
    """Few sequences: thin state tiles by default, or cut into segments (``SSDConfig.segments =
    0``, off by default); groups = heads, no optional inputs, chunk 16."""
    from dataclasses import replace
    from kernels.mamba2 import export_cubins, ssd
    from kernels.mamba2.ssd import scan_segments, scan_tile
    on = replace(ssd.DEFAULT, segments=0)
    assert scan_tile(64, 32, 132) == 16 and scan_tile(64, 512, 132) == 64
    thin = export_cubins((4, 1024, 8, 64, 128), torch.bfloat16, 64, "single")
    assert set(thin) == WANT["single"] and b"wgmma.mma_async" in thin["scan"]
    assert set(export_cubins((1, 300, 80, 32, 64), torch.bfloat16, 16, "single", ngroups=80, has_D=False,
                             has_init=False, has_bias=False, dt_softplus=False)) == WANT["single"]
    assert scan_segments(32, 256, 132) == 1  # off by default
    # 32 sequences of 256 blocks: 16 segments (512 blocks); 64 of 1024: 8; 512 sequences: none;
    # 16 blocks: segments of at least 4 blocks
    assert tuple(scan_segments(w, nb, 132, on) for w, nb in ((32, 256), (64, 1024), (512, 64), (32, 16))) \
        == (16, 8, 1, 4)
    # the rules fill the SMs the device has: on a GPU of half the SMs, half the segments
    assert scan_segments(32, 256, 66, on) == 8
    segmented = export_cubins((4, 1024, 8, 64, 128), torch.bfloat16, 64, "single", config=on)
    assert set(segmented) == WANT["segments"]
    for name in ("segment_state", "scan"):
        assert b"wgmma.mma_async" in segmented[name] and kernel_resources(segmented[name])[0].frame_bytes == 0
    assert set(export_cubins((1, 300, 80, 32, 64), torch.bfloat16, 16, "single", ngroups=80, has_D=False,
                             has_init=False, has_bias=False, dt_softplus=False, config=on)) == WANT["segments"]


def test_auto_picks_the_one_kernel_pass_only_with_enough_sequences():
    from dataclasses import replace
    from kernels.mamba2 import ssd
    from kernels.mamba2.ssd import choose_impl, single_min_sequences
    least = single_min_sequences(132)
    assert least == 2 * 132  # two scan blocks an SM (the scan's occupancy)
    assert choose_impl(8, 64, 16, sms=132) == "single"
    assert choose_impl(4, 8, 16, sms=132) == "fused"  # 32 short sequences: the scan would idle the GPU
    assert choose_impl(4, 8, 16, 16384, 64, sms=132) == "fused"  # 32 long ones: segments are off by default
    assert choose_impl(8, 64, 32, sms=132) == "fused"  # fp32
    assert choose_impl(1, least - 1, 16, sms=132) == "fused" and choose_impl(1, least, 16, sms=132) == "single"
    assert choose_impl(1, least // 2, 16, sms=66) == "single"  # a GPU of fewer SMs fills with fewer
    from kernels.mamba2 import export_cubins
    assert set(export_cubins((8, 256, 64, 64, 128), torch.bfloat16, 64)) == WANT["single"]
    assert set(export_cubins((4, 256, 8, 64, 128), torch.bfloat16, 64)) == WANT["fused"]
    on = replace(ssd.DEFAULT, segments=0)  # segments on: 32 long sequences become 512 segments
    assert choose_impl(4, 8, 16, 16384, 64, sms=132, cfg=on) == "single"
    assert choose_impl(4, 8, 16, 256, 64, sms=132, cfg=on) == "fused"


def test_state_latency_hints_reach_the_state_kernel():
    """Each ``SSDConfig.state_latency`` entry is four hints in 0..10, and its tile's state kernel
    compiles with it to different machine code than without hints (the hints are arguments, not
    dead data); (1, 64 heads) sequences take the (64, 32) tile and its entry."""
    from dataclasses import replace
    from kernels.cubin import text_hash
    from kernels.mamba2 import export_cubins, ssd
    assert ssd.state_tile(64, 128, 64, 132) == (64, 32)
    for (bits, bn), hints in ssd.DEFAULT.state_latency:
        assert bits == 16 and len(hints) == 4 and all(0 <= v <= 10 for v in hints), (bn, hints)
    shape = (1, 4096, 64, 64, 128)  # 64 sequences: the (64, 32) tile
    hinted = export_cubins(shape, torch.bfloat16, 64, "fused")["state"]
    plain = export_cubins(shape, torch.bfloat16, 64, "fused", config=replace(ssd.DEFAULT, state_latency=()))["state"]
    assert kernel_resources(hinted)[0].frame_bytes == 0
    assert text_hash(hinted) != text_hash(plain)

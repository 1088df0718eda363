"""The copy kernel of chapter 2: PTX widths without a GPU, exact copies on one."""
import pytest
import torch

from kernels.copy import copy, copy_
from kernels.inspect import inspect_op

from _gpu import requires_gpu


@pytest.mark.parametrize("dtype,bits", [("fp32", 32), ("fp32", 64), ("fp32", 128), ("bf16", 16), ("bf16", 32),
                                        ("bf16", 64), ("bf16", 128)])
@pytest.mark.parametrize("coalesced", [True, False])
def test_access_width_is_what_was_asked(dtype, bits, coalesced):
    rep = inspect_op("copy", dtype, 4096, bits=bits, coalesced=coalesced)
    assert rep.widths("global loads") == {bits}
    assert rep.widths("global stores") == {bits}
    assert rep.frame_bytes == 0


def test_128_bit_copy_uses_16_byte_loads():
    """The claim of chapter 2: every global load and store of the fast copy moves 16 bytes
    (ld.global.v4.b32 or ld.global.v2.b64, one LDG.E.128 either way); fails if any is narrower."""
    for dtype in ("fp32", "bf16", "fp16"):
        rep = inspect_op("copy", dtype, 4096)
        assert rep.widths("global loads") == {128} and rep.widths("global stores") == {128}


def test_copy_rejects_bad_input():
    with pytest.raises(ValueError, match="CUDA"):
        copy(torch.zeros(16))
    with pytest.raises(TypeError, match="float32"):
        copy(torch.zeros(16, dtype=torch.int32))


def _copy_cases():
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        ebits = torch.finfo(dtype).bits
        for numel in (8, 1000, 4096, 4096 * 37, (1 << 22) + 8):
            for bits in (32, 64, 128):
                if bits >= ebits and numel % (bits // ebits) == 0:
                    yield dtype, numel, bits


@requires_gpu
@pytest.mark.parametrize("dtype,numel,bits", list(_copy_cases()))
@pytest.mark.parametrize("coalesced", [True, False])
def test_copy_is_exact(dtype, numel, bits, coalesced):
    src = torch.randn(numel, device="cuda").to(dtype)
    dst = torch.full_like(src, float("nan"))
    copy_(dst, src, bits=bits, coalesced=coalesced)
    assert torch.equal(dst, src)

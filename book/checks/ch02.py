"""Chapter 2's checks: the copy kernel the chapter writes, and the exercises built on it.

Each takes the reader's host function, a ``@cute.jit`` function ``host(mS, mD, stream)`` that
launches a copy of the (M, N) tensor ``mS`` into ``mD`` (``scale``: ``host(mS, mD, alpha,
stream)``), compiles it for fixed N and symbolic M, checks its PTX and, on a GPU, runs it on
whole tiles and on a ragged edge, into a destination with a margin of NaN around it (a write
past the end of a row or below the last row shows there).
"""
from __future__ import annotations

import re

import torch

import cutlass

from kernels.compile import NAME_BY_TORCH

from . import compile, expect_close, expect_ptx, fake, fake_stream, gpu, numbers_need_gpu, passed

#: (M, N): whole tiles of the chapter's kernel, then a ragged edge (N not a multiple of the tile,
#: M not a multiple of the rows a block covers). N is a multiple of every vector width.
SHAPES = ((37, 4096), (5, 4104))
DTYPES = (torch.float32, torch.bfloat16)


def _compile(host, dtype, n, *scalars):
    return compile(host, fake(dtype, n), fake(dtype, n), *scalars, fake_stream())


def _run(name, host, src, *scalars):
    """dst = the kernel's output for src (and the Python floats ``scalars``), written into a NaN-filled buffer larger than dst (its
    rows padded, two rows more); fails if anything outside dst changed."""
    m, n = src.shape
    pad = 16 + (-n) % 16  # keeps every row 16-byte aligned
    buf = torch.full((m + 2, n + pad), float("nan"), device=src.device, dtype=src.dtype)
    dst = buf[:m, :n]
    _compile(host, src.dtype, n, *[cutlass.Float32(0.0) for _ in scalars])(src, dst, *scalars)
    torch.cuda.synchronize()
    outside = buf[:m, n:].isfinite().sum().item() + buf[m:].isfinite().sum().item()
    if outside:
        raise AssertionError(f"{name}: the kernel wrote {outside} values outside the ({m}, {n}) destination "
                             "(past the end of a row or below the last row): a missing predicate or row guard?")
    return dst


def _check_copies(name, host):
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in SHAPES))
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in SHAPES:
            src = torch.randn(m, n, device="cuda").to(dtype)
            dst = _run(name, host, src)
            expect_close(name, dst, src.double(), what=f"{m} x {n} {NAME_BY_TORCH[dtype]} copied exactly")


def copy(host, name="ch02.copy"):
    """The chapter's kernel: 128-bit loads and stores only, for fp32 and bf16; exact copies."""
    for dtype in DTYPES:
        ptx = _compile(host, dtype, SHAPES[0][1]).ptx
        expect_ptx(f"{name} {NAME_BY_TORCH[dtype]}", ptx, has=("ld.global", "st.global"), bits=128)
    _check_copies(name, host)


def copy64(host, name="ch02.copy64"):
    """Exercise: the same copy with 64-bit accesses (ld.global.v2.b32 for fp32, no .v4)."""
    for n in (SHAPES[0][1], SHAPES[1][1]):
        ptx = _compile(host, torch.float32, n).ptx
        expect_ptx(f"{name} fp32 N={n}", ptx, has=("ld.global.v2", "st.global.v2"), bits=64,
                   lacks=("ld.global.v4", "st.global.v4", "ld.local", "st.local"))
    _check_copies(name, host)


_LOAD = re.compile(r"ld\.global\.b32\s+%r\d+,\s*\[(%rd\d+)(?:\+(\d+))?\]")


def strided(host, name="ch02.strided"):
    """Exercise: one row per thread, 32 bits an access: scalar loads only, and one thread's
    loads 4 bytes apart (it walks along its own row, a whole row away from its neighbours)."""
    ptx = _compile(host, torch.float32, SHAPES[0][1]).ptx
    expect_ptx(f"{name} fp32", ptx, has=("ld.global.b32", "st.global.b32"), bits=32)
    by_base = {}
    for m in _LOAD.finditer(ptx):
        by_base.setdefault(m.group(1), []).append(int(m.group(2) or 0))
    offsets = max(by_base.values(), key=len)
    steps = sorted({b - a for a, b in zip(sorted(offsets), sorted(offsets)[1:])})
    if len(offsets) < 2 or steps != [4]:
        raise AssertionError(f"{name}: one thread's loads should be 4 bytes apart (one fp32 after the other "
                             f"along its own row); they are {steps or offsets} bytes apart, so neighbouring "
                             "threads still share a row")
    passed(name, f"one thread's {len(offsets)} loads are 4 bytes apart: each thread walks its own row")
    _check_copies(name, host)


def scale(host, name="ch02.scale"):
    """Exercise: dst = alpha * src on the way through the registers, 128-bit accesses, the
    product in fp32 (mul.f32); within one rounding of the float64 result."""
    ptx = _compile(host, torch.float32, SHAPES[0][1], cutlass.Float32(0.0)).ptx
    expect_ptx(f"{name} fp32", ptx, has=("ld.global.v4", "st.global.v4", "mul.f32"), bits=128)
    if not gpu():
        return numbers_need_gpu(name, "launching it")
    torch.manual_seed(0)
    # one rounding of the product: half a unit in the last place, 2^-24 (fp32) or 2^-8 (bf16)
    # relative at most, with a margin
    for dtype, rtol in ((torch.float32, 2.0**-23), (torch.bfloat16, 1.01 * 2.0**-8)):
        for m, n in SHAPES:
            src = torch.randn(m, n, device="cuda").to(dtype)
            alpha = float(torch.empty(()).uniform_(-3, 3).to(torch.float32))
            dst = _run(name, host, src, alpha)
            expect_close(name, dst, alpha * src.double(), rtol=rtol,
                         what=f"{m} x {n} {NAME_BY_TORCH[dtype]} times {alpha:.4f}")

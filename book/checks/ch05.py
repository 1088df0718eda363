"""Chapter 5's checks: the block reduction the chapter writes, and the exercises built on it.

Each takes the reader's host function, a ``@cute.jit`` function ``host(mX, mOut, stream)`` that
launches one block a row of the (M, N) tensor ``mX`` and writes each row's result to the fp32
``mOut``: (M,) for a sum or a max, (M, 2) for a sum and a sum of squares (``warps``: ``host(mX,
mOut, warps, stream)``, ``warps`` a ``cutlass.Constexpr[int]``). A check compiles it for fixed N
and symbolic M, checks its PTX (128-bit loads, the butterfly, one fp32 slot a warp and value in
a statically allocated shared buffer, one barrier, no local memory) and, on a GPU, compares its
rows with float64: whole passes, a ragged last pass, a row shorter than one pass.
"""
from __future__ import annotations

import re

import torch

import cutlass
import cutlass.cute as cute

from kernels.compile import NAME_BY_TORCH, compile_once, fake_vector

from . import count, expect_close, expect_ptx, fake, fake_stream, gpu, numbers_need_gpu, opcodes, passed, widths

#: (M, N): whole passes; one pass more than whole (ragged, and a last pass nearly empty); a row
#: shorter than one pass of the block. N is a multiple of every vector width.
SHAPES = ((64, 65536), (37, 65544), (5, 1000))
DTYPES = (torch.float32, torch.bfloat16)
#: The summation's error bound relative to the row's sum of |x|: fp32 rounding (2^-24) times a
#: generous depth of the adding tree (64); one element left out of a row moves it by about 1/N.
SUM_TOL = 2.0**-18


def _out(pairs: bool):
    m = cute.sym_int()
    if pairs:
        return cute.runtime.make_fake_tensor(cutlass.Float32, (m, 2), stride=(2, 1), assumed_align=8)
    return fake_vector(cutlass.Float32, m)


def _compile(host, dtype, n, *constexpr, pairs=False):
    """``host`` compiled for rows of n elements of ``dtype`` and the compile-time ints ``constexpr``
    (part of the cache key), with its own fakes for the pair output."""
    args = (fake(dtype, n), _out(pairs), *constexpr, fake_stream())
    key = ("book ch05", host, str(dtype), n, constexpr, pairs)
    return compile_once(key, lambda: (host, args, None))


_SHARED = re.compile(r"^\s*\.shared\s+(?:\.align\s+\d+\s+)?\.b8\s+\w+\[(\d*)\]", re.M)
_THREADS = re.compile(r"^\s*\.reqntid\s+(\d+)", re.M)


def shared_bytes(ptx: str):
    """The bytes of shared memory the PTX declares statically (``.shared .b8 name[64]``), or None
    where it declares only dynamic shared memory (``name[]``: the size is set at launch)."""
    sizes = [int(s) for s in _SHARED.findall(ptx) if s]
    return sum(sizes) if sizes else None


def block_threads(ptx: str):
    """The threads a block is launched with, from the kernel's ``.reqntid`` (None if absent)."""
    m = _THREADS.search(ptx)
    return int(m.group(1)) if m else None


def _exchange(name, ptx, values=1, combine=None, lacks=()):
    """The block exchange's claims: 128-bit loads only, the butterfly, ``values`` fp32 slots a warp in a
    static shared buffer written and read around exactly one barrier, no local memory; ``combine``
    (an opcode pattern) is the arithmetic the reduction must use."""
    expect_ptx(name, ptx, has=("ld.global.v4", "shfl.sync.bfly", "st.shared", "ld.shared"),
               counts={"bar.sync": 1}, lacks=("ld.local", "st.local", *lacks))
    loads = widths(ptx, "ld.global")
    if loads != {128}:
        raise AssertionError(f"{name}: every global load should move 128 bits; these move {sorted(loads)} bits")
    threads, smem = block_threads(ptx), shared_bytes(ptx)
    if threads is None or threads % 32:
        raise AssertionError(f"{name}: the kernel should name its block size (.reqntid) in whole warps; got {threads}")
    warps = threads // 32
    if smem is None:
        raise AssertionError(f"{name}: the PTX declares no static shared memory: allocate the partials with "
                             "cute.arch.alloc_smem, so that their size is fixed at compile time and shows here")
    want = 4 * values * warps
    if smem != want:
        raise AssertionError(f"{name}: a block of {threads} threads ({warps} warps) should hold {values} fp32 "
                             f"slot{'s' if values > 1 else ''} a warp, {want} bytes of shared memory; the PTX "
                             f"declares {smem} bytes")
    if combine is not None and not any(re.fullmatch(combine, op) for op in opcodes(ptx)):
        raise AssertionError(f"{name}: the PTX has no {combine} instruction: is every tier combining with it?")
    passed(name, f"{threads} threads, {warps} warps; {smem} bytes of shared memory ({values} fp32 a warp); "
                 f"{count(ptx, 'shfl.sync.bfly')} shfl.sync.bfly, {count(ptx, 'st.shared')} st.shared, "
                 f"1 bar.sync, {count(ptx, 'ld.shared')} ld.shared")
    return warps


def _launch(c, x, pairs=False):
    out = torch.full((x.shape[0], 2) if pairs else (x.shape[0],), float("nan"), device=x.device)
    c(x, out)
    torch.cuda.synchronize()
    return out


def _inputs(dtype, m, n, negative=False):
    x = torch.randn(m, n, device="cuda")
    if negative:  # every element below zero: a padding of zeros would win the max
        x = -x.abs() - 0.5
    return x.to(dtype)


def _expect_sum(name, got, x, what):
    x64 = x.double()
    scale = x64.abs().sum(-1).clamp_min(1e-30)
    expect_close(name, got.double() / scale, x64.sum(-1) / scale, atol=SUM_TOL,
                 what=f"{what}, each row's sum over its sum of |x|")


def _numbers(name, host, *constexpr, kind="sum"):
    shapes = ", ".join(f"{m} x {n}" for m, n in SHAPES)
    if not gpu():
        return numbers_need_gpu(name, f"launching it on {shapes}, fp32 and bf16")
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in SHAPES:
            c = _compile(host, dtype, n, *constexpr, pairs=kind == "sum_sumsq")
            what = f"{m} x {n} {NAME_BY_TORCH[dtype]}"
            if kind == "max":
                for negative in (False, True):
                    x = _inputs(dtype, m, n, negative)
                    expect_close(name, _launch(c, x), x.double().amax(-1),
                                 what=f"{what}{', every element negative' if negative else ''}, max exact")
            elif kind == "sum_sumsq":
                x = _inputs(dtype, m, n)
                out = _launch(c, x, pairs=True)
                _expect_sum(name, out[:, 0], x, what)
                sq = x.double().square().sum(-1)
                expect_close(name, out[:, 1], sq, rtol=SUM_TOL, what=f"{what}, the sums of squares")
            else:
                x = _inputs(dtype, m, n)
                _expect_sum(name, _launch(c, x), x, what)


def block_sum(host, name="ch05.block_sum"):
    """The chapter's kernel: a row sum, one block a row through one shared-memory exchange."""
    for dtype in DTYPES:
        for n in (SHAPES[0][1], SHAPES[1][1]):
            _exchange(f"{name} {NAME_BY_TORCH[dtype]} N={n}", _compile(host, dtype, n).ptx, combine=r"add\.f32")
    _numbers(name, host)


def block_max(host, name="ch05.block_max"):
    """Exercise: the row's max; every tier combines with max (no add.f32 at all), and accesses past
    the row's end must not win it (the check's second input is negative everywhere)."""
    for dtype in DTYPES:
        _exchange(f"{name} {NAME_BY_TORCH[dtype]} N={SHAPES[1][1]}", _compile(host, dtype, SHAPES[1][1]).ptx,
                  combine=r"max(\.\w+)*\.f32", lacks=("add.f32",))
    _numbers(name, host, kind="max")


WARPS = (2, 8, 32)


def block_sum_warps(host, name="ch05.block_sum_warps"):
    """Exercise: the row sum with ``warps`` warps a block, a compile-time parameter: the PTX of each
    has a block of 32 x warps threads and a buffer of warps fp32."""
    for w in WARPS:
        got = _exchange(f"{name} warps={w} fp32", _compile(host, torch.float32, SHAPES[1][1], w).ptx,
                        combine=r"add\.f32")
        if got != w:
            raise AssertionError(f"{name}: compiled with warps={w}, the kernel launches {got} warps a block")
    if not gpu():
        return numbers_need_gpu(name, f"launching it with {', '.join(map(str, WARPS))} warps")
    for w in WARPS:
        _numbers(f"{name} warps={w}", host, w)


def sum_sumsq(host, name="ch05.sum_sumsq"):
    """Exercise: a row's sum and sum of squares, (M, 2), in one exchange: two fp32 slots a warp and
    still one barrier."""
    for dtype in DTYPES:
        _exchange(f"{name} {NAME_BY_TORCH[dtype]} N={SHAPES[1][1]}",
                  _compile(host, dtype, SHAPES[1][1], pairs=True).ptx, values=2, combine=r"(add|fma\.rn)\.f32")
    _numbers(name, host, kind="sum_sumsq")


__all__ = ["block_sum", "block_max", "block_sum_warps", "sum_sumsq", "shared_bytes", "block_threads", "SHAPES"]

"""Chapter 3's checks: the row reduction the chapter writes (one thread a row), and the exercises
built on it.

Each takes the reader's host function, a ``@cute.jit`` function ``host(mX, mOut, stream)`` that
launches a reduction of every row of the (M, N) tensor ``mX`` into the fp32 vector ``mOut`` of
length M. It is compiled for fixed N and symbolic M, its PTX is checked and, on a GPU, it runs on
whole passes, on a ragged last pass and on a short row, with M not a multiple of the rows a block
covers, into an output with a margin of NaN after it (a write past row M - 1 shows there).
"""
from __future__ import annotations

import math
import re

import torch

import cutlass
import cutlass.cute as cute

from kernels.compile import NAME_BY_TORCH, fake_vector

from . import compile, count, expect_close, expect_ptx, fake, fake_stream, gpu, numbers_need_gpu, passed, per_row_output, widths

#: (M, N): N a multiple of 128 bits in fp32 and bf16; 4096 fills every pass of the chapter's
#: kernel, 4104 leaves a ragged last pass, 1000 is shorter than a few passes. M is not a multiple
#: of the 128 rows a block covers.
SHAPES = ((300, 4096), (37, 4104), (5, 1000))
DTYPES = (torch.float32, torch.bfloat16)
#: A sum is right within 2^-20 x (the sum of |x| over its row): 16 units in the last place of
#: fp32 at that size, far more than any order of fp32 additions loses on these rows, and far less
#: than one element left out or counted twice.
SUM_TOL = 2.0**-20

_ADD = re.compile(r"^\s*(?:@!?%p\d+\s+)?(add(?:\.rn)?\.f32(?:\.bf16)?)\s+(%r\d+),\s*(%?\w+),\s*(%?\w+)", re.M)
_MOV = re.compile(r"^\s*mov\.b32\s+(%r\d+),\s*(%r\d+);", re.M)


def fake_out():
    """A fake fp32 vector of symbolic length M: the result, one value a row."""
    return fake_vector(cutlass.Float32, cute.sym_int())


def compile_reduction(host, dtype, n: int):
    """``host(mX, mOut, stream)`` compiled for (M, n) rows of ``dtype`` (torch or CuTe), M symbolic."""
    return compile(host, fake(dtype, n), fake_out(), fake_stream())


def add_depth(ptx: str) -> int:
    """The longest chain of dependent fp32 additions in the PTX (``add.f32`` and the mixed
    ``add.rn.f32.bf16``; register copies pass a value on). A fold written as a chain of n values
    is n additions deep; a pairwise tree is log2(n) deep."""
    depth: dict[str, int] = {}
    events = sorted([(m.start(), "add", m.group(2), (m.group(3), m.group(4))) for m in _ADD.finditer(ptx)]
                    + [(m.start(), "mov", m.group(1), (m.group(2),)) for m in _MOV.finditer(ptx)])
    for _, kind, dst, srcs in events:
        d = max(depth.get(s, 0) for s in srcs)
        depth[dst] = d + 1 if kind == "add" else d
    return max(depth.values(), default=0)


def _claims(name, ptx, has=(), lacks=()):
    """The claims every kernel of this chapter makes: 128-bit global loads only, one 32-bit store
    (the row's result), no shuffles, no shared memory, no barriers and no spills; then ``has``
    and ``lacks``."""
    loads = widths(ptx, "ld.global")
    if loads != {128}:
        raise AssertionError(f"{name}: every global load should move 128 bits; these move {sorted(loads)} bits")
    expect_ptx(name, ptx, has=("ld.global.v4",) + tuple(has), counts={"st.global": 1},
               lacks=("shfl", "st.shared", "ld.shared", "bar.sync", "barrier", "ld.local", "st.local") + tuple(lacks))


def _run(name, host, x):
    """The kernel's (M,) output for x (see ``checks.per_row_output``)."""
    m, n = x.shape
    return per_row_output(name, m, lambda out: compile_reduction(host, x.dtype, n)(x, out), pad=16)


def _inputs(dtype, m, n, shift=0.0):
    return (torch.randn(m, n, device="cuda") + shift).to(dtype)


def expect_sum(name, got, x, what=""):
    """Assert that ``got`` is each row's sum of ``x`` within SUM_TOL x (the row's sum of |x|)."""
    x64 = x.double()
    want, scale = x64.sum(-1), x64.abs().sum(-1)
    got64 = got.detach().double()
    err = (got64 - want).abs()
    bad = ~(err <= SUM_TOL * scale)  # NaN is bad
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {len(want)} row sums differ from the float64 reference by more than "
            f"2^-20 x the row's sum of |x|; the first, row {i}: got {got64[i].item():.9g}, want "
            f"{want[i].item():.9g} (sum of |x| {scale[i].item():.6g})")
    rel = (err / scale.clamp_min(1e-300)).max().item()
    passed(name, f"{what + ': ' if what else ''}{len(want)} row sums match the float64 reference, max error "
                 f"{err.max().item():.3g} ({rel:.2g} x the row's sum of |x|)")


def _check_sums(name, host):
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in SHAPES))
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in SHAPES:
            x = _inputs(dtype, m, n)
            expect_sum(name, _run(name, host, x), x, what=f"{m} x {n} {NAME_BY_TORCH[dtype]}")


def row_sum(host, name="ch03.row_sum"):
    """The chapter's kernel: 128-bit loads, fp32 additions, one store a row and nothing shared,
    for fp32 and bf16 rows; each row's sum within SUM_TOL of float64's."""
    for dtype in DTYPES:
        for n in (SHAPES[0][1], SHAPES[1][1]):
            ptx = compile_reduction(host, dtype, n).ptx
            _claims(f"{name} {NAME_BY_TORCH[dtype]} N={n}", ptx, lacks=("cvt.rn.bf16.f32",))
            if not (count(ptx, "add.f32") or count(ptx, "add.rn.f32")):
                raise AssertionError(f"{name}: the {NAME_BY_TORCH[dtype]} PTX adds nothing in fp32")
    _check_sums(name, host)


def row_max(host, name="ch03.row_max"):
    """Exercise: each row's maximum. The PTX has max instructions and no fp32 addition; the
    results equal float64's exactly (a max rounds nothing), also on rows whose every element is
    negative (elements past the end of the row must not count)."""
    for dtype in DTYPES:
        ptx = compile_reduction(host, dtype, SHAPES[1][1]).ptx
        _claims(f"{name} {NAME_BY_TORCH[dtype]} N={SHAPES[1][1]}", ptx, has=("max",),
                lacks=("add.f32", "add.rn.f32"))
    if not gpu():
        return numbers_need_gpu(name, "launching it")
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in SHAPES:
            for shift in (0.0, -8.0):  # every element of a row below -3, nearly surely
                x = _inputs(dtype, m, n, shift)
                expect_close(name, _run(name, host, x), x.double().amax(-1),
                             what=f"{m} x {n} {NAME_BY_TORCH[dtype]}{', all negative' if shift else ''}, exact")


def running_sum(x, pass_elems: int, acc_dtype=torch.bfloat16):
    """Each row of x summed as the chapter's kernel sums it, pass by pass: each pass's sum (of
    ``pass_elems`` elements, the row padded with zeros) rounded once to fp32, and the running sum
    rounded to ``acc_dtype`` after every pass (to nearest, ties to even, as ``cvt.rn``). Where every
    pass's sum is exact in fp32 (small integers), this is the kernel's result exactly."""
    m, n = x.shape
    passes = -(-n // pass_elems)
    padded = torch.zeros(m, passes * pass_elems, dtype=torch.float64, device=x.device)
    padded[:, :n] = x.double()
    sums = padded.view(m, passes, pass_elems).sum(-1).float()
    acc = torch.zeros(m, dtype=acc_dtype, device=x.device)
    for p in range(passes):
        acc = (acc.float() + sums[:, p]).to(acc_dtype)
    return acc.double()


def bf16_accumulator(host, vecs: int, name="ch03.bf16_accumulator"):
    """Exercise: the running sum rounded to bf16 after each pass of ``vecs`` 128-bit loads (one
    cvt.rn.bf16.f32 in the PTX). On a GPU: on rows of small integers, where every pass's fp32 sum
    is exact, the result equals that rounding done in torch exactly; on Gaussian rows, its error is
    compared with the fp32 running sum's (the library's thread tier)."""
    ptx = compile_reduction(host, torch.bfloat16, SHAPES[1][1]).ptx
    _claims(f"{name} bf16 N={SHAPES[1][1]}", ptx, has=("cvt.rn.bf16.f32",))
    if count(ptx, "cvt.rn.bf16.f32") != 1:
        raise AssertionError(f"{name}: the running sum should be rounded to bf16 once a pass: one cvt.rn.bf16.f32 "
                             f"in the loop, and the PTX has {count(ptx, 'cvt.rn.bf16.f32')}")
    if not gpu():
        return numbers_need_gpu(name, "launching it")
    from kernels.reduction import reduce_rows

    torch.manual_seed(0)
    pass_elems = vecs * 8  # 128 bits hold 8 bf16
    for m, n in SHAPES:
        x = torch.randint(0, 5, (m, n), device="cuda").to(torch.bfloat16)
        expect_close(name, _run(name, host, x), running_sum(x, pass_elems),
                     what=f"{m} x {n} small integers, rounded to bf16 after each pass of {pass_elems}")
    m, n = 256, 16384
    x = _inputs(torch.bfloat16, m, n, shift=1.0)
    want, scale = x.double().sum(-1), x.double().abs().sum(-1)
    err16 = ((_run(name, host, x).double() - want).abs() / scale).max().item()
    err32 = ((reduce_rows(x, max_tier="thread").double() - want).abs() / scale).max().item()
    if not err16 > 16 * err32:
        raise AssertionError(f"{name}: a bf16 running sum should lose far more than an fp32 one; errors "
                             f"{err16:.2g} and {err32:.2g} x the row's sum of |x|")
    passed(name, f"{m} x {n} bf16 rows (mean 1): the bf16 running sum is off by up to {err16:.2g} x the row's "
                 f"sum of |x|, the fp32 one by {err32:.2g}"
                 + (f": {err16 / err32:.0f} times more" if err32 else ": exact"))


def tree_fold(host, name="ch03.tree_fold"):
    """Exercise: each pass folded as a pairwise tree. The longest chain of dependent fp32 additions
    in the PTX is at most log2(values a pass) + 2 (the tree, the running sum, one spare); the
    sums as ``row_sum``'s."""
    for dtype in DTYPES:
        ptx = compile_reduction(host, dtype, SHAPES[0][1]).ptx
        _claims(f"{name} {NAME_BY_TORCH[dtype]}", ptx)
        per_pass = count(ptx, "add.f32") + count(ptx, "add.rn.f32")
        depth, most = add_depth(ptx), int(math.log2(max(2, per_pass))) + 2
        if depth > most:
            raise AssertionError(f"{name}: the {NAME_BY_TORCH[dtype]} fold is a chain {depth} additions deep; "
                                 f"a pairwise tree of {per_pass} additions is at most {most}")
        passed(name, f"{NAME_BY_TORCH[dtype]}: {per_pass} fp32 additions a pass, at most {depth} of them in a "
                     "dependent chain")
    _check_sums(name, host)

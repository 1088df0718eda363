"""Chapter 8's checks: the softmax kernel the chapter writes, and the two ops built on the library's
template in its exercises (a log-softmax, and a logsumexp that writes one value a row).

``softmax_rows`` takes the reader's ``@cute.jit`` host ``host(mX, mY, stream)`` (one block a row,
rows of whole 128-bit accesses); ``log_softmax`` and ``logsumexp`` take a ``RowOp`` subclass. Each
compiles for sm_90a on fake tensors, asserts what the PTX must show (128-bit accesses, the
butterfly, ``ex2`` for the exponentials, ``lg2`` for a logarithm, no local memory) and, on a GPU,
launches on random rows and rows with ``-inf`` entries and compares with float64.
"""
from __future__ import annotations

import math

import torch

from kernels.compile import NAME_BY_TORCH

from . import (
    compile, compile_op, count, expect_close, expect_ptx, fake, fake_stream, fresh_op, gpu,
    numbers_need_gpu, passed, per_row_output)

DTYPES = (torch.bfloat16, torch.float32)
#: (relative, absolute) tolerance of a probability against float64, by output dtype
SOFTMAX_TOL = {torch.float32: (2e-5, 2e-6), torch.bfloat16: (1.6e-2, 1e-5)}


def _rows(dtype, m, n, masked=True):
    """Random logits of (m, n), the first rows made hard: huge logits, every third entry -inf,
    one survivor."""
    x = torch.randn(m, n, device="cuda") * 3
    if masked and m >= 3:
        x[0] *= 1e4
        x[1, ::3] = -math.inf
        x[2, :-1] = -math.inf
    return x.to(dtype)


def softmax_rows(host, name="ch08.softmax_rows"):
    """The chapter's kernel: softmax with one block a row, the row kept in registers, the pair
    (max, sum of exp) through the warp's butterfly and one shared-memory exchange."""
    vecs = {torch.bfloat16: 8, torch.float32: 4}
    for dtype in DTYPES:
        n = 256 * vecs[dtype] * 2
        c = compile(host, fake(dtype, n), fake(dtype, n), fake_stream())
        expect_ptx(f"{name} {NAME_BY_TORCH[dtype]} N={n}", c.ptx,
                   has=("ld.global.v4", "st.global.v4", "shfl.sync.bfly", "ex2.approx", "bar.sync"), bits=128)
        bfly = count(c.ptx, "shfl.sync.bfly")
        if bfly % 2:
            raise AssertionError(f"{name}: {bfly} shfl.sync.bfly, an odd number: each step of the butterfly "
                                 "should carry both halves of the pair")
    if not gpu():
        return numbers_need_gpu(name, "launching it on rows of 1, 2 and 4 accesses a thread")
    torch.manual_seed(0)
    for dtype in DTYPES:
        for k in (1, 2, 4):
            n = 256 * vecs[dtype] * k
            fn = compile(host, fake(dtype, n), fake(dtype, n), fake_stream())
            for m in (1, 37, 1000):
                x = _rows(dtype, m, n)
                y = torch.full_like(x, float("nan"))
                fn(x, y)
                rtol, atol = SOFTMAX_TOL[dtype]
                expect_close(name, y, torch.softmax(x.double(), -1), atol=atol, rtol=rtol,
                             what=f"{m} x {n} {NAME_BY_TORCH[dtype]}")


def _has_log(name, ptx, dtype, n):
    if not count(ptx, "lg2.approx"):
        raise AssertionError(f"{name}: the {NAME_BY_TORCH[dtype]} PTX at N={n} has no lg2.approx: the op never "
                             "takes the logarithm of the row's sum (cute.math.log)")


def _finite_close(name, got, want, rtol, atol, what):
    """Entries that are -inf in float64 must be -inf; the others must be close."""
    got64 = got.double()
    finite = torch.isfinite(want)
    if not torch.equal(torch.isfinite(got64), finite):
        i = int((torch.isfinite(got64) != finite).flatten().nonzero()[0])
        raise AssertionError(f"{name}: {what}: the result is finite where the reference is not (or the other way "
                             f"round), first at flat index {i}: got {got64.flatten()[i].item()}, "
                             f"want {want.flatten()[i].item()}")
    expect_close(name, got64[finite], want[finite], atol=atol, rtol=rtol, what=what)


SHAPES = ((37, 1000), (64, 4096), (5, 32768), (3, 262144))


def log_softmax(cls, name="ch08.log_softmax"):
    """``cls``: a ``RowOp`` that reads ("x",), writes ("y",) and reduces softmax's pair, whose
    epilogue writes y = x - max - log(sum): the PTX must show the logarithm (lg2), 128-bit row
    stores and no local memory, kept in registers and staged alike; on a GPU, float64."""
    if tuple(cls.rows) != ("x",) or tuple(cls.out) != ("y",):
        raise AssertionError(f"{name}: the op should read rows ('x',) and write out ('y',); it declares "
                             f"rows {tuple(cls.rows)} and out {tuple(cls.out)}")
    op = fresh_op(cls)
    for dtype in DTYPES:
        for n in (4096, 262144):
            c = compile_op(name, op, dtype, n)
            _has_log(name, c.ptx, dtype, n)
            expect_ptx(f"{name} {NAME_BY_TORCH[dtype]} N={n} ({c.config.stage})", c.ptx,
                       has=("st.global.v4", "shfl.sync.bfly", "lg2.approx"))
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in SHAPES))
    torch.manual_seed(0)
    for dtype, (rtol, atol) in ((torch.float32, (1e-5, 1e-5)), (torch.bfloat16, (2**-7, 2**-6))):
        for m, n in SHAPES:
            x = _rows(dtype, m, n)
            y = torch.full_like(x, float("nan"))
            op.launch(x, rows=(x,), out=(y,))
            _finite_close(name, y, torch.log_softmax(x.double(), -1), rtol, atol,
                          f"{m} x {n} {NAME_BY_TORCH[dtype]}")


def logsumexp(cls, name="ch08.logsumexp"):
    """``cls``: a ``RowOp`` that reads ("x",), writes no row and one fp32 a row, ``row_out =
    ("lse",)``, the row's log(sum(exp(x))): the PTX must show the logarithm, no 128-bit store (no
    row is written) and no local memory, at every N up to 262,144; on a GPU, float64."""
    if tuple(cls.rows) != ("x",) or tuple(cls.out) != () or tuple(cls.row_out) != ("lse",):
        raise AssertionError(f"{name}: the op should read rows ('x',), write no row (out = ()) and one value a "
                             f"row (row_out = ('lse',)); it declares rows {tuple(cls.rows)}, out {tuple(cls.out)}, "
                             f"row_out {tuple(cls.row_out)}")
    op = fresh_op(cls)
    for dtype in DTYPES:
        for n in (4096, 32768, 262144):
            c = compile_op(name, op, dtype, n)
            _has_log(name, c.ptx, dtype, n)
            expect_ptx(f"{name} {NAME_BY_TORCH[dtype]} N={n} ({c.config.stage})", c.ptx,
                       has=("ld.global.v4", "shfl.sync.bfly", "lg2.approx"),
                       lacks=("ld.local", "st.local", "st.global.v4"))
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in SHAPES))
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in SHAPES:
            x = _rows(dtype, m, n)
            got = per_row_output(name, m, lambda out: op.launch(x, rows=(x,), row_out=(out,)))
            _finite_close(name, got, torch.logsumexp(x.double(), -1), 2e-6, 2e-5,
                          f"{m} x {n} {NAME_BY_TORCH[dtype]}, one value a row")
    passed(name, "every row's logsumexp within 2e-6 x |lse| + 2e-5 of float64")


__all__ = ["softmax_rows", "log_softmax", "logsumexp", "SHAPES"]

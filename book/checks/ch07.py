"""Chapter 7's checks: an RMSNorm without a weight, written on the chapter's kernel, and LayerNorm
written on the row-kernel template.

``unweighted`` takes the reader's host function ``host(mX, mY, eps, stream)``: one block a row of
the (M, N) tensor ``mX``, ``mY`` of the same shape and dtype. It is compiled for fixed N and
symbolic M, its PTX must show 128-bit loads and stores of the row and no other global load (no
weight), the butterfly, one ``rsqrt`` and no local memory; on a GPU it is compared with float64.
``layernorm`` takes a ``RowOp`` class, compiles it for sm_90a and reads its PTX; on a GPU it
launches it and compares with float64.
"""
from __future__ import annotations

import torch

from kernels.compile import NAME_BY_TORCH

from . import (
    compile, count, expect_close, expect_ptx, expect_row_op, fake, fake_stream, fresh_op, gpu,
    numbers_need_gpu, passed)

#: (M, N) of the numeric checks: whole rows of the chapter's 256-thread block, fp32 and bf16.
SHAPES = ((37, 4096), (5, 16384))
DTYPES = (torch.float32, torch.bfloat16)
#: Tolerances against float64, relative to |y| plus a floor: a few units in the last place.
TOL = {torch.float32: (1e-5, 1e-6), torch.bfloat16: (1.6e-2, 1e-5)}


def _compile_unweighted(host, dtype, n):
    import cutlass
    return compile(host, fake(dtype, n), fake(dtype, n), cutlass.Float32(0.0), fake_stream())


def unweighted(host, name="ch07.unweighted"):
    """Exercise: y = x / sqrt(mean(x^2) + eps), no weight: as many 128-bit global loads as stores
    (each load brings an access of x, each store writes one of y; a weight would add loads), the
    butterfly, one rsqrt, no local memory."""
    for dtype in DTYPES:
        n = SHAPES[0][1]
        ptx = _compile_unweighted(host, dtype, n).ptx
        label = f"{name} {NAME_BY_TORCH[dtype]} N={n}"
        expect_ptx(label, ptx, has=("ld.global.v4", "st.global.v4", "shfl.sync.bfly", "rsqrt.approx"), bits=128)
        loads, stores = count(ptx, "ld.global"), count(ptx, "st.global")
        if loads != stores:
            raise AssertionError(f"{label}: the PTX has {loads} global loads for {stores} global stores; without a "
                                 "weight a thread loads exactly the accesses of x it writes back")
        passed(label, f"{loads} loads of x for {stores} stores of y: no weight is read")
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in SHAPES))
    from kernels.rmsnorm import rmsnorm_reference
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in SHAPES:
            x = torch.randn(m, n, device="cuda").to(dtype)
            y = torch.full_like(x, float("nan"))
            _compile_unweighted(host, dtype, n)(x, y, 1e-6)
            rtol, atol = TOL[dtype]
            expect_close(name, y, rmsnorm_reference(x, None, 1e-6), rtol=rtol, atol=atol,
                         what=f"{m} x {n} {NAME_BY_TORCH[dtype]}")


#: (M, N) of LayerNorm's numeric checks: ragged, whole, long (a cluster), a mean far from zero.
LN_SHAPES = ((37, 1000), (64, 4096), (5, 65536))


def layernorm(cls, name="ch07.layernorm"):
    """Exercise: ``cls``, a ``RowOp`` that reads rows ("x",) and columns ("weight", "bias") and
    writes out ("y",), y = (x - mean) / sqrt(var + eps) * weight + bias, with eps its scalar. Its
    bf16 and fp32 PTX must show 128-bit loads and stores, the butterfly, an rsqrt and no local
    memory; on a GPU it must match float64 on ragged, whole and long rows, with a mean far from
    zero (where the sum of squares less the squared sum cancels)."""
    if tuple(cls.rows) != ("x",) or tuple(cls.cols) != ("weight", "bias") or tuple(cls.out) != ("y",):
        raise AssertionError(f"{name}: the op should read rows ('x',) and cols ('weight', 'bias') and write out "
                             f"('y',); it declares rows {tuple(cls.rows)}, cols {tuple(cls.cols)}, out {tuple(cls.out)}")
    if list(cls.scalars) != ["eps"]:
        raise AssertionError(f"{name}: the op's one scalar should be eps; it declares {list(cls.scalars)}")
    expect_row_op(name, cls, "rsqrt.approx", "the epilogue never takes 1 / sqrt(var + eps)",
                  present=(True, True) + (False,) * len(cls.row_out + cls.extra))
    op = fresh_op(cls)
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in LN_SHAPES))
    from kernels.layernorm import layernorm_reference
    torch.manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 2**-6)):
        for (m, n), shift in zip(LN_SHAPES, (0.0, 30.0, 3.0)):
            x = (torch.randn(m, n, device="cuda") + shift).to(dtype)
            w = torch.randn(n, device="cuda").to(dtype)
            b = torch.randn(n, device="cuda").to(dtype)
            y = torch.full_like(x, float("nan"))
            present_out = tuple(None for _ in cls.row_out)
            op.launch(x, None, rows=(x,), out=(y,), cols=(w, b), row_out=present_out,
                      extra=tuple(None for _ in cls.extra), scalars=(1e-5,))
            want = layernorm_reference(x, w, b, 1e-5)
            scale = want.abs().amax(-1, keepdim=True)
            expect_close(name, y.double() / scale, want / scale, atol=tol,
                         what=f"{m} x {n} {NAME_BY_TORCH[dtype]}, mean {shift:g} (as a fraction of the row's largest |y|)")


__all__ = ["unweighted", "layernorm", "SHAPES", "LN_SHAPES"]

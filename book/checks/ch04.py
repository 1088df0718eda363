"""Chapter 4's checks: the warp-per-row sum the chapter writes, and the exercises built on it.

Each takes the reader's host function, a ``@cute.jit`` function ``host(mX, mY, stream)`` that
reduces each row of the (M, N) tensor ``mX`` into the (M,) fp32 tensor ``mY``. It compiles it for
fixed N and symbolic M, checks its PTX (128-bit loads, the shuffles the exercise asks for, no
local memory) and, on a GPU, runs it on fp32 and bf16 rows, whole passes and a ragged edge (N not a
multiple of a pass, M not a multiple of the rows a block covers), into an output followed by NaN
(a write below the last row shows there), and compares the result with float64.
"""
from __future__ import annotations

import torch

import cutlass
import cutlass.cute as cute

from kernels.compile import NAME_BY_TORCH, fake_vector

from . import compile, expect_close, expect_ptx, fake, fake_stream, gpu, numbers_need_gpu, per_row_output, widths

#: (M, N) for a warp a row: whole passes of the chapter's kernel, then a ragged edge.
SHAPES = ((37, 4096), (5, 1000))
#: (M, N) for short rows shared by 8 lanes each (16 rows a block of 128 threads).
SHORT = ((37, 256), (5, 200))
DTYPES = (torch.float32, torch.bfloat16)


def fake_sums():
    """A fake (M,) fp32 output to compile for, M symbolic."""
    return fake_vector(cutlass.Float32, cute.sym_int())


def _compile(host, dtype, n):
    return compile(host, fake(dtype, n), fake_sums(), fake_stream())


def _ptx(name, host, n, has, counts=None, lacks=("ld.local", "st.local")):
    """The PTX claims, for fp32 and bf16 rows of n: ``has``, ``counts``, ``lacks``, and every
    global load 128 bits wide."""
    for dtype in DTYPES:
        label = f"{name} {NAME_BY_TORCH[dtype]} N={n}"
        ptx = _compile(host, dtype, n).ptx
        loads = widths(ptx, "ld.global")
        if loads != {128}:
            raise AssertionError(f"{label}: every global load should move 128 bits; these move {sorted(loads)} bits")
        expect_ptx(label, ptx, has=("ld.global.v4",) + tuple(has), counts=counts, lacks=lacks)


def _run(name, host, x):
    """The kernel's (M,) output for x (see ``checks.per_row_output``)."""
    m, n = x.shape
    return per_row_output(name, m, lambda out: _compile(host, x.dtype, n)(x, out))


def _numbers(name, host, shapes, op="sum", make=None):
    """Launch on fresh random rows of each dtype and shape; compare with float64. A sum may
    differ by fp32 rounding (1e-6 of the largest row's sum of |x|); a max must be exact."""
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in shapes))
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in shapes:
            x = (make or torch.randn)(m, n, device="cuda").to(dtype)
            got = _run(name, host, x)
            x64 = x.double()
            if op == "sum":
                want, atol = x64.sum(-1), 1e-6 * x64.abs().sum(-1).max().item()
            else:
                want, atol = x64.amax(-1), 0.0
            expect_close(name, got, want, atol=atol, what=f"{m} x {n} {NAME_BY_TORCH[dtype]} row {op}s")


def warp_sum(host, name="ch04.warp_sum"):
    """The chapter's kernel: 128-bit loads, one butterfly of 5 xor shuffles; row sums within
    fp32 rounding of float64."""
    _ptx(name, host, SHAPES[0][1], has=("shfl.sync.bfly",), counts={"shfl.sync.bfly": 5})
    _numbers(name, host, SHAPES)


def _negative(m, n, device):
    """Rows whose every element is -1 or less: a max padded with 0 instead of -inf shows."""
    return -1.0 - torch.randn(m, n, device=device).abs()


def warp_max(host, name="ch04.warp_max"):
    """Exercise: the row's max, butterfly and all: 5 xor shuffles, a float max, and no float
    add (nothing is summed); exact on rows of negative numbers, ragged ones included."""
    _ptx(name, host, SHAPES[0][1], has=("shfl.sync.bfly", "max"), counts={"shfl.sync.bfly": 5},
         lacks=("add.f32", "ld.local", "st.local"))
    _numbers(name, host, SHAPES, op="max", make=_negative)


def tree_sum(host, name="ch04.tree_sum"):
    """Exercise: the tree, 5 down shuffles and no butterfly; the sum is in lane 0 only, so the
    output is right only if lane 0 writes it."""
    _ptx(name, host, SHAPES[0][1], has=("shfl.sync.down",), counts={"shfl.sync.down": 5},
         lacks=("shfl.sync.bfly", "ld.local", "st.local"))
    _numbers(name, host, SHAPES)


def segment_sum(host, name="ch04.segment_sum"):
    """Exercise: short rows, 8 lanes a row and 4 rows a warp: a butterfly of 3 xor shuffles
    (offsets 4, 2, 1) that never crosses into the next row's lanes."""
    _ptx(name, host, SHORT[0][1], has=("shfl.sync.bfly",), counts={"shfl.sync.bfly": 3})
    _numbers(name, host, SHORT)

"""Chapter 6's checks: the cluster row sum the chapter writes, and the exercises built on it.

Each takes the reader's host function, a ``@cute.jit`` function ``host(mX, mOut, stream)`` that
reduces each row of the (M, N) tensor ``mX`` into the fp32 vector ``mOut`` (M,), one row per
thread-block cluster. A check compiles it for fixed N and symbolic M, asserts what its PTX must
show (the cluster exchange: ``mapa``, ``st.async``, an mbarrier armed with the bytes that will
land on it, the cluster barrier; no local memory) and, on a GPU, launches it on fp32 and bf16
rows into an output with a margin of NaN after it, and compares with float64.
"""
from __future__ import annotations

import re

import torch

import cutlass.cute as cute
from cutlass import Float32

from kernels.compile import NAME_BY_TORCH, fake_vector

from . import compile, count, expect_close, expect_ptx, fake, fake_stream, gpu, numbers_need_gpu, passed, per_row_output, widths

#: (M, N): an odd M; the chapter's long row, and a shorter one (both split evenly over a cluster
#: of up to 16 blocks of 512 threads with 128-bit accesses, in fp32 and in bf16).
SHAPES = ((37, 262144), (5, 65536))
DTYPES = (torch.float32, torch.bfloat16)
#: What every cluster exchange compiles to: the mbarrier armed and waited on, the cluster barrier
#: around its initialization, and the remote stores with their address maps.
CLUSTER_OPS = ("mbarrier.init", "fence.mbarrier_init", "barrier.cluster.arrive", "barrier.cluster.wait",
               "mbarrier.arrive.expect_tx", "mapa", "st.async", "mbarrier.try_wait")
THREADS = 512  # the chapter's block
WARPS = THREADS // 32


def _compile(host, dtype, n):
    return compile(host, fake(dtype, n), fake_vector(Float32, cute.sym_int()), fake_stream())


_EXPECT = re.compile(r"mbarrier\.arrive\.expect_tx[\w.:]*\s+[^,;]+,\s*\[[^\]]+\],\s*(%r\d+|\d+)\s*;")


def expect_tx_bytes(ptx: str) -> list:
    """The byte counts the PTX's ``mbarrier.arrive.expect_tx`` instructions arm their mbarrier
    with (a constant, or the register a ``mov`` set to one; None where it is computed)."""
    found = []
    for m in _EXPECT.finditer(ptx):
        arg = m.group(1)
        if not arg.startswith("%"):
            found.append(int(arg))
            continue
        mov = re.search(r"mov\.[bu]32\s+" + re.escape(arg) + r",\s*(\d+)\s*;", ptx)
        found.append(int(mov.group(1)) if mov else None)
    return found


def _expect_exchange(name, ptx, want_bytes, has=(), lacks=("ld.local", "st.local")):
    """The cluster exchange's claims, and the mbarrier's byte count."""
    expect_ptx(name, ptx, has=("ld.global.v4", "shfl.sync.bfly", *CLUSTER_OPS, *has), lacks=lacks)
    bits = widths(ptx, "ld.global")
    if bits != {128}:
        raise AssertionError(f"{name}: every global load should move 128 bits; these move {sorted(bits)} bits")
    armed = expect_tx_bytes(ptx)
    if armed != [want_bytes]:
        raise AssertionError(
            f"{name}: the mbarrier should be armed once, with the {want_bytes} bytes that land on it "
            f"(one fp32 from each sender); the PTX arms it with {armed} bytes. Too many and the wait never "
            "ends; too few and a block reads slots that have not landed yet")
    passed(name, f"the mbarrier expects {want_bytes} bytes, and {count(ptx, 'st.async')} x st.async sends them")


def _check_rows(name, host, reduce, what):
    """Launch ``host`` on fresh rows of SHAPES in each dtype; compare with ``reduce`` (of float64)."""
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in SHAPES))
    torch.manual_seed(0)
    for dtype in DTYPES:
        for m, n in SHAPES:
            x = torch.randn(m, n, device="cuda")
            x[1::2] -= 8.0  # every other row all negative (a max that starts at 0 shows there)
            x = x.to(dtype)
            out = per_row_output(name, m, lambda out: _compile(host, dtype, n)(x, out), pad=2)
            x64 = x.double()
            atol = 1e-6 * x64.abs().sum(-1).max().item() if reduce == "sum" else 0.0
            want = x64.sum(-1) if reduce == "sum" else x64.amax(-1)
            expect_close(name, out, want, atol=atol, what=f"{m} x {n} {NAME_BY_TORCH[dtype]} {what}")


def cluster_sum(host, name="ch06.cluster_sum", cluster=8):
    """The chapter's kernel: 128-bit loads, the warp butterfly, the block's shared-memory round
    (``st.shared``, ``bar.sync``), then one fp32 a block through the cluster (its mbarrier
    expecting ``cluster`` x 4 bytes); row sums within 1e-6 of the row's sum of |x|."""
    for dtype in DTYPES:
        ptx = _compile(host, dtype, SHAPES[0][1]).ptx
        _expect_exchange(f"{name} {NAME_BY_TORCH[dtype]}", ptx, 4 * cluster, has=("st.shared", "bar.sync"))
    _check_rows(name, host, "sum", "row sums")


def cluster_max(host, name="ch06.cluster_max", cluster=8):
    """Exercise: the same kernel reducing with max: ``max`` instructions and no ``add.f32``
    (every tier takes the max); on a GPU, exactly the float64 max, rows of negative numbers
    included."""
    for dtype in DTYPES:
        ptx = _compile(host, dtype, SHAPES[0][1]).ptx
        _expect_exchange(f"{name} {NAME_BY_TORCH[dtype]}", ptx, 4 * cluster, has=("max",),
                         lacks=("add.f32", "ld.local", "st.local"))
    _check_rows(name, host, "max", "row maxima, exactly")


def one_exchange(host, name="ch06.one_exchange", cluster=8):
    """Exercise: no block round: every warp sends its partial to every block of the cluster, so
    the PTX has no ``bar.sync`` and the mbarrier expects WARPS x cluster x 4 bytes."""
    for dtype in DTYPES:
        ptx = _compile(host, dtype, SHAPES[0][1]).ptx
        _expect_exchange(f"{name} {NAME_BY_TORCH[dtype]}", ptx, 4 * WARPS * cluster,
                         lacks=("bar.sync", "barrier.sync", "ld.local", "st.local"))
    _check_rows(name, host, "sum", "row sums")

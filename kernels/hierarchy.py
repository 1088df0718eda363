"""Small probes of the memory hierarchy, for chapter 1.

* ``read_probe``: read-only bandwidth. Every thread loads 128-bit vectors and folds
  them; the result is stored only if it equals a runtime value no input produces,
  so the compiler must keep every load and the kernel writes (almost) nothing.
  Over a tensor far larger than L2 this is the HBM read ceiling; over one that fits
  in L2, the L2 read bandwidth.
* ``smem_probe``: shared-memory bandwidth: each block reads its shared buffer many
  times with 128-bit loads.
* ``chase``: latency. One thread follows a chain ``i = next[i]``; each load needs
  the previous one's result, so time / steps is the latency of wherever the chain
  lives (HBM, L2, L1, or shared memory with ``in_smem=True``).
"""
from __future__ import annotations

import torch

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import Float32, Int32, const_expr

from .compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector
from .config import RowConfig
from .layout import access_atom, make_row_copy

PROBE_WIDTH = 4096
THREADS = 256


class ReadProbe:
    """Read an (M, PROBE_WIDTH) tensor once; one thread in 2^32 would ever write."""

    def __init__(self, cfg: RowConfig):
        self.cfg = cfg

    @cute.jit
    def __call__(self, mX: cute.Tensor, mOut: cute.Tensor, sentinel: Float32, stream):
        cfg = self.cfg
        tiled_copy = make_row_copy(mX.element_type, cfg)
        tiler_mn = (cfg.rows_per_block, cfg.cols_per_pass)
        self.kernel(mX, mOut, sentinel, tiled_copy, tiler_mn).launch(
            grid=[cute.ceil_div(mX.shape[0], cfg.rows_per_block), PROBE_WIDTH // cfg.cols_per_pass, 1],
            block=[cfg.threads_per_block, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mOut: cute.Tensor, sentinel: Float32, tiled_copy: cute.TiledCopy,
               tiler_mn: cute.Shape):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        thr = tiled_copy.get_slice(tidx)
        tXgX = thr.partition_S(cute.local_tile(mX, tiler_mn, (bidx, bidy)))
        tXcX = thr.partition_S(cute.local_tile(cute.make_identity_tensor(mX.shape), tiler_mn, (bidx, bidy)))
        atom = access_atom(mX.element_type, self.cfg.vec)
        frag = cute.make_rmem_tensor_like(tXgX)
        frag.fill(0.0)
        if tXcX[0][0] < mX.shape[0]:
            cute.copy(atom, tXgX, frag)
        acc = frag.load().to(Float32).reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)
        if acc == sentinel:
            mOut[0] = acc


def compile_read_probe(dtype: torch.dtype = torch.float32):
    """The probe for rows of PROBE_WIDTH elements of ``dtype``: a block's pass covers one row
    exactly (fp32: 4 128-bit loads a thread; 16-bit: 2)."""
    vec = 128 // torch.finfo(dtype).bits
    cfg = RowConfig(THREADS, THREADS, 1, vec, PROBE_WIDTH // (THREADS * vec), 1)
    ct = TORCH_TO_CUTE[dtype]
    return compile_once(("read_probe", str(dtype)), lambda: (ReadProbe(cfg), (
        fake_rows(ct, PROBE_WIDTH, vec), fake_vector(Float32, 1), Float32(0.0), fake_stream()), cfg))


def read_probe(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Read every element of x (contiguous, numel a multiple of PROBE_WIDTH)."""
    if not x.is_cuda or not x.is_contiguous() or x.numel() % PROBE_WIDTH:
        raise ValueError(f"read_probe needs a contiguous CUDA tensor whose size is a multiple of {PROBE_WIDTH}")
    out = out if out is not None else torch.zeros(1, dtype=torch.float32, device=x.device)
    compile_read_probe(x.dtype)(x.view(-1, PROBE_WIDTH), out, float("nan"))
    return out


class SmemProbe:
    """Each block fills a shared buffer of ``words`` fp32, then every thread reads
    ``reps`` 128-bit vectors from it."""

    def __init__(self, words: int, reps: int):
        self.words, self.reps = words, reps

    @cute.jit
    def __call__(self, mOut: cute.Tensor, blocks: Int32, sentinel: Float32, stream):
        self.kernel(mOut, sentinel).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1],
                                           smem=self.words * 4, stream=stream)

    @cute.kernel
    def kernel(self, mOut: cute.Tensor, sentinel: Float32):
        tidx, _, _ = cute.arch.thread_idx()
        smem = cutlass.memory.SmemAllocator()
        vecs = self.words // 4
        sX = smem.allocate_tensor(Float32, cute.make_layout((4, vecs)), byte_alignment=16)
        for i in cutlass.range_constexpr(vecs // THREADS):
            for k in cutlass.range_constexpr(4):
                sX[k, tidx + i * THREADS] = Float32(tidx + k)
        cute.arch.barrier()
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), Float32, num_bits_per_copy=128)
        frag = cute.make_rmem_tensor(cute.make_layout(4), Float32)
        acc = Float32(0.0)
        for r in cutlass.range(self.reps, unroll=8):
            col = (tidx + r * 37) % vecs  # a different vector each time, no bank conflicts within a quarter-warp
            cute.copy(atom, sX[None, col], frag)
            acc = acc + frag.load().reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)
        if acc == sentinel:
            mOut[0] = acc


def compile_smem_probe(words: int = 8192, reps: int = 4096):
    return compile_once(("smem_probe", words, reps), lambda: (SmemProbe(words, reps), (
        fake_vector(Float32, 1), Int32(1), Float32(0.0), fake_stream()), None))


class Chase:
    """One thread follows ``steps`` links of a chain of int32 indices."""

    def __init__(self, in_smem: bool, smem_len: int = 0):
        self.in_smem, self.smem_len = in_smem, smem_len

    @cute.jit
    def __call__(self, mNext: cute.Tensor, mOut: cute.Tensor, steps: Int32, stream):
        self.kernel(mNext, mOut, steps).launch(grid=[1, 1, 1], block=[32, 1, 1],
                                               smem=max(16, self.smem_len * 4), stream=stream)

    @cute.kernel
    def kernel(self, mNext: cute.Tensor, mOut: cute.Tensor, steps: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        chain = mNext
        if const_expr(self.in_smem):
            smem = cutlass.memory.SmemAllocator()
            sNext = smem.allocate_tensor(Int32, cute.make_layout(self.smem_len), byte_alignment=16)
            for i in cutlass.range(cute.ceil_div(self.smem_len, 32)):
                j = tidx + i * 32
                if j < self.smem_len:
                    sNext[j] = mNext[j]
            cute.arch.barrier()
            chain = sNext
        if tidx == 0:
            idx = Int32(0)
            for _ in cutlass.range(steps, unroll=4):
                idx = Int32(chain[idx])
            mOut[0] = idx


def compile_chase(in_smem: bool = False, smem_len: int = 0):
    return compile_once(("chase", in_smem, smem_len), lambda: (Chase(in_smem, smem_len), (
        fake_vector(Int32, cute.sym_int()), fake_vector(Int32, 1), Int32(1), fake_stream()), None))


def make_chain(n_elems: int, stride_elems: int, device="cuda", seed: int = 0) -> torch.Tensor:
    """A random cycle through n_elems / stride_elems slots spaced stride_elems apart,
    so that every step lands on a new cache line in an unpredictable order."""
    slots = n_elems // stride_elems
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(slots, generator=g) * stride_elems
    nxt = torch.zeros(n_elems, dtype=torch.int32)
    nxt[order] = torch.roll(order, -1).to(torch.int32)
    # start the chain at slot 0
    return nxt.to(device)

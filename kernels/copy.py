"""Device copy: the memory system's speed of light, and the lesson of chapter 2.

A copy does no arithmetic, so its bandwidth is the ceiling every memory-bound kernel
is measured against. The tensor is viewed as rows of ``width`` elements; each block
moves a tile of rows, each thread ``vecs_per_thread`` accesses of ``vec`` elements.
What the chapter varies:

* the access width: ``bits`` = 16/32/64/128 bits per load and store
  (one element per thread up to a 128-bit vector, ``ld.global.v4``);
* coalescing: ``coalesced=False`` puts neighbouring lanes in different rows, so a
  warp's accesses scatter across 32 segments instead of one.
"""
from __future__ import annotations

import torch

import cutlass.cute as cute
from cutlass import const_expr

from . import validate
from .compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream
from .config import RowConfig
from .layout import access_atom, column_predicate, make_row_copy

#: Elements per row of the 2-D view the copy works on (a multiple of every vector width).
COPY_WIDTH = 4096
THREADS = 512
#: 128-bit accesses per thread: sixteen (256 bytes in flight a thread), best with 512-thread
#: blocks (TUNING.md#copy-vecs).
VECS = 16


class Copy:
    def __init__(self, dtype, width: int, cfg: RowConfig, coalesced: bool):
        self.dtype, self.width, self.cfg, self.coalesced = dtype, width, cfg, coalesced

    @cute.jit
    def __call__(self, mSrc: cute.Tensor, mDst: cute.Tensor, stream):
        cfg = self.cfg
        tiled_copy = make_row_copy(mSrc.element_type, cfg, self.coalesced)
        tiler_mn = (cfg.rows_per_block, cfg.cols_per_pass)
        self.kernel(mSrc, mDst, tiled_copy, tiler_mn).launch(
            grid=[cute.ceil_div(mSrc.shape[0], cfg.rows_per_block), cute.ceil_div(self.width, cfg.cols_per_pass), 1],
            block=[cfg.threads_per_block, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mSrc: cute.Tensor, mDst: cute.Tensor, tiled_copy: cute.TiledCopy, tiler_mn: cute.Shape):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        thr = tiled_copy.get_slice(tidx)
        tSgS = thr.partition_S(cute.local_tile(mSrc, tiler_mn, (bidx, bidy)))
        tDgD = thr.partition_D(cute.local_tile(mDst, tiler_mn, (bidx, bidy)))
        tScS = thr.partition_S(cute.local_tile(cute.make_identity_tensor(mSrc.shape), tiler_mn, (bidx, bidy)))
        ragged = const_expr(self.width % self.cfg.cols_per_pass != 0)
        tSpS = column_predicate(tScS, self.width) if const_expr(ragged) else None
        atom = access_atom(mSrc.element_type, self.cfg.vec)
        frag = cute.make_rmem_tensor_like(tSgS)
        if tScS[0][0] < mSrc.shape[0]:
            cute.copy(atom, tSgS, frag, pred=tSpS)
            cute.copy(atom, frag, tDgD, pred=tSpS)


def copy_config(dtype: torch.dtype, bits: int = 128, width: int = COPY_WIDTH, coalesced: bool = True,
                vecs: int = VECS, threads: int = THREADS) -> RowConfig:
    """Each thread moves ``vecs`` accesses of ``bits`` bits; coalesced rows give a
    block's threads neighbouring pieces of one row, strided ones one row per thread."""
    elem_bits = torch.finfo(dtype).bits
    if bits % elem_bits or bits > 128 or width % (bits // elem_bits):
        raise ValueError(f"cannot move {bits}-bit pieces of {dtype} rows of {width}")
    vec = bits // elem_bits
    tpr = min(threads, max(1, width // (vec * vecs)))
    if not coalesced:  # one thread per row: lane i reads row i, a whole row away from lane i+1
        tpr = 1
    return RowConfig(tpr, threads, 1, vec, vecs, 1)


def compile_copy(dtype: torch.dtype, bits: int = 128, coalesced: bool = True, width: int = COPY_WIDTH,
                 vecs: int = VECS, threads: int = THREADS):
    cfg = copy_config(dtype, bits, width, coalesced, vecs, threads)
    ct = TORCH_TO_CUTE[dtype]
    key = ("copy", str(dtype), bits, coalesced, width, cfg)
    return compile_once(key, lambda: (Copy(ct, width, cfg, coalesced), (
        fake_rows(ct, width, cfg.vec), fake_rows(ct, width, cfg.vec), fake_stream()), cfg))


def copy_(dst: torch.Tensor, src: torch.Tensor, *, bits: int = 128, coalesced: bool = True,
          vecs: int = VECS, threads: int = THREADS) -> torch.Tensor:
    """Copy src into dst (same shape and dtype, both contiguous CUDA tensors)."""
    if not isinstance(src, torch.Tensor) or src.dtype not in validate.FLOAT_DTYPES:
        raise TypeError(f"src must be a float32, bfloat16 or float16 tensor, got {getattr(src, 'dtype', src)}")
    validate.no_autograd("copy", src)
    validate.on_cuda(src, "src")
    if dst.shape != src.shape or dst.dtype != src.dtype or dst.device != src.device:
        raise ValueError("dst must have src's shape, dtype and device")
    if not (src.is_contiguous() and dst.is_contiguous()):
        raise ValueError("copy_ needs contiguous tensors")
    numel = src.numel()
    width = COPY_WIDTH
    while numel % width:
        width //= 2
    if validate.ptr_align(src, dst) < bits // 8 or width % (bits // torch.finfo(src.dtype).bits):
        raise ValueError(f"{bits}-bit accesses need 16-byte aligned tensors whose size is a multiple of the vector")
    kernel = compile_copy(src.dtype, bits, coalesced, width, vecs, threads)
    kernel(src.view(-1, width), dst.view(-1, width))
    if (bits, coalesced, vecs, threads) == (128, True, VECS, THREADS):
        _FAST[src.dtype, numel] = (kernel.fn, width)
    return dst


#: (dtype, numel) -> (compiled function, row width) of the last checked default copy: the fast
#: path of ``copy`` (the compiled signature checks dtype, alignment and device itself).
_FAST: dict = {}


def copy(src: torch.Tensor, *, bits: int = 128, coalesced: bool = True) -> torch.Tensor:
    """A new tensor equal to src, moved by our copy kernel."""
    if bits == 128 and coalesced and type(src) is torch.Tensor and not (src.requires_grad and torch.is_grad_enabled()):
        hit = _FAST.get((src.dtype, src.numel()))
        if hit is not None and src.is_contiguous():
            fn, width = hit
            dst = torch.empty_like(src)
            try:
                fn(src.view(-1, width), dst.view(-1, width))
                return dst
            except (ValueError, TypeError):  # refused before launching: the checked path says why
                pass
    return copy_(torch.empty_like(src), src, bits=bits, coalesced=coalesced)

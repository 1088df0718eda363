"""Compile each kernel once, in one visible cache, and launch it cheaply.

Kernels are compiled from *fake* tensors whose row count M (and row stride) is symbolic, so
one compile serves every M, and the same call works on a machine with no GPU (set
``CUTE_DSL_ARCH=sm_90a``): that is how the tests and ``kernels.inspect`` see the PTX and cubin.
The compiled function takes torch tensors directly (TVM FFI) and launches on torch's current
stream. A call finds its kernel by a cheap key (the op, dtypes, N, access width and flags)
and calls the compiled function with no Python layer in between.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Hashable

import torch

import cutlass.cute as cute
from cutlass import BFloat16, Float16, Float32, Int32, Int64

TORCH_TO_CUTE = {
    torch.float32: Float32,
    torch.bfloat16: BFloat16,
    torch.float16: Float16,
    torch.int64: Int64,
    torch.int32: Int32,
}
NAME_BY_TORCH = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
TORCH_BY_NAME = {v: k for k, v in NAME_BY_TORCH.items()}


# The compiler writes each kernel's PTX and cubin to files named after the kernel and its
# argument types (not its configuration), and the DSL reads them back right after compiling:
# a directory of our own per process (taken when compiling, so a forked child gets its own),
# so that processes compiling at once (pytest -n, two notebooks) never read each other's files.
def _options() -> str:
    dump = os.path.join(tempfile.gettempdir(), f"speed-of-light-cute-{os.getpid()}")
    os.makedirs(dump, exist_ok=True)
    return f"--enable-tvm-ffi --keep-ptx --keep-cubin --dump-dir={dump}"


@dataclass
class Compiled:
    """One compiled kernel: the function to call, and what the compiler made of it."""

    key: tuple
    fn: Callable  # the TVM FFI function: fn(*args) launches on torch's current stream
    config: object
    seconds: float
    ptx: str
    cubin: bytes

    def __call__(self, *args):
        return self.fn(*args)


_CACHE: dict[Hashable, Compiled] = {}
_LOCK = threading.Lock()


def cache() -> dict:
    """The compile cache itself: key -> Compiled. Chapters print it."""
    return _CACHE


def compile_once(key: tuple, build: Callable) -> Compiled:
    """Return the compiled kernel for ``key``. Only the first time, ``build()`` makes the
    kernel object, its fake arguments and its configuration, ``(jit_fn, args, config)``, and
    they are compiled; later calls cost one dictionary lookup."""
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        jit_fn, fake_args, config = build()
        t0 = time.perf_counter()
        fn = cute.compile(jit_fn, *fake_args, options=_options())
        seconds = time.perf_counter() - t0
        cubin = fn.__cubin__
        if isinstance(cubin, str):
            cubin = cubin.encode("latin-1")
        # Call the TVM FFI function itself: the DSL's wrapper only adds Python frames around it
        # (it converts pointer arguments, which no kernel here takes).
        raw = fn.__tvm_ffi_object__() if hasattr(fn, "__tvm_ffi_object__") else None
        compiled = Compiled(key, raw if raw is not None else fn, config, seconds, fn.__ptx__ or "", cubin or b"")
        _CACHE[key] = compiled
        return compiled


def fake_rows(dtype, n: int, vec: int):
    """An (M, N) row-major tensor with M and the row stride symbolic; the stride and the base
    pointer are promised to be multiples of ``vec`` elements (16 bytes at most)."""
    m = cute.sym_int()
    stride = cute.sym_int64(divisibility=vec)
    return cute.runtime.make_fake_tensor(
        dtype, (m, n), stride=(stride, 1), assumed_align=max(1, vec * dtype.width // 8)
    )


def fake_vector(dtype, n, align_elems: int = 1):
    """A contiguous 1-D tensor of n (int or symbolic) elements."""
    return cute.runtime.make_fake_compact_tensor(
        dtype, (n,), assumed_align=max(1, align_elems * dtype.width // 8)
    )


def fake_stream():
    return cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)

"""Input checks shared by every op: each raises a clear Python error before launch."""
from __future__ import annotations

import torch

from .config import MAX_N, vector_width

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_rows(x: torch.Tensor, name: str = "x", cuda: bool = True) -> None:
    """x must be a CUDA float tensor of rank >= 1 whose last dim is contiguous and at most
    MAX_N. Device last, so the other checks also run (and are tested) without a GPU."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError(f"{name} must have at least one dimension")
    n = x.shape[-1]
    if n < 1:
        raise ValueError(f"{name}'s last dimension is empty")
    if n > MAX_N:
        raise ValueError(f"{name}'s last dimension N = {n} is past the supported maximum {MAX_N}")
    if x.stride(-1) != 1 and n > 1:
        raise ValueError(f"{name}'s last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")
    if cuda:
        check_cuda(x, name)


def check_cuda(x: torch.Tensor, name: str) -> None:
    if not x.is_cuda:
        raise ValueError(f"{name} must be on a CUDA device, got device {x.device}")


def as_rows(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    """View x as (M, N) without copying; refuse layouts that would need a copy."""
    n = x.shape[-1]
    if x.dim() == 2:
        return x
    try:
        return x.view(-1, n)
    except RuntimeError as e:
        raise ValueError(f"{name}'s leading dimensions cannot be flattened without a copy: {e}") from None


def check_same_device(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    if b.device != a.device:
        raise ValueError(f"{name} is on {b.device} but the input is on {a.device}")


def access_width(n: int, rows: tuple, others: tuple = ()) -> int:
    """The widest access (elements, <= 128 bits) every row of every tensor in ``rows`` (2-D,
    same dtype) allows: it divides N, each row stride, and the base alignment of those
    tensors and of ``others`` (e.g. a weight read with the same accesses)."""
    align = ptr_align(*rows, *others)
    bits = torch.finfo(rows[0].dtype).bits
    return min(vector_width(n, bits, r.stride(0), align) for r in rows)


def ptr_align(*tensors: torch.Tensor) -> int:
    """The largest power of two (<= 16 bytes) that divides every tensor's base address."""
    a = 16
    for t in tensors:
        while a > 1 and t.data_ptr() % a:
            a //= 2
    return a

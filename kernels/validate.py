"""Input checks shared by every op: each raises a clear Python error before any launch.

The checks are ordered so that everything but the device is checked (and tested) without a
GPU. They cost a few hundred nanoseconds a call: attribute reads and integer arithmetic.
"""
from __future__ import annotations

import torch

from .config import MAX_N

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: The GPUs the kernels are built for: Hopper (compute capability 9.0, ``sm_90a``).
ARCH = (9, 0)
_CHECKED_DEVICES: set = set()


def rows(x: torch.Tensor, name: str = "x", cuda: bool = True) -> torch.Tensor:
    """x viewed as (M, N) without a copy, after checking that it is a float tensor of rank >= 1
    whose last dim is contiguous, non-empty and at most MAX_N, and (``cuda``) on a CUDA device:
    an op that checks more passes ``cuda=False`` and calls :func:`on_cuda` after its own checks."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {x.dtype}")
    shape = x.shape
    if not shape:
        raise ValueError(f"{name} must have at least one dimension")
    n = shape[-1]
    if n < 1:
        raise ValueError(f"{name}'s last dimension is empty")
    if n > MAX_N:
        raise ValueError(f"{name}'s last dimension N = {n} is past the supported maximum {MAX_N}")
    if n > 1 and x.stride(-1) != 1:
        raise ValueError(f"{name}'s last dimension must be contiguous (stride 1), got stride {x.stride(-1)}")
    if cuda and not x.is_cuda:
        on_cuda(x, name)
    if len(shape) == 2:
        return x
    try:
        return x.view(-1, n)
    except RuntimeError as e:
        raise ValueError(f"{name}'s leading dimensions cannot be flattened without a copy: {e}") from None


def on_cuda(x: torch.Tensor, name: str = "x") -> None:
    if not x.is_cuda:
        raise ValueError(f"{name} must be on a CUDA device, got device {x.device}")


def no_autograd(name: str, *tensors) -> None:
    """Refuse inputs that want a gradient where the function would not give one: the outputs
    would be silently cut off from autograd (the differentiable ops are ``kernels.<op>``)."""
    if torch.is_grad_enabled() and any([isinstance(t, torch.Tensor) and t.requires_grad for t in tensors]):
        raise RuntimeError(f"{name} does not differentiate its inputs, and one of them requires grad: "
                           f"call it under torch.no_grad() or on detached tensors"
                           + ("" if name in ("copy", "reduce_rows") else f", or use kernels.{name.split('.')[-1]}, "
                              "which has autograd"))


def like(x: torch.Tensor, out: torch.Tensor, name: str = "out") -> None:
    """``out`` must be a tensor of x's shape, dtype and device."""
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"{name} must have x's shape {tuple(x.shape)}, dtype {x.dtype} and device {x.device}")


def column(t, x: torch.Tensor, name: str) -> None:
    """A per-column input (weight, bias): contiguous, shape (N,), x's dtype and device."""
    n = x.shape[-1]
    if not isinstance(t, torch.Tensor) or t.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {tuple(getattr(t, 'shape', ()))}")
    if t.dtype != x.dtype:
        raise TypeError(f"{name} dtype {t.dtype} must match x dtype {x.dtype}")
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device} but x is on {x.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def per_row(t, m: int, device, name: str, dtypes=(torch.float32,)) -> None:
    """A per-row tensor (target, rstd, ...): contiguous, shape (M,), one of ``dtypes``, on ``device``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must be {' or '.join(str(d).removeprefix('torch.') for d in dtypes)}, got {t.dtype}")
    if t.shape != (m,):
        raise ValueError(f"{name} must have shape ({m},), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the input is on {device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def access_width(n: int, elem_bytes: int, tensors, others=()) -> int:
    """The widest access (elements, <= 16 bytes) every row of every (M, N) tensor in
    ``tensors`` allows: it divides N, each row stride, and the base address of those tensors and
    of ``others`` (read with the same accesses, e.g. a weight). The largest power of two that
    divides all of them is the lowest set bit of their OR."""
    g = n * elem_bytes | 16
    for t in tensors:
        g |= t.stride(0) * elem_bytes | t.data_ptr()
    for t in others:
        g |= t.data_ptr()
    return (g & -g) // elem_bytes or 1


def ptr_align(*tensors: torch.Tensor) -> int:
    """The largest power of two (<= 16 bytes) that divides every tensor's base address."""
    g = 16
    for t in tensors:
        g |= t.data_ptr()
    return g & -g


def check_arch(device: torch.device) -> None:
    """Raise a clear error on a GPU the kernels are not built for (once per device)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index in _CHECKED_DEVICES:
        return
    cap = torch.cuda.get_device_capability(index)
    if cap != ARCH:
        name = torch.cuda.get_device_name(index)
        raise RuntimeError(
            f"kernels are built for Hopper GPUs (compute capability 9.0, sm_90a: H100, H200); "
            f"cuda:{index} is {name} (compute capability {cap[0]}.{cap[1]})")
    _CHECKED_DEVICES.add(index)

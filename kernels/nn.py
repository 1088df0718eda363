"""``torch.nn`` drop-ins: RMSNorm, LayerNorm and CrossEntropyLoss on this package's kernels.

They take torch's constructor arguments where the kernels support them and raise a clear error
where not (a normalized shape of more than the last dim, per-class weights),
and they keep torch's parameter names, so a state dict loads into either.
"""
from __future__ import annotations

import numbers

import torch

from . import functional as F


def _last_dim(normalized_shape, name) -> int:
    shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if len(shape) != 1:
        raise ValueError(f"{name} normalizes over the last dim only: normalized_shape must be an int or a "
                         f"1-tuple, got {normalized_shape!r}")
    return int(shape[0])


class RMSNorm(torch.nn.Module):
    """As ``torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)``; eps=None
    takes ``torch.finfo(x.dtype).eps``, as torch does."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        n = _last_dim(normalized_shape, "RMSNorm")
        self.normalized_shape, self.eps, self.elementwise_affine = (n,), eps, elementwise_affine
        self.weight = torch.nn.Parameter(torch.ones(n, device=device, dtype=dtype)) if elementwise_affine else None

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return F.rmsnorm(x, self.weight, eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(torch.nn.Module):
    """As ``torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True)``."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        n = _last_dim(normalized_shape, "LayerNorm")
        self.normalized_shape, self.eps, self.elementwise_affine = (n,), eps, elementwise_affine
        kw = dict(device=device, dtype=dtype)
        self.weight = torch.nn.Parameter(torch.ones(n, **kw)) if elementwise_affine else None
        self.bias = torch.nn.Parameter(torch.zeros(n, **kw)) if elementwise_affine and bias else None

    def forward(self, x):
        return F.layernorm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class CrossEntropyLoss(torch.nn.Module):
    """As ``torch.nn.CrossEntropyLoss(weight=None, ignore_index=-100, reduction="mean",
    label_smoothing=0.0)`` over logits (M, N) and class targets (M,)."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        if weight is not None:
            raise NotImplementedError("CrossEntropyLoss: per-class weights are not supported")
        if size_average is not None or reduce is not None:
            raise ValueError("CrossEntropyLoss: size_average and reduce are deprecated in torch; use reduction=")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, logits, target):
        return F.cross_entropy(logits, target, self.ignore_index, self.reduction, label_smoothing=self.label_smoothing)

"""The ops as PyTorch sees them: custom ops with fake implementations and autograd.

Each training op (RMSNorm, LayerNorm, softmax, cross-entropy) is a ``torch.library`` custom op
(``torch.ops.speed_of_light.*``) with a fake implementation, so ``torch.compile(fullgraph=True)``
traces a model that calls it without a graph break, and with its autograd registered, so
gradients flow and CUDA graphs capture forward and backward. The public functions take the
custom op only while torch.compile traces; an eager call that needs a gradient runs the same
setup and backward functions, and the same forward (cross-entropy's with a fast path of its own,
``_cross_entropy_fwd_eager``), as one ``torch.autograd.Function`` (``_Eager``: the dispatcher's
way through a custom op and its backward op cost the host more than the kernels' launches), and
any other call goes straight to the kernel. After a first, checked call, the forward and the
backward of a training call launch the compiled function that call remembered (``_fast``).

The backward passes are kernels of the template too (``SoftmaxBackward``,
``CrossEntropyBackward``, and ``kernels.norm_backward`` for RMSNorm's and LayerNorm's, whose
weight gradients are summed over the rows by a persistent kernel), for every row the forward
takes.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import cross_entropy as _ce
from . import layernorm as _ln
from . import norm_backward as _nb
from . import rmsnorm as _rms
from . import softmax as _sm
from . import validate

LIB = "speed_of_light"


def _needs_autograd(x, w=None, b=None) -> bool:
    """The custom op is needed: torch.compile is tracing, or an input will want a gradient."""
    if torch.compiler.is_compiling():
        return True
    if not torch.is_grad_enabled():
        return False
    return ((isinstance(x, Tensor) and x.requires_grad) or (w is not None and isinstance(w, Tensor) and w.requires_grad)
            or (b is not None and isinstance(b, Tensor) and b.requires_grad))


def _plain(x, w=None, b=None) -> bool:
    """The call may take the fast path: eager (not traced), no input wanting a gradient, x a
    plain 2-D tensor with rows. The fast path calls the compiled function the last checked call
    of the same kind remembered (``RowOp.fast``); its signature checks every tensor (dtype,
    shapes, strides, alignment, device) before launching, and a call it refuses takes the
    checked path, which names the problem or compiles the kernel the call needs."""
    if torch.compiler.is_compiling() or type(x) is not Tensor or x.ndim != 2 or not x.shape[0]:
        return False
    if not torch.is_grad_enabled():
        return True
    return not (x.requires_grad or getattr(w, "requires_grad", False) or getattr(b, "requires_grad", False))


def _eager_only(config, name):
    if config is not None:
        raise ValueError(f"{name}: config= applies to eager calls without autograd; it cannot pass through "
                         "torch.compile or autograd")


_PLAIN_TYPES = (Tensor, torch.nn.Parameter)


def _eager(*tensors) -> bool:
    """Plain CUDA tensors (or a module's parameters) outside torch.compile: a custom op's body may
    be called directly. Traced tensors (fake, functional) and meta tensors take the op, whose fake
    implementation they need; tensors on other devices take it too, and are refused by its checks."""
    return not torch.compiler.is_compiling() and all([t is None or (type(t) in _PLAIN_TYPES and t.is_cuda)
                                                      for t in tensors])


class _Eager(torch.autograd.Function):
    """An op's forward, its setup_context and its backward (the functions its custom op
    registers) as one autograd.Function, for eager calls: ``_Eager.apply(*inputs, spec)`` with
    spec = (forward, setup, backward, stats), the last ``stats`` outputs not differentiable
    (the per-row mean, rstd or lse the backward reads)."""

    @staticmethod
    def forward(ctx, *args):
        *inputs, (forward, setup, backward, stats) = args
        out = forward(*inputs)
        setup(ctx, tuple(inputs), out)
        ctx.backward_fn = backward
        ctx.set_materialize_grads(False)
        if stats:
            ctx.mark_non_differentiable(*out[-stats:])
        return out

    @staticmethod
    def backward(ctx, *grads):
        if grads[0] is None:  # the op's output took no part in what was differentiated
            return (None,) * len(ctx.needs_input_grad)
        g = ctx.backward_fn(ctx, *grads)
        return (g if isinstance(g, tuple) else (g,)) + (None,)


def _stats_shape(x):
    return x.shape[:-1]


def _fast(op, x, *key):
    """The compiled function a checked call remembered under (x's dtype, N) + key (``RowOp.fast``),
    for an x of rows, 2-D; else None. Training calls take it for the forward and, with the tensors
    autograd hands the backward (whose shapes agree by construction: a compiled signature checks
    each tensor alone), for the backward."""
    if x.ndim != 2 or not x.shape[0]:
        return None
    return op.fast.get((x.dtype, x.shape[1]) + key)


def _launched(fn, args) -> bool:
    """Call ``fn(args)``; False where its signature refused a tensor before launching (the caller
    then takes the checked path, which names the problem or compiles the kernel the call needs)."""
    try:
        fn(args)
    except (ValueError, TypeError):
        return False
    return True


def _launch_remembered(op, x, key: tuple, args: tuple, checked) -> None:
    """Launch ``args`` through the kernel remembered under (x's dtype, N) + key (``_fast``), or
    else call ``checked(remember)``, the checked path, which remembers its kernel under that key."""
    fn = _fast(op, x, *key)
    if fn is None or not _launched(fn, args):
        checked((x.dtype, x.shape[-1]) + key)


# ---- RMSNorm --------------------------------------------------------------------------------
def _rmsnorm_fwd(x: Tensor, weight: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor]:
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = torch.empty(_stats_shape(x), dtype=torch.float32, device=x.device)
    _launch_remembered(_rms.RMSNorm, x, (weight is not None, "rstd"),
                       (x, out) + ((weight,) if weight is not None else ()) + (rstd, float(eps)),
                       lambda key: _rms.rmsnorm_out(x, weight, out, eps, rstd=rstd.view(-1), remember=key))
    return out, rstd


_rmsnorm_op = torch.library.custom_op(f"{LIB}::rmsnorm", mutates_args=(), device_types="cuda")(_rmsnorm_fwd)


@_rmsnorm_op.register_fake
def _(x, weight, eps):
    validate.rows(x, cuda=False)
    if weight is not None:
        validate.column(weight, x, "weight")
    return torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(_stats_shape(x), dtype=torch.float32)


def _rmsnorm_backward_body(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor) -> tuple[Tensor, Tensor]:
    dx = torch.empty_like(x)
    dw = _nb.rmsnorm_backward_out(dy.contiguous(), x, weight, rstd.reshape(-1), dx)
    return dx, (dw.to(weight.dtype) if weight is not None else x.new_empty(0))


_rmsnorm_backward_op = torch.library.custom_op(f"{LIB}::rmsnorm_backward", mutates_args=(),
                                               device_types="cuda")(_rmsnorm_backward_body)


@_rmsnorm_backward_op.register_fake
def _(dy, x, weight, rstd):
    return torch.empty_like(x), (torch.empty_like(weight) if weight is not None else x.new_empty(0))


def rmsnorm_backward(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor):
    """(dx, dweight) of y = x * rstd * weight, with rstd = 1 / sqrt(mean(x^2) + eps) saved by the
    forward: dx = rstd (g - xhat mean(g xhat)) with g = dy * weight and xhat = x * rstd;
    dweight = the sum over rows of dy * xhat."""
    dx, dw = (_rmsnorm_backward_body if _eager(dy, x, weight) else _rmsnorm_backward_op)(dy, x, weight, rstd)
    return dx, (dw if weight is not None else None)


def _accumulated(x: Tensor) -> torch.dtype:
    """The dtype the PyTorch twins compute in: fp32, or float64 for float64 inputs (a reference)."""
    return torch.promote_types(x.dtype, torch.float32)


def rmsnorm_backward_torch(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor):
    """``rmsnorm_backward`` in PyTorch operations (fp32 accumulation, float64 for float64
    inputs), for any device."""
    acc = _accumulated(x)
    xhat = x.to(acc) * rstd.to(acc).unsqueeze(-1)
    g = dy.to(acc) * weight.to(acc) if weight is not None else dy.to(acc)
    dx = (g - xhat * (g * xhat).mean(-1, keepdim=True)) * rstd.to(acc).unsqueeze(-1)
    dw = (dy.to(acc) * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype) if weight is not None else None
    return dx.to(x.dtype), dw


def _rmsnorm_setup(ctx, inputs, output):
    x, weight, _ = inputs
    ctx.save_for_backward(x, weight, output[1])


def _norm_key(x, weight):
    """A norm backward's fast-path key: with the device, whose SM count sets the persistent grid."""
    return (x.dtype, x.shape[-1], weight is not None, x.get_device())


def _rmsnorm_bwd(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dy = dy.contiguous()  # (y.sum()'s gradient is expanded, stride 0)
    if not _eager(dy, x, weight):
        dx, dw = rmsnorm_backward(dy, x, weight, rstd)
        return dx, (dw if ctx.needs_input_grad[1] else None), None
    dx, (dw,) = _nb.autograd_backward(_nb.RMSNormBackward, dy, x, weight, (rstd,), _norm_key(x, weight))
    return dx, (dw.to(weight.dtype) if ctx.needs_input_grad[1] else None), None


_rmsnorm_op.register_autograd(_rmsnorm_bwd, setup_context=_rmsnorm_setup)
_RMSNORM = (_rmsnorm_fwd, _rmsnorm_setup, _rmsnorm_bwd, 1)


def rmsnorm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-6, *, config=None) -> Tensor:
    """RMSNorm over the last dim of x (fp32, bf16 or fp16; any leading shape), differentiable in
    x and weight."""
    if config is None and _plain(x, weight):
        fn = _fast(_rms.RMSNorm, x, weight is not None)
        if fn is not None:
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
            if _launched(fn, (x, out, weight, float(eps)) if weight is not None else (x, out, float(eps))):
                return out
    if _needs_autograd(x, weight):
        _eager_only(config, "rmsnorm")
        if _eager(x, weight):
            return _Eager.apply(x, weight, eps, _RMSNORM)[0]
        return _rmsnorm_op(x, weight, eps)[0]
    return _rms.rmsnorm(x, weight, eps, config=config)


# ---- LayerNorm ------------------------------------------------------------------------------
def _layernorm_fwd(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor, Tensor]:
    fn = _fast(_ln.LayerNorm, x, weight is not None, bias is not None, "stats")
    if fn is not None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        mean, rstd = (torch.empty(x.shape[0], dtype=torch.float32, device=x.device) for _ in range(2))
        if _launched(fn, (x, out) + tuple([t for t in (weight, bias) if t is not None]) + (mean, rstd, float(eps))):
            return out, mean, rstd
    y, mean, rstd = _ln.layernorm(x, weight, bias, eps, return_stats=True)
    return y, mean, rstd


_layernorm_op = torch.library.custom_op(f"{LIB}::layernorm", mutates_args=(), device_types="cuda")(_layernorm_fwd)


@_layernorm_op.register_fake
def _(x, weight, bias, eps):
    validate.rows(x, cuda=False)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            validate.column(t, x, name)
    stats = x.new_empty(_stats_shape(x), dtype=torch.float32)
    return torch.empty_like(x, memory_format=torch.contiguous_format), stats, torch.empty_like(stats)


def _layernorm_backward_body(dy: Tensor, x: Tensor, weight: Optional[Tensor], mean: Tensor,
                             rstd: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    dx = torch.empty_like(x)
    dw, db = _nb.layernorm_backward_out(dy.contiguous(), x, weight, mean.reshape(-1), rstd.reshape(-1), dx)
    return dx, (dw.to(weight.dtype) if weight is not None else x.new_empty(0)), db.to(dy.dtype)


_layernorm_backward_op = torch.library.custom_op(f"{LIB}::layernorm_backward", mutates_args=(),
                                                 device_types="cuda")(_layernorm_backward_body)


@_layernorm_backward_op.register_fake
def _(dy, x, weight, mean, rstd):
    n = x.shape[-1]
    return (torch.empty_like(x), torch.empty_like(weight) if weight is not None else x.new_empty(0),
            dy.new_empty(n))


def layernorm_backward(dy, x, weight, mean, rstd, has_bias: bool):
    """(dx, dweight, dbias) of y = (x - mean) * rstd * weight + bias: with xhat = (x - mean) rstd
    and g = dy * weight, dx = rstd (g - mean(g) - xhat mean(g xhat)); dweight and dbias are the
    sums over rows of dy * xhat and dy."""
    body = _layernorm_backward_body if _eager(dy, x, weight) else _layernorm_backward_op
    dx, dw, db = body(dy, x, weight, mean, rstd)
    return dx, (dw if weight is not None else None), (db if has_bias else None)


def layernorm_backward_torch(dy, x, weight, mean, rstd, has_bias: bool):
    """``layernorm_backward`` in PyTorch operations (fp32 accumulation, float64 for float64
    inputs), for any device."""
    n, acc = x.shape[-1], _accumulated(x)
    rstd = rstd.to(acc).unsqueeze(-1)
    xhat = (x.to(acc) - mean.to(acc).unsqueeze(-1)) * rstd
    g = dy.to(acc) * weight.to(acc) if weight is not None else dy.to(acc)
    dx = (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)) * rstd
    rows = dy.to(acc).reshape(-1, n)
    dw = (rows * xhat.reshape(-1, n)).sum(0).to(weight.dtype) if weight is not None else None
    db = rows.sum(0).to(dy.dtype) if has_bias else None
    return dx.to(x.dtype), dw, db


def _layernorm_setup(ctx, inputs, output):
    x, weight, bias, _ = inputs
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, weight, output[1], output[2])


def _layernorm_bwd(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dy = dy.contiguous()
    if not _eager(dy, x, weight):
        dx, dw, db = layernorm_backward(dy, x, weight, mean, rstd, ctx.has_bias)
        return dx, (dw if ctx.needs_input_grad[1] else None), (db if ctx.needs_input_grad[2] else None), None
    dx, (dw, db) = _nb.autograd_backward(_nb.LayerNormBackward, dy, x, weight, (mean, rstd), _norm_key(x, weight))
    return (dx, dw.to(weight.dtype) if ctx.needs_input_grad[1] else None,
            db.to(dy.dtype) if ctx.needs_input_grad[2] else None, None)


_layernorm_op.register_autograd(_layernorm_bwd, setup_context=_layernorm_setup)
_LAYERNORM = (_layernorm_fwd, _layernorm_setup, _layernorm_bwd, 2)


def layernorm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None, eps: float = 1e-5, *,
              return_stats: bool = False, config=None):
    """LayerNorm over the last dim of x, as ``torch.nn.functional.layer_norm``; differentiable in
    x, weight and bias. With ``return_stats``, also each row's mean and rstd (fp32)."""
    if config is None and not return_stats and _plain(x, weight, bias):
        fn = _fast(_ln.LayerNorm, x, weight is not None, bias is not None)
        if fn is not None:
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
            if _launched(fn, (x, out, weight, bias, float(eps)) if weight is not None and bias is not None else
                         (x, out) + tuple([t for t in (weight, bias) if t is not None]) + (float(eps),)):
                return out
    if _needs_autograd(x, weight, bias):
        _eager_only(config, "layernorm")
        y, mean, rstd = (_Eager.apply(x, weight, bias, eps, _LAYERNORM) if _eager(x, weight, bias) else
                         _layernorm_op(x, weight, bias, eps))
        # the statistics are not differentiable (the backward reads them): detached, so that
        # differentiating one raises instead of giving a silently wrong gradient
        return (y, mean.detach(), rstd.detach()) if return_stats else y
    return _ln.layernorm(x, weight, bias, eps, return_stats=return_stats, config=config)


# ---- softmax --------------------------------------------------------------------------------
def _softmax_fwd(x: Tensor) -> Tensor:
    fn = _fast(_sm.Softmax, x)
    if fn is not None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        if _launched(fn, (x, out)):
            return out
    return _sm.softmax(x)


_softmax_op = torch.library.custom_op(f"{LIB}::softmax", mutates_args=(), device_types="cuda")(_softmax_fwd)


@_softmax_op.register_fake
def _(x):
    validate.rows(x, cuda=False)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_backward_body(dy: Tensor, y: Tensor) -> Tensor:
    return _sm.softmax_backward_out(dy.contiguous(), y, torch.empty_like(y))


_softmax_backward_op = torch.library.custom_op(f"{LIB}::softmax_backward", mutates_args=(),
                                               device_types="cuda")(_softmax_backward_body)


@_softmax_backward_op.register_fake
def _(dy, y):
    return torch.empty_like(y)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_bwd(ctx, dy):
    (y,) = ctx.saved_tensors
    dy = dy.contiguous()
    if not _eager(dy, y):
        return _softmax_backward_op(dy, y)
    dx = torch.empty_like(y)
    _launch_remembered(_sm.SoftmaxBackward, y, (), (y, dy, dx),
                       lambda key: _sm.softmax_backward_out(dy, y, dx, remember=key))
    return dx


_softmax_op.register_autograd(_softmax_bwd, setup_context=_softmax_setup)
_SOFTMAX = (_softmax_fwd, _softmax_setup, _softmax_bwd, 0)


def softmax(x: Tensor, dim: int = -1, *, config=None) -> Tensor:
    """Softmax of x along its last dim, differentiable in x."""
    if config is None and dim == -1 and _plain(x):
        fn = _fast(_sm.Softmax, x)
        if fn is not None:
            out = torch.empty_like(x, memory_format=torch.contiguous_format)
            if _launched(fn, (x, out)):
                return out
    if _needs_autograd(x):
        _eager_only(config, "softmax")
        if dim != -1 and dim != x.dim() - 1:
            raise ValueError(f"softmax supports only the last dim (dim=-1), got dim={dim}")
        return _Eager.apply(x, _SOFTMAX) if _eager(x) else _softmax_op(x)
    return _sm.softmax(x, dim, config=config)


# ---- cross-entropy --------------------------------------------------------------------------
def _cross_entropy_fwd(logits: Tensor, target: Tensor, ignore_index: int, reduction: str, label_smoothing: float,
                       lse_square_scale: float, inplace_backward: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, lse, the count of rows not ignored that a mean's backward divides by)."""
    return _ce.cross_entropy(logits, target, ignore_index, reduction, label_smoothing=label_smoothing,
                             lse_square_scale=lse_square_scale, return_lse=True, return_count=True)


_cross_entropy_op = torch.library.custom_op(f"{LIB}::cross_entropy", mutates_args=(),
                                            device_types="cuda")(_cross_entropy_fwd)


def _cross_entropy_fwd_eager(logits, target, ignore_index, reduction, label_smoothing, lse_square_scale,
                             inplace_backward):
    """``_cross_entropy_fwd`` for an eager training call: the default mean through its fast path
    (whose loss and count may share a buffer, as a custom op's outputs may not)."""
    if (reduction == "mean" and not (label_smoothing or lse_square_scale) and logits.ndim == 2 and logits.shape[0]
            and type(target) is Tensor and -(2**31) <= ignore_index < 2**31):
        got = _ce.mean_fast(logits, target, ignore_index, with_lse=True)
        if got is not None:
            return got
    return _cross_entropy_fwd(logits, target, ignore_index, reduction, label_smoothing, lse_square_scale,
                              inplace_backward)


@_cross_entropy_op.register_fake
def _(logits, target, ignore_index, reduction, label_smoothing, lse_square_scale, inplace_backward):
    if reduction not in _ce.REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    m = logits.shape[0]
    loss = logits.new_empty((m,) if reduction == "none" else (), dtype=torch.float32)
    return loss, logits.new_empty((m,), dtype=torch.float32), logits.new_empty((1,), dtype=torch.float32)


def _cross_entropy_backward_body(g: Tensor, logits: Tensor, target: Tensor, lse: Tensor, ignore_index: int,
                                 label_smoothing: float, lse_square_scale: float) -> Tensor:
    return _ce.cross_entropy_backward_out(g, logits, target, lse, torch.empty_like(logits), ignore_index,
                                          label_smoothing=label_smoothing, lse_square_scale=lse_square_scale)


_cross_entropy_backward_op = torch.library.custom_op(f"{LIB}::cross_entropy_backward", mutates_args=(),
                                                     device_types="cuda")(_cross_entropy_backward_body)


@_cross_entropy_backward_op.register_fake
def _(g, logits, target, lse, ignore_index, label_smoothing, lse_square_scale):
    return torch.empty_like(logits)


def _cross_entropy_backward_inplace_body(g: Tensor, logits: Tensor, target: Tensor, lse: Tensor, ignore_index: int,
                                         label_smoothing: float, lse_square_scale: float) -> None:
    _ce.cross_entropy_backward_out(g, logits, target, lse, logits, ignore_index, label_smoothing=label_smoothing,
                                   lse_square_scale=lse_square_scale)


_cross_entropy_backward_inplace_op = torch.library.custom_op(
    f"{LIB}::cross_entropy_backward_", mutates_args=("logits",), device_types="cuda")(_cross_entropy_backward_inplace_body)


@_cross_entropy_backward_inplace_op.register_fake
def _(g, logits, target, lse, ignore_index, label_smoothing, lse_square_scale):
    return None


def _cross_entropy_setup(ctx, inputs, output):
    logits, target, ignore_index, reduction, smoothing, z, inplace = inputs
    ctx.ignore_index, ctx.reduction, ctx.inplace, ctx.smoothing, ctx.z = ignore_index, reduction, inplace, smoothing, z
    ctx.save_for_backward(logits, target, output[1], output[2])


def _cross_entropy_bwd(ctx, dloss, _dlse, _dcount):
    logits, target, lse, count = ctx.saved_tensors
    g = _ce.row_gradients(dloss.float().contiguous(), target, ctx.ignore_index, ctx.reduction, count)
    args = (g, logits, target, lse, ctx.ignore_index, ctx.smoothing, ctx.z)
    rest = (None,) * 6
    if not _eager(g, logits, target, lse):
        if ctx.inplace:
            _cross_entropy_backward_inplace_op(*args)
            return (logits,) + rest
        return (_cross_entropy_backward_op(*args),) + rest
    dlogits = logits if ctx.inplace else torch.empty_like(logits)
    options = (g.numel() != 1 or logits.shape[0] == 1, ctx.smoothing != 0, ctx.z != 0)  # (per-row g, as launched)
    _launch_remembered(_ce.CrossEntropyBackward, logits, (target.dtype,) + options,
                       (logits, dlogits, target, lse, g, ctx.ignore_index, float(ctx.smoothing), float(ctx.z)),
                       lambda key: _ce.cross_entropy_backward_out(g, logits, target, lse, dlogits, ctx.ignore_index,
                                                                  label_smoothing=ctx.smoothing,
                                                                  lse_square_scale=ctx.z, remember=key))
    return (dlogits,) + rest


_cross_entropy_op.register_autograd(_cross_entropy_bwd, setup_context=_cross_entropy_setup)
_CROSS_ENTROPY = (_cross_entropy_fwd_eager, _cross_entropy_setup, _cross_entropy_bwd, 2)


def cross_entropy(logits: Tensor, target: Tensor, ignore_index: int = -100, reduction: str = "mean", *,
                  label_smoothing: float = 0.0, lse_square_scale: float = 0.0, return_lse: bool = False,
                  inplace_backward: bool = False, config=None):
    """Cross-entropy of logits (M, N) against integer targets (M,), as torch's
    ``F.cross_entropy`` with its ``label_smoothing``, plus PaLM's z-loss (``lse_square_scale``
    times each row's lse^2); differentiable in the logits (with ``inplace_backward``, the
    gradient overwrites the logits, saving an (M, N) buffer: the logits must not be used after
    the backward). No host sync: a bad target makes its row's loss NaN and is reported later
    (``kernels.errors``)."""
    if (config is None and reduction == "mean" and not (label_smoothing or lse_square_scale or return_lse)
            and _plain(logits) and type(target) is Tensor and -(2**31) <= ignore_index < 2**31):
        loss = _ce.mean_fast(logits, target, ignore_index)
        if loss is not None:
            return loss
    if _needs_autograd(logits):
        _eager_only(config, "cross_entropy")
        args = (logits, target, ignore_index, reduction, float(label_smoothing), float(lse_square_scale),
                inplace_backward)
        loss, lse, _ = _Eager.apply(*args, _CROSS_ENTROPY) if _eager(logits, target) else _cross_entropy_op(*args)
        return (loss, lse.detach()) if return_lse else loss  # (lse: not differentiable, as the stats above)
    return _ce.cross_entropy(logits, target, ignore_index, reduction, label_smoothing=label_smoothing,
                             lse_square_scale=lse_square_scale, return_lse=return_lse, config=config)

"""The implementations each op is measured against, built for one (M, N, dtype).

Each entry is (impl name, make(m, n, dtype) -> zero-argument callable). Inputs are fresh random
tensors; torch.compile uses dynamic=False (one graph per shape). "ours" is the public function
called as a user calls it, default arguments (it allocates its output); the rows after it
("ours-out", "ours-none") time the same kernels writing into a given output or unreduced, to
compare like with like where a peer does that.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _x(m, n, dt):
    return torch.randn(m, n, device="cuda", dtype=dt)


def _rmsnorm(m, n, dt):
    x, w = _x(m, n, dt), torch.randn(n, device="cuda", dtype=dt)
    return x, w


def _layernorm(m, n, dt):
    return _x(m, n, dt), torch.randn(n, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)


def fresh_compile(f, backend="inductor"):
    """``torch.compile(f, dynamic=False)`` compiled afresh. Every point of a suite compiles the
    same lambda (one code object) for a new shape or dtype, and Dynamo stops compiling a code
    object after ``recompile_limit`` (8) graphs and silently runs it eagerly. Resetting Dynamo
    first gives each point its own compile."""
    torch._dynamo.reset()
    return torch.compile(f, dynamic=False, backend=backend)


def _ours_rmsnorm(m, n, dt):
    from kernels import rmsnorm
    x, w = _rmsnorm(m, n, dt)
    return lambda: rmsnorm(x, w, 1e-6)


def _ours_rmsnorm_out(m, n, dt):
    from kernels.rmsnorm import rmsnorm_out
    x, w = _rmsnorm(m, n, dt)
    out = torch.empty_like(x)
    return lambda: rmsnorm_out(x, w, out, 1e-6)


def _torch_rmsnorm(m, n, dt, compiled=False):
    x, w = _rmsnorm(m, n, dt)
    f = lambda x, w: F.rms_norm(x, (n,), w, 1e-6)
    if compiled:
        f = fresh_compile(f)
    return lambda: f(x, w)


def _liger_rmsnorm(m, n, dt):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    x, w = _rmsnorm(m, n, dt)
    return lambda: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)


def _quack_rmsnorm(m, n, dt):
    from quack.rmsnorm import rmsnorm_fwd
    x, w = _rmsnorm(m, n, dt)
    return lambda: rmsnorm_fwd(x, w, eps=1e-6)


def _ours_layernorm(m, n, dt):
    from kernels import layernorm
    x, w, b = _layernorm(m, n, dt)
    return lambda: layernorm(x, w, b, 1e-5)


def _torch_layernorm(m, n, dt, compiled=False):
    x, w, b = _layernorm(m, n, dt)
    f = lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5)
    if compiled:
        f = fresh_compile(f)
    return lambda: f(x, w, b)


def _liger_layernorm(m, n, dt):
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    x, w, b = _layernorm(m, n, dt)
    return lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5)


def _quack_layernorm(m, n, dt):
    from quack.rmsnorm import layernorm_fwd
    x, w, b = _layernorm(m, n, dt)
    w, b = w.float(), b.float()  # QuACK's LayerNorm takes fp32 parameters only
    return lambda: layernorm_fwd(x, w, b, eps=1e-5)


def _ours_softmax(m, n, dt):
    from kernels import softmax
    x = _x(m, n, dt)
    return lambda: softmax(x)


def _ours_softmax_out(m, n, dt):
    from kernels.softmax import softmax_out
    x = _x(m, n, dt)
    out = torch.empty_like(x)
    return lambda: softmax_out(x, out)


def _torch_softmax(m, n, dt, compiled=False):
    x = _x(m, n, dt)
    f = lambda x: torch.softmax(x, -1)
    if compiled:
        f = fresh_compile(f)
    return lambda: f(x)


def _liger_softmax(m, n, dt):
    from liger_kernel.ops.softmax import LigerSoftmaxFunction
    x = _x(m, n, dt)
    return lambda: LigerSoftmaxFunction.apply(x)


def _quack_softmax(m, n, dt):
    from quack.softmax import softmax_fwd
    x = _x(m, n, dt)
    return lambda: softmax_fwd(x)


def _ce(m, n, dt):
    return _x(m, n, dt), torch.randint(0, n, (m,), device="cuda")


def _ours_ce(m, n, dt):
    from kernels import cross_entropy
    x, t = _ce(m, n, dt)
    return lambda: cross_entropy(x, t)


def _ours_ce_none(m, n, dt):
    from kernels import cross_entropy
    x, t = _ce(m, n, dt)
    return lambda: cross_entropy(x, t, reduction="none")


def _torch_ce(m, n, dt, compiled=False):
    x, t = _ce(m, n, dt)
    f = lambda x, t: F.cross_entropy(x.float(), t, reduction="none")
    if compiled:
        f = fresh_compile(f)
    return lambda: f(x, t)


def _liger_ce(m, n, dt):
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    x, t = _ce(m, n, dt)
    # Liger's fused forward writes the gradient into the logits only when they require grad
    # (liger-kernel 0.8.5: HAS_GRADIENTS=_input.requires_grad); these do not, as in inference.
    return lambda: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "none")


def _quack_ce(m, n, dt):
    from quack.cross_entropy import cross_entropy_fwd
    x, t = _ce(m, n, dt)
    return lambda: cross_entropy_fwd(x, t)


_TABLE = {
    "rmsnorm": [("ours", _ours_rmsnorm), ("ours-out", _ours_rmsnorm_out), ("torch", _torch_rmsnorm),
                ("torch.compile", lambda m, n, d: _torch_rmsnorm(m, n, d, True)),
                ("liger", _liger_rmsnorm), ("quack", _quack_rmsnorm)],
    "layernorm": [("ours", _ours_layernorm), ("torch", _torch_layernorm),
                  ("torch.compile", lambda m, n, d: _torch_layernorm(m, n, d, True)),
                  ("liger", _liger_layernorm), ("quack", _quack_layernorm)],
    "softmax": [("ours", _ours_softmax), ("ours-out", _ours_softmax_out), ("torch", _torch_softmax),
                ("torch.compile", lambda m, n, d: _torch_softmax(m, n, d, True)),
                ("liger", _liger_softmax), ("quack", _quack_softmax)],
    # "ours" is the default call (the mean, finished in the same launch); "ours-none" the losses
    # per row, as every peer here returns them
    "cross_entropy": [("ours", _ours_ce), ("ours-none", _ours_ce_none), ("torch", _torch_ce),
                      ("torch.compile", lambda m, n, d: _torch_ce(m, n, d, True)),
                      ("liger", _liger_ce), ("quack", _quack_ce)],
}


def peer_impls(op: str):
    return _TABLE[op]


# ---- host latency: each public op as a user calls it, against torch eager and QuACK --------------
def host_calls(op: str, m: int, n: int, dt):
    """(impl, zero-argument callable) for ``op`` on (m, n) inputs: ours (the public function,
    default arguments), torch eager, and QuACK's public function where it has the op."""
    import kernels
    x = _x(m, n, dt)
    w, b = torch.randn(n, device="cuda", dtype=dt), torch.randn(n, device="cuda", dtype=dt)
    t = torch.randint(0, n, (m,), device="cuda")
    calls = {
        "copy": [("ours", lambda: kernels.copy(x)), ("torch", lambda: x.clone())],
        "reduce_rows": [("ours", lambda: kernels.reduce_rows(x)),
                        ("torch", lambda: x.sum(-1, dtype=torch.float32))],
        "rmsnorm": [("ours", lambda: kernels.rmsnorm(x, w)), ("torch", lambda: F.rms_norm(x, (n,), w, 1e-6)),
                    ("quack", lambda: _quack("rmsnorm")(x, w))],
        "layernorm": [("ours", lambda: kernels.layernorm(x, w, b)),
                      ("torch", lambda: F.layer_norm(x, (n,), w, b, 1e-5)),
                      ("quack", lambda: _quack("layernorm")(x, w32, b32))],
        "softmax": [("ours", lambda: kernels.softmax(x)), ("torch", lambda: torch.softmax(x, -1)),
                    ("quack", lambda: _quack("softmax")(x))],
        "cross_entropy": [("ours", lambda: kernels.cross_entropy(x, t)),
                          ("torch", lambda: F.cross_entropy(x, t)),
                          ("quack", lambda: _quack("cross_entropy")(x, t))],
    }
    w32, b32 = w.float(), b.float()
    return calls[op]


def _quack(op):
    """QuACK's public function for ``op`` (ImportError where QuACK is not installed)."""
    if op == "rmsnorm":
        from quack.rmsnorm import rmsnorm
        return rmsnorm
    if op == "layernorm":
        from quack.rmsnorm import layernorm_fwd
        return layernorm_fwd
    if op == "softmax":
        from quack.softmax import softmax
        return softmax
    from quack.cross_entropy import cross_entropy
    return cross_entropy


HOST_OPS = ("copy", "reduce_rows", "rmsnorm", "layernorm", "softmax", "cross_entropy")

"""The training-step suite: every op forward, backward and both, through autograd, as a training
step calls them (``python -m benchmarks.run backward``, ``book/data/backward.csv``).

Each implementation is a function of the inputs that returns the op's output, differentiable;
``pass`` is "fwd" (the forward alone, no graph kept), "bwd" (``torch.autograd.grad`` of one kept
graph, the cotangent fixed) or "fwd+bwd" (both, a fresh graph a call). Bytes that must move, in
elements of the input dtype: RMSNorm, LayerNorm and softmax read x and write y forward, read x
(or y) and dy and write dx backward (2MN, 3MN, 5MN); cross-entropy reads the logits forward and
reads them and writes their gradient backward (MN, 2MN, 3MN).
"""
from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from . import harness as H
from .peers import fresh_compile

OPS = ("rmsnorm", "layernorm", "softmax", "cross_entropy")
NS = [1024, 4096, 16384, 32768, 65536, 131072, 262144]
PASSES = ("fwd", "bwd", "fwd+bwd")


def elements(op: str, pass_: str) -> int:
    """Elements (times M N) a pass must move."""
    if op == "cross_entropy":
        return {"fwd": 1, "bwd": 2, "fwd+bwd": 3}[pass_]
    return {"fwd": 2, "bwd": 3, "fwd+bwd": 5}[pass_]


def _torch(op):
    return {
        "rmsnorm": lambda x, w, b, t: F.rms_norm(x, x.shape[-1:], w, 1e-6),
        "layernorm": lambda x, w, b, t: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
        "softmax": lambda x, w, b, t: torch.softmax(x, -1),
        "cross_entropy": lambda x, w, b, t: F.cross_entropy(x, t),
    }[op]


def implementations(op: str):
    """(name, make() -> f(x, w, b, t)) for ``op``: ours, torch eager, torch.compile, Liger, QuACK."""
    import kernels

    def ours():
        return {"rmsnorm": lambda x, w, b, t: kernels.rmsnorm(x, w),
                "layernorm": lambda x, w, b, t: kernels.layernorm(x, w, b),
                "softmax": lambda x, w, b, t: kernels.softmax(x),
                "cross_entropy": lambda x, w, b, t: kernels.cross_entropy(x, t)}[op]

    def liger():
        if op == "rmsnorm":
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            return lambda x, w, b, t: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
        if op == "layernorm":
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            return lambda x, w, b, t: LigerLayerNormFunction.apply(x, w, b, 1e-5)
        if op == "softmax":
            from liger_kernel.ops.softmax import LigerSoftmaxFunction
            return lambda x, w, b, t: LigerSoftmaxFunction.apply(x)
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        return lambda x, w, b, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean")[0]

    def quack():
        if op == "rmsnorm":
            from quack.rmsnorm import rmsnorm
            return lambda x, w, b, t: rmsnorm(x, w, eps=1e-6)
        if op == "softmax":
            from quack.softmax import softmax
            return lambda x, w, b, t: softmax(x)
        if op == "cross_entropy":
            from quack.cross_entropy import cross_entropy
            return lambda x, w, b, t: cross_entropy(x, t)
        raise NotImplementedError("QuACK has no autograd LayerNorm")

    return [("ours", ours), ("torch", lambda: _torch(op)), ("torch.compile", lambda: fresh_compile(_torch(op))),
            ("liger", liger), ("quack", quack)]


def _inputs(op, m, n, dt):
    x = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=dt, requires_grad=op in ("rmsnorm", "layernorm"))
    b = torch.randn(n, device="cuda", dtype=dt, requires_grad=op == "layernorm")
    t = torch.randint(0, n, (m,), device="cuda")
    return x, w, b, t


def calls(f, op, x, w, b, t):
    """The three passes of ``f`` as zero-argument callables."""
    leaves = [v for v in (x, w, b) if v.requires_grad]
    out = f(x, w, b, t)
    dy = torch.randn_like(out)

    def fwd():
        with torch.no_grad():
            f(x, w, b, t)

    def bwd():
        torch.autograd.grad(out, leaves, dy, retain_graph=True)

    def both():
        torch.autograd.grad(f(x, w, b, t), leaves, dy)
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": both}


def suite(args, ceil):
    rows, timed = [], getattr(args, "timed", [])  # (``timed``: see benchmarks.run.main)
    ns = NS if not args.quick else [4096, 65536]
    if getattr(args, "ns", ""):
        ns = [int(v) for v in args.ns.split(",")]
    skip = set(filter(None, getattr(args, "skip", "").split(",")))
    ops = [o for o in OPS if not getattr(args, "ops", "") or o in args.ops.split(",")]
    dts = [d for d in (("bf16", torch.bfloat16), ("fp32", torch.float32))
           if not getattr(args, "dtypes", "") or d[0] in args.dtypes.split(",")]
    for op in ops:
        for name, dt in dts:
            for n in ns:
                m = max(1, (1 << 28) // n)
                x, w, b, t = _inputs(op, m, n, dt)
                fns, failed, first_row = {}, {}, len(rows)
                for impl, make in implementations(op):
                    if impl in skip:
                        continue
                    try:
                        passes = calls(make(), op, x, w, b, t)
                        for p, fn in passes.items():
                            fn()
                            fns[impl, p] = fn
                        torch.cuda.synchronize()
                    except Exception as e:  # a peer that cannot run this size
                        failed[impl] = f"{type(e).__name__}: {str(e)[:80]}"
                times = H.time_rounds(fns, args.rounds, failed={})
                for impl, _ in implementations(op):
                    if impl in skip:
                        continue
                    for p in PASSES:
                        nbytes = elements(op, p) * m * n * torch.finfo(dt).bits // 8
                        if impl in failed or (impl, p) not in times:
                            rows.append(H.row(op, impl, name, m, n, nbytes, float("nan"), ceil["copy"], note=failed.get(impl, ""),
                                              **{"pass": p}))
                        else:
                            rows.append(H.row(op, impl, name, m, n, nbytes, statistics.median(times[impl, p]),
                                              ceil["copy"], rounds_us=" ".join(f"{v * 1e3:.2f}" for v in times[impl, p]),
                                              **{"pass": p}))
                        print(rows[-1], flush=True)
                timed.extend(rows[first_row:])
                del x, w, b, t, fns
                torch.cuda.empty_cache()
    return rows

"""Chapter 10's checks: the bytes of a training step, log-softmax's backward on the row-kernel
template, and cross-entropy's gradient with label smoothing.

``step_bytes`` and ``smoothed_grad`` need no GPU at all (the first is checked against the
committed measurements, the second against PyTorch's autograd in float64); on a GPU
``smoothed_grad`` is also checked against the library's in-place backward kernel.
``log_softmax_backward`` compiles the reader's ``RowOp`` for sm_90a and reads its PTX; on a GPU
it launches it and compares with float64.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kernels.compile import NAME_BY_TORCH

from . import expect_close, expect_row_op, fresh_op, gpu, numbers_need_gpu, passed

#: (M, N) of the numeric checks: a ragged row, one of whole 128-bit accesses, a long one.
SHAPES = ((37, 1000), (64, 4096), (5, 32768))


def step_bytes(fn, name="ch10.step_bytes"):
    """``fn(op, pass_, m, n, elem_bytes)``: the bytes the training-step suite counts for ``op``
    ("rmsnorm", "layernorm", "softmax", "cross_entropy") and ``pass_`` ("fwd", "bwd",
    "fwd+bwd"), checked against every row of ours in ``book/data/backward.csv`` (its time
    times its bandwidth is the bytes it counted)."""
    from benchmarks import figures
    rows, _ = figures.load("backward")
    ours = [r for r in rows if r["impl"] == "ours" and isinstance(r["us"], float) and not math.isnan(r["us"])]
    for r in ours:
        want = r["tb_per_s"] * 1e12 * r["us"] * 1e-6
        elem_bytes = {"bf16": 2, "fp16": 2, "fp32": 4}[r["dtype"]]
        got = fn(r["op"], r["pass"], int(r["M"]), int(r["N"]), elem_bytes)
        if not abs(got - want) <= 1e-3 * want:
            raise AssertionError(f"{name}: {r['op']} {r['pass']} at M = {r['M']}, N = {r['N']} ({r['dtype']}): "
                                 f"you count {got / 1e6:.1f} MB, the suite counted {want / 1e6:.1f} MB "
                                 f"({want / (r['M'] * r['N'] * elem_bytes):.2f} x M N elements)")
    passed(name, f"{len(ours)} rows of book/data/backward.csv ({len({r['op'] for r in ours})} ops, "
                 f"{len({r['pass'] for r in ours})} passes, {len({r['N'] for r in ours})} row lengths) "
                 "count the bytes you count")


def log_softmax_backward(cls, name="ch10.log_softmax_backward"):
    """``cls``: a ``RowOp`` with rows ("z", "dy") and out ("dx",) whose kernel writes
    dx = dy - exp(z) sum(dy) for z = log_softmax(x). Its bf16 and fp32 PTX must show 128-bit
    loads and stores, the butterfly of the row's sum, an exponential and no local memory; on a
    GPU it must match float64 on ragged, whole and long rows."""
    if tuple(cls.rows) != ("z", "dy") or tuple(cls.out) != ("dx",):
        raise AssertionError(f"{name}: the op should read rows ('z', 'dy') and write out ('dx',); it declares "
                             f"rows {tuple(cls.rows)} and out {tuple(cls.out)}")
    expect_row_op(name, cls, "ex2.approx", "the epilogue never takes exp(z), which softmax(x) = "
                  "exp(log_softmax(x)) needs")
    op = fresh_op(cls)
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(f"{m} x {n}" for m, n in SHAPES))
    torch.manual_seed(0)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2**-7)):
        for m, n in SHAPES:
            z = torch.log_softmax(torch.randn(m, n, device="cuda") * 3, -1).to(dtype)
            dy = torch.randn(m, n, device="cuda").to(dtype)
            dx = torch.empty_like(z)
            op.launch(z, None, rows=(z, dy), out=(dx,))
            z64, dy64 = z.double(), dy.double()
            p64 = z64.exp()
            want = dy64 - p64 * dy64.sum(-1, keepdim=True)
            # rounding is relative to the two terms, whose difference may cancel
            scale = (dy64.abs() + p64 * dy64.sum(-1, keepdim=True).abs()).amax(-1, keepdim=True)
            expect_close(name, dx.double() / scale, want / scale, atol=tol,
                         what=f"{m} x {n} {NAME_BY_TORCH[dtype]} (as a fraction of the row's largest term)")


def _cases(device):
    g = torch.Generator(device="cpu").manual_seed(11)
    for (m, n), e in zip(SHAPES, (0.1, 0.0, 0.25)):
        logits = torch.randn(m, n, generator=g) * 3
        target = torch.randint(0, n, (m,), generator=g)
        target[1::4] = -100  # ignored rows
        yield logits.to(device), target.to(device), e


def smoothed_grad(fn, name="ch10.smoothed_grad"):
    """``fn(logits, target, smoothing, ignore_index=-100)``: the gradient of the mean
    cross-entropy with label smoothing ``smoothing`` over the rows not ignored, in PyTorch
    (float64 is fine); checked against PyTorch's autograd in float64 and, on a GPU, against the
    library's in-place backward kernel on bf16 logits."""
    for logits, target, e in _cases("cpu"):
        x = logits.double().requires_grad_()
        F.cross_entropy(x, target, ignore_index=-100, label_smoothing=e).backward()
        got = fn(logits.double(), target, e)
        expect_close(name, got, x.grad, atol=1e-12, rtol=1e-9,
                     what=f"{tuple(logits.shape)}, smoothing {e}, {int((target == -100).sum())} rows ignored, "
                          "against autograd")
    if not gpu():
        return numbers_need_gpu(name, "comparing with the library's in-place backward kernel")
    from kernels.cross_entropy import cross_entropy, cross_entropy_backward_out, row_gradients
    for logits, target, e in _cases("cuda"):
        x = logits.to(torch.bfloat16)
        _, lse = cross_entropy(x, target, reduction="none", label_smoothing=e, return_lse=True)
        want = fn(x.double(), target, e)
        g = row_gradients(torch.ones((), device="cuda"), target, -100, "mean")
        grad = x.clone()
        cross_entropy_backward_out(g, grad, target, lse, grad, label_smoothing=e)  # in place, over the logits
        scale = want.abs().amax().item()
        expect_close(name, grad.double() / scale, want / scale, atol=2**-7,
                     what=f"{tuple(x.shape)} bf16, smoothing {e}, against the in-place kernel")

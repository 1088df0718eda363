"""Chapter 9's checks: the streamed cross-entropy kernel the chapter writes, a softcapped one, and
the z-loss by hand.

A kernel check takes the reader's host function, a ``@cute.jit`` function ``host(mX, mT, mLoss,
stream)`` (``host(mX, mT, mLoss, cap, stream)`` for the softcap, ``cap`` a
``cutlass.Constexpr[float]``) that launches one block a row of the (M, N) logits ``mX`` and writes
each row's loss to the fp32 ``mLoss`` (M,), from the int64 targets ``mT`` (M,), 0 where the target
is -100. It compiles it for a fixed N and symbolic M, checks its PTX (128-bit loads of the logits,
the butterfly, the exponentials, no local memory) and, on a GPU, compares its losses with float64.
``zloss`` takes a function of torch tensors and needs no GPU for its first part.
"""
from __future__ import annotations

import math

import torch

import cutlass
import cutlass.cute as cute

from kernels.compile import NAME_BY_TORCH, compile_once, fake_vector

from . import count, expect_close, expect_ptx, fake, fake_stream, gpu, numbers_need_gpu, passed, per_row_output

IGNORE = -100
#: (dtype, M, N): whole passes of the teaching kernel (256 threads, four 128-bit accesses each a
#: pass: 8,192 bf16 or 4,096 fp32 elements), one pass, several, many; M ragged.
SHAPES = ((torch.bfloat16, 37, 8192), (torch.bfloat16, 5, 65536), (torch.float32, 37, 4096),
          (torch.float32, 3, 131072))
#: Elements a thread loads in one pass: four 128-bit accesses.
def elems_per_pass(dtype) -> int:
    return 4 * 128 // (16 if dtype == torch.bfloat16 else 32)


def _compile(host, dtype, n, *constexpr):
    args = (fake(dtype, n), fake_vector(cutlass.Int64, cute.sym_int()), fake_vector(cutlass.Float32, cute.sym_int()),
            *constexpr, fake_stream())
    key = ("book ch09", host, str(dtype), n, constexpr)
    return compile_once(key, lambda: (host, args, None))


def _streamed_ptx(name, ptx, dtype):
    """A streamed row's claims: 128-bit loads of the logits (one narrow load of the target and
    one of its logit), the butterfly, the exponentials, no store but the loss, no spills."""
    expect_ptx(name, ptx, has=("ld.global.v4", "shfl.sync.bfly", "ex2.approx", "bar.sync"))
    stores = {op for op in (o for o in _ops(ptx)) if op.startswith("st.global")}
    if stores != {"st.global.b32"}:
        raise AssertionError(f"{name}: the kernel should store one fp32 loss a row and nothing else; its global "
                             f"stores are {sorted(stores)}")


def _ops(ptx):
    from . import opcodes
    return opcodes(ptx)


def _inputs(dtype, m, n, scale, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(m, n, generator=g) * scale).to(dtype)
    t = torch.randint(0, n, (m,), generator=g)
    t[1::4] = IGNORE
    return x.cuda(), t.cuda()


def reference(x, t, cap=None):
    """Each row's loss in float64: logsumexp(z) - z[t] with z = x, or cap tanh(x / cap); 0 where
    the target is ignored."""
    z = x.double()
    if cap is not None:
        z = cap * torch.tanh(z / cap)
    keep = t != IGNORE
    zt = z.gather(1, torch.where(keep, t, 0).long().unsqueeze(1)).squeeze(1)
    return torch.where(keep, torch.logsumexp(z, -1) - zt, 0.0)


def _numbers(name, host, *constexpr, cap=None, tol=2e-5):
    what = ", ".join(f"{m} x {n} {NAME_BY_TORCH[d]}" for d, m, n in SHAPES)
    if not gpu():
        return numbers_need_gpu(name, f"launching it on {what}")
    for i, (dtype, m, n) in enumerate(SHAPES):
        c = _compile(host, dtype, n, *constexpr)
        x, t = _inputs(dtype, m, n, 4.0 if cap is None else 3.0 * cap / 4, seed=i)
        loss = per_row_output(name, m, lambda out: c(x, t, out))
        expect_close(name, loss, reference(x, t, cap), atol=tol, rtol=tol,
                     what=f"{m} x {n} {NAME_BY_TORCH[dtype]}, every 4th row ignored")


def streamed(host, name="ch09.streamed"):
    """The chapter's kernel: the loss of each row from one streamed pass over it."""
    for dtype, _, n in SHAPES[:3]:
        _streamed_ptx(f"{name} {NAME_BY_TORCH[dtype]} N={n}", _compile(host, dtype, n).ptx, dtype)
    _numbers(name, host)


CAP = 30.0


def softcap(host, name="ch09.softcap"):
    """Exercise: the loss of the softcapped logits z = cap tanh(x / cap) (Gemma 2's final-logit
    softcapping), cap a compile-time float: one tanh.approx for every logit of a pass and one for
    the target's, which must be capped too."""
    for dtype, _, n in SHAPES[:3]:
        ptx = _compile(host, dtype, n, CAP).ptx
        label = f"{name} {NAME_BY_TORCH[dtype]} N={n}"
        _streamed_ptx(label, ptx, dtype)
        want, got = elems_per_pass(dtype) + 1, count(ptx, "tanh.approx")
        if got != want:
            raise AssertionError(
                f"{label}: the PTX should have {want} x tanh.approx (cute.math.tanh(..., fastmath=True)): one for "
                f"each of the {want - 1} logits a thread folds a pass and one for the target's logit; it has {got}")
        passed(label, f"{got} x tanh.approx: every logit of a pass and the target's are capped")
    # the cap must be the compile-time value, not a number typed into the kernel
    ptx_other = _compile(host, torch.float32, SHAPES[2][2], 2 * CAP).ptx
    if ptx_other == _compile(host, torch.float32, SHAPES[2][2], CAP).ptx:
        raise AssertionError(f"{name}: the PTX for cap={2 * CAP:g} is the same as for cap={CAP:g}: is `cap` used?")
    # tanh.approx.f32: relative error up to 2^-11, in every capped logit and the target's: the loss
    # can be off by 2^-11 (|z_t| + max |z|), up to 1.6 x 2e-3 (1 + loss) on these inputs
    _numbers(name, host, CAP, cap=CAP, tol=4e-3)


def zloss(fn, name="ch09.zloss"):
    """Exercise: ``fn(logits, target, z, ignore_index=-100)``, each row's cross-entropy plus the
    z-loss z lse^2 (0 for an ignored row), in PyTorch: checked against float64 here and, on a GPU,
    against ``kernels.cross_entropy(..., lse_square_scale=z, reduction="none")``."""
    g = torch.Generator(device="cpu").manual_seed(9)
    for m, n, z in ((37, 1000, 1e-4), (8, 50257, 1e-2), (5, 7, 0.5)):
        x = torch.randn(m, n, generator=g, dtype=torch.float64) * 5 + 3
        t = torch.randint(0, n, (m,), generator=g)
        t[2::3] = IGNORE
        lse = torch.logsumexp(x, -1)
        keep = t != IGNORE
        want = torch.where(keep, lse - x.gather(1, torch.where(keep, t, 0).unsqueeze(1)).squeeze(1) + z * lse**2, 0.0)
        got = fn(x, t, z)
        expect_close(name, got, want, atol=1e-9, rtol=1e-9,
                     what=f"{m} x {n} float64, z = {z:g}, {int((~keep).sum())} rows ignored")
    if not gpu():
        return numbers_need_gpu(name, "comparing with kernels.cross_entropy(lse_square_scale=z)")
    from kernels.cross_entropy import cross_entropy
    for dtype in (torch.float32, torch.bfloat16):
        x, t = _inputs(dtype, 64, 32000, 4.0, seed=3)
        want = cross_entropy(x, t, reduction="none", lse_square_scale=1e-3)
        expect_close(name, fn(x.double(), t, 1e-3), want.double(), atol=2e-5, rtol=2e-5,
                     what=f"64 x 32000 {NAME_BY_TORCH[dtype]}, against the library's kernel")


__all__ = ["streamed", "softcap", "zloss", "reference", "SHAPES", "CAP"]

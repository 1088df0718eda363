"""The checks of book/12_beyond_one_gpu (Beyond one GPU): the merge of shards' pairs in log2
units, and a shard kernel that also writes each row's sum of logits.

``merge_log2`` takes a function of torch tensors and needs no GPU: the pairs of shards cut from
one float64 tensor, merged by the reader, must give torch's logsumexp of the whole rows.

``shard_logit_sum`` takes the reader's host function, a ``@cute.jit`` function
``host(mX, mT, mMax, mSum, mXt, mLogitSum, start, stream)`` that launches one block a row of the
(M, n) shard ``mX`` (classes [start, start + n) of the vocabulary, ``start`` a run-time
``Int64``) and writes four fp32 vectors (M,): the row's max, its sum of exp(x - max), the
target's logit where the shard holds it (else 0), and the sum of the row's logits. It compiles
it for a fixed n and symbolic M and checks its PTX (128-bit loads, the butterfly with more
shuffles than the pair's alone, four stores a row, no local memory); on a GPU it launches it on
the shards of one tensor and compares each output with float64.
"""
from __future__ import annotations

import math

import torch

import cutlass
import cutlass.cute as cute

from kernels.compile import NAME_BY_TORCH, compile_once, fake_vector

from . import count, expect_close, expect_ptx, fake, fake_stream, gpu, numbers_need_gpu, opcodes, passed

LOG2_E = math.log2(math.e)
IGNORE = -100
#: The butterfly shuffles of the chapter's shard kernel: two values (the pair), five warp steps
#: and three block steps (8 warps).
PAIR_SHUFFLES = 2 * (5 + 3)
#: (dtype, M, n, W): shards of whole passes of the chapter's kernel (256 threads, four 128-bit
#: accesses a pass: 8,192 bf16 or 4,096 fp32 elements); M ragged.
SHAPES = ((torch.bfloat16, 37, 16384, 2), (torch.float32, 5, 8192, 3))


def log2_pairs(x: torch.Tensor, widths) -> tuple:
    """(big, total), each (W, M) float64: for each shard of ``x`` (M, N) cut by ``widths``, the
    row's max times log2 e and the sum of 2^(x log2 e - big) (0 for a shard row of only -inf)."""
    bigs, totals, a = [], [], 0
    for w in widths:
        s = x[:, a:a + w].double()
        big = s.amax(-1) * LOG2_E
        safe = torch.where(big == -math.inf, 0.0, big)
        bigs.append(big)
        totals.append(torch.exp2(s * LOG2_E - safe.unsqueeze(-1)).sum(-1))
        a += w
    return torch.stack(bigs), torch.stack(totals)


def _merge_cases():
    g = torch.Generator().manual_seed(12)
    x = torch.randn(64, 1000, generator=g, dtype=torch.float64) * 4
    x[3, 400:750] = -math.inf  # one shard of row 3 holds nothing but -inf
    x[5] = -math.inf  # row 5: every shard
    x[7, 750:] += 2000.0  # row 7: one shard far above the others (2^(2000 log2 e) overflows float64)
    yield x, (400, 350, 250)
    yield torch.randn(9, 4096, generator=g, dtype=torch.float64) * 30 - 500, (1024,) * 4
    yield torch.randn(3, 50, generator=g, dtype=torch.float64), (50,)


def merge_log2(fn, name="ch12.merge_log2"):
    """Exercise: ``fn(big, total)`` merges W shards' pairs, (W, M) each with the max in log2 units,
    into one pair (big, total), (M,) each: big the maxima's max (exactly), and big ln 2 + ln total
    the row's logsumexp; a row of nothing but -inf gives (-inf, 0), with no NaN."""
    for x, widths in _merge_cases():
        big, total = log2_pairs(x, widths)
        got = fn(big.clone(), total.clone())
        if not isinstance(got, tuple) or len(got) != 2:
            raise AssertionError(f"{name}: return the merged pair (big, total), two tensors of shape (M,)")
        got_big, got_total = (torch.as_tensor(v, dtype=torch.float64) for v in got)
        if got_big.shape != (x.shape[0],) or got_total.shape != (x.shape[0],):
            raise AssertionError(f"{name}: the merged big and total should have shape ({x.shape[0]},), got "
                                 f"{tuple(got_big.shape)} and {tuple(got_total.shape)}")
        if got_total.isnan().any():
            raise AssertionError(f"{name}: the merged total has NaN in rows {got_total.isnan().nonzero().flatten().tolist()}"
                                 ": a row whose shards hold nothing but -inf has big = -inf, and 2^(-inf - (-inf)) "
                                 "is NaN; rescale against 0 where the merged max is -inf")
        if not torch.equal(got_big, big.amax(0)):
            raise AssertionError(f"{name}: the merged big should be the largest of the shards' bigs, exactly")
        want = torch.logsumexp(x, -1)
        live = want.isfinite()
        dead = ~live
        if dead.any() and not (got_total[dead] == 0).all():
            raise AssertionError(f"{name}: a row of nothing but -inf should merge to total 0, got "
                                 f"{got_total[dead].tolist()}")
        lse = got_big[live] * math.log(2.0) + torch.log(got_total[live])
        expect_close(name, lse, want[live], atol=1e-12, rtol=1e-12,
                     what=f"{x.shape[0]} rows cut into {len(widths)} shards {list(widths)}, as big ln 2 + ln total"
                          + (f", {int(dead.sum())} row of -inf only" if dead.any() else ""))


def reference_partials(x: torch.Tensor, target: torch.Tensor, start: int) -> torch.Tensor:
    """(4, M) float64: each row's max, sum of exp(x - max), the target's logit where classes
    [start, start + n) hold it (else 0), and the sum of the row's logits, of the shard ``x`` (M, n)."""
    x = x.double()
    m = x.amax(-1)
    col = target.long() - start
    held = (col >= 0) & (col < x.shape[1])
    x_t = torch.where(held, x.gather(-1, col.clamp(0, x.shape[1] - 1).unsqueeze(-1)).squeeze(-1), 0.0)
    return torch.stack([m, torch.exp(x - m.unsqueeze(-1)).sum(-1), x_t, x.sum(-1)])


def compile_shard(host, dtype, n: int, outs: int = 3):
    """``host(mX, mT, *outs fp32 vectors, start, stream)`` compiled for shards of n columns of
    ``dtype``, M symbolic, int64 targets, ``start`` a run-time Int64."""
    def build():
        m = cute.sym_int()
        args = (fake(dtype, n), fake_vector(cutlass.Int64, m), *(fake_vector(cutlass.Float32, m) for _ in range(outs)),
                cutlass.Int64(0), fake_stream())
        return host, args, None
    return compile_once(("book ch12", host, str(dtype), n, outs), build)


def shard_inputs(dtype, m: int, n: int, world: int, seed: int, device="cuda"):
    """Logits (M, world n) in ``dtype`` and targets over all world n classes (every 4th row
    ignored); the shards are the column blocks of n."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, world * n, generator=g) * 4).to(dtype)
    t = torch.randint(0, world * n, (m,), generator=g)
    t[1::4] = IGNORE
    return x.to(device), t.to(device)


def launch_shards(c, x, t, world: int, outs: int):
    """Each shard of ``x`` (its own contiguous tensor, as on its own GPU) through the compiled
    ``c``: a list of (outs, M) fp32, one a shard."""
    n = x.shape[1] // world
    got = []
    for r in range(world):
        shard = x[:, r * n:(r + 1) * n].contiguous()
        out = torch.full((outs, x.shape[0]), math.nan, device=x.device)
        c(shard, t, *out, r * n)
        got.append(out)
    torch.cuda.synchronize()
    return got


def shard_logit_sum(host, name="ch12.shard_logit_sum"):
    """Exercise: the chapter's shard kernel writing a fourth output, the sum of the row's logits
    (label smoothing needs it), reduced beside the pair through every tier."""
    for dtype, _, n, _ in SHAPES:
        label = f"{name} {NAME_BY_TORCH[dtype]} n={n}"
        ptx = compile_shard(host, dtype, n, outs=4).ptx
        expect_ptx(label, ptx, has=("ld.global.v4", "shfl.sync.bfly", "ex2.approx"))
        stores = count(ptx, "st.global")
        if stores != 4:
            found = sorted(op for op in opcodes(ptx) if op.startswith("st.global"))
            raise AssertionError(f"{label}: the kernel should store four fp32 numbers a row (max, sum of exp, target "
                                 f"logit, logit sum); its PTX has {stores} global stores ({found})")
        shuffles = count(ptx, "shfl.sync.bfly")
        if shuffles <= PAIR_SHUFFLES:
            raise AssertionError(
                f"{label}: the PTX has {shuffles} x shfl.sync.bfly, the pair's {PAIR_SHUFFLES} alone: the sum of logits "
                "must be reduced across the warp and the block too (a third value through the butterfly and the "
                "exchange), or every row gets one thread's share")
        passed(label, f"{shuffles} butterfly shuffles: the logit sum travels beside the pair")
    if not gpu():
        return numbers_need_gpu(name, "launching it on " + ", ".join(
            f"{m} x {w} shards of {n} {NAME_BY_TORCH[d]}" for d, m, n, w in SHAPES))
    for i, (dtype, m, n, world) in enumerate(SHAPES):
        x, t = shard_inputs(dtype, m, n, world, seed=i)
        for r, got in enumerate(launch_shards(compile_shard(host, dtype, n, outs=4), x, t, world, 4)):
            want = reference_partials(x[:, r * n:(r + 1) * n], t, r * n)
            what = f"{m} x {n} {NAME_BY_TORCH[dtype]}, shard {r} of {world}"
            expect_close(f"{name} max", got[0], want[0], what=what)
            expect_close(f"{name} sum of exp", got[1], want[1], rtol=1e-5, what=what)
            expect_close(f"{name} target logit", got[2], want[2], what=what)
            scale = x[:, r * n:(r + 1) * n].double().abs().sum(-1)
            expect_close(f"{name} logit sum", got[3] / scale, want[3] / scale, atol=1e-6,
                         what=what + " (as a fraction of the row's sum of |x|)")


__all__ = ["merge_log2", "shard_logit_sum", "log2_pairs", "reference_partials", "compile_shard", "shard_inputs",
           "launch_shards", "SHAPES", "PAIR_SHUFFLES"]

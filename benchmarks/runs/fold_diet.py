"""What the exponentials cost softmax and cross-entropy, and what each cut buys (H200).

Run at the tree of ae13f7f, whose RowKernel hooks (fold_row, kept_epilogue, fold_staged) it
needs; eeb62ab removed them, so check that commit out to run it again.

ce_fold_cost.py (book/data/ce_fold_cost.csv) found the exponential, not the bytes in flight,
behind cross-entropy's bf16 gap: the same kernel with a plain sum in place of the fold reads
at 95.2-96.4% of the read ceiling where the fold reaches 91.5-94.5%, and a ring of shared-memory
stages (benchmarks.sweep --ring, book/data/sweep_ring.csv) kept up to seven passes in flight
without gaining. One MUFU.EX2 an element is at least 8 issue cycles a warp on its sub-partition
(16 a clock an SM), and it issues beside the row's conversions, max, subtraction, product and
sum. This script times, in alternating rounds, each cut against the kernel as shipped:

softmax (copy ceiling, bf16 and fp32, every suite N):
- ``shipped``: the fold's exponentials thrown away and computed again in the epilogue; a staged
  row folded one access at a time, each partial pair rescaled into the running one.
- ``kept``: the fold's exp(x - m) (m: the thread's max) stay in registers in place of x and the
  epilogue scales them (one multiply an element); a staged row is read twice (max, then
  exponentials against it), so no access pays a rescale.
- ``kept_fma``: ``kept`` with the pair carried in log2 units, each term exp2(fma(x, log2 e, -M)).
- ``kept_access``: ``kept`` with the staged row still folded access by access (staged points only).

cross-entropy (read ceiling, bf16 and fp32, every suite N): ``shipped`` against ``fma`` (the log2
pair; the loss fma(x_t, -log2 e, M) ln 2 + ln(sum), where M's rounding cancels).

Each variant is checked against float64 on the timed input and on logits of size 1e4 (targets
at the row's max for cross-entropy).

    bash benchmarks/h200.sh run benchmarks/runs/fold_diet.py
"""
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, ".")
import cutlass.cute as cute  # noqa: E402
from cutlass import Float32, Int32  # noqa: E402

from kernels.compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector  # noqa: E402
from kernels.config import row_config  # noqa: E402
from kernels.cross_entropy import CrossEntropy, _error_flag, cross_entropy_reference  # noqa: E402
from kernels.reduce import LOG2_E, Combine, _finite_or_zero, exp_minus  # noqa: E402
from kernels.rowkernel import RowKernel  # noqa: E402
from kernels.softmax import Softmax, softmax_reference  # noqa: E402

NS = [1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = os.environ.get("M2OUT", "/tmp")


def _max(x):
    return x.reduce(cute.ReductionOp.MAX, init_val=-math.inf, reduction_profile=0)


def _sum(x):
    return x.reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)


def _exp2_from(x, big):
    """exp2(x log2 e - big): one fma, the product exact inside it."""
    shift = -_finite_or_zero(big)
    return cute.math.exp2(cute.math.fma(x, cute.full_like(x, LOG2_E), cute.full_like(x, shift)), fastmath=True)


def _log2_fold(x):
    big = _max(x) * LOG2_E
    return (big, _sum(_exp2_from(x, big)))


def _log2_combine(a, b):
    big = cute.arch.fmax(a[0], b[0])
    safe = _finite_or_zero(big)
    return (big, a[1] * cute.math.exp2(a[0] - safe, fastmath=True) + b[1] * cute.math.exp2(b[0] - safe, fastmath=True))


LOG2_PAIR = Combine("logsumexp2", (-math.inf, 0.0), _log2_combine, _log2_fold, -math.inf)


class SoftmaxKept(Softmax):
    """Softmax (as shipped) with the fold's exponentials kept for the epilogue, and a staged
    row's max read first, through RowKernel's hooks."""

    def fold_row(self, x):
        """The fold's exponentials, exp(x - m) against this thread's max m, are the output up
        to one factor a thread: they stay in registers in place of x, so the epilogue scales
        them (one multiply an element) instead of computing each exponential again."""
        m = x.reduce(cute.ReductionOp.MAX, init_val=-math.inf, reduction_profile=0)
        e = exp_minus(x, _finite_or_zero(m))
        return (m, e.reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)), (e, m)

    def kept_epilogue(self, kept, result, w, scalar):
        e, m = kept
        row_max, denom = result
        # exp(x - row_max) / sum = exp(x - m) * (exp(m - row_max) / sum); a row of nothing but
        # -inf has sum 0 and comes out NaN, as torch's does
        return e * (exp_minus(m, _finite_or_zero(row_max)) * cute.arch.rcp_approx(denom))

    def fold_staged(self, read, count: int):
        """A staged row is read back twice: its max first, then its exponentials against
        that one max, so that no access's partial sum is rescaled (two exponentials an access
        that folding each access and combining would cost)."""
        m = Float32(-math.inf)
        for k in range(count):
            m = cute.arch.fmax(m, read(k).reduce(cute.ReductionOp.MAX, init_val=-math.inf, reduction_profile=0))
        safe = _finite_or_zero(m)
        cute.arch.sync_warp()  # read the accesses again, rather than keep them all in registers
        s = Float32(0.0)
        for k in range(count):
            s = s + exp_minus(read(k), safe).reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)
        return m, s


class SoftmaxKeptAccess(SoftmaxKept):
    fold_staged = RowKernel.fold_staged


class SoftmaxKeptFma(SoftmaxKept):
    op = LOG2_PAIR

    def row_epilogue(self, x, result, w, scalar):
        big, denom = result
        return _exp2_from(x, big) * cute.arch.rcp_approx(denom)

    def fold_row(self, x):
        big = _max(x) * LOG2_E
        e = _exp2_from(x, big)
        return (big, _sum(e)), (e, big)

    def kept_epilogue(self, kept, result, w, scalar):
        e, big = kept
        row_big, denom = result
        return e * (cute.math.exp2(big - _finite_or_zero(row_big), fastmath=True) * cute.arch.rcp_approx(denom))

    def fold_staged(self, read, count: int):
        m = Float32(-math.inf)
        for k in range(count):
            m = cute.arch.fmax(m, _max(read(k)))
        big = m * LOG2_E
        cute.arch.sync_warp()
        s = Float32(0.0)
        for k in range(count):
            s = s + _sum(_exp2_from(read(k), big))
        return big, s


class CrossEntropyFma(CrossEntropy):
    op = LOG2_PAIR

    def loss(self, result, x_t):
        big, denom = result
        return cute.math.fma(x_t, Float32(-LOG2_E), big) * math.log(2.0) + cute.math.log(denom, fastmath=False)


SOFTMAX = {"shipped": Softmax, "kept": SoftmaxKept, "kept_fma": SoftmaxKeptFma, "kept_access": SoftmaxKeptAccess}
CE = {"shipped": CrossEntropy, "fma": CrossEntropyFma}


def compile_softmax_variant(name, dtype, n):
    ct, cfg = TORCH_TO_CUTE[dtype], row_config(n, torch.finfo(dtype).bits, keep_row=True, op="softmax")
    return compile_once(("fold_diet softmax", name, str(dtype), n), lambda: (SOFTMAX[name](ct, n, cfg), (
        fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), None, None, None, Float32(0.0), fake_stream())))


def compile_ce_variant(name, dtype, n):
    ct, cfg = TORCH_TO_CUTE[dtype], row_config(n, torch.finfo(dtype).bits, keep_row=False)

    def build():
        m = cute.sym_int()
        return CE[name](ct, n, cfg, False), (fake_rows(ct, n, cfg.vec), fake_vector(Float32, m), None,
                                            fake_vector(TORCH_TO_CUTE[torch.int64], m), fake_vector(Int32, 1),
                                            Int32(-100), fake_stream())
    return compile_once(("fold_diet ce", name, str(dtype), n), build)


def softmax_variants(dtype, n):
    staged = row_config(n, torch.finfo(dtype).bits, keep_row=True, op="softmax").stage == "smem"
    return [v for v in SOFTMAX if v != "kept_access" or staged]


def main():
    from benchmarks import harness as H
    from benchmarks.bytes import bytes_moved
    from benchmarks.run import rows_for
    copy_ceiling, read_ceiling = H.copy_ceiling(), H.read_ceiling()
    print("ceilings", copy_ceiling, read_ceiling, flush=True)
    rows = []
    # logits of size 1e4: the order of the exponent's arithmetic shows
    for dtype in (torch.bfloat16, torch.float32):
        n = 32768
        x = (torch.randn(64, n, device="cuda") * 1e4).to(dtype)
        t = torch.randint(0, n, (64,), device="cuda")
        t[:8] = x[:8].float().argmax(1)
        ref = cross_entropy_reference(x, t, reduction="none")
        for name in CE:
            out = torch.empty(64, device="cuda")
            compile_ce_variant(name, dtype, n)(x, out, None, t, _error_flag(x.device, False), -100)
            print(f"ce {dtype} logits ~1e4 {name}: max |loss - float64| = {float((out.double() - ref).abs().max()):.3e}"
                  f", target at the max {float((out[:8].double() - ref[:8]).abs().max()):.3e}", flush=True)
        sref = softmax_reference(x)
        for name in softmax_variants(dtype, n):
            y = torch.empty_like(x)
            compile_softmax_variant(name, dtype, n)(x, y, None, None, None, 0.0)
            print(f"softmax {dtype} logits ~1e4 {name}: max |y - float64| = {float((y.double() - sref).abs().max()):.3e}",
                  flush=True)
    for dtype in (torch.bfloat16, torch.float32):
        dt = "bf16" if dtype == torch.bfloat16 else "fp32"
        bits = torch.finfo(dtype).bits
        for n in NS:
            m = rows_for(n)
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            y = torch.empty_like(x)
            t = torch.randint(0, n, (m,), device="cuda")
            loss = torch.empty(m, device="cuda")
            err = _error_flag(x.device, False)
            sref, cref = softmax_reference(x[:16]), cross_entropy_reference(x[:64], t[:64], reduction="none")
            fns, errs = {}, {}
            for name in softmax_variants(dtype, n):
                k = compile_softmax_variant(name, dtype, n)
                fns[("softmax", name)] = (lambda k=k: k(x, y, None, None, None, 0.0))
                fns[("softmax", name)]()
                e = float((y[:16].double() - sref).abs().max())
                print(f"{dt} N={n} softmax {name}: max err {e:.2e}", flush=True)
                errs[("softmax", name)] = e
            for name in CE:
                k = compile_ce_variant(name, dtype, n)
                fns[("cross_entropy", name)] = (lambda k=k: k(x, loss, None, t, err, -100))
                fns[("cross_entropy", name)]()
                e = float((loss[:64].double() - cref).abs().max())
                print(f"{dt} N={n} cross_entropy {name}: max err {e:.2e}", flush=True)
                errs[("cross_entropy", name)] = e
            times = {key: [] for key in fns}
            for _ in range(ROUNDS):
                for key, fn in fns.items():
                    times[key].append(H.time_ms(fn, warmup=3, rep=20))
            for (op, name), ts in times.items():
                ms = statistics.median(ts)
                ceil = copy_ceiling if op == "softmax" else read_ceiling
                r = H.row(op, "ours", dt, m, n, bytes_moved(op, m, n, bits // 8), ms, ceil, variant=name,
                          rounds_us=" ".join(f"{v * 1e3:.2f}" for v in ts), max_abs_err=f"{errs[(op, name)]:.2e}")
                rows.append(r)
                print(f"{op:14s} {dt} N={n:>6} {name:12s} {r['frac_of_ceiling']:.4f}  rounds {r['rounds_us']}",
                      flush=True)
            del x, y, t, loss
            torch.cuda.empty_cache()
    meta = H.metadata({"suite": "fold_diet", "copy_ceiling_tb_per_s": copy_ceiling,
                       "read_ceiling_tb_per_s": read_ceiling, "rounds": ROUNDS, "script": "benchmarks/runs/fold_diet.py"})
    print("wrote", H.write_suite("fold_diet", rows, meta, OUT))


if __name__ == "__main__":
    main()

"""fold_diet.py, second round (H200): fewer instructions an element, not fewer exponentials.

Run at the tree of ae13f7f (it imports fold_diet.py, which needs that commit's RowKernel
hooks). Its ``fma_packed`` fold became kernels.reduce.LOGSUMEXP2's ``fold_bf16`` (eeb62ab).

fold_diet.py measured that halving softmax's exponentials (``kept``) made it slower, 0.1-1.2
points of the copy ceiling in bf16, while carrying the pair in log2 units (one fma a term in place of a
subtraction and a product) took cross-entropy's bf16 rows up 0.2-0.8 points from 1k to 64k. So
the issue slots, not the MUFU pipe, are what the exponentials cost. This round:

- softmax ``fma``: the kernel as shipped (exponentials computed again in the epilogue, a staged
  row folded access by access) with the pair in log2 units, against ``shipped``;
- cross-entropy ``fma`` against ``shipped``, and for bf16 ``fma_packed``: ``fma`` over the raw
  bf16 registers: the max over bf16 pairs (``max.NaN.bf16x2``, exact, half the instructions and
  no conversion), each element widened by one ``shl``/``and`` (the compiler's conversion takes
  a ``prmt`` more for every second element), the terms summed in a tree.

Alternating rounds, every suite N, checked against float64 (and logits of size 1e4).

    bash benchmarks/h200.sh run benchmarks/runs/fold_diet2.py
"""
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, ".")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cutlass.cute as cute  # noqa: E402
from cutlass import Float32, Int32  # noqa: E402
from cutlass.cute.arch import inline_ptx  # noqa: E402

from fold_diet import LOG2_PAIR, NS, CrossEntropyFma, _exp2_from, compile_once  # noqa: E402
from kernels.compile import TORCH_TO_CUTE, fake_rows, fake_stream, fake_vector  # noqa: E402
from kernels.config import row_config  # noqa: E402
from kernels.cross_entropy import CrossEntropy, _error_flag, cross_entropy_reference  # noqa: E402
from kernels.reduce import LOG2_E, _finite_or_zero  # noqa: E402
from kernels.softmax import Softmax, softmax_reference  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = os.environ.get("M2OUT", "/tmp")


def _tree(vals, f):
    while len(vals) > 1:
        vals = [f(vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
    return vals[0]


def _max2(a, b):
    return inline_ptx("max.NaN.bf16x2 {$w0}, {$r0}, {$r1};", write_only_types=[Int32], read_only_args=[a, b])


def _lo(v):
    return inline_ptx("shl.b32 {$w0}, {$r0}, 16;", write_only_types=[Float32], read_only_args=[v])


def _hi(v):
    return inline_ptx("and.b32 {$w0}, {$r0}, -65536;", write_only_types=[Float32], read_only_args=[v])


class CrossEntropyFmaPacked(CrossEntropyFma):
    def fold_buffer(self, buf):
        raw = cute.recast_tensor(buf, Int32)
        words = [raw[i] for i in range(cute.size(raw))]
        m2 = _tree(words, _max2)
        big = cute.arch.fmax(_lo(m2), _hi(m2)) * LOG2_E
        shift = -_finite_or_zero(big)
        terms = []
        for w in words:
            for half in (_lo(w), _hi(w)):
                terms.append(cute.math.exp2(cute.math.fma(half, Float32(LOG2_E), shift), fastmath=True))
        return (big, _tree(terms, lambda a, b: a + b))


class SoftmaxFma(Softmax):
    op = LOG2_PAIR

    def row_epilogue(self, x, result, w, scalar):
        big, denom = result
        return _exp2_from(x, big) * cute.arch.rcp_approx(denom)


SOFTMAX = {"shipped": Softmax, "fma": SoftmaxFma}
CE = {"shipped": CrossEntropy, "fma": CrossEntropyFma, "fma_packed": CrossEntropyFmaPacked}


def ce_variants(dtype):
    return [v for v in CE if v != "fma_packed" or dtype == torch.bfloat16]


def compile_softmax_variant(name, dtype, n):
    ct, cfg = TORCH_TO_CUTE[dtype], row_config(n, torch.finfo(dtype).bits, keep_row=True, op="softmax")
    return compile_once(("fold_diet2 softmax", name, str(dtype), n), lambda: (SOFTMAX[name](ct, n, cfg), (
        fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), None, None, None, Float32(0.0), fake_stream())))


def compile_ce_variant(name, dtype, n):
    ct, cfg = TORCH_TO_CUTE[dtype], row_config(n, torch.finfo(dtype).bits, keep_row=False)

    def build():
        m = cute.sym_int()
        return CE[name](ct, n, cfg, False), (fake_rows(ct, n, cfg.vec), fake_vector(Float32, m), None,
                                            fake_vector(TORCH_TO_CUTE[torch.int64], m), fake_vector(Int32, 1),
                                            Int32(-100), fake_stream())
    return compile_once(("fold_diet2 ce", name, str(dtype), n), build)


def main():
    from benchmarks import harness as H
    from benchmarks.bytes import bytes_moved
    from benchmarks.run import rows_for
    copy_ceiling, read_ceiling = H.copy_ceiling(), H.read_ceiling()
    print("ceilings", copy_ceiling, read_ceiling, flush=True)
    for dtype in (torch.bfloat16, torch.float32):
        n = 32768
        x = (torch.randn(64, n, device="cuda") * 1e4).to(dtype)
        x[8, 5] = -math.inf
        t = torch.randint(0, n, (64,), device="cuda")
        t[:8] = x[:8].float().argmax(1)
        ref = cross_entropy_reference(x, t, reduction="none")
        for name in ce_variants(dtype):
            out = torch.empty(64, device="cuda")
            compile_ce_variant(name, dtype, n)(x, out, None, t, _error_flag(x.device, False), -100)
            print(f"ce {dtype} logits ~1e4 {name}: max |loss - float64| = {float((out.double() - ref).abs().max()):.3e}"
                  f", target at the max {float((out[:8].double() - ref[:8]).abs().max()):.3e}", flush=True)
        sref = softmax_reference(x)
        for name in SOFTMAX:
            y = torch.empty_like(x)
            compile_softmax_variant(name, dtype, n)(x, y, None, None, None, 0.0)
            print(f"softmax {dtype} logits ~1e4 {name}: max |y - float64| = {float((y.double() - sref).abs().max()):.3e}",
                  flush=True)
    rows = []
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
            for name in SOFTMAX:
                k = compile_softmax_variant(name, dtype, n)
                fns[("softmax", name)] = (lambda k=k: k(x, y, None, None, None, 0.0))
                fns[("softmax", name)]()
                errs[("softmax", name)] = float((y[:16].double() - sref).abs().max())
            for name in ce_variants(dtype):
                k = compile_ce_variant(name, dtype, n)
                fns[("cross_entropy", name)] = (lambda k=k: k(x, loss, None, t, err, -100))
                fns[("cross_entropy", name)]()
                errs[("cross_entropy", name)] = float((loss[:64].double() - cref).abs().max())
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
                print(f"{op:14s} {dt} N={n:>6} {name:12s} {r['frac_of_ceiling']:.4f}  err {r['max_abs_err']}  "
                      f"rounds {r['rounds_us']}", flush=True)
            del x, y, t, loss
            torch.cuda.empty_cache()
    meta = H.metadata({"suite": "fold_diet2", "copy_ceiling_tb_per_s": copy_ceiling,
                       "read_ceiling_tb_per_s": read_ceiling, "rounds": ROUNDS, "script": "benchmarks/runs/fold_diet2.py"})
    print("wrote", H.write_suite("fold_diet2", rows, meta, OUT))


if __name__ == "__main__":
    main()

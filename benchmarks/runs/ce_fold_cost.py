"""What in cross-entropy's fold costs the bf16 rows their last points? (Run at 1b768b7:
book/data/ce_fold_cost.csv, benchmarks/runs/README.md, "The fourth session of runs".)

The row sum reads the same logits under the same shapes at 95.7-96.5% of the read ceiling where
cross-entropy reaches 92.2-92.4% (book/data/sweep_reduce_ce_shapes.csv, chapter 9): the
difference is the work per element. This script takes that work apart. Each variant is
cross-entropy's kernel (the same template, shape, target loads and epilogue) with another fold:

- ``full``: the kernel as shipped: a max, then exp2((x - max) * log2 e), then a sum, per pass,
  and the running pair rescaled.
- ``scaled``: the same pair in log2 units: the running max is carried as M = fl(max * log2 e),
  each term is exp2(fma(x, log2 e, -M)) (one FFMA where ``full`` has a subtraction and a
  product), the rescale is exp2(M_a - M_b), and the loss is fma(x_t, -log2 e, M) * ln 2 + log(sum)
  (the target's logit against M in one rounding; exact when x_t is the max). By its SASS
  (nvdisasm) it issues 784 instructions where ``full`` issues 896 at 128k.
- ``no_max``: no max at all: exp2(x * log2 e) summed (correct for logits whose exponentials do not
  overflow, as for the randn inputs here; the loss is then max-free).
- ``max_sum``: the max and a plain sum of x, no exponential (a wrong loss; timing only).
- ``sum``: a plain sum of x (a wrong loss; the row sum's work inside cross-entropy's kernel).

Every variant runs under the table's configuration and, for rows of more than one pass, with
``RowConfig.ahead`` flipped, bf16 at 32k-256k, M * N = 2^28. ``full``, ``scaled`` and ``no_max`` are
checked against the float64 reference first. Softmax folds the same pair, so it runs too, shipped
against ``scaled`` (bf16 16k-256k, the table's configurations, checked against float64). With ``--ptx`` (no GPU needed) it prints each
variant's count of exp2, fma, mul, sub, max and add instructions instead.

    bash benchmarks/h200.sh run benchmarks/runs/ce_fold_cost.py
    CUTE_DSL_ARCH=sm_90a python benchmarks/runs/ce_fold_cost.py --ptx
"""
import math
import os
import re
import sys
from dataclasses import replace

import torch

sys.path.insert(0, ".")
import cutlass.cute as cute  # noqa: E402
from cutlass import Float32, Int32  # noqa: E402

from kernels.compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector  # noqa: E402
from kernels.config import row_config  # noqa: E402
from kernels.cross_entropy import CrossEntropy, _error_flag, cross_entropy_reference  # noqa: E402
from kernels.reduce import LOG2_E, LOGSUMEXP, Combine, _finite_or_zero  # noqa: E402
from kernels.softmax import Softmax, softmax_reference  # noqa: E402

NS = [32768, 65536, 131072, 262144]
SOFTMAX_NS = [16384, 32768, 65536, 131072, 262144]
OUT = os.environ.get("M2OUT", "/tmp")


def _sum(x):
    return x.reduce(cute.ReductionOp.ADD, init_val=0.0, reduction_profile=0)


def _max(x):
    return x.reduce(cute.ReductionOp.MAX, init_val=-math.inf, reduction_profile=0)


def _scaled_fold(x):
    big = _max(x) * LOG2_E  # M = fl(max * log2 e): the max in log2 units, rounded once
    return (big, _sum(cute.math.exp2(x * LOG2_E - _finite_or_zero(big), fastmath=True)))


def _scaled_combine(a, b):
    big = cute.arch.fmax(a[0], b[0])
    safe = _finite_or_zero(big)
    return (big, a[1] * cute.math.exp2(a[0] - safe, fastmath=True) + b[1] * cute.math.exp2(b[0] - safe, fastmath=True))


class CrossEntropyScaled(CrossEntropy):
    """The ``scaled`` variant's loss: its pair is (M, sum of exp2(x log2 e - M))."""

    def loss(self, result, x_t):
        big, denom = result
        return (big - x_t * LOG2_E) * math.log(2.0) + cute.math.log(denom, fastmath=False)


VARIANTS = {
    "full": LOGSUMEXP,
    "scaled": Combine("scaled", (-math.inf, 0.0), _scaled_combine, _scaled_fold, -math.inf),
    # (0, sum): the epilogue's (max - x_t) + log(sum) is then the max-free loss
    "no_max": Combine("no_max", (0.0, 0.0), lambda a, b: (a[0], a[1] + b[1]),
                      lambda x: (Float32(0.0), _sum(cute.math.exp2(x * LOG2_E, fastmath=True))), -math.inf),
    "max_sum": Combine("max_sum", (-math.inf, 0.0), lambda a, b: (cute.arch.fmax(a[0], b[0]), a[1] + b[1]),
                       lambda x: (_max(x), _sum(x)), 0.0),
    "sum": Combine("sum", (0.0, 0.0), lambda a, b: (a[0], a[1] + b[1]), lambda x: (Float32(0.0), _sum(x)), 0.0),
}
CHECKED = ("full", "scaled", "no_max")


def compile_variant(name, n, cfg, dtype=torch.bfloat16):
    ct = TORCH_TO_CUTE[dtype]
    base = CrossEntropyScaled if name == "scaled" else CrossEntropy
    kernel_cls = type(f"CrossEntropy_{name}", (base,), {"op": VARIANTS[name]})

    def build():
        m = cute.sym_int()
        return kernel_cls(ct, n, cfg, False), (fake_rows(ct, n, cfg.vec), fake_vector(Float32, m), None,
                                               fake_vector(TORCH_TO_CUTE[torch.int64], m), fake_vector(Int32, 1),
                                               Int32(-100), fake_stream())
    return compile_once(("ce_fold_cost", name, str(dtype), n, cfg), build)


class SoftmaxScaled(Softmax):
    """Softmax over the ``scaled`` pair (M, sum of exp2(x log2 e - M))."""
    op = VARIANTS["scaled"]

    def row_epilogue(self, x, result, w, scalar):
        big, denom = result
        return cute.math.exp2(x * LOG2_E - _finite_or_zero(big), fastmath=True) * cute.arch.rcp_approx(denom)


def compile_softmax_variant(name, n, cfg, dtype=torch.bfloat16):
    ct = TORCH_TO_CUTE[dtype]
    cls = SoftmaxScaled if name == "scaled" else Softmax
    return compile_once(("ce_fold_cost softmax", name, str(dtype), n, cfg), lambda: (cls(ct, n, cfg), (
        fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), None, None, None, Float32(0.0), fake_stream())))


def configs(n):
    base = row_config(n, 16, keep_row=False)
    return [base] + ([replace(base, ahead=1 - base.ahead)] if base.passes > 1 else [])


def ptx_counts():
    ops = {"ex2": r"^ex2\.", "fma": r"^fma\.", "mul": r"^mul\.(rn\.)?f32", "sub": r"^sub\.(rn\.)?f32",
           "max": r"^max\.f32", "add": r"^add\.(rn\.)?f32"}
    for n in NS:
        for cfg in configs(n):
            for name in VARIANTS:
                body = [ln.strip() for ln in compile_variant(name, n, cfg).ptx.splitlines()]
                counts = {k: sum(bool(re.match(p, ln)) for ln in body) for k, p in ops.items()}
                print(f"N={n:>6} ahead={cfg.ahead} {name:>8}: " + " ".join(f"{k}={v}" for k, v in counts.items()),
                      flush=True)
    for n in SOFTMAX_NS:
        cfg = row_config(n, 16, keep_row=True, op="softmax")
        for name in ("full", "scaled"):
            body = [ln.strip() for ln in compile_softmax_variant(name, n, cfg).ptx.splitlines()]
            counts = {k: sum(bool(re.match(p, ln)) for ln in body) for k, p in ops.items()}
            print(f"softmax N={n:>6} {name:>8}: " + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)


def main():
    from benchmarks import harness as H
    from benchmarks.bytes import bytes_moved
    from benchmarks.run import rows_for
    ceiling = H.read_ceiling()
    rows = []
    # logits of size 1e4 (bf16), where the order of the exponent's arithmetic shows: the loss of
    # ``full`` and ``scaled`` against float64, under the table's configuration at 32k
    xl = (torch.randn(64, NS[0], device="cuda") * 1e4).to(torch.bfloat16)
    tl = torch.randint(0, NS[0], (64,), device="cuda")
    tl[:8] = xl[:8].float().argmax(1)  # target at the max: a loss near log(1) = 0
    refl = cross_entropy_reference(xl, tl, reduction="none")
    for name in ("full", "scaled"):
        out = torch.empty(64, device="cuda")
        compile_variant(name, NS[0], configs(NS[0])[0])(xl, out, None, tl, _error_flag(xl.device, False), -100)
        print(f"logits ~1e4, {name}: max |loss - float64| = {float((out.double() - refl).abs().max()):.3e}, "
              f"rows with the target at the max {float((out[:8].double() - refl[:8]).abs().max()):.3e}", flush=True)
    for n in NS:
        m = rows_for(n)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        t = torch.randint(0, n, (m,), device="cuda")
        loss = torch.empty(m, device="cuda")
        err = _error_flag(x.device, False)
        ref = cross_entropy_reference(x[:64], t[:64], reduction="none")
        for cfg in configs(n):
            for name in VARIANTS:
                k = compile_variant(name, n, cfg)
                fn = lambda: k(x, loss, None, t, err, -100)  # noqa: E731
                fn()
                err_max = float((loss[:64].double() - ref).abs().max()) if name in CHECKED else float("nan")
                rows.append(H.row("cross_entropy", "ours", "bf16", m, n, bytes_moved("cross_entropy", m, n, 2),
                                  H.time_ms(fn, warmup=3, rep=20), ceiling, variant=name, ahead=cfg.ahead,
                                  config=str(cfg), max_abs_err=err_max))
                print(rows[-1], flush=True)
        del x, t, loss
        torch.cuda.empty_cache()
    # softmax folds the same pair: its shipped kernel against the scaled pair (and the epilogue's
    # exp2(fma(x, log2 e, -M)) / sum), bf16 16k-256k under the table's configurations
    copy_ceiling = H.copy_ceiling()
    for n in SOFTMAX_NS:
        m = rows_for(n)
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        ref = softmax_reference(x[:16])
        cfg = row_config(n, 16, keep_row=True, op="softmax")
        for name in ("full", "scaled"):
            k = compile_softmax_variant(name, n, cfg)
            fn = lambda: k(x, y, None, None, None, 0.0)  # noqa: E731
            fn()
            err_max = float((y[:16].double() - ref).abs().max())
            rows.append(H.row("softmax", "ours", "bf16", m, n, bytes_moved("softmax", m, n, 2),
                              H.time_ms(fn, warmup=3, rep=20), copy_ceiling, variant=name, config=str(cfg),
                              max_abs_err=err_max))
            print(rows[-1], flush=True)
        del x, y
        torch.cuda.empty_cache()
    meta = H.metadata({"suite": "ce_fold_cost", "read_ceiling_tb_per_s": ceiling, "copy_ceiling_tb_per_s": copy_ceiling,
                       "script": "benchmarks/runs/ce_fold_cost.py"})
    print("wrote", H.write_suite("ce_fold_cost", rows, meta, OUT))


if __name__ == "__main__":
    ptx_counts() if "--ptx" in sys.argv else main()

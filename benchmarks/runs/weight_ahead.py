"""Does RMSNorm's staged epilogue wait on its weight? (H200)

A row staged in shared memory reads its weight in the epilogue, one 128-bit access at a time
from L2 (the weight is every row's), ``RowKernel.weight_ahead`` accesses ahead of the one it
works on, the first of them issued before the cluster exchange (kernels.rowkernel.WEIGHT_AHEAD,
2). RMSNorm's staged rows measure 93.5-96.2% of the copy ceiling where softmax's, on the same
shapes and with no weight, measure 96.0-96.9% (book/data/rmsnorm.csv, softmax.csv). This times
RMSNorm's staged points (bf16 64k-256k, fp32 256k) with 2, 3, 4 and 8 weight accesses ahead (8:
every access of these shapes, all issued before the exchange), in alternating rounds, each
checked against float64, with the registers each takes.

    bash benchmarks/h200.sh run benchmarks/runs/weight_ahead.py
"""
import os
import statistics
import sys

import torch

sys.path.insert(0, ".")
from cutlass import Float32  # noqa: E402

from kernels.compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector  # noqa: E402
from kernels.config import row_config  # noqa: E402
from kernels.cubin import kernel_resources  # noqa: E402
from kernels.rmsnorm import RMSNorm, rmsnorm_reference  # noqa: E402

POINTS = [(torch.bfloat16, 65536), (torch.bfloat16, 131072), (torch.bfloat16, 262144), (torch.float32, 262144)]
AHEAD = [2, 3, 4, 8]
ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = os.environ.get("M2OUT", "/tmp")


def compile_variant(dtype, n, ahead):
    ct, cfg = TORCH_TO_CUTE[dtype], row_config(n, torch.finfo(dtype).bits, keep_row=True)
    cls = type(f"RMSNormWeightAhead{ahead}", (RMSNorm,), {"weight_ahead": ahead})
    return compile_once(("weight_ahead", str(dtype), n, ahead), lambda: (cls(ct, n, cfg), (
        fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), fake_vector(ct, n, cfg.vec), None, None,
        Float32(1e-6), fake_stream())))


def main():
    from benchmarks import harness as H
    from benchmarks.bytes import bytes_moved
    from benchmarks.run import rows_for
    ceiling = H.copy_ceiling()
    print("copy ceiling", ceiling, flush=True)
    rows = []
    for dtype, n in POINTS:
        dt = "bf16" if dtype == torch.bfloat16 else "fp32"
        m = rows_for(n)
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        ref = rmsnorm_reference(x[:8], w)
        fns, errs, regs = {}, {}, {}
        for a in AHEAD:
            k = compile_variant(dtype, n, a)
            regs[a] = kernel_resources(k.cubin)[0].registers
            fns[a] = (lambda k=k: k(x, y, w, None, None, 1e-6))
            fns[a]()
            errs[a] = float((y[:8].double() - ref).abs().max())
        times = {a: [] for a in AHEAD}
        for _ in range(ROUNDS):
            for a in AHEAD:
                times[a].append(H.time_ms(fns[a], warmup=3, rep=20))
        for a in AHEAD:
            r = H.row("rmsnorm", "ours", dt, m, n, bytes_moved("rmsnorm", m, n, x.element_size()),
                      statistics.median(times[a]), ceiling, variant=f"weight_ahead={a}", registers=regs[a],
                      rounds_us=" ".join(f"{v * 1e3:.2f}" for v in times[a]), max_abs_err=f"{errs[a]:.2e}")
            rows.append(r)
            print(f"{dt} N={n:>6} weight_ahead={a}: {r['frac_of_ceiling']:.4f} regs {regs[a]} err {errs[a]:.2e} "
                  f"rounds {r['rounds_us']}", flush=True)
        del x, y, w
        torch.cuda.empty_cache()
    meta = H.metadata({"suite": "weight_ahead", "copy_ceiling_tb_per_s": ceiling, "rounds": ROUNDS,
                       "script": "benchmarks/runs/weight_ahead.py"})
    print("wrote", H.write_suite("weight_ahead", rows, meta, OUT))


if __name__ == "__main__":
    main()

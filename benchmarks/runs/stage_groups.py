"""Does a staged row's fold wait for copies it does not need yet? (H200)

A row staged in shared memory (``stage="smem"``, RMSNorm and softmax at their longest rows)
copies its tile in with cp.async. With ``RowKernel.stage_groups`` = 1 (shipped) every copy is
one commit group, and the fold waits for all of them (``cp.async.wait_group 0``) before it reads
the first access back. With G groups the fold waits for group g only (``wait_group G-1-g``)
before its accesses, so it starts when the first group has landed. This times G = 1, 2, 4 and
one group an access at the staged points (bf16 64k-256k, fp32 256k), RMSNorm and softmax, in
alternating rounds, each checked against float64, with the registers each takes.

    bash benchmarks/h200.sh run benchmarks/runs/stage_groups.py
    python benchmarks/runs/stage_groups.py --ptx    # no GPU: the waits each variant compiles to
"""
import os
import re
import statistics
import sys

import torch

sys.path.insert(0, ".")
from cutlass import Float32  # noqa: E402

from kernels.compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector  # noqa: E402
from kernels.config import row_config  # noqa: E402
from kernels.cubin import kernel_resources  # noqa: E402
from kernels.rmsnorm import RMSNorm, rmsnorm_reference  # noqa: E402
from kernels.softmax import Softmax, softmax_reference  # noqa: E402

POINTS = [(torch.bfloat16, 65536), (torch.bfloat16, 131072), (torch.bfloat16, 262144), (torch.float32, 262144)]
OPS = {"rmsnorm": RMSNorm, "softmax": Softmax}
ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = os.environ.get("M2OUT", "/tmp")


def config(op, dtype, n):
    return row_config(n, torch.finfo(dtype).bits, keep_row=True, op=op)


def group_counts(cfg):
    v = cfg.vecs_per_thread
    return sorted({g for g in (1, 2, 4, v) if v % g == 0})


def compile_variant(op, dtype, n, groups):
    ct, cfg = TORCH_TO_CUTE[dtype], config(op, dtype, n)
    cls = type(f"{OPS[op].__name__}Groups{groups}", (OPS[op],), {"stage_groups": groups})
    w = fake_vector(ct, n, cfg.vec) if op == "rmsnorm" else None
    scalar = Float32(1e-6 if op == "rmsnorm" else 0.0)
    return compile_once(("stage_groups", op, str(dtype), n, groups), lambda: (cls(ct, n, cfg), (
        fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), w, None, None, scalar, fake_stream())))


def ptx_report():
    for op in OPS:
        for dtype, n in POINTS:
            cfg = config(op, dtype, n)
            assert cfg.stage == "smem", (op, dtype, n, cfg)
            for g in group_counts(cfg):
                k = compile_variant(op, dtype, n, g)
                waits = re.findall(r"cp\.async\.wait_group\s+(\d+)", k.ptx)
                commits = len(re.findall(r"cp\.async\.commit_group", k.ptx))
                print(f"{op} {dtype} {n} G={g}: {commits} commits, waits {' '.join(waits)}, "
                      f"{kernel_resources(k.cubin)[0].registers} registers", flush=True)


def main():
    from benchmarks import harness as H
    from benchmarks.bytes import bytes_moved
    from benchmarks.run import rows_for
    ceiling = H.copy_ceiling()
    print("copy ceiling", ceiling, flush=True)
    rows = []
    for op in OPS:
        for dtype, n in POINTS:
            dt = "bf16" if dtype == torch.bfloat16 else "fp32"
            m = rows_for(n)
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            w = torch.randn(n, device="cuda", dtype=dtype) if op == "rmsnorm" else None
            y = torch.empty_like(x)
            ref = rmsnorm_reference(x[:8], w) if op == "rmsnorm" else softmax_reference(x[:8])
            scalar = 1e-6 if op == "rmsnorm" else 0.0
            gs = group_counts(config(op, dtype, n))
            fns, errs, regs = {}, {}, {}
            for g in gs:
                k = compile_variant(op, dtype, n, g)
                regs[g] = kernel_resources(k.cubin)[0].registers
                fns[g] = (lambda k=k: k(x, y, w, None, None, scalar))
                y.fill_(float("nan"))
                fns[g]()
                torch.cuda.synchronize()
                errs[g] = float(((y[:8].double() - ref).abs().max() / ref.abs().max()))
                assert errs[g] < 2e-2, (op, dt, n, g, errs[g])
            times = H.time_rounds(fns, ROUNDS)
            for g in gs:
                rr = H.row(op, "ours", dt, m, n, bytes_moved(op, m, n, x.element_size()), statistics.median(times[g]),
                           ceiling, variant=f"stage_groups={g}", registers=regs[g], **H.rounds_fields(times, g),
                           max_rel_err=f"{errs[g]:.2e}")
                rows.append(rr)
                print(f"{op} {dt} N={n:>6} G={g}: {rr['frac_of_ceiling']:.4f} regs {regs[g]} err {errs[g]:.2e} "
                      f"rounds {rr['rounds_us']}", flush=True)
            del x, y, w
            torch.cuda.empty_cache()
    meta = H.metadata({"suite": "stage_groups", "copy_ceiling_tb_per_s": ceiling, "copy_ceiling_end_tb_per_s":
                       H.copy_ceiling(), "rounds": ROUNDS, "script": "benchmarks/runs/stage_groups.py"})
    print("wrote", H.write_suite("stage_groups", rows, meta, OUT))


if __name__ == "__main__":
    ptx_report() if "--ptx" in sys.argv else main()

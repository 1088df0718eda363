"""The output row's stores as streaming stores (``st.global.cs``), beside the table's kernel and
QuACK. (H200)

Every row kernel stores its output with a plain ``st.global``: the lines stay in L2 like any
other until evicted. ``RowKernel.store_mode = "STREAMING"`` makes them ``st.global.cs``, the first
lines L2 evicts, so the row being read and (RMSNorm) the weight, which every row reads again,
keep the cache. Here RMSNorm and softmax at POINTS (op:dtype:N), each kernel checked against
float64 over every row, then ROUNDS alternating rounds. M2OUT names a folder for store_mode.csv.

    bash benchmarks/h200.sh run benchmarks/runs/store_mode.py

Ran at 51fa85d (book/data/store_mode.csv, logs/store_mode_51fa85d.log): the streaming stores
were slower than the plain ones at every point, in every round: % of the copy ceiling, plain
against streaming, RMSNorm bf16 8k 98.06 / 97.24, 64k 96.54 / 96.08, 128k 95.94 / 95.84, 256k
95.33 / 94.92, fp32 256k 93.96 / 93.37; softmax bf16 32k 96.72 / 96.02, 64k 96.20 / 95.84, 128k
97.10 / 96.58, 256k 96.02 / 95.69. The next commit removed ``RowKernel.store_mode``; check 51fa85d
out to run this.
"""
import os
import statistics
import sys

import torch

sys.path.insert(0, ".")
from benchmarks import harness as H  # noqa: E402
from benchmarks.bytes import bytes_moved  # noqa: E402
from benchmarks.peers import peer_impls  # noqa: E402
from benchmarks.run import rows_for  # noqa: E402
from benchmarks.runs.persist import full_error  # noqa: E402
from cutlass import Float32  # noqa: E402
from kernels.compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector  # noqa: E402
from kernels.config import row_config  # noqa: E402
from kernels.rmsnorm import RMSNorm  # noqa: E402
from kernels.softmax import Softmax  # noqa: E402

POINTS = "rmsnorm:bf16:8192,rmsnorm:bf16:65536,rmsnorm:bf16:131072,rmsnorm:bf16:262144,rmsnorm:fp32:262144," \
         "softmax:bf16:32768,softmax:bf16:65536,softmax:bf16:131072,softmax:bf16:262144"
POINTS = [(op, dt, int(n)) for op, dt, n in (p.split(":") for p in os.environ.get("POINTS", POINTS).split(","))]
MODES = os.environ.get("MODES", "STREAMING").split(",")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = os.environ.get("M2OUT", "/tmp")
DT = {"bf16": torch.bfloat16, "fp32": torch.float32}


def compiled(op, dt, n, mode):
    """The table's kernel for (op, dtype, N) with ``store_mode`` = mode (None: as shipped)."""
    cfg = row_config(n, torch.finfo(dt).bits, keep_row=True, op=op)
    ct = TORCH_TO_CUTE[dt]

    def build():
        k = (RMSNorm if op == "rmsnorm" else Softmax)(ct, n, cfg)
        k.store_mode = mode
        w = fake_vector(ct, n, cfg.vec) if op == "rmsnorm" else None
        return k, (fake_rows(ct, n, cfg.vec), fake_rows(ct, n, cfg.vec), w, None, None,
                   Float32(1e-6 if op == "rmsnorm" else 0.0), fake_stream())
    return compile_once(("store_mode", op, str(dt), n, cfg, mode), build)


def launcher(op, x, out, mode):
    kernel = compiled(op, x.dtype, x.shape[1], mode)
    w = torch.randn(x.shape[1], device="cuda", dtype=x.dtype) if op == "rmsnorm" else None
    if op == "rmsnorm":
        return (lambda: kernel(x, out, w, None, None, 1e-6)), w
    return (lambda: kernel(x, out, None, None, None, 0.0)), None


def main():
    ceil = H.copy_ceiling()
    print("copy ceiling", ceil, flush=True)
    rows = []
    for op, dname, n in POINTS:
        dt = DT[dname]
        m = rows_for(n)
        x = torch.randn(m, n, device="cuda", dtype=dt)
        fns, errs = {}, {}
        for mode in [None] + MODES:
            out = torch.empty_like(x)
            fn, w = launcher(op, x, out, mode)
            fn()
            errs[mode] = full_error(op, x, w, out)
            fns[mode or "table"] = fn
        print(f"{op} {dname} {n}: max error {errs}", flush=True)
        assert max(errs.values()) < 2e-2, errs
        quack = dict(peer_impls(op))["quack"](m, n, dt)
        quack()
        fns["quack"] = quack
        times = H.time_rounds(fns, ROUNDS)
        nbytes = bytes_moved(op, m, n, torch.finfo(dt).bits // 8)
        for k in fns:
            r = H.row(op, "quack" if k == "quack" else "ours", dname, m, n, nbytes, statistics.median(times[k]),
                      ceil, variant="" if k == "quack" else k,
                      **H.rounds_fields(times, k, "quack" if k != "quack" else None))
            if k not in ("quack", "table"):
                r.update(H.rounds_fields(times, k, "table"))
            rows.append(r)
            print(f"{op} {dname} {n} {k:10s} {r['frac_of_ceiling']:.4f} "
                  + " ".join(f"{f}={r[f]}" for f in r if f.startswith(("x_", "rounds_ahead"))), flush=True)
        del x, fns
        torch.cuda.empty_cache()
    meta = H.metadata({"suite": "store_mode", "copy_ceiling_tb_per_s": ceil, "rounds": ROUNDS,
                       "script": "benchmarks/runs/store_mode.py"})
    print("wrote", H.write_suite(os.environ.get("NAME", "store_mode"), rows, meta, OUT))


if __name__ == "__main__":
    main()

"""Softmax computing each exp once, beside the table's kernel and QuACK. (H200)

Our softmax folds exp(x - m) for the row's sum and computes exp(x - row max) again in the
epilogue: two exps an element. With ``Softmax.keep_folded`` the fold keeps each exp(x - m) (m the
max of the thread's part) and the epilogue scales it by exp(m - row max) / sum: one exp an
element, as QuACK's kernel does. A row kept in registers pays nothing for it; a staged row keeps
the exps in registers (fp32) instead of reading the row from shared memory again. Each variant is
checked against float64 over every row at every point, including rows with -inf entries and one
of nothing but -inf, then timed in ROUNDS alternating rounds with the table's kernel and QuACK at
POINTS (dtype:N). M2OUT names a folder for keep_folded.csv. With SHAPES=1, every staged shape of
the sweep's list (``benchmarks.sweep.smem_candidates``) runs both ways beside the table's kernel.

    bash benchmarks/h200.sh run benchmarks/runs/keep_folded.py
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
from benchmarks.sweep import cfg_for, smem_candidates  # noqa: E402
from kernels.softmax import compile_softmax, softmax_reference  # noqa: E402

POINTS = "bf16:1024,bf16:4096,bf16:8192,bf16:16384,bf16:32768,bf16:65536,bf16:131072,bf16:262144," \
         "fp32:4096,fp32:32768,fp32:131072,fp32:262144"
POINTS = [(dt, int(n)) for dt, n in (p.split(":") for p in os.environ.get("POINTS", POINTS).split(","))]
ROUNDS = int(os.environ.get("ROUNDS", "5"))
OUT = os.environ.get("M2OUT", "/tmp")
DT = {"bf16": torch.bfloat16, "fp32": torch.float32}


def launcher(x, out, keep, cfg=None):
    kernel = compile_softmax(x.dtype, x.shape[1], keep_folded=keep, config=cfg)
    return lambda: kernel(x, out, None, None, None, 0.0)


def variants(n, bits):
    """name -> (configuration, keep_folded): the table's kernel both ways, and with SHAPES every
    staged shape of the sweep's list both ways."""
    out = {"table": (None, False), "keep_folded": (None, True)}
    if os.environ.get("SHAPES"):
        for tpr, tpb, cluster in smem_candidates(n, bits):
            cfg = cfg_for(n, bits, tpr, tpb, cluster, keep=True, stage="smem")
            for keep in (False, True):
                out[f"{cfg}{' keep_folded' if keep else ''}"] = (cfg, keep)
    return out


def worst_error(x, keep, cfg=None):
    """Largest |error| over every row against float64 (NaN where both are NaN counts as 0)."""
    out = torch.empty_like(x)
    launcher(x, out, keep, cfg)()
    worst = 0.0
    for i in range(0, x.shape[0], 512):
        ref = softmax_reference(x[i:i + 512])
        err = (out[i:i + 512].double() - ref).abs()
        both_nan = out[i:i + 512].isnan() & ref.isnan()
        worst = max(worst, float(torch.where(both_nan, 0.0, err).max()))
    return worst


def main():
    ceil = H.copy_ceiling()
    print("copy ceiling", ceil, flush=True)
    rows = []
    for dname, n in POINTS:
        dt = DT[dname]
        m = rows_for(n)
        x = torch.randn(m, n, device="cuda", dtype=dt)
        xs = x[:64].clone() * 30
        xs[1, ::3] = -float("inf")
        xs[2] = -float("inf")
        xs[3, 5] = 1e4
        errs, fns = {}, {}
        out = torch.empty_like(x)
        for name, (cfg, keep) in variants(n, torch.finfo(dt).bits).items():
            errs[name] = (worst_error(x, keep, cfg), worst_error(xs, keep, cfg))
            fns[name] = launcher(x, out, keep, cfg)
        print(f"{dname} {n}: max error (random, extreme) {errs}", flush=True)
        assert all(max(e) < 2 * max(errs["table"]) + 1e-6 for e in errs.values()), errs
        quack = dict(peer_impls("softmax"))["quack"](m, n, dt)
        quack()
        fns["quack"] = quack
        times = H.time_rounds(fns, ROUNDS)
        nbytes = bytes_moved("softmax", m, n, torch.finfo(dt).bits // 8)
        for k in fns:
            r = H.row("softmax", "quack" if k == "quack" else "ours", dname, m, n, nbytes,
                      statistics.median(times[k]), ceil, variant="" if k == "quack" else k,
                      **H.rounds_fields(times, k, "quack" if k != "quack" else None),
                      max_err="" if k == "quack" else f"{errs[k][0]:.2e}")
            if k not in ("quack", "table"):
                r.update(H.rounds_fields(times, k, "table"))
            rows.append(r)
            print(f"softmax {dname} {n} {k:12s} {r['frac_of_ceiling']:.4f} "
                  + " ".join(f"{f}={r[f]}" for f in r if f.startswith(("x_", "rounds_ahead"))), flush=True)
        del x, out, fns
        torch.cuda.empty_cache()
    meta = H.metadata({"suite": "keep_folded", "copy_ceiling_tb_per_s": ceil, "rounds": ROUNDS,
                       "script": "benchmarks/runs/keep_folded.py"})
    print("wrote", H.write_suite(os.environ.get("NAME", "keep_folded"), rows, meta, OUT))


if __name__ == "__main__":
    main()

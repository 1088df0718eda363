"""Candidate configurations for the streamed row reduction (``reduce_rows``, chapters 3-6).

    python -m benchmarks.sweep_reduce [--out DIR] [--n N ...]

For each dtype and N, the bandwidth (fraction of the read ceiling of the same run) of every
candidate (threads per row, threads per block, cluster, 128-bit accesses per pass) and which
one the table picks now; STREAM_TABLE in kernels/config.py is edited from these numbers
(written to <out>/sweep_reduce.csv).
"""
from __future__ import annotations

import argparse
import math

import torch

from kernels.config import RowConfig
from kernels.reduction import reduce_config, reduce_rows

from . import harness as H
from .bytes import bytes_moved

NS = [1024, 262144]  # the two points chapter 6 showed short of 95% of the read ceiling


def candidates(n: int, bits: int):
    """Streamed configurations that cover a row of n elements with 128-bit accesses."""
    vec = 128 // bits
    nvec = n // vec
    out = []
    short = n <= 4096
    for tpr in ((16, 32, 64, 128) if short else (128, 256, 512)):
        for cluster in ((1,) if short else (1, 2, 4, 8)):
            for vecs in ((1, 2, 4, 8) if short else (2, 4, 8)):
                if tpr * cluster * vecs > nvec:
                    continue
                for tpb in ((128, 256) if short else (tpr,)):
                    passes = math.ceil(nvec / (tpr * cluster * vecs))
                    out.append(RowConfig(tpr, tpb, cluster, vec, vecs, passes))
    return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--n", type=int, nargs="*", default=NS)
    p.add_argument("--dtype", nargs="*", default=["bf16"], choices=["bf16", "fp32"])
    a = p.parse_args(argv)
    ceil = H.read_ceiling()
    print("read ceiling", ceil, flush=True)
    rows = []
    for dt in [{"bf16": torch.bfloat16, "fp32": torch.float32}[d] for d in a.dtype]:
        bits = torch.finfo(dt).bits
        for n in a.n:
            m = (1 << 28) // n
            x = torch.randn(m, n, device="cuda", dtype=dt)
            out = torch.empty(m, device="cuda")
            picked = reduce_config(n, dt)
            best = None
            for cfg in candidates(n, bits):
                try:
                    ms = H.time_ms(lambda: reduce_rows(x, "sum", config=cfg, out=out), warmup=3, rep=15)
                except Exception as e:  # a candidate the template rejects
                    print("FAIL", n, cfg, type(e).__name__, str(e)[:120], flush=True)
                    continue
                r = H.row("reduce", "ours", "bf16" if bits == 16 else "fp32", m, n,
                          bytes_moved("reduce", m, n, bits // 8), ms, ceil, variant=str(cfg), picked=(cfg == picked))
                rows.append(r)
                if best is None or r["frac_of_ceiling"] > best["frac_of_ceiling"]:
                    best = r
            pick = [r for r in rows if r["N"] == n and r["dtype"] == ("bf16" if bits == 16 else "fp32") and r["picked"]]
            print(f"{'bf16' if bits == 16 else 'fp32'} N={n:>6} picked {pick[0]['frac_of_ceiling'] if pick else None} "
                  f"best {best['frac_of_ceiling']:.4f} {best['variant']}", flush=True)
            del x, out
    H.write_suite("sweep_reduce", rows, H.metadata({"ceilings": {"read": ceil}}), a.out)


if __name__ == "__main__":
    main()

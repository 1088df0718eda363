"""Cross-entropy's backward under other tables' shapes (an experiment for kernels/config.py).

The backward maps its row (reads the logits, writes their gradient, nothing to reduce). Its
table streams the row in passes of four accesses; this times, at bf16 and M N = 2^28, that
table's shape beside the same shape with the next pass loaded ahead, softmax's kept shapes
(the whole row loaded before anything is written) and the forward's streamed shapes. Writes
``ce_backward_shapes.csv`` (the suites' schema, the candidate in ``variant``) into --out.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import torch

from kernels.config import row_config
from kernels.cross_entropy import cross_entropy, cross_entropy_backward_out

from . import harness as H

NS = [1024, 4096, 32768, 131072]


def candidates(n, bits):
    table = row_config("cross_entropy_bwd", n, bits)
    out = {"table": table, "softmax_kept": row_config("softmax", n, bits), "forward_stream": row_config("cross_entropy", n, bits)}
    if table.stage == "stream" and not table.ahead:
        out["table_ahead"] = replace(table, ahead=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    ceil = H.copy_ceiling()
    rows = []
    for n in NS:
        m = (1 << 28) // n
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        t = torch.randint(0, n, (m,), device="cuda")
        _, lse = cross_entropy(x, t, reduction="none", return_lse=True)
        g = torch.full((1,), 1.0 / m, device="cuda")
        dx = torch.empty_like(x)
        fns = {}
        for name, cfg in candidates(n, 16).items():
            try:
                fn = (lambda cfg=cfg: cross_entropy_backward_out(g, x, t, lse, dx, config=cfg))
                fn()
                fns[name] = fn
            except Exception as e:  # a shape the backward cannot take
                print(n, name, type(e).__name__, str(e)[:100], flush=True)
        times = H.time_rounds(fns, a.rounds)
        for name in fns:
            rows.append(H.row("cross_entropy_bwd", "ours", "bf16", m, n, 4 * m * n, statistics.median(times[name]), ceil,
                              variant=f"{name} {candidates(n, 16)[name]}",
                              rounds_us=" ".join(f"{v * 1e3:.2f}" for v in times[name])))
            print(rows[-1], flush=True)
    meta = H.metadata({"suite": "ce_backward_shapes", "copy_ceiling_tb_per_s": ceil, "rounds": a.rounds})
    print("wrote", H.write_suite("ce_backward_shapes", rows, meta, a.out))


if __name__ == "__main__":
    main()

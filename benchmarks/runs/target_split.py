"""Cross-entropy's target in two steps, as QuACK loads it. (H200)

The suites in rounds (book/data/cross_entropy.csv, 2f46116) and every candidate shape in rounds
(benchmarks/runs/near_misses.py, book/data/near_misses.csv) left QuACK ahead of every shape of
ours at bf16 1k (0.995x at best) and 8k (0.995x). Ours loads a row's target and then its logit
after the reduction, by the thread that writes the loss: two dependent round trips at the end of
every row (``early_target=False``), or both right after the row's first loads
(``early_target=True``, which waits on the target before folding). QuACK's kernel
(quack/cross_entropy.py, quack-kernels 0.6.5) loads the target before the row and the logit
after the row has arrived, before its reduction. ``early_target="split"`` does that: the target
before the row's loads (``scalar_prologue_index``), the logit after the fold and before the
exchange (``scalar_prologue_gather``). This times the three at every suite point, under the
table's shapes, with QuACK, in ROUNDS alternating rounds, each checked against float64.

    bash benchmarks/h200.sh run benchmarks/runs/target_split.py
"""
import os
import statistics
import sys

import torch

sys.path.insert(0, ".")
from benchmarks import harness as H  # noqa: E402
from benchmarks.bytes import bytes_moved  # noqa: E402
from benchmarks.peers import peer_impls  # noqa: E402
from benchmarks.run import OP_NS, rows_for  # noqa: E402
from kernels.cross_entropy import cross_entropy, cross_entropy_reference  # noqa: E402

MODES = [False, True, "split"]
ROUNDS = int(os.environ.get("ROUNDS", "5"))
OUT = os.environ.get("M2OUT", "/tmp")


def main():
    ceiling = H.read_ceiling()
    print("read ceiling", ceiling, flush=True)
    rows = []
    for dname, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        for n in OP_NS:
            m = rows_for(n)
            x = torch.randn(m, n, device="cuda", dtype=dt)
            t = torch.randint(0, n, (m,), device="cuda")
            t[::7] = -100  # ignored rows too
            ref = cross_entropy_reference(x[:256], t[:256], reduction="none")
            fns, errs = {}, {}
            for mode in MODES:
                fns[mode] = (lambda mode=mode: cross_entropy(x, t, reduction="none", check_target=False,
                                                            early_target=mode))
                errs[mode] = float((fns[mode]()[:256].double() - ref).abs().max())
                assert errs[mode] < 1e-4, (dname, n, mode, errs[mode])
            quack = dict(peer_impls("cross_entropy"))["quack"](m, n, dt)
            quack()
            fns["quack"] = quack
            times = H.time_rounds(fns, ROUNDS)
            line = []
            for k in fns:
                rr = H.row("cross_entropy", "quack" if k == "quack" else "ours", dname, m, n,
                           bytes_moved("cross_entropy", m, n, x.element_size()), statistics.median(times[k]), ceiling,
                           variant="" if k == "quack" else f"early_target={k}", **H.rounds_fields(times, k, "quack"),
                           max_abs_err="" if k == "quack" else f"{errs[k]:.2e}")
                rows.append(rr)
                line.append(f"{k}: {rr['frac_of_ceiling'] * 100:.2f}% x{rr['x_quack']:.4f} "
                            f"({rr['rounds_ahead_of_quack']}/{ROUNDS})")
            print(f"{dname} {n:>6}  " + " | ".join(line), flush=True)
            del x, t, fns
            torch.cuda.empty_cache()
    meta = H.metadata({"suite": "target_split", "read_ceiling_tb_per_s": ceiling, "rounds": ROUNDS,
                       "script": "benchmarks/runs/target_split.py"})
    print("wrote", H.write_suite("target_split", rows, meta, OUT))


if __name__ == "__main__":
    main()

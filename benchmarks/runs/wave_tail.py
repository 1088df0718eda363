"""Is the gap at the longest rows the last wave? Bandwidth against M at a fixed row length. (H200)

At N = 131072 and 262144 the suites (M x N = 2^28) leave RMSNorm and softmax 1-3 points under
97% of the copy ceiling. A staged row of 128k-256k elements is split over a cluster of 4-16
blocks of 32-64 KiB of shared memory each, so an SM holds only a few blocks and the GPU a few
dozen rows at a time (at most about 58 rows of 512 KiB in 132 x 228 KiB). If the rows that
fit at once do not divide M, the last wave runs part-empty; bandwidth against M then saws, with
the period of the rows in flight, and the suite's M sits somewhere on the saw. Here each point's
kernel (the table's shape) and torch's copy_ of the same bytes are timed at every M from
M0 / 2 to 3 M0 / 2 in steps of STEP (M0 = 2^28 / N), in alternating order, ROUNDS rounds.
One line a point: where the suite's M sits against the best and worst M near it; then, per
series, the line t = t0 + M b / B fitted through its times (``fit``; ``--fit CSV`` prints it
for a CSV already written, without a GPU). Cross-entropy
(POINTS with op cross_entropy) is timed beside our read probe over the same bytes instead, as
a fraction of the read ceiling. M2OUT names a folder for wave_tail.csv (NAME for another name).

    bash benchmarks/h200.sh run benchmarks/runs/wave_tail.py
"""
import os
import statistics
import sys

import torch

sys.path.insert(0, ".")
from benchmarks import harness as H  # noqa: E402
from benchmarks.bytes import bytes_moved  # noqa: E402
from benchmarks.run import rows_for  # noqa: E402
from benchmarks.runs.near_misses import make_ours  # noqa: E402

POINTS = [("rmsnorm", "bf16", 262144), ("softmax", "bf16", 262144), ("rmsnorm", "bf16", 131072),
          ("rmsnorm", "fp32", 262144), ("rmsnorm", "fp32", 131072), ("softmax", "fp32", 262144),
          ("rmsnorm", "bf16", 65536)]
if os.environ.get("POINTS"):
    POINTS = [(op, dt, int(n)) for op, dt, n in (p.split(":") for p in os.environ["POINTS"].split(","))]
ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = os.environ.get("M2OUT", "/tmp")
DT = {"bf16": torch.bfloat16, "fp32": torch.float32}


def fit(rows) -> dict:
    """{(op, dtype, N, impl): (t0 in us, streaming rate as a fraction of the row's ceiling, largest
    residual in us)} from rows of this script's CSV: the least-squares line t = t0 + M b / B through
    each series' medians (b bytes a row: the row read, and for RMSNorm and softmax written too)."""
    series = {}
    for r in rows:
        series.setdefault((r["op"], r["dtype"], int(r["N"]), r["impl"]), []).append(
            (int(r["M"]), float(r["us"]), float(r["ceiling_tb_per_s"])))
    out = {}
    for (op, dname, n, impl), pts in series.items():
        k = len(pts)
        mx, my = sum(m for m, _, _ in pts) / k, sum(t for _, t, _ in pts) / k
        slope = sum((m - mx) * (t - my) for m, t, _ in pts) / sum((m - mx) ** 2 for m, _, _ in pts)
        t0 = my - slope * mx
        row_bytes = (1 if op == "cross_entropy" else 2) * n * (2 if dname == "bf16" else 4)
        rate = row_bytes / (slope * 1e-6) / 1e12 / pts[0][2]
        out[op, dname, n, impl] = (t0, rate, max(abs(t - t0 - slope * m) for m, t, _ in pts))
    return out


def print_fit(rows) -> None:
    for (op, dname, n, impl), (t0, rate, resid) in fit(rows).items():
        print(f"{op} {dname} {n} {impl}: {t0:.2f} us a launch, streaming at {100 * rate:.1f}% of the ceiling "
              f"(largest residual {resid:.2f} us)", flush=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--fit":  # python benchmarks/runs/wave_tail.py --fit CSV (no GPU)
        import csv
        with open(sys.argv[2]) as f:
            print_fit(list(csv.DictReader(f)))
        return
    from kernels.hierarchy import read_probe
    ceils = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
    print("ceilings", ceils, flush=True)
    rows = []
    for op, dname, n in POINTS:
        dt = DT[dname]
        m0 = rows_for(n)
        step = int(os.environ.get("STEP", str(max(1, m0 // 64))))
        reads = op == "cross_entropy"
        ceil, ref = ceils["read" if reads else "copy"], "read probe" if reads else "copy_"
        ms = sorted(set(range(m0 // 2, 3 * m0 // 2 + 1, step)) | {m0})
        big = torch.randn(max(ms), n, device="cuda", dtype=dt)
        dst = torch.zeros(1, device="cuda") if reads else torch.empty_like(big)
        per_m = {}
        for m in ms:
            x, y = big[:m], (None if reads else dst[:m])
            fns = {"ours": make_ours(op, x, None)[0]}  # the table's shape
            if reads:  # the same bytes as fp32, as in the read ceiling
                fns[ref] = lambda x=x: read_probe(x.view(torch.float32), dst)
            else:
                fns[ref] = lambda x=x, y=y: y.copy_(x)
            fns["ours"]()
            times = H.time_rounds(fns, ROUNDS)
            nbytes = bytes_moved(op, m, n, dt.itemsize)
            for k, t in times.items():
                nb = m * n * dt.itemsize if k == ref and reads else nbytes  # the probe reads the logits only
                r = H.row(op, k, dname, m, n, nb, statistics.median(t), ceil, **H.rounds_fields(times, k))
                rows.append(r)
            per_m[m] = {k: r["frac_of_ceiling"] for k, r in zip(times, rows[-len(times):])}
        near = [m for m in ms if abs(m - m0) <= m0 // 4]
        best = max(near, key=lambda m: per_m[m]["ours"])
        worst = min(near, key=lambda m: per_m[m]["ours"])
        print(f"{op} {dname} {n}: M0={m0} ours {per_m[m0]['ours']:.4f} {ref} {per_m[m0][ref]:.4f}; "
              f"within M0 +-25%: best M={best} {per_m[best]['ours']:.4f} ({ref} {per_m[best][ref]:.4f}), "
              f"worst M={worst} {per_m[worst]['ours']:.4f}", flush=True)
        print(f"  M: ours/{ref} " + " ".join(f"{m}:{per_m[m]['ours']:.3f}/{per_m[m][ref]:.3f}" for m in ms),
              flush=True)
        del big, dst
        torch.cuda.empty_cache()
    print_fit(rows)
    name = os.environ.get("NAME", "wave_tail")
    meta = H.metadata({"suite": name, "copy_ceiling_tb_per_s": ceils["copy"], "read_ceiling_tb_per_s": ceils["read"],
                       "rounds": ROUNDS, "script": "benchmarks/runs/wave_tail.py"})
    print("wrote", H.write_suite(name, rows, meta, OUT))


if __name__ == "__main__":
    main()

"""Persistent staged blocks against one tile a block, beside QuACK. (H200)

Chapters 7-9 measured (benchmarks/runs/wave_tail.py) that our longest staged rows stream as fast
as ``copy_`` but pay 5.3-8.4 us a launch against its 2.1-2.6. Our reading: a staged block holds
its share of a row from its first load to its last store, so at the start every block loads and
none stores, and at the end the last blocks drain alone. ``RowConfig.persist`` launches at most
that many blocks (clusters) along M, each walking its row tiles with two staged tiles, the next
one's copy in flight while it reduces and writes the current one.

First, every candidate is checked against float64 over *all* rows at a few row counts (M below,
at and above the grid, odd), since a fault in the walk would show only in some rows; then the
table's shape, the persistent candidates and QuACK are timed in ROUNDS alternating rounds at
POINTS (op:dtype:N). M2OUT names a folder for persist.csv.

    bash benchmarks/h200.sh run benchmarks/runs/persist.py
"""
import os
import statistics
import sys
from dataclasses import replace

import torch

sys.path.insert(0, ".")
from benchmarks import harness as H  # noqa: E402
from benchmarks.bytes import bytes_moved  # noqa: E402
from benchmarks.peers import peer_impls  # noqa: E402
from benchmarks.run import rows_for  # noqa: E402
from benchmarks.runs.near_misses import make_ours  # noqa: E402
from benchmarks.sweep import cfg_for  # noqa: E402
from kernels.config import MAX_SMEM_BYTES, row_config  # noqa: E402

POINTS = "rmsnorm:bf16:65536,rmsnorm:bf16:131072,rmsnorm:bf16:262144,rmsnorm:fp32:262144," \
         "softmax:bf16:65536,softmax:bf16:131072,softmax:bf16:262144"
POINTS = [(op, dt, int(n)) for op, dt, n in (p.split(":") for p in os.environ.get("POINTS", POINTS).split(","))]
ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = os.environ.get("M2OUT", "/tmp")
DT = {"bf16": torch.bfloat16, "fp32": torch.float32}
SMS = 132


def candidates(op, n, bits):
    """The table's shape, then persistent staged shapes: 256 or 512 threads a row, clusters of
    4, 8 or 16, and grids of a full SM's worth of clusters (one or two blocks an SM) and a few
    fewer (a GPC may not fit a whole number of clusters)."""
    table = row_config(n, bits, keep_row=True, op=op)
    out = [table]
    for tpr in (256, 512):
        for cluster in (4, 8, 16):
            cfg = cfg_for(n, bits, tpr, tpr, cluster, keep=True, stage="smem")
            if not 4 <= cfg.elems_per_thread // cfg.vec <= 16 or cfg.cols_covered != n:
                continue
            for per_sm in (1, 2):
                full = SMS * per_sm // cluster
                for persist in sorted({full, full - full // 8, full // 2}):
                    c = replace(cfg, persist=persist)
                    if per_sm * (c.smem_bytes(bits) + 1024) <= 228 * 1024 and c.smem_bytes(bits) <= MAX_SMEM_BYTES:
                        out.append(c)
    return table, list(dict.fromkeys(out))


def full_error(op, x, extra, out):
    """Largest error over every row against float64, relative to the largest output."""
    from kernels.rmsnorm import rmsnorm_reference
    from kernels.softmax import softmax_reference
    worst = 0.0
    for i in range(0, x.shape[0], 256):
        ref = rmsnorm_reference(x[i:i + 256], extra) if op == "rmsnorm" else softmax_reference(x[i:i + 256])
        worst = max(worst, float((out[i:i + 256].double() - ref).abs().max() / ref.abs().max()))
    return worst


def main():
    ceil = H.copy_ceiling()
    print("copy ceiling", ceil, flush=True)
    rows = []
    for op, dname, n in POINTS:
        dt, bits = DT[dname], torch.finfo(DT[dname]).bits
        table, cands = candidates(op, n, bits)
        ok = []
        for cfg in cands:  # correctness over every row, several row counts
            try:
                worst = 0.0
                for m in sorted({1, 3, 2 * max(1, cfg.persist) + 1, 97}):
                    x = torch.randn(m, n, device="cuda", dtype=dt)
                    fn, extra = make_ours(op, x, cfg)
                    worst = max(worst, full_error(op, x, extra, fn()))
                assert worst < 2e-2, worst
                ok.append(cfg)
                print(f"ok {op} {dname} {n} err {worst:.1e} {cfg}", flush=True)
            except Exception as e:  # noqa: BLE001
                print("FAIL", op, dname, n, cfg, type(e).__name__, str(e)[:200], flush=True)
        m = rows_for(n)
        nbytes = bytes_moved(op, m, n, bits // 8)
        x = torch.randn(m, n, device="cuda", dtype=dt)
        fns, errs = {}, {}
        for cfg in ok:
            fn, extra = make_ours(op, x, cfg)
            errs[cfg] = full_error(op, x, extra, fn())
            fns[cfg] = fn
        quack = dict(peer_impls(op))["quack"](m, n, dt)
        quack()
        fns["quack"] = quack
        times = H.time_rounds(fns, ROUNDS)
        point = []
        for k in fns:
            r = H.row(op, "quack" if k == "quack" else "ours", dname, m, n, nbytes, statistics.median(times[k]), ceil,
                      variant="" if k == "quack" else str(k), picked=(k == table), **H.rounds_fields(times, k, "quack"),
                      max_err="" if k == "quack" else f"{errs[k]:.2e}")
            rows.append(r)
            point.append(r)
        point.sort(key=lambda r: r["us"])
        for r in point[:10][::-1]:
            print(f"{op} {dname} {n}: {r['frac_of_ceiling']:.4f} x{r['x_quack']:.4f} ahead {r['rounds_ahead_of_quack']}/"
                  f"{ROUNDS} {'*' if r['picked'] else ' '} {r['variant'] or 'QuACK'}", flush=True)
        del x, fns
        torch.cuda.empty_cache()
    meta = H.metadata({"suite": "persist", "copy_ceiling_tb_per_s": ceil, "rounds": ROUNDS,
                       "script": "benchmarks/runs/persist.py"})
    print("wrote", H.write_suite(os.environ.get("NAME", "persist"), rows, meta, OUT))


if __name__ == "__main__":
    main()

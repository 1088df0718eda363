"""Persistent staged clusters with one staged tile, against one tile a cluster, beside QuACK. (H200)

``persist.py`` (b39c6a5) walked each cluster's row tiles with two staged tiles, and every
candidate lost: two tiles leave room for one block an SM. Here ``RowConfig.persist`` keeps one
staged tile (its shared memory as the table's shape asks, so as many blocks an SM), and each
block does what the table's blocks do, tile after tile: the only differences are that G
clusters are launched and placed on their GPCs once rather than once a tile, and that each
walks the same number of tiles (give or take one). Grids G: for b = 1 to 4 blocks an SM (where
shared memory and threads allow b), G = 132 b / cluster and a few fewer (a GPC may not hold a
whole number of clusters), and the divisors of the row tiles between 3/4 of that and it (every
cluster then walks the same number).

First, every candidate is checked against float64 over *all* rows at a few row counts; then
the table's shape, the candidates and QuACK are timed in ROUNDS alternating rounds at POINTS
(op:dtype:N). M2OUT names a folder for persist1.csv.

    bash benchmarks/h200.sh run benchmarks/runs/persist1.py

Ran at fdb271b (book/data/persist1.csv, logs/persist1_and_mamba2_run_s_fdb271b.log): all 114
candidates matched float64, and every one lost to the table's shape, three rounds beside it and
QuACK. Best persistent grid against the table, % of the copy ceiling: RMSNorm bf16 65,536 89.5
(G = 66) against 96.3, 131,072 89.6 (50) against 96.1, 262,144 91.8 (29) against 95.2, fp32 262,144
92.2 (14) against 94.4; softmax bf16 65,536 82.0 (116) against 96.6, 131,072 80.8 (58) against
96.7, 262,144 83.4 (43) against 96.0; the worst grids 42.6-76.3. The next commit (64b8c0a)
removed ``RowConfig.persist`` again; check fdb271b out to run this.
"""
import os
import sys
from dataclasses import replace

sys.path.insert(0, ".")
from benchmarks.runs import persist  # noqa: E402
from benchmarks.run import rows_for  # noqa: E402
from kernels.config import MAX_SMEM_BYTES, row_config  # noqa: E402

SMS = persist.SMS


def candidates(op, n, bits):
    table = row_config(n, bits, keep_row=True, op=op)
    tiles = rows_for(n) // table.rows_per_block
    out = [table]
    for per_sm in (1, 2, 3, 4):
        c0 = replace(table, persist=1)
        if per_sm * (c0.smem_bytes(bits) + 1024) > 228 * 1024 or per_sm * table.threads_per_block > 2048 \
                or c0.smem_bytes(bits) > MAX_SMEM_BYTES:
            continue
        full = SMS * per_sm // table.cluster_n
        grids = {full, full - 1, full - 2, full - full // 8, full - full // 4}
        grids |= {d for d in range(max(1, (3 * full) // 4), full + 1) if tiles % d == 0}
        out += [replace(table, persist=g) for g in sorted(grids) if 1 <= g < tiles]
    return table, list(dict.fromkeys(out))


persist.candidates = candidates
if __name__ == "__main__":
    os.environ.setdefault("NAME", "persist1")
    persist.main()

"""Nineteenth GPU pass on the cuTile SSD: the chunk scan's diagonal tile out of its loop.

The chunk-scan kernel shipped until now walked the key tiles kt = 0..mt of its output tile mt in
one loop, masking every tile to the causal triangle, and then loaded the diagonal tile of x a
second time for the D x term. ``chunk_scan_kernel`` now walks kt < mt unmasked (every entry of
those tiles is causal) and handles the diagonal tile after the loop, with one load of x for both
its product and D x (at chunk 64 a block has only the diagonal tile: one x load instead of two).
GPU-free: 120 registers a thread against 64, no spills (both take the occupancy hint 4).

Ran at fdb271b as "before" (``CHUNK_SCAN`` = "chunk_scan_v0", the shipped kernel) against
"diagonal" (that commit's "chunk_scan") and TileGym tuned in six alternating rounds
(``mamba2_race.race``) on (1, 65536, 64) at chunk 64, then ours on (8, 4096, 64) at chunk 64 (the
three-kernel pass, not the one "auto" picks there) and (4, 16384, 8) at chunk 128. The diagonal
out of the loop lost everywhere: medians 1297.3 against 1550.8 us (TileGym 1302.4; the chunk scan
637.4 against 863.2 us), 846.0 against 960.8, 213.6 against 255.5.

Then (the commit after) the shipped kernel against "dfold" (``CHUNK_SCAN`` =
"chunk_scan_dfold"): the loop as shipped, D added to the diagonal of the diagonal tile's
(C B^T o decay o dt) before its product with x, so that x is loaded once (64 registers like the
shipped kernel; D then passes through bf16 with that diagonal). VARIANT=diagonal with
CHUNK_SCAN names as at fdb271b reproduces the first run. At c8f467c (VARIANT=dfold, log
logs/mamba2_run_s_c8f467c.log): dfold faster everywhere, medians of six rounds 1281.2 against
1319.4 us on (1, 65536, 64) chunk 64 (TileGym tuned 1328.7; the chunk scan 591.8 against 636.2
us), 208.1 against 212.2 and 243.7 against 249.6 on (4, 16384, 8) at chunks 128 and 64; but its
error against float64 grew (2.643e-3 against 2.389e-3 on (1, 65536, 64), 2.375e-3 against
1.984e-3 on (4, 16384, 8)). So then "dloop" beside it (the default VARIANT=dfold,dloop): the
shipped loop, D x added in fp32 from the x tile the loop loads at kt = mt (a scalar select a
tile), x loaded once and no rounding added. At fc535e5 (same log), medians of six rounds on
(1, 65536, 64) chunk 64: shipped 1317.5 us, dfold 1278.1, dloop 1285.8, TileGym tuned 1324.3
(dloop ahead of TileGym in all six; first calls 1285.9, 1244.9, 1241.5, 1267.3; chunk scan 616.6,
578.1, 580.8 us); (4, 16384, 8) chunk 128: 214.7, 217.6, 210.9; chunk 64: 249.8, 243.3, 245.4;
dloop's errors those of the shipped kernel. dloop became the chunk scan at 64b8c0a (the same
machine code), which removed the variants and ``ssd.CHUNK_SCAN``: check fc535e5 out to run this
again. M2OUT names a folder for the results CSV. All three runs: book/data/mamba2_run_s.csv.

    python3 benchmarks/runs/tilegym_precompile.py 3 64 15
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_s.py
"""
import csv, faulthandler, os, sys
faulthandler.dump_traceback_later(int(os.environ.get("WD", "500")), exit=True)
sys.path.insert(0, ".")
from benchmarks.runs.mamba2_race import FIELDS, race, say

OUT = os.environ.get("M2OUT", "/tmp")
rows = []
VARIANT = os.environ.get("VARIANT", "dfold,dloop")
VARIANTS = ({"before": dict(CHUNK_SCAN="chunk_scan_v0"), "diagonal": {}} if VARIANT == "diagonal"
            else {"shipped": {}, **{v: dict(CHUNK_SCAN=f"chunk_scan_{v}") for v in VARIANT.split(",")}})


def write():
    with open(os.path.join(OUT, f"results_s_{VARIANT.replace(',', '_')}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader(); w.writerows(rows)


race(rows, 3, 64, {**VARIANTS, **({} if os.environ.get("NO_TILEGYM") else {"tilegym": None})})
write()
for shape, chunk in ((2, 128), (2, 64)) if VARIANT != "diagonal" else ((0, 64), (2, 128)):
    race(rows, shape, chunk, VARIANTS)
    write()
say("done")

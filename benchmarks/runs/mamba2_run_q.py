"""Seventeenth GPU pass on the cuTile SSD: heads a chunk-scan block takes (``ssd.SCAN_HEADS``).

On (1, 65536, 64) at chunk 64 the three-kernel pass's chunk scan takes about 614-645 us of
1280-1340, and each of its 65,536 blocks (one head of one chunk) loads the chunk's C tile (16 KB)
and C B^T tile (16 KB fp32) beside the head's own state (16 KB) and x (8 KB): with one group, the
64 heads of a chunk load the same C and C B^T 64 times. ``chunk_scan_heads_kernel`` takes HPB
heads of a group a block and loads the C tile once for all of them (and at chunk 64, one tile a
chunk, the C B^T tile too). Here SCAN_HEADS 1
(the shipped kernel), 2, 4 and 8, and 4 with the kernel's occupancy hint at 2 instead of 4,
against TileGym tuned in six alternating rounds (``mamba2_race.race``) on (1, 65536, 64) at
chunk 64; then the same variants on (4, 16384, 8) at chunks 64 and 128. M2OUT names a folder for
results_q.csv.

    python3 benchmarks/runs/tilegym_precompile.py 3 64 15
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_q.py

Ran at d0f0bb4 (book/data/mamba2_run_q.csv). Medians of six rounds, (1, 65536, 64) chunk 64:
heads1 (shipped) 1307.2 us, heads2 1578.5, heads4 1541.7, heads8 1535.2, heads4_occ2 1475.0;
TileGym tuned 1278.7. The chunk scan itself (one call, torch.profiler): 616.4 us shipped against
851.0-894.2 with 2-8 heads a block and 763.3 at occupancy 2. (4, 16384, 8) chunk 64: 251.4 against
284.9-290.6 and 273.1; chunk 128: 212.6 against 261.4-264.6 and 229.9. Errors identical to the
shipped kernel's everywhere. Loading C and C B^T once for several heads did not pay: the blocks'
heads then run one after the other. The next commit removed ``ssd.SCAN_HEADS``; check d0f0bb4 out
to run this again.
"""
import csv, faulthandler, os, sys
faulthandler.dump_traceback_later(int(os.environ.get("WD", "500")), exit=True)
sys.path.insert(0, ".")
from benchmarks.runs.mamba2_race import FIELDS, race, say
from kernels.mamba2 import ssd

OUT = os.environ.get("M2OUT", "/tmp")
rows = []


def variants():
    v = {f"heads{k}": dict(SCAN_HEADS=k) for k in (1, 2, 4, 8)}
    occ2 = dict(ssd.HINTS)
    occ2["chunk_scan_heads", 16] = {"occupancy": 2}
    v["heads4_occ2"] = dict(SCAN_HEADS=4, HINTS=occ2, _BUILT={})
    return v


def write():
    with open(os.path.join(OUT, "results_q.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader(); w.writerows(rows)


only = os.environ.get("ONLY")
if only != "2":
    race(rows, 3, 64, {**variants(), **({} if os.environ.get("NO_TILEGYM") else {"tilegym": None})})
    write()
if only != "3":
    for chunk in (64, 128):
        race(rows, 2, chunk, variants())
        write()
say("done")

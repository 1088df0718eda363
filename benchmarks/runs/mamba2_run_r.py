"""Eighteenth GPU pass on the cuTile SSD: cuTile's two other kernel options.

Besides ``occupancy`` (set per kernel in ``ssd.HINTS``), ``ct.kernel`` takes ``num_worker_warps``
(the warps of the CUDA-core warp groups of a warp-specialized kernel; 4 by default here, since 4
compiles to the same machine code as none) and ``num_ctas`` (CTAs of a CGA, a cluster). Compiled
without a GPU (grouped by the hash of the cubin's code), on (1, 65536, 64) at chunk 64 8 worker
warps change the state kernel (128 -> 80 registers), the chunk scan (64 -> 56) and the prep
kernel (86 -> 56), and CGAs of 2 or 4 change all three; ``opt_level=2`` changes nothing. Here each
of those, one kernel at a time, against the shipped pass and TileGym tuned in six alternating
rounds (``mamba2_race.race``) on (1, 65536, 64) at chunk 64; then the same variants on
(4, 16384, 8) at chunks 128 and 64. M2OUT names a folder for results_r.csv.

    python3 benchmarks/runs/tilegym_precompile.py 3 64 15
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_r.py

Ran at b3e5886 with every option: the state kernel with 8 worker warps took 1153.8 us against
640.9 (one call); the state kernel in a CGA of 2 then failed to launch ("misaligned address"), which
ends the process, so CGAs were left there. Ran again at 221024a with OPTS=nww8
KERNELS=chunk_scan,prep (book/data/mamba2_run_r.csv), medians of six rounds: (1, 65536, 64) chunk
64 shipped 1382.4 us, chunk scan with 8 worker warps 1589.8 (its kernel 822.7 against 615.1), prep
with 8 1415.0, TileGym tuned 1429.2 (first calls 1280.7 and 1294.7; rounds noisy on both, ours
1316.2-1420.5, TileGym 1371.8-1818.7, ours faster in five of six); (4, 16384, 8) chunk 128 213.0,
233.8, 209.9 (prep with 8 worker warps faster in all six rounds, by 1.5%), chunk 64 251.1, 270.0,
250.5. Nothing shipped changed.
"""
import csv, faulthandler, os, sys
faulthandler.dump_traceback_later(int(os.environ.get("WD", "500")), exit=True)
sys.path.insert(0, ".")
from benchmarks.runs.mamba2_race import FIELDS, race, say
from kernels.mamba2 import ssd

OUT = os.environ.get("M2OUT", "/tmp")
rows = []
OPTIONS = {"nww8": {"num_worker_warps": 8}, "ctas2": {"num_ctas": 2}, "ctas4": {"num_ctas": 4}}
if os.environ.get("OPTS"):  # e.g. OPTS=nww8
    OPTIONS = {k: OPTIONS[k] for k in os.environ["OPTS"].split(",")}
KERNELS = tuple(os.environ.get("KERNELS", "state,chunk_scan,prep").split(","))


def variants(kernels=KERNELS):
    v = {"shipped": {}}
    for k in kernels:
        for name, opt in OPTIONS.items():
            hints = {key: dict(val) for key, val in ssd.HINTS.items()}
            hints[k, 16] = {**hints.get((k, 16), {}), **opt}
            v[f"{k}_{name}"] = dict(HINTS=hints, _BUILT={})
    return v


def write():
    with open(os.path.join(OUT, "results_r.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader(); w.writerows(rows)


race(rows, 3, 64, {**variants(), **({} if os.environ.get("NO_TILEGYM") else {"tilegym": None})})
write()
for chunk in (128, 64):
    race(rows, 2, chunk, variants())
    write()
say("done")

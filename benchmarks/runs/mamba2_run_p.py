"""Sixteenth GPU pass on the cuTile SSD: how the state kernel walks (``ssd.STATE_WALK``).

Runs L-O left ours and TileGym tuned level on (1, 65536, 64) at chunk 64, each about half in
its state kernel (ours 620-695 us of 1280-1320). That kernel's 256 blocks (a (64, 32) tile of one
head's state each) walk 1024 chunks in turn: about 620 ns a chunk, for 8 KB of x, 4 KB of B and
a 4 KB store. Here it walks three other ways, each with the shipped latency hints and with none:
WALK 1 takes the decayed state off the product's chain (h exp(last) + x^T (B w), the product
from zero); WALK 2 loads the next chunk's inputs before the chunk's product (prefetch, one chunk
ahead); WALK 3 both. Ours against TileGym tuned in six alternating rounds (``mamba2_race.race``),
then the same variants on (4, 16384, 8) at chunks 64 and 128. M2OUT names a folder for
results_p.csv.

    python3 benchmarks/runs/tilegym_precompile.py 3 64 15
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_p.py

Ran at 82a9b5e (book/data/mamba2_run_p.csv). Medians of six rounds, (1, 65536, 64) chunk 64:
WALK 0 1354.1 us, 1 1338.8, 2 2029.2, 3 2021.7; without hints 0 1417.5, 2 2007.4, 3 2051.9;
TileGym tuned 1320.3. (4, 16384, 8) chunk 64: 250.1, 246.9, 409.9, 417.2; chunk 128: 212.1,
214.0, 354.5, 361.7. On (1, 65536, 64) WALK 0's rounds ran from 1316.0 to 1400.5 us and WALK 1's
from 1316.4 to 1423.5, so WALK 1's 1% there is inside the noise; on (4, 16384, 8) it was 1.3%
faster at chunk 64 and 0.9% slower at chunk 128 (that shape's best chunk), every round apart;
WALK 2 and 3 (the prefetch) were slower everywhere and wrong on most points (rel_err up to
1.5e-1), a fault not chased. The next commit removed ``ssd.STATE_WALK``; check 82a9b5e out to
run this again.
"""
import csv, faulthandler, os, sys
faulthandler.dump_traceback_later(int(os.environ.get("WD", "480")), exit=True)
sys.path.insert(0, ".")
from benchmarks.runs.mamba2_race import FIELDS, race, say
from kernels.mamba2 import ssd

OUT = os.environ.get("M2OUT", "/tmp")
rows = []
NONE = {k: (0, 0, 0, 0) for k in ssd.STATE_LATENCY}


def variants():
    v = {f"walk{w}": dict(STATE_WALK=w) for w in (0, 1, 2, 3)}
    v.update({f"walk{w}_nohint": dict(STATE_WALK=w, STATE_LATENCY=NONE) for w in (0, 2, 3)})
    return v


def write():
    with open(os.path.join(OUT, "results_p.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader(); w.writerows(rows)


race(rows, 3, 64, {**variants(), "tilegym": None})
write()
for chunk in (64, 128):
    race(rows, 2, chunk, variants())
    write()
say("done")

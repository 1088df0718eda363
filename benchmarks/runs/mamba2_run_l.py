"""Twelfth GPU pass on the cuTile SSD: is ours faster than TileGym tuned on (1, 65536, 64) at
chunk 64, or is the suite's 1281.6 against 1295.2 us (45a2884) within their run-to-run spread
(TileGym took 1269.9 us in an earlier run)? Both on TileGym's feature set, TileGym tuned once,
then ROUNDS rounds that time ours and TileGym one after the other (the order alternating), each
a median of REPS calls. Then (VARIANTS=1, the default) the three-kernel pass with (64, 64) state
tiles, which read x twice a chunk instead of four times, under the hints that won for (64, 32)
(run J) and their neighbours, at occupancy 1 and 2; run F timed them without hints only. One
line a result; M2OUT names a folder for results_l.csv.

Compile TileGym's configurations first, or its tuning alone takes minutes:

    python3 benchmarks/runs/tilegym_precompile.py 3 64
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_l.py
"""
import csv, faulthandler, os, statistics, sys, time
faulthandler.dump_traceback_later(int(os.environ.get("WD", "400")), exit=True)
import torch
sys.path.insert(0, ".")
from benchmarks import harness as H
from benchmarks.mamba2 import SHAPES, as_tilegym_features, kernel_times, make_call, make_inputs, measure, reference
from benchmarks.runs.variants import state_variant

OUT = os.environ.get("M2OUT", "/tmp")
SHAPE_INDEX, CHUNK, ROUNDS, REPS = 3, 64, int(os.environ.get("ROUNDS", "6")), 26
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s]", *a, flush=True)


args, kw = as_tilegym_features(*make_inputs(*SHAPES[SHAPE_INDEX], torch.bfloat16, seed=SHAPE_INDEX))
ref = reference(args, kw)
os.environ["TILEGYM_DISABLE_AUTOTUNE"] = "0"
calls = {}
for impl in ("ours", "tilegym"):
    first = measure(impl, args, kw, CHUNK, ref, REPS)  # compiles / tunes, checks against float64
    say(impl, *(f"{k}={v}" for k, v in first.items()))
    rows.append(dict(round="first", impl=impl, **first))
    calls[impl] = make_call(impl, args, kw, CHUNK)
for r in range(ROUNDS):
    for impl in (("ours", "tilegym") if r % 2 == 0 else ("tilegym", "ours")):
        us = round(H.time_ms(calls[impl], warmup=3, rep=REPS) * 1e3, 1)
        rows.append(dict(round=r, impl=impl, us=us, reps=REPS))
        say(f"round {r} {impl} {us} us")
for impl in ("ours", "tilegym"):
    rows.append(dict(round="kernels", impl=impl, kernels=kernel_times(calls[impl])))
    say(impl, rows[-1]["kernels"])
med = {impl: statistics.median(row["us"] for row in rows if row["impl"] == impl and isinstance(row["round"], int))
       for impl in ("ours", "tilegym")}
say(f"medians over {ROUNDS} rounds: ours {med['ours']:.1f} us, TileGym {med['tilegym']:.1f} us, "
    f"TileGym / ours {med['tilegym'] / med['ours']:.3f}")
if os.environ.get("VARIANTS", "1") == "1":
    for occupancy in (2, 1):
        for hints in ((6, 4, 4, 2), (4, 4, 4, 2), (6, 2, 2, 2), (2, 4, 4, 2)):
            with state_variant((64, 64), occupancy, hints):
                row = measure("ours_fused", args, kw, CHUNK, ref, REPS)
            rows.append(dict(round=f"variant (64, 64) occupancy {occupancy} hints {hints}", impl="ours_fused", **row))
            say(rows[-1]["round"], *(f"{k}={v}" for k, v in row.items()))
            torch.cuda.empty_cache()
fields = ["round", "impl", "us", "reps", "first_call_s", "rel_err", "rel_err_state", "kernels"]
with open(os.path.join(OUT, "results_l.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader(); w.writerows(rows)
say("done")

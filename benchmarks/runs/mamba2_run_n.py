"""Fourteenth GPU pass on the cuTile SSD: the chunk scan beside the state kernel's walk.

In the three-kernel pass the state kernel walks each sequence chunk by chunk with two blocks an
SM (256 blocks at (1, 65536, 64)), latency-bound: in run M it took 661.8 us and moved about
1.6 GB (2.4 TB/s). The chunk scan after it is bandwidth-bound (633.4 us for about 2.1 GB). With
``ssd.FUSED["ranges"] = R`` the walk is R launches of consecutive chunks on a stream of higher
priority, and the chunk scan of each range is launched on the caller's stream as soon as the
walk has passed it, so that it fills the SMs the walk leaves idle. Here R = 1 (shipped), 2, 4, 8
and 16, and TileGym tuned, on TileGym's feature set: (1, 65536, 64) at chunk 64, then
(4, 16384, 8) at chunks 128 and 64 (ours only), ROUNDS rounds in alternating order, each a
median of REPS calls, every output against float64, the kernels of one call by torch.profiler.
One line a result; M2OUT names a folder for results_n.csv.

    python3 benchmarks/runs/tilegym_precompile.py 3 64 15
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_n.py

Ran at f75cf5c (book/data/mamba2_run_n.csv); the commit after its results removed
``ssd.FUSED["ranges"]`` (it did not pay), so check f75cf5c out to run it again.
"""
import csv, faulthandler, os, statistics, sys, time
faulthandler.dump_traceback_later(int(os.environ.get("WD", "480")), exit=True)
import torch
sys.path.insert(0, ".")
from benchmarks import harness as H
from benchmarks.mamba2 import SHAPES, as_tilegym_features, kernel_times, make_call, make_inputs, measure, reference
from kernels.mamba2 import ssd

OUT = os.environ.get("M2OUT", "/tmp")
ROUNDS, REPS = int(os.environ.get("ROUNDS", "5")), 26
RANGES = [1, 2, 4, 8, 16]
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s]", *a, flush=True)


class Ranges:
    """A zero-argument call of ours (the three-kernel pass) with the walk cut into r launches."""
    def __init__(self, args, kw, chunk, r):
        self.r, self.fn = r, make_call("ours_fused", args, kw, chunk)

    def __call__(self):
        old = ssd.FUSED["ranges"]
        ssd.FUSED["ranges"] = self.r
        try:
            return self.fn()
        finally:
            ssd.FUSED["ranges"] = old


def race(shape_index, chunk, tilegym):
    args, kw = as_tilegym_features(*make_inputs(*SHAPES[shape_index], torch.bfloat16, seed=shape_index))
    ref = reference(args, kw)
    calls = {}
    for r in RANGES:
        ssd.FUSED["ranges"] = r
        first = measure("ours_fused", args, kw, chunk, ref, REPS)  # compiles, checks against float64
        ssd.FUSED["ranges"] = 1
        calls[f"ranges={r}"] = Ranges(args, kw, chunk, r)
        rows.append(dict(shape=shape_index, chunk=chunk, impl=f"ranges={r}", round="first", **first))
        say(shape_index, chunk, f"ranges={r}", *(f"{k}={v}" for k, v in first.items()))
    if tilegym:
        os.environ["TILEGYM_DISABLE_AUTOTUNE"] = "0"
        first = measure("tilegym", args, kw, chunk, ref, REPS)
        calls["tilegym"] = make_call("tilegym", args, kw, chunk)
        rows.append(dict(shape=shape_index, chunk=chunk, impl="tilegym", round="first", **first))
        say(shape_index, chunk, "tilegym", *(f"{k}={v}" for k, v in first.items()))
    order = list(calls)
    for rd in range(ROUNDS):
        for impl in (order if rd % 2 == 0 else order[::-1]):
            us = round(H.time_ms(calls[impl], warmup=3, rep=REPS) * 1e3, 1)
            rows.append(dict(shape=shape_index, chunk=chunk, impl=impl, round=rd, us=us, reps=REPS))
    med = {impl: statistics.median(x["us"] for x in rows if x["impl"] == impl and x["shape"] == shape_index
                                   and x["chunk"] == chunk and isinstance(x["round"], int)) for impl in order}
    say(f"shape {shape_index} chunk {chunk} medians over {ROUNDS} rounds:",
        ", ".join(f"{k} {v:.1f} us" for k, v in med.items()))
    del calls
    torch.cuda.empty_cache()


race(3, 64, True)
for chunk in (128, 64):
    race(2, chunk, False)
fields = ["shape", "chunk", "round", "impl", "us", "reps", "first_call_s", "rel_err", "rel_err_state", "kernels"]
with open(os.path.join(OUT, "results_n.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader(); w.writerows(rows)
say("done")

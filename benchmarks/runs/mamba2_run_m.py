"""Thirteenth GPU pass on the cuTile SSD: C B^T in the chunk scan instead of the prep launch.

Run L (book/data/mamba2_run_l.csv) left TileGym tuned 1-1.5% ahead of ours on (1, 65536, 64)
at chunk 64 (medians 1323.8 against 1344.0 us), kernel by kernel: our prep launch 33.3 us
against TileGym's cumsum 19.2, our state kernel 678.7 against 664.5, our chunk scan 644.5
against TileGym's output kernel 637.6. TileGym's output kernel computes C B^T itself; ours reads
it from the prep launch, which computes it (stage 4) beside the step sizes (stage 1). Here the
three-kernel pass runs both ways (``ssd.FUSED["pre_cb"]``, True as shipped) and TileGym tuned,
on TileGym's feature set, ROUNDS rounds in alternating order, each a median of REPS calls, with
the kernels of one call by torch.profiler and every output against float64. Then the same for
ours on (4, 16384, 8) at chunks 64 and 128, which also takes the three-kernel pass (no TileGym:
its tuning there takes minutes). One line a result; M2OUT names a folder for results_m.csv.

    python3 benchmarks/runs/tilegym_precompile.py 3 64 15
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_m.py

Ran at 2a1460c (book/data/mamba2_run_m.csv); 5e6a8fb removed ``ssd.FUSED`` (C B^T in the chunk scan
lost at (1, 65536, 64)), so check that commit out to run it again.
"""
import csv, faulthandler, os, statistics, sys, time
faulthandler.dump_traceback_later(int(os.environ.get("WD", "480")), exit=True)
import torch
sys.path.insert(0, ".")
from benchmarks import harness as H
from benchmarks.mamba2 import SHAPES, as_tilegym_features, kernel_times, make_call, make_inputs, measure, reference
from kernels.mamba2 import ssd

OUT = os.environ.get("M2OUT", "/tmp")
ROUNDS, REPS = int(os.environ.get("ROUNDS", "6")), 26
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s]", *a, flush=True)


class Variant:
    """A zero-argument call of ours with C B^T in the prep launch (pre_cb) or in the chunk scan."""
    def __init__(self, args, kw, chunk, pre_cb):
        self.pre_cb, self.fn = pre_cb, make_call("ours_fused", args, kw, chunk)

    def __call__(self):
        old = ssd.FUSED["pre_cb"]
        ssd.FUSED["pre_cb"] = self.pre_cb
        try:
            return self.fn()
        finally:
            ssd.FUSED["pre_cb"] = old


def race(shape_index, chunk, impls, tilegym):
    args, kw = as_tilegym_features(*make_inputs(*SHAPES[shape_index], torch.bfloat16, seed=shape_index))
    ref = reference(args, kw)
    calls = {}
    for impl in impls:
        if impl == "tilegym":
            os.environ["TILEGYM_DISABLE_AUTOTUNE"] = "0"
            first = measure("tilegym", args, kw, chunk, ref, REPS)
            calls[impl] = make_call("tilegym", args, kw, chunk)
        else:
            pre_cb = impl == "ours_pre_cb"
            ssd.FUSED["pre_cb"] = pre_cb
            first = measure("ours_fused", args, kw, chunk, ref, REPS)  # compiles, checks against float64
            ssd.FUSED["pre_cb"] = True
            calls[impl] = Variant(args, kw, chunk, pre_cb)
        base = dict(shape=shape_index, chunk=chunk, impl=impl)
        rows.append(dict(base, round="first", **first))
        say(shape_index, chunk, impl, *(f"{k}={v}" for k, v in first.items()))
    for r in range(ROUNDS):
        for impl in (impls if r % 2 == 0 else impls[::-1]):
            us = round(H.time_ms(calls[impl], warmup=3, rep=REPS) * 1e3, 1)
            rows.append(dict(shape=shape_index, chunk=chunk, impl=impl, round=r, us=us, reps=REPS))
            say(f"{shape_index} {chunk} round {r} {impl} {us} us")
    med = {}
    for impl in impls:
        rows.append(dict(shape=shape_index, chunk=chunk, impl=impl, round="kernels", kernels=kernel_times(calls[impl])))
        say(impl, rows[-1]["kernels"])
        med[impl] = statistics.median(x["us"] for x in rows if x["impl"] == impl and x["shape"] == shape_index
                                      and x["chunk"] == chunk and isinstance(x["round"], int))
    say(f"shape {shape_index} chunk {chunk} medians over {ROUNDS} rounds:",
        ", ".join(f"{k} {v:.1f} us" for k, v in med.items()))
    del calls
    torch.cuda.empty_cache()


race(3, 64, ["ours_pre_cb", "ours_inline_cb", "tilegym"], True)
for chunk in (128, 64):
    race(2, chunk, ["ours_pre_cb", "ours_inline_cb"], False)
fields = ["shape", "chunk", "round", "impl", "us", "reps", "first_call_s", "rel_err", "rel_err_state", "kernels"]
with open(os.path.join(OUT, "results_m.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader(); w.writerows(rows)
say("done")

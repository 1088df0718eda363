"""Fifteenth GPU pass on the cuTile SSD: the chunk scan carries the state over k chunks.

Runs L-N left ours and TileGym tuned level on (1, 65536, 64) at chunk 64 (within about 1.5%,
either ahead). Both three-kernel passes move the state entering every chunk through memory:
1.07 GB written by the state kernel and read back by the chunk scan, more than x, B, C and out
together. Here the state kernel stores the state entering every k-th chunk only and a chunk-scan
block takes k chunks in turn, carrying the state (fp32) over them with stage 2's tile function
(``ssd.CARRY_CHUNKS``; k = 1 is the pass as shipped). Ours at k in KS and TileGym tuned, on
TileGym's feature set, ROUNDS rounds in alternating order, each a median of REPS calls, the
kernels of one call by torch.profiler and every output against float64; then ours on
(4, 16384, 8), which also takes the three-kernel pass, at chunk 64. One line a result; M2OUT
names a folder for results_o.csv.

    python3 benchmarks/runs/tilegym_precompile.py 3 64 15
    bash benchmarks/h200.sh run benchmarks/runs/mamba2_run_o.py

Ran at f4efe22 (book/data/mamba2_run_o.csv). Medians of six rounds on (1, 65536, 64): k = 1
1290.2 us, k = 2 2039.2, k = 4 2079.7, k = 8 2150.2, TileGym tuned 1318.5; on (4, 16384, 8):
251.8, 334.9, 345.6, 347.9. The state kernel got no faster (637 -> 620-654 us) and the chunk
scan more than twice as slow (614 -> 1334-1459 us): carrying the fp32 state doubles its
registers (64 -> 128 a thread, by kernels.cubin.kernel_resources on ssd.export_cubins at f4efe22), so half the blocks fit an SM, and each block's chunks run in
turn. The next commit removed ``ssd.CARRY_CHUNKS``; check f4efe22 out to run this again.
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
KS = [int(k) for k in os.environ.get("KS", "1,2,4,8").split(",")]
t0 = time.time()
rows = []


def say(*a):
    print(f"[{time.time() - t0:5.0f}s]", *a, flush=True)


class Carry:
    """A zero-argument call of our three-kernel pass with the chunk scan carrying k chunks."""
    def __init__(self, args, kw, chunk, k):
        self.k, self.chunk, self.fn = k, chunk, make_call("ours_fused", args, kw, chunk)

    def __call__(self):
        old = ssd.CARRY_CHUNKS
        ssd.CARRY_CHUNKS = {(16, self.chunk): self.k}
        try:
            return self.fn()
        finally:
            ssd.CARRY_CHUNKS = old


def race(shape_index, chunk, impls):
    args, kw = as_tilegym_features(*make_inputs(*SHAPES[shape_index], torch.bfloat16, seed=shape_index))
    ref = reference(args, kw)
    calls = {}
    for impl in impls:
        if impl == "tilegym":
            os.environ["TILEGYM_DISABLE_AUTOTUNE"] = "0"
            first = measure("tilegym", args, kw, chunk, ref, REPS)
            calls[impl] = make_call("tilegym", args, kw, chunk)
        else:
            k = int(impl.split("_k")[1])
            ssd.CARRY_CHUNKS = {(16, chunk): k}
            first = measure("ours_fused", args, kw, chunk, ref, REPS)  # compiles, checks against float64
            ssd.CARRY_CHUNKS = {}
            calls[impl] = Carry(args, kw, chunk, k)
        rows.append(dict(shape=shape_index, chunk=chunk, impl=impl, round="first", **first))
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


def write():
    fields = ["shape", "chunk", "round", "impl", "us", "reps", "first_call_s", "rel_err", "rel_err_state", "kernels"]
    with open(os.path.join(OUT, "results_o.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader(); w.writerows(rows)


race(3, 64, [f"ours_k{k}" for k in KS] + (["tilegym"] if os.environ.get("TILEGYM", "1") == "1" else []))
write()
race(2, 64, [f"ours_k{k}" for k in KS])
write()
say("done")

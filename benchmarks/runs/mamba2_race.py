"""Race variants of our SSD pass (each a set of ``kernels.mamba2.ssd`` module attributes) and
TileGym tuned on one suite shape and chunk, on TileGym's feature set: every variant compiles and
is checked against float64 once, then ROUNDS rounds in alternating order, each a median of REPS
calls, then the kernels of one call by torch.profiler. The run scripts of benchmarks/runs call
``race``; it appends one dict a result to ``rows`` and prints one line a result."""
import os, statistics, time
from contextlib import contextmanager

import torch

from benchmarks import harness as H
from benchmarks.mamba2 import SHAPES, as_tilegym_features, kernel_times, make_call, make_inputs, measure, reference
from kernels.mamba2 import ssd

T0 = time.time()
FIELDS = ["shape", "chunk", "round", "impl", "us", "reps", "first_call_s", "rel_err", "rel_err_state", "kernels"]


def say(*a):
    print(f"[{time.time() - T0:5.0f}s]", *a, flush=True)


@contextmanager
def patched(attrs):
    """``ssd``'s module attributes set to ``attrs`` inside the block, restored after it."""
    old = {k: getattr(ssd, k) for k in attrs}
    for k, v in attrs.items():
        setattr(ssd, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(ssd, k, v)


class Variant:
    """A zero-argument call of our pass (``impl``) with these ``ssd`` attributes in place."""
    def __init__(self, attrs, args, kw, chunk, impl="ours_fused"):
        self.attrs, self.fn = attrs, make_call(impl, args, kw, chunk)

    def __call__(self):
        with patched(self.attrs):
            return self.fn()


def race(rows, shape_index, chunk, variants, rounds=6, reps=26, impl="ours_fused"):
    """variants: {name: {ssd attribute: value}}, or {"tilegym": None} for TileGym tuned."""
    args, kw = as_tilegym_features(*make_inputs(*SHAPES[shape_index], torch.bfloat16, seed=shape_index))
    ref = reference(args, kw)
    calls = {}
    for name, attrs in variants.items():
        if attrs is None:
            os.environ["TILEGYM_DISABLE_AUTOTUNE"] = "0"
            first = measure("tilegym", args, kw, chunk, ref, reps)
            calls[name] = make_call("tilegym", args, kw, chunk)
        else:
            calls[name] = Variant(attrs, args, kw, chunk, impl)
            with patched(attrs):
                first = measure(impl, args, kw, chunk, ref, reps)  # compiles, checks against float64
        rows.append(dict(shape=shape_index, chunk=chunk, impl=name, round="first", **first))
        say(shape_index, chunk, name, *(f"{k}={v}" for k, v in first.items()))
    names = list(variants)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            us = round(H.time_ms(calls[name], warmup=3, rep=reps) * 1e3, 1)
            rows.append(dict(shape=shape_index, chunk=chunk, impl=name, round=r, us=us, reps=reps))
            say(f"{shape_index} {chunk} round {r} {name} {us} us")
    med = {}
    for name in names:
        rows.append(dict(shape=shape_index, chunk=chunk, impl=name, round="kernels", kernels=kernel_times(calls[name])))
        say(name, rows[-1]["kernels"])
        med[name] = statistics.median(x["us"] for x in rows if x["impl"] == name and x["shape"] == shape_index
                                      and x["chunk"] == chunk and isinstance(x["round"], int))
    say(f"shape {shape_index} chunk {chunk} medians over {rounds} rounds:",
        ", ".join(f"{k} {v:.1f} us" for k, v in med.items()))
    del calls
    torch.cuda.empty_cache()
    return med

"""What a training step runs on the GPU, kernel by kernel: each implementation of an op's
forward plus backward through autograd (as ``benchmarks.backward`` times it), under
``torch.profiler``, listing every CUDA kernel, memset and copy it launched with its count and
total time. Where a step takes longer than its forward and backward apart, the extra is in
this list (a copy, a fill, a kernel run twice).

    python -m benchmarks.profile_step --op cross_entropy --ns 4096,65536 --out DIR

Writes ``profile_step.csv`` (op, impl, dtype, M, N, pass, kernel, calls, us_per_step; the host
calls that wait for the GPU or allocate device memory as ``host: <name>`` rows; the step's time
between CUDA events and on the host as ``step: ...`` rows) and its
``.json`` metadata into --out, and prints each step's table.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
from collections import defaultdict

import torch

from . import harness as H
from .backward import OPS, _inputs, calls, implementations

STEPS = 10
STEP = "profile_step.step"  # the annotation around each step


#: CUDA runtime and driver calls that make the host wait for the GPU or that (de)allocate device
#: memory: one of these inside a training step stalls the stream it is in.
STALLS = ("Synchronize", "cudaMemcpy", "cuMemcpy", "cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree",
          "cudaHostAlloc", "cuMemHostAlloc")


def profile_step(fn, steps: int = STEPS):
    """(kernels, stalls) over ``steps`` calls of ``fn`` after a warm-up call: {GPU kernel, memset
    or copy: (launches a step, GPU microseconds a step)} and {host call of STALLS: calls a step}
    (an asynchronous ``cudaMemcpyAsync`` counts too: its name starts like the blocking one)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            with record_function(STEP):
                fn()
        torch.cuda.synchronize()
    events = list(prof.events())
    # host calls count only inside a step (the profiler's own and the closing synchronize do not)
    spans = [(e.time_range.start, e.time_range.end) for e in events
             if e.name == STEP and e.device_type != torch.autograd.DeviceType.CUDA]
    kernels, stalls = defaultdict(lambda: [0, 0.0]), defaultdict(int)
    for e in events:
        if e.name == STEP:  # the step's own annotation (on the host, and its GPU range)
            continue
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name][0] += 1
            kernels[e.name][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        elif any(k in e.name for k in STALLS) and any(a <= e.time_range.start <= b for a, b in spans):
            stalls[e.name] += 1
    return ({k: (c / steps, us / steps) for k, (c, us) in kernels.items()},
            {k: c / steps for k, c in stalls.items()})


def host_us(fn, calls: int = 30) -> float:
    """Microseconds the host spends in one call of ``fn`` (the mean of ``calls`` calls issued back
    to back, timed before the closing synchronize): where it passes the GPU's time of a step,
    the GPU waits for the host."""
    import time
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def host_profile(fn, calls: int = 30, top: int = 25) -> str:
    """cProfile's table of ``calls`` calls of ``fn`` (the host's time, by cumulative time), the
    backward run on the calling thread so that the profile sees it."""
    import cProfile
    import io
    import pstats
    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    with torch.autograd.set_multithreading_enabled(False):
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def kernel_table(fn, steps: int = STEPS):
    """{GPU kernel, memset or copy: (launches a step, GPU microseconds a step)} of ``fn``."""
    return profile_step(fn, steps)[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_step")
    p.add_argument("--op", default="cross_entropy", choices=OPS)
    p.add_argument("--ns", default="4096,65536")
    p.add_argument("--dtypes", default="bf16")
    p.add_argument("--impls", default="ours,quack,torch", help="of ours, torch, torch.compile, liger, quack")
    p.add_argument("--passes", default="fwd,bwd,fwd+bwd")
    p.add_argument("--out", default=".")
    p.add_argument("--host-profile", action="store_true", help="print cProfile's table of our step on the host")
    a = p.parse_args(argv)
    dts = {"bf16": torch.bfloat16, "fp32": torch.float32}
    rows = []
    for name in a.dtypes.split(","):
        for n in map(int, a.ns.split(",")):
            m = max(1, (1 << 28) // n)
            x, w, b, t = _inputs(a.op, m, n, dts[name])
            for impl, make in implementations(a.op):
                if impl not in a.impls.split(","):
                    continue
                try:
                    passes = calls(make(), a.op, x, w, b, t)
                except Exception as e:  # a peer that does not run here
                    print(f"{impl}: {type(e).__name__}: {str(e)[:100]}", flush=True)
                    continue
                for pass_ in a.passes.split(","):
                    table, stalls = profile_step(passes[pass_])
                    total = sum(us for _, us in table.values())
                    wall = H.time_ms(passes[pass_]) * 1e3  # as the suites time a step: CUDA events around it
                    host = host_us(passes[pass_])
                    with torch.autograd.set_multithreading_enabled(False):  # the backward on this thread
                        host_here = host_us(passes[pass_])
                    print(f"\n{a.op} {impl} {name} M={m} N={n} {pass_}: {total:.1f} us of GPU time a step, "
                          f"{wall:.1f} us between events around it, {host:.1f} us on the host "
                          f"({host_here:.1f} us with the backward on the calling thread)", flush=True)
                    for what, us in (("step: between CUDA events", wall), ("step: host", host),
                                     ("step: host, backward on the calling thread", host_here)):
                        rows.append({"op": a.op, "impl": impl, "dtype": name, "M": m, "N": n, "pass": pass_,
                                     "kernel": what, "calls": 1, "us_per_step": round(us, 2)})
                    if a.host_profile and impl == "ours":
                        print(host_profile(passes[pass_]), flush=True)
                    for k, (c, us) in sorted(table.items(), key=lambda kv: -kv[1][1]):
                        print(f"  {us:9.1f} us  {c:4.1f} x  {k[:110]}")
                        rows.append({"op": a.op, "impl": impl, "dtype": name, "M": m, "N": n, "pass": pass_,
                                     "kernel": k, "calls": round(c, 2), "us_per_step": round(us, 2)})
                    for k, c in stalls.items():  # host calls that wait for the GPU or allocate
                        print(f"  host: {c:4.1f} x  {k}")
                        rows.append({"op": a.op, "impl": impl, "dtype": name, "M": m, "N": n, "pass": pass_,
                                     "kernel": f"host: {k}", "calls": round(c, 2), "us_per_step": ""})
            del x, w, b, t
            torch.cuda.empty_cache()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "profile_step.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["op"])
        wr.writeheader()
        wr.writerows(rows)
    with open(os.path.join(a.out, "profile_step.json"), "w") as f:
        json.dump(H.metadata({"steps": STEPS, "argv": argv or []}), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

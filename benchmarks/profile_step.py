"""What a training step runs on the GPU, kernel by kernel: each implementation of an op's
forward plus backward through autograd (as ``benchmarks.backward`` times it), under
``torch.profiler``, listing every CUDA kernel, memset and copy it launched with its count and
total time. Where a step takes longer than its forward and backward apart, the extra is in
this list (a copy, a fill, a kernel run twice).

    python -m benchmarks.profile_step --op cross_entropy --ns 4096,65536 --out DIR

Writes ``profile_step.csv`` (op, impl, dtype, M, N, pass, kernel, calls, us_per_step; the host
calls that wait for the GPU or allocate device memory as ``host: <name>`` rows) and its
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


#: CUDA runtime and driver calls that make the host wait for the GPU or that (de)allocate device
#: memory: one of these inside a training step stalls the stream it is in.
STALLS = ("Synchronize", "cudaMemcpy", "cuMemcpy", "cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree",
          "cudaHostAlloc", "cuMemHostAlloc")


def profile_step(fn, steps: int = STEPS):
    """(kernels, stalls) over ``steps`` calls of ``fn`` after a warm-up call: {GPU kernel, memset
    or copy: (launches a step, GPU microseconds a step)} and {host call of STALLS: calls a step}
    (an asynchronous ``cudaMemcpyAsync`` counts too: its name starts like the blocking one)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    kernels, stalls = defaultdict(lambda: [0, 0.0]), defaultdict(int)
    events = list(prof.events())
    last_sync = max((i for i, e in enumerate(events) if "DeviceSynchronize" in e.name), default=len(events))
    for i, e in enumerate(events):
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name][0] += 1
            kernels[e.name][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        elif any(k in e.name for k in STALLS) and i != last_sync:  # (the closing synchronize is ours)
            stalls[e.name] += 1
    return ({k: (c / steps, us / steps) for k, (c, us) in kernels.items()},
            {k: c / steps for k, c in stalls.items()})


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
                    print(f"\n{a.op} {impl} {name} M={m} N={n} {pass_}: {total:.1f} us of GPU time a step", flush=True)
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

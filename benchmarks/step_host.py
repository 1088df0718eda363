"""The host's cost of a training call, op by op (``book/data/step_host.csv``): wall time per call
over 1,000 calls back to back, then a synchronize, at 8 x 4096 bf16 (the GPU's work is small,
so what shows is the host's): the forward of inputs that require grad, the forward under
``torch.no_grad()``, the backward of one kept graph, and both; ours against torch eager and
QuACK (whose ops are autograd Functions written in Python, as ours are), the implementations
and passes of the training-step suite (``benchmarks.backward``). The median of ``--rounds``
rounds (default 5), each round timing every implementation in turn, so that a slow spell of
the host falls on all of them (a single run moved one op's time by half from run to run).

    python -m benchmarks.step_host [--out DIR] [--rounds R] [--profile]

With ``--profile``, cProfile's table of each op's fwd+bwd step of ours is printed too
(``benchmarks.profile_step.host_profile``).
"""
import argparse
import functools
import statistics
import time

import torch

from . import harness as H
from .backward import OPS, _inputs, calls, implementations
from .profile_step import host_profile

IMPLS = ("ours", "torch", "quack")


def per_call(fn, calls: int = 1000) -> float:
    """Microseconds a call of ``fn``: ``calls`` calls back to back, then a synchronize."""
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--profile", action="store_true", help="also print cProfile's table of each op's fwd+bwd step of ours")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    m, n = 8, 4096
    timed = []  # (op, impl, call, fn)
    for op in OPS:
        x, w, b, t = _inputs(op, m, n, torch.bfloat16)
        for impl, make in implementations(op):
            if impl not in IMPLS:
                continue
            try:
                f = make()
                passes = calls(f, op, x, w, b, t)
            except NotImplementedError:  # (QuACK has no autograd LayerNorm)
                continue
            for name, fn in (("fwd(grad)", functools.partial(f, x, w, b, t)), ("fwd(no grad)", passes["fwd"]), ("bwd", passes["bwd"]),
                             ("fwd+bwd", passes["fwd+bwd"])):
                timed.append((op, impl, name, fn))
            if a.profile and impl == "ours":
                print(f"===== {op}: cProfile of ours' fwd+bwd step\n{host_profile(passes['fwd+bwd'])}", flush=True)
    rounds = [[per_call(fn) for *_, fn in timed] for _ in range(a.rounds)]
    rows = []
    for i, (op, impl, name, _) in enumerate(timed):
        us = [r[i] for r in rounds]
        rows.append({"op": op, "impl": impl, "dtype": "bf16", "M": m, "N": n, "call": name,
                     "us": round(statistics.median(us), 1), "rounds_us": " ".join(f"{u:.1f}" for u in us)})
        print(rows[-1], flush=True)
    add = torch.randn(m, n, device="cuda")
    meta = H.metadata({"timing": f"wall time per call: 1,000 calls back to back, then a synchronize; the median of {a.rounds} rounds, each timing every implementation in turn",
                       "torch_add_us": round(per_call(lambda: torch.add(add, add)), 1)})
    H.write_suite("step_host", rows, meta, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

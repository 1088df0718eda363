"""The host's cost of a training call, op by op (``book/data/step_host.csv``): wall time per call
over 1,000 calls back to back, then a synchronize, at 8 x 4096 bf16 (the GPU's work is small,
so what shows is the host's): the forward of inputs that require grad, the forward under
``torch.no_grad()``, the backward of one kept graph, and both; ours against torch eager, the
implementations and passes of the training-step suite (``benchmarks.backward``).

    python -m benchmarks.step_host [--out DIR] [--profile]

With ``--profile``, cProfile's table of each op's fwd+bwd step of ours is printed too
(``benchmarks.profile_step.host_profile``).
"""
import argparse
import time

import torch

from . import harness as H
from .backward import OPS, _inputs, calls, implementations
from .profile_step import host_profile

IMPLS = ("ours", "torch")


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
    a = p.parse_args(argv)
    m, n = 8, 4096
    rows = []
    for op in OPS:
        x, w, b, t = _inputs(op, m, n, torch.bfloat16)
        for impl, make in implementations(op):
            if impl not in IMPLS:
                continue
            f = make()
            passes = calls(f, op, x, w, b, t)
            timed = {"fwd(grad)": lambda: f(x, w, b, t), "fwd(no grad)": passes["fwd"], "bwd": passes["bwd"],
                     "fwd+bwd": passes["fwd+bwd"]}
            for name, fn in timed.items():
                rows.append({"op": op, "impl": impl, "dtype": "bf16", "M": m, "N": n, "call": name, "us": round(per_call(fn), 1)})
                print(rows[-1], flush=True)
            if a.profile and impl == "ours":
                print(f"===== {op}: cProfile of ours' fwd+bwd step\n{host_profile(passes['fwd+bwd'])}", flush=True)
    add = torch.randn(m, n, device="cuda")
    meta = H.metadata({"timing": "wall time per call: 1,000 calls back to back, then a synchronize (one run)",
                       "torch_add_us": round(per_call(lambda: torch.add(add, add)), 1)})
    H.write_suite("step_host", rows, meta, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

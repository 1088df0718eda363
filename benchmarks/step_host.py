"""The host's cost of a training call, op by op (``book/data/step_host.csv``): wall time per call
over 1,000 calls back to back, then a synchronize, at 8 x 4096 bf16 (the GPU's work is small,
so what shows is the host's): the forward of inputs that require grad, the forward under
``torch.no_grad()``, the backward of one kept graph, and both; ours against torch eager.

    python -m benchmarks.step_host [--out DIR] [--profile]

With ``--profile``, each op's fwd+bwd step of ours is also profiled (200 steps under cProfile,
the 18 costliest functions; 50 under torch.profiler, the 18 costliest CPU-side ops), printed.
"""
import argparse
import time

import torch
import torch.nn.functional as F

from . import harness as H


def per_call(fn, calls: int = 1000) -> float:
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6


def profile_step(name: str, step) -> None:
    """Where the host's time of ``step`` goes: Python functions (cProfile) and CPU-side ops."""
    import cProfile
    import io
    import pstats
    from torch.profiler import ProfilerActivity, profile
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        step()
    torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    print(f"===== {name}: cProfile, 200 fwd+bwd steps\n{s.getvalue()}")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(50):
            step()
        torch.cuda.synchronize()
    print(f"===== {name}: torch.profiler, 50 fwd+bwd steps")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))


def main(argv=None) -> int:
    import kernels
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--profile", action="store_true", help="also profile each op's fwd+bwd step of ours")
    a = p.parse_args(argv)
    m, n = 8, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, n, (m,), device="cuda")
    ops = {
        "cross_entropy": (lambda: kernels.cross_entropy(x, t), lambda: F.cross_entropy(x, t), [x]),
        "softmax": (lambda: kernels.softmax(x), lambda: torch.softmax(x, -1), [x]),
        "rmsnorm": (lambda: kernels.rmsnorm(x, w), lambda: F.rms_norm(x, (n,), w, 1e-6), [x, w]),
        "layernorm": (lambda: kernels.layernorm(x, w, b), lambda: F.layer_norm(x, (n,), w, b, 1e-5), [x, w, b]),
    }
    rows = []
    for op, (ours, ref, leaves) in ops.items():
        for impl, f in (("ours", ours), ("torch", ref)):
            out = f()
            dy = torch.randn_like(out)

            def fwd_nograd(f=f):
                with torch.no_grad():
                    f()
            calls = {"fwd(grad)": f, "fwd(no grad)": fwd_nograd,
                     "bwd": lambda: torch.autograd.grad(out, leaves, dy, retain_graph=True),
                     "fwd+bwd": lambda: torch.autograd.grad(f(), leaves, dy)}
            for name, fn in calls.items():
                rows.append({"op": op, "impl": impl, "dtype": "bf16", "M": m, "N": n, "call": name, "us": round(per_call(fn), 1)})
                print(rows[-1], flush=True)
    if a.profile:
        for op, (ours, _, leaves) in ops.items():
            out = ours()
            profile_step(op, lambda: torch.autograd.grad(ours(), leaves, torch.ones_like(out)))
    add = torch.randn(m, n, device="cuda")
    meta = H.metadata({"timing": "wall time per call: 1,000 calls back to back, then a synchronize (one run)",
                       "torch_add_us": round(per_call(lambda: torch.add(add, add)), 1)})
    H.write_suite("step_host", rows, meta, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

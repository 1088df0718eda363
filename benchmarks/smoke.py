"""A few seconds on the GPU before a long run: every public op once against torch, a bad target
reported without a sync, and one CUDA-graph replay. Exits 1 on the first failure.

    python -m benchmarks.smoke
"""
import sys

import torch
import torch.nn.functional as F

import kernels


def main() -> int:
    x = torch.randn(300, 4096, device="cuda", dtype=torch.bfloat16)
    w, b = torch.randn(4096, device="cuda", dtype=torch.bfloat16), torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 4096, (300,), device="cuda")
    x64 = x.double()
    checks = {
        "copy": (kernels.copy(x).double(), x64, 0),
        "reduce_rows": (kernels.reduce_rows(x).double(), x64.sum(-1), 1e-4),
        "rmsnorm": (kernels.rmsnorm(x, w).double(), F.rms_norm(x64, (4096,), w.double(), 1e-6), 2e-2),
        "layernorm": (kernels.layernorm(x, w, b).double(), F.layer_norm(x64, (4096,), w.double(), b.double()), 2e-2),
        "softmax": (kernels.softmax(x).double(), torch.softmax(x64, -1), 2e-2),
        "cross_entropy": (kernels.cross_entropy(x, t).double(), F.cross_entropy(x64, t), 1e-5),
    }
    ok = True
    for name, (out, ref, tol) in checks.items():
        err = ((out - ref).abs() / (ref.abs() + 1)).max().item()
        print(f"{name:14s} max relative error {err:.2e} {'ok' if err <= tol else 'FAIL'}")
        ok &= err <= tol
    bad = t.clone()
    bad[5] = 4096
    loss = kernels.cross_entropy(x, bad)
    try:
        kernels.check_errors()
        print("bad target: NOT reported FAIL")
        ok = False
    except kernels.BadInputError as e:
        print(f"bad target reported ({e}); loss {loss.item()}")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = kernels.cross_entropy(x, t)
    g.replay()
    torch.cuda.synchronize()
    same = torch.equal(y, kernels.cross_entropy(x, t))
    print(f"graph replay equals an eager call: {same}")
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())

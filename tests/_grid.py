"""Shapes, dtypes and tolerances shared by the kernel tests."""
import torch

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Ragged N, every vector width, and every cluster size the table picks (1, 2, 4, 8, 16); 128256
# (Llama 3's vocabulary) is even and leaves its staged row's last column tile part empty.
NS = [1, 7, 64, 1000, 1024, 4097, 8192, 16384, 32768, 65536, 128256, 131071, 131072, 262144]
# Each stage forced where the table may pick the other one (its choice depends on the
# element width): the row staged in shared memory at short and middle N (N = 1000: two
# rows a block; ragged 65535 and 262143), the row in registers at the longest N.
STAGES = [(1000, "smem"), (8192, "smem"), (65536, "smem"), (65535, "smem"), (262143, "smem"),
          (131072, "reg"), (262144, "reg")]
# Output tolerances against the float64 reference: (rtol, atol) per output dtype.
TOL = {torch.float32: (2e-5, 2e-6), torch.bfloat16: (1.6e-2, 1e-5), torch.float16: (2e-3, 1e-6)}


def ms_for(n: int):
    """M = 1, an odd M, and a large M (bounded so M * N stays under 2^25)."""
    return [1, 37, max(2, min(4096, (1 << 25) // n) | 1)]


def assert_close(out, ref, dtype, what=""):
    rtol, atol = TOL[dtype]
    out64 = out.double()
    assert torch.isfinite(out64).all() == torch.isfinite(ref).all(), f"{what}: non-finite mismatch"
    torch.testing.assert_close(out64, ref.to(out64.device), rtol=rtol, atol=atol, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


# Gradient tolerances against float64: (rtol, atol as a fraction of the gradient's scale).
GRAD_TOL = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (3e-2, 3e-2), torch.float16: (5e-3, 5e-3)}


def assert_grad_close(got, want, dtype, what, scale=None):
    """got against the float64 ``want``, the absolute tolerance relative to ``scale`` (by default
    the largest |want|; a gradient whose terms cancel passes the size of its terms instead)."""
    rtol, atol = GRAD_TOL[dtype]
    scale = scale or want.abs().max().item() or 1.0
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol * scale, msg=lambda m: f"{what}: {m}")


def dx_scale(op, x, w, dy):
    """The size of the terms whose difference is dx (float64): |dy w| rstd for the norms, whose
    dx = rstd (g - xhat mean(g xhat)) cancels to nearly zero at N = 1; y (|dy| + |sum(dy y)|) for
    softmax. Rounding is relative to these terms, not to dx."""
    x, dy = x.double(), dy.double()
    g = (dy * w.double()).abs() if w is not None else dy.abs()
    if op == "rmsnorm":
        return (g * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).max().item()
    if op == "layernorm":
        return (g * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)).max().item()
    y = torch.softmax(x, -1)
    return (y * (dy.abs() + (dy * y).sum(-1, keepdim=True).abs())).max().item()

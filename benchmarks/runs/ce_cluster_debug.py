import sys, math, dataclasses; sys.path.insert(0, ".")
import torch
import cutlass.cute as cute
from cutlass import Float32, Int32
from dataclasses import replace
from kernels.compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector
from kernels.config import row_config, RowConfig
from kernels.cross_entropy import CrossEntropy, _error_flag, cross_entropy_reference
from kernels.reduce import LOGSUMEXP2, LOGSUMEXP

class NoPacked(CrossEntropy):
    op = dataclasses.replace(LOGSUMEXP2, fold_bf16=None)

class Old(CrossEntropy):
    op = LOGSUMEXP
    def loss(self, result, x_t):
        m, s = result
        return (m - x_t) + cute.math.log(s, fastmath=False)

def comp(cls, n, cfg, dtype=torch.bfloat16):
    ct = TORCH_TO_CUTE[dtype]
    def build():
        m = cute.sym_int()
        return cls(ct, n, cfg, False), (fake_rows(ct, n, cfg.vec), fake_vector(Float32, m), None,
                                        fake_vector(TORCH_TO_CUTE[torch.int64], m), fake_vector(Int32, 1), Int32(-100), fake_stream())
    return compile_once(("dbg", cls.__name__, n, cfg, str(dtype)), build)

n = 2048
for tpb in (256, 128):
    for vecs in (1, 2):
        for ahead in (0, 1):
            cfg = RowConfig(128, tpb, 2, 8, vecs, passes=-(-n // (8 * 128 * 2 * vecs)), ahead=ahead)
            for m in (1, 2, 37):
                torch.manual_seed(0)
                x = (torch.randn(m, n, device="cuda") * 4).to(torch.bfloat16)
                t = torch.randint(0, n, (m,), device="cuda")
                ref = cross_entropy_reference(x, t, reduction="none")
                res = []
                for cls in (CrossEntropy, NoPacked, Old):
                    out = torch.empty(m, device="cuda")
                    comp(cls, n, cfg)(x, out, None, t, _error_flag(x.device, False), -100)
                    torch.cuda.synchronize()
                    res.append(f"{cls.__name__}={float((out.double() - ref).abs().max()):.2e}")
                print(f"tpb={tpb} vecs={vecs} ahead={ahead} passes={cfg.passes} m={m}:", " ".join(res), flush=True)

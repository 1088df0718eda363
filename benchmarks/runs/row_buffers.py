"""Prepared, not yet run. Are the bf16 points short of 97% the kernels', or their buffers'?
Cross-entropy at 32,768 and 131,072 (85.8% and 89.6% of the read ceiling, f9e39f9), softmax at
32,768 (92.4%, 0.96x QuACK), RMSNorm at 65,536 and 262,144 (96.2% and 93.5%). The suites give every
implementation its own freshly allocated input, and chapter 6 saw a slow mode of some 512 MiB
reads (the read probe at 85.3% in one repetition, 97.3% in the other; book/data/ceiling_size.csv).
Here ours, QuACK's and a probe (the read probe for cross-entropy, torch's copy_ into a buffer of
the same size for the others) run on the *same* input, for BUFFERS allocations a point (each
after a different amount of padding, so they land elsewhere), twice in alternating order. If
ours tracks the probe over the same bytes, the gap is where the buffer landed; if it stays below
the probe on every buffer, it is the kernel's. Writes row_buffers.csv and .json (spine schema)
into M2OUT.

    bash benchmarks/h200.sh run benchmarks/runs/row_buffers.py
"""
import os, sys
import torch
sys.path.insert(0, ".")
from benchmarks import harness as H
from benchmarks.bytes import bytes_moved
from benchmarks.run import rows_for
from kernels.cross_entropy import cross_entropy
from kernels.hierarchy import read_probe
from kernels.rmsnorm import rmsnorm_out
from kernels.softmax import softmax_out

OUT = os.environ.get("M2OUT", "/tmp")
MIB = 1 << 20
POINTS = {"cross_entropy": (16384, 32768, 65536, 131072), "softmax": (16384, 32768, 65536),
          "rmsnorm": (65536, 262144)}
BUFFERS, PAD_MIB = int(os.environ.get("BUFFERS", "3")), 96
ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
rows = []


def quack(op):
    """QuACK's forward for op, or None (said once) where it does not import."""
    try:
        if op == "cross_entropy":
            from quack.cross_entropy import cross_entropy_fwd as f
        elif op == "softmax":
            from quack.softmax import softmax_fwd as f
        else:
            from quack.rmsnorm import rmsnorm_fwd as f
        return f
    except ImportError as e:
        print(f"QuACK's {op} not importable: {e}", flush=True)
        return None


def calls_for(op, x):
    """{impl: (zero-argument call, bytes it moves)} on the input x."""
    m, n = x.shape
    moved = bytes_moved(op, m, n, x.element_size())
    q = quack(op)
    if op == "cross_entropy":
        t = torch.randint(0, n, (m,), device="cuda")
        probe_out = torch.zeros(1, device="cuda")
        calls = {"ours": (lambda: cross_entropy(x, t, reduction="none", check_target=False), moved),
                 # the same bytes as fp32: the probe's 64 bytes a thread, as in the read ceiling
                 "read probe": (lambda: read_probe(x.view(torch.float32), probe_out), x.numel() * x.element_size())}
        if q:
            calls["quack"] = (lambda: q(x, t), moved)
        return calls
    out = torch.empty_like(x)
    if op == "softmax":
        calls = {"ours": (lambda: softmax_out(x, out), moved)}
        if q:
            calls["quack"] = (lambda: q(x), moved)
    else:
        w = torch.randn(n, device="cuda", dtype=x.dtype)
        calls = {"ours": (lambda: rmsnorm_out(x, w, out, 1e-6), moved)}
        if q:
            calls["quack"] = (lambda: q(x, w, eps=1e-6), moved)
    calls["copy_"] = (lambda: out.copy_(x), 2 * x.numel() * x.element_size())
    return calls


for op, ns in POINTS.items():
    ceiling = ceil["read"] if op == "cross_entropy" else ceil["copy"]
    for n in ns:
        m = rows_for(n)
        for buf in range(BUFFERS):
            pad = torch.empty(buf * PAD_MIB * MIB, dtype=torch.uint8, device="cuda")
            x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            calls = calls_for(op, x)
            for order in range(2):
                for impl in (list(calls) if order == 0 else list(calls)[::-1]):
                    fn, nbytes = calls[impl]
                    where = dict(variant=f"buffer {buf}, order {order}", pad_mib=buf * PAD_MIB, address=hex(x.data_ptr()))
                    try:
                        fn()
                        rows.append(H.row(op, impl, "bf16", m, n, nbytes, H.time_ms(fn, warmup=3, rep=20), ceiling, **where))
                    except Exception as e:  # noqa: BLE001  (a failing implementation is a result; the others go on)
                        rows.append(H.row(op, impl, "bf16", m, n, nbytes, float("nan"), ceiling, **where,
                                          note=f"{type(e).__name__}: {str(e)[:80]}"))
                    print(rows[-1], flush=True)
            del x, pad, calls
            torch.cuda.empty_cache()
meta = H.metadata({"suite": "row_buffers", "copy_ceiling_tb_per_s": ceil["copy"], "read_ceiling_tb_per_s": ceil["read"],
                   "script": "benchmarks/runs/row_buffers.py"})
print("wrote", H.write_suite("row_buffers", rows, meta, OUT))

"""Prepared, not yet run. Is cross-entropy's bf16 gap at 32,768 and 131,072 (85.8% and 89.6% of
the read ceiling, f9e39f9) the kernel's, or the buffer's? The suite gives every implementation
its own freshly allocated logits, and chapter 6 saw a slow mode of some 512 MiB reads (the read
probe at 85.3% in one repetition, 97.3% in the other; book/data/ceiling_size.csv). Here ours,
QuACK's and the read probe read the *same* logits, for BUFFERS allocations a length (each after
a different amount of padding, so they land elsewhere), twice in alternating order. If ours
tracks the probe over the same bytes, the gap is where the buffer landed; if it stays below the
probe on every buffer, it is the kernel's. Writes ce_buffers.csv and .json (spine schema) into
M2OUT.

    bash benchmarks/h200.sh run benchmarks/runs/ce_buffers.py
"""
import os, sys
import torch
sys.path.insert(0, ".")
from benchmarks import harness as H
from benchmarks.bytes import bytes_moved
from benchmarks.run import rows_for
from kernels.cross_entropy import cross_entropy
from kernels.hierarchy import read_probe

OUT = os.environ.get("M2OUT", "/tmp")
MIB = 1 << 20
NS, BUFFERS, PAD_MIB = (16384, 32768, 65536, 131072), int(os.environ.get("BUFFERS", "3")), 96
ceil = H.read_ceiling()
rows = []
try:
    from quack.cross_entropy import cross_entropy_fwd
except ImportError as e:  # measured without it, and said so
    cross_entropy_fwd = None
    print("QuACK not importable:", e, flush=True)

for n in NS:
    m = rows_for(n)
    for buf in range(BUFFERS):
        pad = torch.empty(buf * PAD_MIB * MIB, dtype=torch.uint8, device="cuda")
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        t = torch.randint(0, n, (m,), device="cuda")
        probe_out = torch.zeros(1, device="cuda")
        calls = {"ours": lambda: cross_entropy(x, t, reduction="none", check_target=False),
                 "read probe": lambda: read_probe(x.view(-1), probe_out)}
        if cross_entropy_fwd is not None:
            calls["quack"] = lambda: cross_entropy_fwd(x, t)
        for order in range(2):
            for impl in (list(calls) if order == 0 else list(calls)[::-1]):
                nbytes = x.numel() * 2 if impl == "read probe" else bytes_moved("cross_entropy", m, n, 2)
                calls[impl]()
                rows.append(H.row("cross_entropy", impl, "bf16", m, n, nbytes, H.time_ms(calls[impl], warmup=3, rep=20),
                                  ceil, variant=f"buffer {buf}, order {order}", pad_mib=buf * PAD_MIB,
                                  address=hex(x.data_ptr())))
                print(rows[-1], flush=True)
        del x, t, pad, calls
        torch.cuda.empty_cache()
meta = H.metadata({"suite": "ce_buffers", "read_ceiling_tb_per_s": ceil, "script": "benchmarks/runs/ce_buffers.py"})
print("wrote", H.write_suite("ce_buffers", rows, meta, OUT))

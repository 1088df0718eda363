"""How the ceilings depend on how many bytes they move, next to the row sum at N = 1024 and 4096.
The suites measure their ceilings over 2 GiB, while a suite row of 2^28 elements reads 512 MiB
in bf16 and 1 GiB in fp32. A launch's fixed costs (its start, the first loads' latency, the
last wave's tail) weigh four times as much against 512 MiB as against 2 GiB. Every row's
``frac_of_ceiling`` is against the suites' ceiling of the same run (2 GiB; the copy ceiling for
copies, the read ceiling otherwise); ``variant`` is the repetition (the whole set runs twice, to
show the spread). Writes ceiling_size.csv and .json (spine schema) into M2OUT; committed as
book/data/ceiling_size.*.

    bash benchmarks/h200.sh run benchmarks/runs/ceiling_size.py
"""
import os, sys
import torch
sys.path.insert(0, ".")
from benchmarks import harness as H
from kernels.hierarchy import read_probe
from kernels.reduction import reduce_rows

OUT = os.environ.get("M2OUT", "/tmp")
MIB = 1 << 20
ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
rows = []


def add(op, impl, rep, dtype, m, n, nbytes, ms, ceiling):
    rows.append(H.row(op, impl, dtype, m, n, nbytes, ms, ceiling, variant=str(rep), mib=nbytes // MIB))
    print(rows[-1], flush=True)


for rep in range(2):
    for mib in (256, 512, 1024, 2048):
        nbytes = mib * MIB
        x = torch.randn(nbytes // 4, device="cuda")
        out = torch.zeros(1, device="cuda")
        add("read", "ours (read_probe)", rep, "fp32", 1, x.numel(), nbytes, H.time_ms(lambda: read_probe(x, out), rep=50), ceil["read"])
        add("read", "torch.sum", rep, "fp32", 1, x.numel(), nbytes, H.time_ms(lambda: x.sum(), rep=50), ceil["read"])
        y = torch.empty_like(x)
        add("copy", "torch copy_", rep, "fp32", 1, x.numel(), 2 * nbytes, H.time_ms(lambda: y.copy_(x), rep=50), ceil["copy"])
        del x, y
        torch.cuda.empty_cache()
    for dt, n, m in ((torch.bfloat16, 1024, 1 << 18), (torch.bfloat16, 1024, 1 << 19), (torch.bfloat16, 4096, 1 << 16),
                     (torch.bfloat16, 4096, 1 << 17), (torch.float32, 1024, 1 << 18), (torch.float32, 4096, 1 << 16)):
        x = torch.randn(m, n, device="cuda", dtype=dt)
        o = torch.empty(m, device="cuda")
        add("reduce_sum", "ours", rep, {torch.bfloat16: "bf16", torch.float32: "fp32"}[dt], m, n,
            x.numel() * x.element_size() + 4 * m, H.time_ms(lambda: reduce_rows(x, "sum", out=o), rep=50), ceil["read"])
        del x, o
        torch.cuda.empty_cache()
meta = H.metadata({"suite": "ceiling_size", "copy_ceiling_tb_per_s": ceil["copy"], "read_ceiling_tb_per_s": ceil["read"],
                   "script": "benchmarks/runs/ceiling_size.py"})
print("wrote", H.write_suite("ceiling_size", rows, meta, OUT))

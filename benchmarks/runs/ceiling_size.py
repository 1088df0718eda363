"""How the ceilings depend on how many bytes they move, next to the row sum at N = 1024 (the one
point of the reduction suite under 95% of the read ceiling: bf16, 94.9%). The suites measure
their ceilings over 2 GiB, while a suite row moves 2^28 elements: 512 MiB read in bf16, 1 GiB in
fp32. A launch's fixed costs (its start, the first loads' latency, the last wave's tail) weigh
four times as much against 512 MiB as against 2 GiB. Results: M2OUT/results_ceiling.csv.

    bash benchmarks/h200.sh run benchmarks/runs/ceiling_size.py
"""
import csv, os, sys
import torch
sys.path.insert(0, ".")
from benchmarks import harness as H
from kernels.hierarchy import read_probe
from kernels.reduction import reduce_rows

OUT = os.environ.get("M2OUT", "/tmp")
MIB = 1 << 20
rows = []


def add(what, nbytes, ms, **kw):
    rows.append(dict(what=what, mib=nbytes // MIB, us=round(ms * 1e3, 2), tb_per_s=round(H.tbps(nbytes, ms), 4), **kw))
    print(rows[-1], flush=True)


for rep in range(2):  # twice, to see the run-to-run spread
    for mib in (256, 512, 1024, 2048):
        nbytes = mib * MIB
        x = torch.randn(nbytes // 4, device="cuda")
        out = torch.zeros(1, device="cuda")
        add("read_probe", nbytes, H.time_ms(lambda: read_probe(x, out), rep=50), rep=rep)
        add("torch.sum fp32", nbytes, H.time_ms(lambda: x.sum(), rep=50), rep=rep)
        y = torch.empty_like(x)
        add("copy_ (bytes read + written)", 2 * nbytes, H.time_ms(lambda: y.copy_(x), rep=50), rep=rep)
        del x, y
        torch.cuda.empty_cache()
    for dt, n, m in ((torch.bfloat16, 1024, 1 << 18), (torch.bfloat16, 1024, 1 << 19), (torch.bfloat16, 4096, 1 << 16),
                     (torch.bfloat16, 4096, 1 << 17), (torch.float32, 1024, 1 << 18), (torch.float32, 4096, 1 << 16)):
        x = torch.randn(m, n, device="cuda", dtype=dt)
        o = torch.empty(m, device="cuda")
        add(f"reduce_rows sum {str(dt)[6:]} N={n} M={m}", x.numel() * x.element_size() + 4 * m,
            H.time_ms(lambda: reduce_rows(x, "sum", out=o), rep=50), rep=rep)
        del x, o
        torch.cuda.empty_cache()
with open(os.path.join(OUT, "results_ceiling.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader(); w.writerows(rows)

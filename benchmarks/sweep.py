"""Time candidate configurations of the row ops, to choose the rows of kernels/config.py.

    python -m benchmarks.sweep --op rmsnorm softmax --dtype bf16 --n 32768 65536 [--name sweep_x]
    python -m benchmarks.sweep --op cross_entropy --n 4096 [--out DIR]

For each op, dtype and N (M * N = 2^28) it times the table's configuration (marked ``*``) and
every candidate: for kept rows (RMSNorm, LayerNorm, softmax) the shapes that give a thread
16-64 elements, in registers and, where a staged tile leaves room for two blocks an SM, in
shared memory; for streamed rows (cross-entropy, the row sum) 128-512 threads a row, clusters of
1-8 and 2-8 accesses a pass, each with its next pass loaded ahead or not, and (cross-entropy)
both target orders (cross-entropy's backward, which maps its row and reduces nothing: clusters
only to split long rows over more blocks). Each op is timed through its public function, against
the same run's copy ceiling (read ceiling for the forward's streamed ops). Rows go to <out>/<name>.csv with the suites' schema,
the candidate in ``variant`` and its kernel's registers a thread in ``registers``.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import replace

import torch

from kernels.config import SM_SMEM_BYTES, SMEM_RESERVED_PER_BLOCK, RowConfig, row_config

from . import harness as H
from .bytes import bytes_moved
from .run import rows_for

KEPT = ("rmsnorm", "layernorm", "softmax")
STREAMED = ("cross_entropy", "row_reduce", "cross_entropy_bwd")
NS = [1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144]


def window(n: int, bits: int):
    """(head, accesses a row): an N that is no multiple of the 128-bit vector takes its rows'
    aligned windows, N + vec - 1 columns (``RowConfig.head``)."""
    vec = 128 // bits
    head = n % vec != 0
    return head, -(-(n + vec - 1 if head else n) // vec)


def kept_candidates(n: int, bits: int):
    """Kept rows: one to 16 blocks a row and 32 to 1024 threads each, where a thread gets 16 to
    64 elements (exactly 16, 32 or 64 at a power of two), in registers; staged in shared memory
    where two blocks still fit an SM."""
    vec = 128 // bits
    head, nvec = window(n, bits)
    out = []
    for threads in (32, 64, 128, 256, 512, 1024):
        for cluster in (1, 2, 4, 8, 16):
            per = -(-nvec // (threads * cluster))
            if not 16 <= per * vec <= 64:
                continue
            for tpb in sorted({max(threads, 128), max(threads, 256)}):
                cfg = RowConfig(threads, tpb, cluster, vec, per, head=head)
                out.append(cfg)
                staged = replace(cfg, stage="smem", groups=2 if cfg.vecs_per_thread % 2 == 0 else 1)
                if n >= 16384 and 2 * (staged.smem_bytes(bits) + SMEM_RESERVED_PER_BLOCK) <= SM_SMEM_BYTES:
                    out += [replace(staged, groups=1), staged] if staged.groups > 1 else [staged]
    return out


def streamed_candidates(n: int, bits: int, op: str):
    """Streamed rows: 16-512 threads a row in blocks of 128 or 256 (or one row), 2-8 accesses a
    pass, clusters of 1-8 (128 threads a row and more), the next pass loaded ahead or not, and
    cross-entropy's two target orders. Cross-entropy's backward maps its row (a pass is loaded
    and written: no ``ahead``), and its cluster only splits a row that still takes four passes
    or more over more blocks, of one row each."""
    vec = 128 // bits
    head, nvec = window(n, bits)
    maps = op == "cross_entropy_bwd"
    out = []
    for tpr in (16, 32, 64, 128, 256, 512):
        for cluster in (1, 2, 4, 8):
            for vecs in (2, 4, 8):
                if tpr * cluster * vecs > nvec or (tpr < 128 and cluster > 1):
                    continue
                passes = math.ceil(nvec / (tpr * cluster * vecs))
                if maps and cluster > 1 and passes < 4:
                    continue
                for tpb in sorted({max(tpr, 128), max(tpr, 256)}):
                    if maps and cluster > 1 and tpb != tpr:
                        continue
                    base = RowConfig(tpr, tpb, cluster, vec, vecs, passes, "stream", head=head)
                    for ahead in ((False, True) if passes > 1 and not maps else (False,)):
                        for targets in (("late", "split") if op == "cross_entropy" else ("late",)):
                            out.append(replace(base, ahead=ahead, targets=targets))
    return out


def neighbour_candidates(op: str, n: int, bits: int):
    """Between the table's rows: what ``kernels.config``'s rule for any N chooses from
    (:func:`kernels.config.neighbours`), and the row N falls in stretched over it."""
    from kernels.config import table_row_config, neighbours
    head = window(n, bits)[0]
    return list(dict.fromkeys([table_row_config(op, n, bits, head=head)] + neighbours(op, n, bits, head)))


def call(op, x, w, b, t, out, cfg):
    from kernels import cross_entropy, layernorm, reduce_rows
    from kernels.cross_entropy import cross_entropy_backward_out
    from kernels.rmsnorm import rmsnorm_out
    from kernels.softmax import softmax_out
    # the backward's per-row inputs, made here and not in the timed call: the gradient of a mean
    # (one dloss for all rows) and an lse a row
    g, lse = (w[:1].float(), b[:x.shape[0]].float()) if op == "cross_entropy_bwd" else (None, None)
    return {
        "rmsnorm": lambda: rmsnorm_out(x, w, out, 1e-6, config=cfg),
        "layernorm": lambda: layernorm(x, w, b[:x.shape[1]], config=cfg),
        "softmax": lambda: softmax_out(x, out, config=cfg),
        "cross_entropy": lambda: cross_entropy(x, t, reduction="none", config=cfg),
        "row_reduce": lambda: reduce_rows(x, config=cfg),
        "cross_entropy_bwd": lambda: cross_entropy_backward_out(g, x, t, lse, out, config=cfg),
    }[op]


def registers(cfg, n: int, dtype) -> int:
    """ptxas's registers a thread of the kernel last compiled for ``cfg`` at N and ``dtype`` (0
    where there is none): a candidate's cost in occupancy, beside its time."""
    from kernels.compile import cache
    from kernels.cubin import kernel_resources
    for c in reversed(list(cache().values())):
        if c.config == cfg and n in c.key and str(dtype) in c.key:
            return max([k.registers for k in kernel_resources(c.cubin)] or [0])
    return 0


def sweep(ops, dtypes, ns, name, out_dir, family="all", max_elems=None):
    ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
    print("ceilings", ceil, flush=True)
    rows, path = [], None
    for dt in dtypes:
        bits = torch.finfo(dt).bits
        for n in ns:
            m = rows_for(n)
            x = torch.randn(m, n, device="cuda", dtype=dt)
            w, b = torch.randn(n, device="cuda", dtype=dt), torch.randn(max(n, m), device="cuda", dtype=dt)
            t = torch.randint(0, n, (m,), device="cuda")
            out = torch.empty_like(x)
            for op in ops:
                streamed = op in STREAMED
                ceiling = ceil["read" if op in ("cross_entropy", "row_reduce") else "copy"]
                picked = row_config(op, n, bits, head=window(n, bits)[0])
                if family == "neighbours":
                    cands = neighbour_candidates(op, n, bits)
                else:
                    cands = streamed_candidates(n, bits, op) if streamed else kept_candidates(n, bits)
                if max_elems is not None:
                    cands = [c for c in cands if c.elems_per_thread <= max_elems]
                for cfg in dict.fromkeys([picked] + cands):
                    try:
                        ms = H.time_ms(call(op, x, w, b, t, out, cfg), warmup=3, rep=10)
                    except Exception as e:  # a candidate the template rejects
                        print("skip", op, n, cfg, type(e).__name__, str(e)[:120], flush=True)
                        continue
                    # (the backward: the logits read, their gradient written; targets, lse and dloss a row)
                    nbytes = (2 * m * n * bits // 8 + m * 16 if op == "cross_entropy_bwd" else
                              bytes_moved("reduce" if op == "row_reduce" else op, m, n, bits // 8))
                    r = H.row(op, "ours", "bf16" if bits == 16 else "fp32", m, n, nbytes, ms, ceiling,
                              variant=repr(cfg), picked=cfg == picked, registers=registers(cfg, n, dt))
                    rows.append(r)
                    print(f"{op:14s} {r['dtype']} N={n:>6} {r['frac_of_ceiling']:.3f} {'*' if r['picked'] else ' '} "
                          f"{r['registers']:>3} regs {cfg}", flush=True)
            del x, w, b, t, out
            torch.cuda.empty_cache()
            path = H.write_suite(name, rows, H.metadata({"ceilings": ceil}), out_dir)  # (after each N: a run cut
            # short keeps what it timed)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", nargs="+", default=list(KEPT + STREAMED[:1]), choices=KEPT + STREAMED)
    p.add_argument("--dtype", nargs="+", default=["bf16", "fp32"], choices=["bf16", "fp32"])
    p.add_argument("--n", type=int, nargs="+", default=NS)
    p.add_argument("--name", default="sweep", help="the CSV's name in --out (default sweep)")
    p.add_argument("--out", default=None)
    p.add_argument("--family", default="all", choices=["all", "neighbours"],
                   help="candidates: every shape the template takes (all), or the neighbouring table rows' "
                        "shapes stretched over N (neighbours)")
    p.add_argument("--max-elems", type=int, default=None,
                   help="only the candidates that give a thread at most this many elements (a pass's, streamed)")
    a = p.parse_args(argv)
    dtypes = [{"bf16": torch.bfloat16, "fp32": torch.float32}[d] for d in a.dtype]
    print("wrote", sweep(a.op, dtypes, a.n, a.name, a.out, a.family, a.max_elems))


if __name__ == "__main__":
    main()

"""Try candidate configurations for the large-N rows of the configuration table.

    python -m benchmarks.sweep [--out DIR]
    python -m benchmarks.sweep --smem [--out DIR]
    python -m benchmarks.sweep --reduce [--n N ...] [--dtype bf16 fp32] [--out DIR]
    python -m benchmarks.sweep --prologue [--n N ...] [--dtype bf16 fp32] [--out DIR]

Prints, for each op, dtype and N, the bandwidth of each candidate RowConfig and
which one the table picks now; the table in kernels/config.py is edited from these
numbers (they are written to <out>/sweep.csv). ``--smem`` compares, for RMSNorm and
softmax at the longest rows, the row kept in registers with the row staged in shared
memory at several block and cluster shapes (<out>/sweep_smem.csv). ``--reduce`` times
streamed configurations of the plain row sum against the read ceiling (by default bf16 at
1k and 256k, the points chapter 6 showed short of 95%; <out>/sweep_reduce.csv). ``--prologue``
times cross-entropy with its target loaded after the reduction and while the row's loads are in
flight (``kernels.cross_entropy.EARLY_TARGET``; <out>/sweep_prologue.csv).
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


def try_config(rows, op, fn, bits, m, n, ceiling, cfg, picked, **extra):
    """Time ``fn`` (``op`` under one candidate configuration ``cfg``), append its row to
    ``rows`` and print it; a candidate the template rejects is reported and skipped."""
    try:
        ms = H.time_ms(fn, warmup=3, rep=10)
    except Exception as e:
        print("FAIL", op, n, cfg, type(e).__name__, str(e)[:200], flush=True)
        return None
    r = H.row(op, "ours", "bf16" if bits == 16 else "fp32", m, n, bytes_moved(op, m, n, bits // 8), ms, ceiling,
              variant=str(cfg), picked=(cfg == picked), **extra)
    rows.append(r)
    print(f"{op:14s} {r['dtype']} N={n:>6} {r['tb_per_s']:.3f} TB/s {r['frac_of_ceiling']:.3f} "
          f"{'*' if r['picked'] else ' '} {cfg}{''.join(f' {k}={v}' for k, v in extra.items())}", flush=True)
    return r


def keep_candidates(n, bits):
    """(threads_per_row, threads_per_block, cluster_n) giving 16, 32 or 64 elements a thread."""
    out = []
    for elems in (16, 32, 64):
        for cluster in (1, 2, 4, 8, 16):
            threads = n // (elems * cluster)
            if 64 <= threads <= 1024 and threads & (threads - 1) == 0:
                out.append((threads, max(threads, 128), cluster))
    if n <= 1024:
        out += [(32, 128, 1), (64, 128, 1), (128, 128, 1)]
    return sorted(set(out))


def stream_candidates(n, bits):
    out = []
    for cluster in (1, 2, 4, 8):
        for tpr in (128, 256):
            if n // (cluster * tpr * (128 // bits)) >= 1:
                out.append((tpr, tpr, cluster))
    return out


def smem_candidates(n, bits):
    """(threads_per_row, threads_per_block, cluster_n) for a row staged in shared memory:
    one row a block, the row split exactly, 8 to 128 elements a thread, and room in an
    SM's shared memory (228 KiB, 1 KiB of it reserved a block) for two blocks at least."""
    out = []
    for cluster in (4, 8, 16):
        for threads in (256, 512, 1024):
            elems = n // (cluster * threads)
            if not (8 <= elems <= 128 and elems * cluster * threads == n):
                continue
            cfg = cfg_for(n, bits, threads, threads, cluster, keep=True, stage="smem")
            if 2 * (cfg.smem_bytes(bits) + SMEM_RESERVED_PER_BLOCK) <= SM_SMEM_BYTES:
                out.append((threads, threads, cluster))
    return out


KEEP_NS = [1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
STREAM_NS = [4096, 16384, 65536, 131072, 262144]
SMEM_NS = [65536, 131072, 262144]


def cfg_for(n, bits, tpr, tpb, cluster, keep, vecs=None, stage="reg"):
    vec = 128 // bits
    nvec = n // vec
    if keep:
        return RowConfig(tpr, tpb, cluster, vec, math.ceil(nvec / (tpr * cluster)), 1, stage)
    per = vecs or max(1, 128 * 8 // (vec * bits))
    per = min(per, math.ceil(nvec / (tpr * cluster)))
    return RowConfig(tpr, tpb, cluster, vec, per, math.ceil(nvec / (tpr * cluster * per)))


def focus(out_dir):
    """The questions left after the full sweep: the copy kernel's shape, the longest kept
    rows, and the host cost of one launch."""
    import time
    from kernels.copy import copy_
    from kernels.rmsnorm import rmsnorm_out
    from kernels.softmax import softmax_out
    rows = []
    ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
    print("ceilings", ceil, flush=True)
    for dt in (torch.float32, torch.bfloat16):
        numel = H.GIB // (torch.finfo(dt).bits // 8)
        src = torch.randn(numel, device="cuda").to(dt)
        dst = torch.empty_like(src)
        for threads in (128, 256, 512):
            for vecs in (2, 4, 8, 16):
                ms = H.time_ms(lambda: copy_(dst, src, vecs=vecs, threads=threads))
                r = H.row("copy", "ours", str(dt)[6:], 1, numel, 2 * numel * src.element_size(), ms, ceil["copy"],
                          variant=f"threads={threads} vecs={vecs}")
                rows.append(r)
                print(r["variant"], r["dtype"], r["tb_per_s"], r["frac_of_ceiling"], flush=True)
        ms = H.time_ms(lambda: dst.copy_(src))
        print("torch copy_", dt, H.tbps(2 * numel * src.element_size(), ms), flush=True)
        del src, dst
    for dt in (torch.float32, torch.bfloat16):
        bits = torch.finfo(dt).bits
        for n, cands in ((262144, [(512, 512, 16), (256, 256, 16), (1024, 1024, 16)]),
                         (131072, [(512, 512, 16), (256, 256, 16), (512, 512, 8)])):
            m = rows_for(n)
            x = torch.randn(m, n, device="cuda", dtype=dt)
            out = torch.empty_like(x)
            w = torch.randn(n, device="cuda", dtype=dt)
            for c in cands:
                cfg = cfg_for(n, bits, *c, keep=True)
                for op, fn in (("rmsnorm", lambda: rmsnorm_out(x, w, out, 1e-6, config=cfg)),
                               ("softmax", lambda: softmax_out(x, out, config=cfg))):
                    try_config(rows, op, fn, bits, m, n, ceil["copy"], cfg, row_config(n, bits, keep_row=True, op=op))
            del x, out, w
    # host cost of one launch: wall time of many back-to-back calls on a tiny input
    x = torch.randn(4, 1024, device="cuda")
    out = torch.empty_like(x)
    softmax_out(x, out)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        softmax_out(x, out)
    torch.cuda.synchronize()
    us = (time.perf_counter() - t0) / 2000 * 1e6
    print(f"host time per softmax call (tiny input): {us:.1f} us", flush=True)
    from kernels.softmax import compile_softmax
    k = compile_softmax(torch.float32, 1024, vec=4)
    t0 = time.perf_counter()
    for _ in range(2000):
        k(x, out, None, None, None, 0.0)
    torch.cuda.synchronize()
    print(f"host time per raw compiled call: {(time.perf_counter() - t0) / 2000 * 1e6:.1f} us", flush=True)
    H.write_suite("focus", rows, H.metadata({"ceilings": ceil, "host_us_per_call": us}), out_dir)


def smem(out_dir, ns=None, dtypes=None, ops=None):
    """The row kept in registers against the row staged in shared memory, for RMSNorm and
    softmax at the longest rows (or ``ns``): the table's pick (*), the register design at the
    table's shape, and each staged shape of ``smem_candidates``."""
    from kernels.rmsnorm import rmsnorm_out
    from kernels.softmax import softmax_out
    ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
    print("ceilings", ceil, flush=True)
    rows = []
    for dt in dtypes or (torch.bfloat16, torch.float32):
        bits = torch.finfo(dt).bits
        for n in ns or SMEM_NS:
            m = rows_for(n)
            x = torch.randn(m, n, device="cuda", dtype=dt)
            out = torch.empty_like(x)
            w = torch.randn(n, device="cuda", dtype=dt)
            staged = [cfg_for(n, bits, *c, keep=True, stage="smem") for c in smem_candidates(n, bits)]
            for op in ops or ("rmsnorm", "softmax"):
                picked = row_config(n, bits, keep_row=True, op=op)
                cfgs = [picked, row_config(n, bits, keep_row=True, stage="reg", op=op)] + staged
                for cfg in dict.fromkeys(cfgs):  # in order, without repeats
                    if op == "rmsnorm":
                        fn = lambda: rmsnorm_out(x, w, out, 1e-6, config=cfg)
                    else:
                        fn = lambda: softmax_out(x, out, config=cfg)
                    try_config(rows, op, fn, bits, m, n, ceil["copy"], cfg, picked, stage=cfg.stage)
            del x, out, w
            torch.cuda.empty_cache()
    H.write_suite("sweep_smem", rows, H.metadata({"ceilings": ceil}), out_dir)


REDUCE_NS = [1024, 262144]


def short_candidates(n: int, bits: int):
    """One-block streamed shapes for short rows: 16-128 threads a row, 1-8 128-bit accesses a
    pass (those the row fills), blocks of 128 or 256 threads."""
    nvec = n // (128 // bits)
    return [cfg_for(n, bits, tpr, tpb, 1, keep=False, vecs=vecs)
            for tpr in (16, 32, 64, 128) for vecs in (1, 2, 4, 8) if tpr * vecs <= nvec for tpb in (128, 256)]


def reduce_candidates(n: int, bits: int, short_max: int = 4096):
    """Streamed configurations of the row sum that cover a row of n elements with 128-bit
    accesses: one block for rows up to ``short_max`` (``short_candidates``), up to 8 for longer
    ones, 2-8 accesses a pass."""
    if n <= short_max:
        return short_candidates(n, bits)
    nvec = n // (128 // bits)
    return [cfg_for(n, bits, tpr, tpr, cluster, keep=False, vecs=vecs)
            for tpr in (128, 256, 512) for cluster in (1, 2, 4, 8) for vecs in (2, 4, 8)
            if tpr * cluster * vecs <= nvec]


def read_sweep(suite, out_dir, ns, dtypes, time_point):
    """Sweeps timed against the read-only ceiling: for each dtype and N, an (M, N) input with
    M * N = 2^28 and ``time_point(rows, x, m, n, bits, ceiling)``, which times its candidates
    with ``try_config``; the rows go to <out>/<suite>.csv."""
    ceil = H.read_ceiling()
    print("read ceiling", ceil, flush=True)
    rows = []
    for dt in dtypes:
        bits = torch.finfo(dt).bits
        for n in ns:
            m = rows_for(n)
            x = torch.randn(m, n, device="cuda", dtype=dt)
            time_point(rows, x, m, n, bits, ceil)
            del x
            torch.cuda.empty_cache()
    H.write_suite(suite, rows, H.metadata({"ceilings": {"read": ceil}}), out_dir)
    return rows


def reduce_sum(out_dir, ns, dtypes):
    """The streamed row sum (``reduce_rows``) under each of ``reduce_candidates``."""
    from kernels.reduction import reduce_config, reduce_rows

    def point(rows, x, m, n, bits, ceil):
        out = torch.empty(m, device="cuda")
        picked = reduce_config(n, x.dtype)
        for cfg in reduce_candidates(n, bits):
            try_config(rows, "reduce", lambda: reduce_rows(x, "sum", config=cfg, out=out), bits, m, n, ceil, cfg,
                       picked)
    read_sweep("sweep_reduce", out_dir, ns, dtypes, point)


PROLOGUE_NS = [1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144]


def prologue(out_dir, ns, dtypes, table_only=False, ahead=False):
    """Cross-entropy with its target and target logit loaded after the reduction (the
    default) or while the row's loads are in flight (``early_target``), under the table's
    configuration; and (not with ``table_only``) with the target late under other shapes: for
    rows up to 8k, one-block-per-cluster shapes of 16-128 threads a row and 1-8 accesses a pass
    (short rows hold their block through the target's two round trips after a short load, so
    the bytes a thread has in flight may matter more than for the plain row sum); for longer
    rows, the row sum's streamed shapes (``reduce_candidates``: 128-512 threads a row, clusters
    of 1-8, 2-8 accesses a pass), which the table's cross-entropy rows were not swept over."""
    from kernels.cross_entropy import cross_entropy

    def point(rows, x, m, n, bits, ceil):
        t = torch.randint(0, n, (m,), device="cuda")
        picked = row_config(n, bits, keep_row=False)
        others = [] if table_only else reduce_candidates(n, bits, short_max=8192)
        cands = list(dict.fromkeys([picked] + others))
        if ahead:  # each streamed candidate also with its next pass loaded before the fold
            cands += [replace(c, ahead=1 - c.ahead) for c in cands if c.passes > 1]
        for cfg in cands:
            for early in ((False, True) if cfg == picked else (False,)):
                try_config(rows, "cross_entropy", lambda: cross_entropy(x, t, reduction="none", check_target=False,
                                                                        config=cfg, early_target=early),
                           bits, m, n, ceil, cfg, picked, early_target=early)
    rows = read_sweep("sweep_prologue", out_dir, ns, dtypes, point)
    print("fraction of the read ceiling, late target / early target: table's config; best config")
    for key in dict.fromkeys((r["dtype"], r["N"]) for r in rows):
        pick = {r["early_target"]: r["frac_of_ceiling"] for r in rows if (r["dtype"], r["N"]) == key and r["picked"]}
        best = {e: max((r["frac_of_ceiling"] for r in rows if (r["dtype"], r["N"]) == key and r["early_target"] == e),
                       default=0.0) for e in (False, True)}
        print(f"  {key[0]} N={key[1]:>6}: {pick.get(False, 0):.3f} / {pick.get(True, 0):.3f}; "
              f"{best[False]:.3f} / {best[True]:.3f}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--focus", action="store_true")
    p.add_argument("--smem", action="store_true", help="registers against shared memory for the longest kept rows")
    p.add_argument("--reduce", action="store_true", help="streamed configurations of the row sum")
    p.add_argument("--prologue", action="store_true",
                   help="cross-entropy's target loads after the reduction against during the row's loads")
    p.add_argument("--n", type=int, nargs="*", default=None, help="row lengths (default: each mode's own)")
    p.add_argument("--dtype", nargs="*", default=None, choices=["bf16", "fp32"],
                   help="dtypes (default: bf16 for --reduce and --prologue, both otherwise)")
    p.add_argument("--op", nargs="*", default=None, choices=["rmsnorm", "softmax", "cross_entropy"],
                   help="the full sweep and --smem: only these ops")
    p.add_argument("--table-only", action="store_true", help="--prologue: only the table's configuration")
    p.add_argument("--ahead", action="store_true",
                   help="--prologue: every candidate of more than one pass also with RowConfig.ahead flipped")
    a = p.parse_args(argv)
    if a.focus:
        return focus(a.out)
    dtypes = [{"bf16": torch.bfloat16, "fp32": torch.float32}[d] for d in a.dtype or ()]
    if a.smem:
        return smem(a.out, a.n, dtypes, a.op)
    if a.reduce:
        return reduce_sum(a.out, a.n or REDUCE_NS, dtypes or [torch.bfloat16])
    if a.prologue:
        return prologue(a.out, a.n or PROLOGUE_NS, dtypes or [torch.bfloat16], a.table_only, a.ahead)
    from kernels.cross_entropy import cross_entropy
    from kernels.rmsnorm import rmsnorm_out
    from kernels.softmax import softmax_out
    ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
    print("ceilings", ceil, flush=True)
    rows = []
    for dt in dtypes or (torch.bfloat16, torch.float32):
        bits = torch.finfo(dt).bits
        for op in a.op or ("rmsnorm", "softmax", "cross_entropy"):
            stream = op == "cross_entropy"
            for n in a.n or (STREAM_NS if stream else KEEP_NS):
                cands = (stream_candidates if stream else keep_candidates)(n, bits)
                m = rows_for(n)
                x = torch.randn(m, n, device="cuda", dtype=dt)
                out = torch.empty_like(x) if op != "cross_entropy" else None
                w = torch.randn(n, device="cuda", dtype=dt)
                t = torch.randint(0, n, (m,), device="cuda")
                ceiling = ceil["read" if op == "cross_entropy" else "copy"]
                picked = row_config(n, bits, keep_row=op != "cross_entropy", op=op)
                vecs_opts = [2, 4, 8] if op == "cross_entropy" else [None]
                for c in cands:
                    for vecs in vecs_opts:
                        cfg = cfg_for(n, bits, *c, keep=op != "cross_entropy", vecs=vecs)
                        if op == "rmsnorm":
                            fn = lambda: rmsnorm_out(x, w, out, 1e-6, config=cfg)
                        elif op == "softmax":
                            fn = lambda: softmax_out(x, out, config=cfg)
                        else:
                            fn = lambda: cross_entropy(x, t, reduction="none", check_target=False, config=cfg)
                        try_config(rows, op, fn, bits, m, n, ceiling, cfg, picked)
                del x, out, w, t
                torch.cuda.empty_cache()
    H.write_suite("sweep", rows, H.metadata({"ceilings": ceil}), a.out)


if __name__ == "__main__":
    main()

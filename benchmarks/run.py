"""Run benchmark suites on the GPU and write book/data/<suite>.csv + .json.

    python -m benchmarks.run copy reduction rmsnorm softmax cross_entropy hierarchy
    python -m benchmarks.run rmsnorm --quick        # fewer points, for a smoke test
    python -m benchmarks.run rmsnorm --out /tmp/x   # write elsewhere

Every suite measures its ceilings (copy and read-only) in the same run. Peers
(torch eager, torch.compile(dynamic=False), Liger, QuACK) are imported here only.
"""
from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time

import torch

from . import harness as H
from .bytes import bytes_moved
from .peers import HOST_OPS, host_calls, peer_impls

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
OP_NS = [1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
REDUCTION_NS = [1024, 4096, 16384, 65536, 131072, 262144]
TOTAL = 1 << 28  # M * N
#: Bytes the reduction suite reads at every point, in both dtypes (M * N = 2^28 in fp32, 2^29 in
#: bf16): a launch's fixed costs weigh twice as much against bf16's 512 MiB of 2^28 elements, and
#: on the H200 our read probe itself reached 97.3% of its 2 GiB speed over 512 MiB (and 85.3% in one
#: repetition of two) and 99.1-99.2% over 1 GiB (book/data/ceiling_size.csv; chapter 6, section 7;
#: benchmarks/TUNING.md#reduction-bytes).
REDUCTION_BYTES = 1 << 30


def rows_for(n: int, total: int = TOTAL) -> int:
    """M for rows of n elements and M * N = total (at least one row)."""
    return max(1, total // n)


def _graph(fn):
    """Capture fn's launches into a CUDA graph (on a side stream, as torch requires)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def suite_copy(args, ceil):
    from kernels.copy import copy_
    rows = []
    for name, dt in DTYPES.items():
        numel = H.GIB // torch.finfo(dt).bits * 8
        src = torch.randn(numel, device="cuda").to(dt)
        dst = torch.empty_like(src)
        nbytes = 2 * numel * src.element_size()
        rows.append(H.row("copy", "torch", name, 1, numel, nbytes, H.time_ms(lambda: dst.copy_(src)),
                          ceil["copy"], variant="torch copy_"))
        for bits in (16, 32, 64, 128):
            if bits < torch.finfo(dt).bits:
                continue
            for coalesced in (True, False):
                fn = lambda: copy_(dst, src, bits=bits, coalesced=coalesced)
                fn()
                assert torch.equal(dst, src), "copy kernel wrote wrong data"
                dst.fill_(0)
                impl = "ours" if bits == 128 and coalesced else "ours-variant"
                rows.append(H.row("copy", impl, name, 1, numel, nbytes, H.time_ms(fn), ceil["copy"],
                                  variant=f"{bits}-bit{'' if coalesced else ' strided'}", bits=bits,
                                  coalesced=coalesced))
                print(rows[-1], flush=True)
        del src, dst
    return rows


def suite_hierarchy(args, ceil):
    from kernels.hierarchy import compile_chase, compile_smem_probe, make_chain, read_probe
    rows = []
    rows.append(H.row("hbm", "torch", "fp32", 1, 0, 1, 1, ceil["copy"], variant="copy bandwidth (read+write)",
                      tb_per_s_override=ceil["copy"]))
    rows.append(H.row("hbm", "ours", "fp32", 1, 0, 1, 1, ceil["read"], variant="read bandwidth",
                      tb_per_s_override=ceil["read"]))
    # L2: a 16 MiB buffer read over and over stays in the 50 MB L2. One read takes a few
    # microseconds, less than a launch costs the host, so 50 reads are replayed as a graph.
    x = torch.randn(16 << 18, device="cuda")
    out = torch.zeros(1, device="cuda")
    read_probe(x, out)
    graph = _graph(lambda: [read_probe(x, out) for _ in range(50)])
    ms = H.time_ms(graph.replay, warmup=3, rep=20) / 50
    rows.append(H.row("l2", "ours", "fp32", 1, x.numel(), x.numel() * 4, ms, ceil["read"], variant="read bandwidth"))
    # Shared memory: 8 blocks per SM each read 32 KiB of their own buffer 4096 times.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    words, reps = 8192, 4096
    k = compile_smem_probe(words, reps)
    blocks = sms * 8
    ms = H.time_ms(lambda: k(out, blocks, float("nan")), warmup=3, rep=20)
    rows.append(H.row("smem", "ours", "fp32", blocks, words, blocks * 256 * reps * 16, ms, ceil["read"],
                      variant="read bandwidth (all SMs)"))
    # Latency: one thread chasing pointers.
    chains = {
        "hbm": (make_chain(256 << 20, 64), 1 << 20),  # 1 GiB, one hop per 256 B: 256 MiB touched
        "l2": (make_chain(2 << 20, 32), 100000),  # 8 MiB: misses L1, hits L2
        "l1": (make_chain(4096, 32), 200000),  # 16 KiB: hits L1 after the first lap
    }
    for level, (chain, steps) in chains.items():
        kc = compile_chase(False)
        res = torch.zeros(1, dtype=torch.int32, device="cuda")
        ms = H.time_ms(lambda: kc(chain, res, steps), warmup=1, rep=3)
        rows.append(H.row(level, "ours", "int32", 1, chain.numel(), 0, ms, ceil["read"], variant="latency",
                          latency_ns=round(ms * 1e6 / steps, 1)))
        print(rows[-1], flush=True)
    chain = make_chain(1024, 1)
    ks = compile_chase(True, 1024)
    res = torch.zeros(1, dtype=torch.int32, device="cuda")
    steps = 200000
    ms = H.time_ms(lambda: ks(chain, res, steps), warmup=2, rep=7)
    rows.append(H.row("smem", "ours", "int32", 1, 1024, 0, ms, ceil["read"], variant="latency",
                      latency_ns=round(ms * 1e6 / steps, 1)))
    for r in rows:
        if "tb_per_s_override" in r:
            r["tb_per_s"] = round(r.pop("tb_per_s_override"), 4)
            r["frac_of_ceiling"] = round(r["tb_per_s"] / r["ceiling_tb_per_s"], 4)
            r["us"] = ""
        if r["variant"] == "latency":
            r["tb_per_s"] = r["frac_of_ceiling"] = ""
    return rows


# (name, reduce_rows kwargs, largest N it may run)
TIERS = [
    ("thread", dict(max_tier="thread"), 262144),
    ("warp", dict(max_tier="warp"), 262144),
    ("warp (kept)", dict(max_tier="warp", stream=False), 8192),
    ("block (kept)", dict(max_tier="block", stream=False), 262144),
    ("block", dict(max_tier="block"), 262144),
    ("cluster (kept)", dict(stream=False), 262144),
    ("cluster", dict(), 262144),
]


def suite_reduction(args, ceil):
    from kernels.reduction import reduce_rows
    ns = REDUCTION_NS if not args.quick else [1024, 65536, 262144]
    rows = []
    for name, dt in DTYPES.items():
        for n in ns:
            m = rows_for(n, REDUCTION_BYTES // (torch.finfo(dt).bits // 8))
            x = torch.randn(m, n, device="cuda", dtype=dt)
            out = torch.empty(m, device="cuda")
            nbytes = bytes_moved("reduce", m, n, x.element_size())
            ref = x.float().sum(-1)
            rows.append(H.row("reduce_sum", "torch", name, m, n, nbytes,
                              H.time_ms(lambda: torch.sum(x, -1, dtype=torch.float32)), ceil["read"]))
            for tier, kw, nmax in TIERS:
                if n > nmax:
                    continue
                fn = lambda: reduce_rows(x, "sum", out=out, **kw)
                fn()
                err = ((out - ref).abs().max() / ref.abs().max()).item()
                impl = "ours" if tier == "cluster" else "ours-tier"
                rows.append(H.row("reduce_sum", impl, name, m, n, nbytes, H.time_ms(fn), ceil["read"],
                                  variant=tier, max_rel_err=f"{err:.2e}"))
                print(rows[-1], flush=True)
            del x, out
    return rows


#: The shapes suite's row lengths (issue "every N at speed"): two drawn per octave from 2^10 to
#: 2^18 with a fixed seed, at least one of them odd, beside the vocabularies of real models.
SHAPE_SEED = 2026
VOCABULARIES = {"GPT-2": 50257, "Llama 2": 32000, "Llama 3": 128256, "Qwen 2": 151936, "Gemma": 256000,
                "Mistral Nemo": 131072, "T5": 32128}


def shape_ns(seed: int = SHAPE_SEED) -> list[int]:
    """Row lengths for the shapes suite: for each octave [2^k, 2^(k+1)), k = 10..17, one odd N
    and one other N drawn uniformly (seeded), then the vocabularies; sorted, no repeats."""
    import random
    rng = random.Random(seed)
    ns = set(VOCABULARIES.values())
    for k in range(10, 18):
        lo, hi = 1 << k, 1 << (k + 1)
        ns.add(rng.randrange(lo + 1, hi, 2))  # odd
        ns.add(rng.randrange(lo, hi))
    return sorted(ns)


def _filtered(args, ns, dtypes=None):
    """The row lengths and dtypes (default: DTYPES, read at the call) that ``--ns`` and
    ``--dtypes`` keep (both by default)."""
    dtypes = DTYPES if dtypes is None else dtypes
    if getattr(args, "ns", ""):
        keep = {int(v) for v in args.ns.split(",")}
        ns = [n for n in ns if n in keep]
    if getattr(args, "dtypes", ""):
        dtypes = {k: v for k, v in dtypes.items() if k in args.dtypes.split(",")}
    return ns, dtypes


def suite_op(op: str, points=None):
    """Every implementation at every (dtype, N): built and called once (the first call, which
    compiles), then timed in ``args.rounds`` rounds, the order alternating between rounds so
    that no implementation always runs first or last; a row reports the median of its rounds
    (each the median of 20 calls) and every round's time (``rounds_us``). ``points(args)``
    gives the row lengths (default: the powers of two of OP_NS)."""
    def run(args, ceil):
        from kernels import compile as kc
        ns = points(args) if points else OP_NS if not args.quick else [4096, 65536, 262144]
        ns, dtypes = _filtered(args, ns)
        skip = set(filter(None, getattr(args, "skip", "").split(",")))
        ceiling = ceil["read"] if op == "cross_entropy" else ceil["copy"]
        rows, timed = [], getattr(args, "timed", [])
        for name, dt in dtypes.items():
            for n in ns:
                m = rows_for(n)
                nbytes = bytes_moved(op, m, n, torch.finfo(dt).bits // 8)
                first_row = len(rows)
                fns, extras, failed = {}, {}, {}
                for impl, make in peer_impls(op):
                    if impl in skip:
                        continue
                    try:
                        fn = make(m, n, dt)
                        before = len(kc.cache())
                        t0 = time.perf_counter()
                        fn()
                        torch.cuda.synchronize()
                        first = time.perf_counter() - t0
                        extras[impl] = {}
                        if impl == "ours":
                            compiles = len(kc.cache()) - before
                            fn()
                            extras[impl] = {"first_call_s": round(first, 3), "compiles": compiles,
                                            "recompiles_after_first": len(kc.cache()) - before - compiles}
                        fns[impl] = fn
                    except Exception as e:  # a peer that cannot run this size
                        failed[impl] = f"{type(e).__name__}: {str(e)[:80]}"
                times = H.time_rounds(fns, args.rounds, failed=failed)
                for impl, _ in peer_impls(op):
                    if impl in skip:
                        continue
                    if impl in failed:
                        rows.append(H.row(op, impl, name, m, n, nbytes, float("nan"), ceiling, note=failed[impl]))
                    else:
                        rows.append(H.row(op, impl, name, m, n, nbytes, statistics.median(times[impl]), ceiling,
                                          **H.rounds_fields(times, impl),
                                          **extras[impl]))
                    print(rows[-1], flush=True)
                timed.extend(rows[first_row:])
                del fns
                torch.cuda.empty_cache()
        return rows
    return run


HOST_MS = (1, 8, 64, 512)
HOST_NS = (4096, 8192)
HOST_CALLS = 2000


def suite_host_latency(args, ceil):
    """Wall time per call of every public op as a user calls it (default arguments), against
    torch eager and QuACK: HOST_CALLS calls back to back, then one synchronize; the median of
    ``args.rounds`` rounds, the order of the implementations alternating. At these sizes the GPU
    work takes a few microseconds, so this is the host's cost of a call (or the launch's, where
    that is longer)."""
    rows = []
    for op in HOST_OPS:
        for n in HOST_NS:
            for m in HOST_MS:
                calls, failed = {}, {}
                for impl, fn in host_calls(op, m, n, torch.bfloat16):
                    try:
                        for _ in range(20):  # compile and warm up
                            fn()
                        torch.cuda.synchronize()
                        calls[impl] = fn
                    except Exception as e:  # a peer without this op, or not installed
                        failed[impl] = f"{type(e).__name__}: {str(e)[:80]}"
                times = {impl: [] for impl in calls}
                for r in range(args.rounds):
                    for impl in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
                        fn = calls[impl]
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        for _ in range(args.calls):
                            fn()
                        torch.cuda.synchronize()
                        times[impl].append((time.perf_counter() - t0) / args.calls * 1e6)
                for impl in calls:
                    rows.append({"op": op, "impl": impl, "dtype": "bf16", "M": m, "N": n,
                                 "us": round(statistics.median(times[impl]), 2),
                                 "rounds_us": " ".join(f"{v:.2f}" for v in times[impl]), "calls": args.calls})
                    print(rows[-1], flush=True)
                for impl, why in failed.items():
                    rows.append({"op": op, "impl": impl, "dtype": "bf16", "M": m, "N": n, "us": "", "note": why})
    return rows


SUITES = {
    "hierarchy": suite_hierarchy,
    "copy": suite_copy,
    "reduction": suite_reduction,
    "rmsnorm": suite_op("rmsnorm"),
    "layernorm": suite_op("layernorm"),
    "softmax": suite_op("softmax"),
    "cross_entropy": suite_op("cross_entropy"),
    "host_latency": suite_host_latency,
    "shapes": lambda args, ceil: [r for op in (o for o in OP_SUITES if not args.ops or o in args.ops.split(","))
                                  for r in suite_op(op, lambda a: shape_ns() if not a.quick else [4097, 50257])(args, ceil)],
    "backward": lambda args, ceil: __import__("benchmarks.backward", fromlist=["suite"]).suite(args, ceil),
}
OP_SUITES = ("rmsnorm", "layernorm", "softmax", "cross_entropy")


class TimeLimit(BaseException):
    """SIGTERM (what ``timeout`` sends) during a suite (a BaseException, as KeyboardInterrupt is,
    so that the suites' catch of a peer that cannot run a size does not take it)."""


class _Stop:
    """Where SIGTERM finds the run: inside a suite it raises TimeLimit there; anywhere else (the
    ceilings, the metadata, the writing) it is only noted, and the run stops at the next suite."""
    in_suite = False
    asked = False

    @classmethod
    def handler(cls, signum, frame):
        cls.asked = True
        if cls.in_suite:
            cls.in_suite = False
            raise TimeLimit()


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("suites", nargs="+", choices=sorted(SUITES))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--rounds", type=int, default=5,
                   help="rmsnorm, softmax, cross_entropy: rounds of timing a point, the order of the "
                        "implementations alternating (default 5)")
    p.add_argument("--calls", type=int, default=HOST_CALLS, help="host_latency: calls a round (default %(default)s)")
    p.add_argument("--skip", default="", help="backward, shapes and the op suites: implementations left out, "
                   "comma-separated (e.g. torch.compile, whose compile per point can outlast one device call)")
    p.add_argument("--ops", default="", help="backward, shapes: the ops timed, comma-separated (default: all)")
    p.add_argument("--dtypes", default="", help="backward, shapes, op suites: bf16, fp32 or both (default: both)")
    p.add_argument("--ns", default="", help="backward, shapes, op suites: the row lengths timed, comma-separated "
                   "(default: all)")
    a = p.parse_args(argv)
    # A suite stopped by a time limit (SIGTERM) still writes the points it timed, to <suite>.cut.csv
    # and its JSON marked cut_short (the op suites, shapes and backward hand each point's rows to
    # ``a.timed`` as they go); a SIGTERM outside a suite lets the suite's file be written first. The
    # run then exits 124, as ``timeout`` does.
    _Stop.in_suite = _Stop.asked = False
    previous = signal.signal(signal.SIGTERM, _Stop.handler)
    try:
        return _run(a)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(a) -> int:
    ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
    print("ceilings (TB/s):", ceil, flush=True)
    for s in a.suites:
        if _Stop.asked:
            return 124
        t0 = time.time()
        a.timed, cut = [], None
        try:
            _Stop.in_suite = True
            rows = SUITES[s](a, ceil)
        except TimeLimit:
            rows, cut = a.timed, (f"stopped by SIGTERM (a time limit) after {time.time() - t0:.0f} s: the points "
                                  "timed until then")
        finally:
            _Stop.in_suite = False
        if cut and not rows:
            print(f"{s}: stopped by SIGTERM before its first point: nothing written", flush=True)
            return 124
        # the ceilings again at the end, so drift within the run shows
        firsts = [r["first_call_s"] for r in rows if "first_call_s" in r]
        meta_ours = {"max_first_call_s": max(firsts), "recompiles_after_first_call":
                     sum(r.get("recompiles_after_first", 0) for r in rows)} if firsts else {}
        meta = H.metadata({**meta_ours, "suite": s, "copy_ceiling_tb_per_s": ceil["copy"], "read_ceiling_tb_per_s": ceil["read"],
                           "copy_ceiling_end_tb_per_s": None if cut or _Stop.asked else H.copy_ceiling(),
                           "seconds": round(time.time() - t0, 1), **({"cut_short": cut} if cut else {}),
                           **({"rounds": a.rounds, "timing": "median of the rounds (rounds_us), the order of the "
                               "implementations alternating; each round the median of 20 calls after 3 warm-up"}
                              if s in OP_SUITES + ("backward", "shapes") else {}),
                           **({"shape_seed": SHAPE_SEED, "vocabularies": VOCABULARIES} if s == "shapes" else {}),
                           **({"rounds": a.rounds, "timing": f"wall time per call: {a.calls} calls back to "
                               "back then a synchronize, the median of the rounds (rounds_us), the order "
                               "alternating"} if s == "host_latency" else {}),
                           **({"bytes_read": REDUCTION_BYTES} if s == "reduction" else {"total_elements": TOTAL})})
        # (a run cut short is written beside the suite's file, never over it: <suite>.cut.csv)
        path = H.write_suite(f"{s}.cut" if cut else s, rows, meta, a.out)
        print(f"wrote {path} ({len(rows)} rows, {time.time() - t0:.0f} s){' CUT SHORT' if cut else ''}", flush=True)
        if cut or _Stop.asked:
            return 124
    return 0


if __name__ == "__main__":
    sys.exit(main())

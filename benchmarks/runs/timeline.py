"""Where does a launch's fixed cost go? Every block's start and end, from the global timer. (H200)

`wave_tail.py` fitted t = t0 + M b / B through times at many M: at the longest bf16 rows ours
streams as fast as a copy (B) but pays 5-8 us a launch (t0) against copy_'s 2.2, and
cross-entropy 5.4-7.3 us against the read probe's 4.5. Chapter 7 read that as the drain at
the end of a launch (a staged block holds 32-64 KiB from its first load to its last store),
without measuring it. Here the table's kernel of each point is built once more with
``RowKernel.block_start`` / ``block_end`` reading ``%globaltimer``: the first thread of each
block writes when the block started and ended, and its SM. From one launch's blocks:

* ``span``: first block start to last block end; ``outside`` = the launch's CUDA-event time
  minus the span (launch, first block's dispatch, the last stores' flush);
* the bytes each block moves spread evenly over its life give the launch's transfer curve;
  a line through its middle half (25-75% of the bytes) gives the streaming rate ``rate`` (as a
  fraction of the ceiling) and where it meets 0 and all the bytes: ``head`` (first start until
  the line's zero: the first round trips and dispatch) and ``tail`` (the line's end until the
  last block ends: the drain), so that event time = outside + head + bytes / rate + tail;
* block lifetimes (median), blocks in flight at once, and the time from the last block's
  start to the end (``last_start_to_end``).

The clocked kernels are timed beside the plain ones first (``x_plain``: the clocks' own cost), and
beside torch's ``copy_`` (RMSNorm, softmax) or our read probe (cross-entropy, the row sum) over the
same bytes (``ref_us``).
A point's row holds the median of each over LAUNCHES launches; M2OUT names a folder for
timeline.csv (those rows) and timeline_curves.csv (blocks in flight and transfer rate, 0.25 us bins,
of the launch whose time is nearest the clocked kernel's median). ``--log LOG`` prints the rows
again from a run's log, without a GPU.

    bash benchmarks/h200.sh run benchmarks/runs/timeline.py
"""
import ast
import contextlib
import csv
import importlib
import json
import os
import statistics
import sys

import numpy as np
import torch

import cutlass.cute as cute
from cutlass import Int64, const_expr

sys.path.insert(0, ".")
from benchmarks import harness as H  # noqa: E402
from benchmarks.bytes import bytes_moved  # noqa: E402
from benchmarks.run import rows_for  # noqa: E402
from benchmarks.runs.near_misses import make_ours  # noqa: E402
import kernels.compile as C  # noqa: E402

POINTS = ([("rmsnorm", "bf16", n) for n in (1024, 32768, 65536, 131072, 262144)]
          + [("rmsnorm", "fp32", 1024), ("rmsnorm", "fp32", 262144)]
          + [("softmax", "bf16", n) for n in (32768, 65536, 131072, 262144)] + [("softmax", "fp32", 1024)]
          + [("cross_entropy", "bf16", 1 << k) for k in (10, 12, 13, 14, 15, 16, 17, 18)]
          + [("cross_entropy", "fp32", 1024)])
if os.environ.get("POINTS"):
    POINTS = [(op, dt, int(n)) for op, dt, n in (p.split(":") for p in os.environ["POINTS"].split(","))]
#: The row sum at 65,536 bf16 with clusters of 1 to 16 (128 threads a row, four 16-byte accesses a
#: thread a pass, as many passes as the row needs): which SMs each cluster size gets.
CLUSTERS = [int(c) for c in os.environ.get("CLUSTERS", "1,2,4,8,16").split(",") if c]
LAUNCHES = int(os.environ.get("LAUNCHES", "5"))
#: Clocked calls queued before the one recorded, so that it starts right after another (as in the suites).
BEFORE = 3
OUT = os.environ.get("M2OUT", "/tmp")
DT = {"bf16": torch.bfloat16, "fp32": torch.float32}
MODULE = {"rmsnorm": ("kernels.rmsnorm", "RMSNorm"), "softmax": ("kernels.softmax", "Softmax"),
          "cross_entropy": ("kernels.cross_entropy", "CrossEntropy"), "reduce": ("kernels.reduction", "RowReduce")}
MAX_BLOCKS = 1 << 19
BIN_NS = 250


def clocked(base, addr: int):
    """``base`` whose blocks write (start, end, SM) in ns into the int64 buffer at ``addr``: the
    first thread of each block writes its start at once, so that no register holds it."""
    class Clocked(base):
        @cute.jit
        def record(self, tidx, bidx, rank, field):
            if tidx == 0:
                t = cute.make_tensor(cute.make_ptr(Int64, addr, cute.AddressSpace.gmem, assumed_align=16),
                                     cute.make_layout((MAX_BLOCKS, 4), stride=(4, 1)))
                b = bidx * self.cfg.cluster_n + rank
                t[b, field] = cute.arch.globaltimer()
                if const_expr(field == 1):
                    t[b, 2] = Int64(cute.arch.smid())

        @cute.jit
        def block_start(self, tidx, bidx, rank):
            self.record(tidx, bidx, rank, 0)

        @cute.jit
        def block_end(self, tidx, bidx, rank):
            self.record(tidx, bidx, rank, 1)
    return Clocked


@contextlib.contextmanager
def cache(entries: dict):
    """The compile cache holding ``entries`` only, for the duration of the block (what it
    compiles meanwhile is added to ``entries``)."""
    shared = C.cache()
    saved = dict(shared)
    shared.clear()
    shared.update(entries)
    try:
        yield
    finally:
        entries.clear()
        entries.update(shared)
        shared.clear()
        shared.update(saved)


def make_call(op, x, cfg=None):
    """A call of op on x with shape cfg (None: the table's): near_misses' for the three ops."""
    if op == "reduce":
        from kernels.reduction import reduce_rows
        return lambda: reduce_rows(x, "sum", config=cfg)
    return make_ours(op, x, cfg)[0]


def write_csv(f, rows):
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)


def analyse(s, e, nbytes, event_us, ceiling):
    """The summary of one launch from its blocks' starts and ends (ns) and its bytes."""
    t0 = s.min()
    s, e = (s - t0).astype(np.float64), (e - t0).astype(np.float64)
    span = e.max()
    b = nbytes / len(s)  # bytes a block (the blocks of a launch move equal shares)
    nb = int(span // BIN_NS) + 2
    rate = np.zeros(nb + 1)  # bytes per ns, piecewise over bins
    life = np.maximum(e - s, 1.0)
    np.add.at(rate, (s // BIN_NS).astype(int), b / life)
    np.add.at(rate, (e // BIN_NS).astype(int), -b / life)
    rate = np.cumsum(rate)[:nb]
    active = np.zeros(nb + 1)
    np.add.at(active, (s // BIN_NS).astype(int), 1)
    np.add.at(active, (e // BIN_NS).astype(int), -1)
    active = np.cumsum(active)[:nb]
    moved = np.cumsum(rate) * BIN_NS  # transfer curve at the end of each bin
    t = (np.arange(nb) + 1) * BIN_NS
    mid = (moved >= 0.25 * nbytes) & (moved <= 0.75 * nbytes)
    slope, icpt = np.polyfit(t[mid], moved[mid], 1)  # bytes per ns
    head = -icpt / slope
    tail = span - (nbytes - icpt) / slope
    ticks = np.diff(np.unique(np.concatenate([s, e])))
    return {
        "event_us": round(event_us, 2), "span_us": round(span / 1e3, 2), "outside_us": round(event_us - span / 1e3, 2),
        "head_us": round(head / 1e3, 2), "tail_us": round(tail / 1e3, 2),
        "rate": round(slope * 1e9 / 1e12 / ceiling, 4), "stream_us": round(nbytes / slope / 1e3, 2),
        "blocks": len(s), "life_us_median": round(float(np.median(e - s)) / 1e3, 2),
        "in_flight_median": int(np.median(active[mid])), "last_start_to_end_us": round((span - s.max()) / 1e3, 2),
        "timer_tick_ns": int(ticks[ticks > 0].min()) if (ticks > 0).any() else 0,
    }, t, active, rate


#: What each launch's summary gives; a point's row holds the median over its launches.
LAUNCH_FIELDS = ("event_us", "span_us", "outside_us", "head_us", "tail_us", "rate", "stream_us", "life_us_median",
                 "in_flight_median", "last_start_to_end_us", "sms", "blocks_per_sm_min", "blocks_per_sm_max")


def medians(launches) -> dict:
    out = {k: round(statistics.median(float(x[k]) for x in launches), 4 if k == "rate" else 2) for k in LAUNCH_FIELDS}
    out["head_plus_tail_us"] = round(statistics.median(float(x["head_us"]) + float(x["tail_us"]) for x in launches), 2)
    out["launches"] = len(launches)
    return out


def from_log(path) -> list:
    """timeline.csv's rows again from a run's log (its launch and SUMMARY lines), without a GPU."""
    rows, launches = [], []
    for line in open(path):
        if " launch " in line and "{" in line:
            launches.append(ast.literal_eval(line[line.index("{"):]))
        elif line.startswith("SUMMARY "):
            row = ast.literal_eval(line[len("SUMMARY "):])
            rows.append({**{k: v for k, v in row.items() if k not in LAUNCH_FIELDS}, **medians(launches)})
            launches = []
    return rows


def main():
    ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
    print("ceilings", ceil, flush=True)
    buf = torch.zeros(MAX_BLOCKS, 4, dtype=torch.int64, device="cuda")
    rows, curves = [], []
    from kernels.config import RowConfig
    points = [(op, dname, n, None) for op, dname, n in POINTS]
    points += [("reduce", "bf16", 65536, RowConfig(128, 128, c, 8, 4, 65536 // (128 * 8 * 4 * c))) for c in CLUSTERS]
    for op, dname, n, cfg in points:
        dt = DT[dname]
        m = rows_for(n)
        x = torch.randn(m, n, device="cuda", dtype=dt)
        nbytes = bytes_moved(op, m, n, x.element_size())
        ceiling = ceil["read" if op in ("cross_entropy", "reduce") else "copy"]
        call = make_call(op, x, cfg)
        call()  # the plain kernel, compiled into the shared cache
        modname, cls = MODULE[op]
        mod = importlib.import_module(modname)
        base = getattr(mod, cls)
        entries = {}
        setattr(mod, cls, clocked(base, buf.data_ptr()))
        try:
            with cache(entries):
                call()
        finally:
            setattr(mod, cls, base)

        used = next(v for key in entries for v in key if isinstance(v, RowConfig))  # the shape compiled
        blocks = -(-m // used.rows_per_block) * used.cluster_n
        if blocks > MAX_BLOCKS:
            raise ValueError(f"{op} {dname} {n}: {blocks} blocks, more than the clock buffer's {MAX_BLOCKS}")

        def clocked_call():
            with cache(entries):
                call()
        # the same bytes through torch's copy_ (RMSNorm, softmax) or our read probe (the rest)
        if op in ("cross_entropy", "reduce"):
            from kernels.hierarchy import read_probe
            flat, probe_out = x.view(-1), torch.zeros(1, device="cuda")
            ref = lambda: read_probe(flat, probe_out)  # noqa: E731
        else:
            y = torch.empty_like(x)
            ref = lambda: y.copy_(x)  # noqa: E731
        times = H.time_rounds({"plain": call, "clocked": clocked_call, "ref": ref}, rounds=3)
        plain_us, clocked_us, ref_us = (statistics.median(times[k]) * 1e3 for k in ("plain", "clocked", "ref"))
        best, launches = None, []
        for i in range(LAUNCHES):
            buf.zero_()
            a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(BEFORE):  # every launch writes every block's line: the last one's stay
                clocked_call()
            a.record()
            clocked_call()
            z.record()
            torch.cuda.synchronize()
            ev = a.elapsed_time(z) * 1e3
            rec = buf[buf[:, 1] > 0].cpu().numpy()
            summ, t, active, rate = analyse(rec[:, 0], rec[:, 1], nbytes, ev, ceiling)
            per_sm = np.unique(rec[:, 2], return_counts=True)[1]
            summ.update(sms=len(per_sm), blocks_per_sm_min=int(per_sm.min()), blocks_per_sm_max=int(per_sm.max()))
            launches.append({k: float(v) for k, v in summ.items()})
            print(op, dname, n, f"launch {i}", launches[-1], flush=True)
            if best is None or abs(ev - clocked_us) < abs(best[0]["event_us"] - clocked_us):
                best = (summ, t, active, rate)  # the launch nearest the median time
        _, t, active, rate = best
        shape = f"{'table' if cfg is None else 'given'}: cluster {used.cluster_n}, {used.threads_per_row} threads a row"
        row = {"op": op, "dtype": dname, "M": m, "N": n, "shape": shape, "plain_us": round(plain_us, 2),
               "clocked_us": round(clocked_us, 2), "x_plain": round(plain_us / clocked_us, 4),
               "frac_of_ceiling_plain": round(H.tbps(nbytes, plain_us * 1e-3) / ceiling, 4),
               "ref": "read probe" if op in ("cross_entropy", "reduce") else "copy_", "ref_us": round(ref_us, 2),
               "frac_of_ceiling_ref": round(H.tbps(nbytes, ref_us * 1e-3) / ceiling, 4),
               "blocks": int(best[0]["blocks"]), "timer_tick_ns": int(best[0]["timer_tick_ns"])}
        print("SUMMARY", {**row, **launches[-1]}, flush=True)  # from_log reads the launches' lines
        rows.append({**row, **medians(launches)})
        for ti, ai, ri in zip(t, active, rate):
            curves.append({"op": op, "dtype": dname, "N": n, "shape": shape, "t_us": round(ti / 1e3, 3), "blocks_in_flight": int(ai),
                           "tb_per_s": round(ri * 1e9 / 1e12, 4)})
        del x, ref
        torch.cuda.empty_cache()
    for name, data in (("timeline", rows), ("timeline_curves", curves)):
        with open(os.path.join(OUT, f"{name}.csv"), "w", newline="") as f:
            write_csv(f, data)
    with open(os.path.join(OUT, "timeline.json"), "w") as f:
        json.dump(H.metadata({"suite": "timeline", "script": "benchmarks/runs/timeline.py",
                              "copy_ceiling_tb_per_s": ceil["copy"], "read_ceiling_tb_per_s": ceil["read"]}), f, indent=1)
    print("wrote", OUT, flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--log"]:  # python benchmarks/runs/timeline.py --log LOG: the CSV rows again
        write_csv(sys.stdout, from_log(sys.argv[2]))
    else:
        main()

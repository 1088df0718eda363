"""Mamba-2 SSD forward on the GPU: ours (cuTile) against mamba_ssm's Triton and TileGym's cuTile.

    python -m benchmarks.mamba2              # every shape, chunk 64/128/256
    python -m benchmarks.mamba2 --quick      # the first shape only
    python -m benchmarks.mamba2 --shapes 0,3 --chunks 64 --impls ours,triton --out /tmp/x

Writes book/data/mamba2.csv (one row per shape, dtype, chunk, feature set and implementation;
rewritten after every shape, so a run cut short keeps what it measured) and mamba2.json (GPU,
driver, versions, date, commit).

Implementations: ``ours`` (the default ``impl="auto"``: the one-kernel pass where there are
enough sequences, else three kernels; its ``notes`` say which), ``ours_single`` (``impl="single"``,
not run by default), ``ours_fused`` (``impl="fused"``,
three kernels), ``ours_staged`` (``impl="staged"``, five; not run by default), ``triton``
(mamba_ssm's ``mamba_chunk_scan_combined``) and ``tilegym`` (TileGym's cuTile
``mamba2_chunk_forward``); see benchmarks/peers_mamba2.py for how the peers are imported and how
TileGym's contract differs from ours.

Feature sets (column ``features``), on identical inputs:

* ``full``: D, initial states, dt_bias and dt_softplus=True, final states returned: what a Mamba-2
  layer asks for. TileGym applies neither dt_bias nor softplus: its row records that.
* ``tilegym``: what TileGym computes: the same D and initial states, final states returned, and
  dt already through softplus(dt + dt_bias) (computed once, outside the timed region), so no bias
  and no softplus in the kernels. Run by TileGym and by ``ours`` (bf16 only), so the two compare
  on the same work. The math is that of ``full``, so both are checked against one float64 reference.

Each time is the median of CUDA-event-timed calls after warm-up; a peer's first calls (its
autotuning) happen before the timing and are reported in ``first_call_s``. ``kernels`` lists the
GPU kernels of one call and their durations (torch.profiler, mean over a few calls) as
"name:us;name:us". ``rel_err`` is ||out - ref|| / ||ref|| (Frobenius norms) against
``kernels.mamba2.ssd_reference`` in float64 on the GPU, ``rel_err_state`` the same for the final
states. ``gb_per_s`` and ``tflops`` divide ``ssd_bytes_and_flops``'s unavoidable bytes and its
FLOPs by the time. A failing implementation records its error in ``error`` and the run goes on.
TileGym tunes every kernel by an exhaustive search on its first call for each shape (a compile and
a timing per configuration: 185 s for the first shape at chunk 64 on the H200); ``--tilegym-tuned``
limits that to some (shape, chunk) pairs, and elsewhere TileGym runs its first configuration
(``TILEGYM_DISABLE_AUTOTUNE=1``); each TileGym row's ``notes`` say which.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from . import harness as H
from . import peers_mamba2 as peers

# (b, L, h, p, n, g)
SHAPES = [
    (8, 4096, 64, 64, 128, 1),
    (8, 4096, 80, 64, 128, 1),
    (4, 16384, 8, 64, 128, 1),
    (1, 65536, 64, 64, 128, 1),
    (8, 4096, 64, 64, 128, 8),
]
CHUNKS = (64, 128, 256)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
IMPLS = ("ours", "ours_single", "ours_fused", "ours_staged", "triton", "tilegym")
DEFAULT_IMPLS = ("ours", "ours_fused", "triton", "tilegym")
OUR_IMPLS = {"ours": "auto", "ours_fused": "fused", "ours_staged": "staged", "ours_single": "single"}
FP32_IMPLS = ("ours", "ours_fused", "ours_staged", "triton")  # fp32 runs on the first shape only
COLUMNS = ["b", "L", "h", "p", "n", "g", "dtype", "chunk", "features", "impl", "us", "gb_per_s", "tflops",
           "rel_err", "rel_err_state", "first_call_s", "reps", "kernels", "notes", "error"]
#: The SSD pass's settings the suite runs (``--segments`` changes them); None: the library's.
CONFIG = None
REF_CHUNK = 64  # the float64 reference's chunk: any gives the same numbers, 64 needs the least memory


# ----------------------------------------------------------------------------- inputs

def make_inputs(b, L, h, p, n, g, dtype, *, seed=0, device="cuda", D=True, initial_states=True, dt_bias=True,
                dt_softplus=True):
    """Random inputs in the ranges of a Mamba-2 layer at initialisation, identical for every impl.

    x, B, C ~ N(0, 1) in ``dtype``; A = -exp(U(log 1, log 16)) per head (fp32), as mamba_ssm's
    Mamba2 module initialises A_log; the step sizes are that module's: a pre-activation
    dt_raw ~ 0.5 N(0, 1) (fp32) and dt_bias = softplus^-1(dt0) with dt0 = exp(U(log 1e-3,
    log 1e-1)), so softplus(dt_raw + dt_bias) is positive and around dt0. D ~ N(0, 1) per head
    and initial states ~ N(0, 1) (b, h, p, n), both fp32.

    The flags choose what is passed: with ``dt_softplus`` but no ``dt_bias`` the bias is folded
    into dt; without ``dt_softplus``, dt is softplus(dt_raw + dt_bias) computed here (positive), and
    ``dt_bias`` then adds a small positive bias (dt0 / 2). Returns ([x, dt, A, B, C], kwargs).
    """
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)

    def loguniform(lo, hi, size):
        u = torch.rand(size, generator=gen, device=device, dtype=torch.float32)
        return torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))

    x = randn(b, L, h, p).to(dtype)
    B, C = randn(b, L, g, n).to(dtype), randn(b, L, g, n).to(dtype)
    A = -loguniform(1.0, 16.0, h)
    dt0 = loguniform(1e-3, 1e-1, h)
    bias = dt0 + torch.log(-torch.expm1(-dt0))  # softplus(bias) = dt0
    dt_raw = 0.5 * randn(b, L, h)
    if dt_softplus:
        dt, bias_arg = (dt_raw, bias) if dt_bias else (dt_raw + bias, None)
    else:
        dt, bias_arg = F.softplus(dt_raw + bias), (0.5 * dt0 if dt_bias else None)
    kw = dict(D=randn(h) if D else None, initial_states=randn(b, h, p, n) if initial_states else None,
              dt_bias=bias_arg, dt_softplus=dt_softplus)
    return [x, dt, A, B, C], kw


def as_tilegym_features(args, kw):
    """The same problem without dt_bias and softplus: dt replaced by softplus(dt + dt_bias)."""
    x, dt, A, B, C = args
    dt_eff = dt + kw["dt_bias"] if kw["dt_bias"] is not None else dt
    dt_eff = F.softplus(dt_eff) if kw["dt_softplus"] else dt_eff
    return [x, dt_eff.contiguous(), A, B, C], {**kw, "dt_bias": None, "dt_softplus": False}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||, Frobenius norms, in float64."""
    ref = ref.to(torch.float64)
    return ((out.to(torch.float64) - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def reference(args, kw):
    """Float64 output and final states of ``kernels.mamba2.ssd_reference`` on the GPU."""
    from kernels.mamba2 import ssd_reference

    x, dt, A, B, C = args
    return ssd_reference(x.double(), dt, A, B.double(), C.double(), REF_CHUNK, **kw, return_final_states=True)


# ----------------------------------------------------------------------------- implementations

def make_call(impl, args, kw, chunk):
    """A zero-argument callable returning (out, final_states); ValueError if impl can't run this."""
    x, dt, A, B, C = args
    if impl in OUR_IMPLS:
        from kernels.mamba2 import mamba_chunk_scan_combined

        mode = OUR_IMPLS[impl]
        return lambda: mamba_chunk_scan_combined(x, dt, A, B, C, chunk, **kw, return_final_states=True, impl=mode,
                                                 config=CONFIG)
    if impl == "triton":
        f = peers.mamba_ssm_triton()
        return lambda: f(x, dt, A, B, C, chunk, D=kw["D"], dt_bias=kw["dt_bias"], initial_states=kw["initial_states"],
                         dt_softplus=kw["dt_softplus"], return_final_states=True)
    if impl == "tilegym":
        f = peers.tilegym_forward()
        targs = peers.tilegym_args(*args, chunk, **kw)  # converted here, outside the timed region
        return lambda: f(*targs)
    raise ValueError(f"unknown impl {impl!r}")


def kernel_times(fn, calls: int = 3) -> str:
    """GPU kernels of one call of fn and their mean durations: "name:us;name:us" (torch.profiler)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:  # kernels, memsets, copies (not their launches)
            name = e.name.replace(";", ",").replace(":", ".")[:80]
            total[name] = total.get(name, 0.0) + e.time_range.elapsed_us()
    return ";".join(f"{name}:{us / calls:.1f}" for name, us in sorted(total.items(), key=lambda kv: -kv[1]))


def reps_for(nbytes: int) -> int:
    """Timed calls: 50 for the smaller problems, down to 20 for the largest (about 30 GB moved)."""
    return max(20, min(50, int(30e9 / max(nbytes, 1))))


def measure(impl, args, kw, chunk, ref, reps):
    """One row's measured fields for impl on these inputs."""
    row = {}
    t0 = time.perf_counter()
    fn = make_call(impl, args, kw, chunk)
    out, state = fn()  # compiles / autotunes
    for _ in range(2):  # a peer's autotuner may run on more than the first call
        fn()
    torch.cuda.synchronize()
    row["first_call_s"] = round(time.perf_counter() - t0, 2)
    row["rel_err"] = f"{rel_err(out, ref[0]):.3e}"
    row["rel_err_state"] = f"{rel_err(state, ref[1]):.3e}" if state is not None else ""
    del out, state
    ms = H.time_ms(fn, warmup=3, rep=reps)
    row["us"] = round(ms * 1e3, 1)
    row["reps"] = reps
    row["kernels"] = kernel_times(fn)
    return row


# ----------------------------------------------------------------------------- the suite

def runs(shape_ids, impls, fp32=True):
    """(shape index, dtype name, impls) in the order measured: bf16 everywhere, fp32 on shape 0."""
    for i in shape_ids:
        yield i, "bf16", list(impls)
        if fp32 and i == 0 and any(m in FP32_IMPLS for m in impls):
            yield i, "fp32", [m for m in impls if m in FP32_IMPLS]


TILEGYM_SET_IMPLS = ("ours", "tilegym")  # who runs the feature set "tilegym" (ours to compare on it)


def tilegym_tuning(i, chunk, tuned):
    """Set TileGym's autotune switch for SHAPES[i] at this chunk; returns the row's note.
    ``tuned``: set of (shape index, chunk) where TileGym autotunes (minutes each: a compile and
    a timing per configuration), None for everywhere."""
    on = tuned is None or (i, chunk) in tuned
    os.environ["TILEGYM_DISABLE_AUTOTUNE"] = "0" if on else "1"
    return "autotuned" if on else "autotune off (TileGym's first configuration)"


def measure_shape(i, dname, impls, log=print, chunks=CHUNKS, tuned=None, done=None):
    """Rows for SHAPES[i] in dtype dname: every chunk, feature set and implementation.
    ``done(rows)``, if given, is called with the rows so far after each one (the suite writes
    its files then, so a run cut short by a time limit keeps every row it measured)."""
    from kernels.mamba2 import ssd_bytes_and_flops
    from kernels.mamba2.ssd import DEFAULT, choose_impl, single_segments, sm_count

    b, L, h, p, n, g = SHAPES[i]
    dtype = DTYPES[dname]
    base = dict(b=b, L=L, h=h, p=p, n=n, g=g, dtype=dname)
    try:
        args, kw = make_inputs(b, L, h, p, n, g, dtype, seed=i)
        targs, tkw = as_tilegym_features(args, kw)
        ref = reference(args, kw)  # one float64 reference: both feature sets compute the same thing
    except Exception as e:  # noqa: BLE001  (out of memory for the inputs or the reference)
        log(f"shape {i} {dname}: inputs/reference failed: {type(e).__name__}: {e}")
        torch.cuda.empty_cache()
        return [{**base, "error": f"inputs/reference: {type(e).__name__}: {str(e)[:160]}"}]
    rows = []
    for chunk in chunks:
        cost = ssd_bytes_and_flops(b, L, h, p, n, g, chunk, torch.finfo(dtype).bits // 8, initial_states=True)
        sets = [("full", (args, kw))] + ([("tilegym", (targs, tkw))] if "tilegym" in impls else [])
        for features, (a, k) in sets:
            for impl in impls:
                row = {**base, "chunk": chunk, "features": features, "impl": impl}
                if impl == "tilegym" and features == "full":
                    row["error"] = f"unsupported: TileGym applies no {' and no '.join(peers.TILEGYM_LACKS)}"
                elif features == "tilegym" and impl not in TILEGYM_SET_IMPLS:
                    continue
                else:
                    if impl == "tilegym":
                        row["notes"] = tilegym_tuning(i, chunk, tuned)
                    elif impl == "ours":
                        if torch.cuda.is_available():  # which pass "auto" took, on this GPU's SMs
                            sms = sm_count(torch.device("cuda"))
                            row["notes"] = "impl=" + choose_impl(b, h, torch.finfo(dtype).bits, L, chunk, sms=sms,
                                                                 cfg=CONFIG or DEFAULT)
                            segs = single_segments(b, h, L, chunk, sms, CONFIG or DEFAULT)
                            if row["notes"] == "impl=single" and segs > 1:
                                row["notes"] += f" segments={segs}"
                    try:
                        row.update(measure(impl, a, k, chunk, ref, reps_for(cost.bytes)))
                        row["gb_per_s"] = round(cost.bytes / (row["us"] * 1e-6) / 1e9, 1)
                        row["tflops"] = round(cost.flops / (row["us"] * 1e-6) / 1e12, 2)
                    except Exception as e:  # noqa: BLE001  (a failing impl is a result)
                        row["error"] = f"{type(e).__name__}: {str(e)[:200]}".replace("\n", " ")
                rows.append(row)
                log({key: v for key, v in row.items() if key != "kernels"})
                if done is not None:
                    done(rows)
                torch.cuda.empty_cache()
    return rows


ROW_KEY = ("b", "L", "h", "p", "n", "g", "dtype", "chunk", "features", "impl")
PART_KEYS = ("commit", "date", "shapes", "chunks", "impls", "tilegym_autotuned_at", "segments", "cutile",
             "copy_ceiling_tb_per_s", "seconds")


def write(rows, meta, out_dir=None, append=False):
    """book/data/mamba2.csv and .json (through harness's metadata). With ``append``, rows of
    earlier runs are kept unless this run measured the same (shape, dtype, chunk, features,
    impl), and the JSON lists every run that contributed under ``parts`` (what each measured,
    when, at which commit)."""
    out_dir = Path(out_dir or H.DATA)
    out_dir.mkdir(parents=True, exist_ok=True)
    path, meta_path = out_dir / "mamba2.csv", out_dir / "mamba2.json"
    key = lambda r: tuple(str(r.get(c, "")) for c in ROW_KEY)
    part = {k: meta.get(k) for k in PART_KEYS}
    parts = [part]
    if append and path.exists():
        ours = {key(r) for r in rows}
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if key(r) not in ours] + rows
        if meta_path.exists():
            with open(meta_path) as f:
                old = json.load(f)
            earlier = old.get("parts") or [{k: old.get(k) for k in PART_KEYS}]
            parts = [p for p in earlier if (p.get("date"), p.get("commit")) != (part["date"], part["commit"])] + parts
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(meta_path, "w") as f:
        json.dump({**meta, "parts": parts}, f, indent=2)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the first shape only")
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES (default: all)")
    ap.add_argument("--chunks", default=",".join(map(str, CHUNKS)), help="comma-separated chunk sizes")
    ap.add_argument("--tilegym-tuned", default=None,
                    help="where TileGym autotunes, as shape:chunk pairs (e.g. 0:64,0:128); elsewhere its "
                         "first configuration. Default: everywhere")
    ap.add_argument("--impls", default=",".join(DEFAULT_IMPLS), help=f"comma-separated subset of {','.join(IMPLS)}")
    ap.add_argument("--no-fp32", action="store_true", help="bf16 only (fp32 runs on the first shape by default)")
    ap.add_argument("--append", action="store_true", help="keep the rows already in the CSV that this run does not re-measure")
    ap.add_argument("--out", default=None, help="folder for mamba2.csv/.json (default book/data)")
    ap.add_argument("--segments", type=int, default=None,
                    help="SSDConfig.segments for the one-kernel pass (0: chosen by scan_segments, "
                         "N: forced; default: off, as in the library)")
    a = ap.parse_args(argv)
    if a.segments is not None:
        global CONFIG
        from dataclasses import replace
        from kernels.mamba2.ssd import DEFAULT as _DEFAULT
        CONFIG = replace(_DEFAULT, segments=a.segments)
    shape_ids = [0] if a.quick else ([int(s) for s in a.shapes.split(",")] if a.shapes else range(len(SHAPES)))
    impls = [m for m in a.impls.split(",") if m]
    chunks = [int(c) for c in a.chunks.split(",")]
    tuned = None if a.tilegym_tuned is None else {tuple(map(int, p.split(":"))) for p in a.tilegym_tuned.split(",") if p}
    unknown = set(impls) - set(IMPLS)
    if unknown:
        ap.error(f"unknown impls {sorted(unknown)}")
    from kernels.mamba2.tile_env import have_tile

    t0 = time.time()
    ceiling = H.copy_ceiling()
    cutile = have_tile()[1]
    print(f"copy ceiling: {ceiling:.2f} TB/s; {cutile}", flush=True)
    meta = H.metadata({"suite": "mamba2", "shapes": [SHAPES[i] for i in shape_ids],
                       "impls": impls, **peers.peer_versions(), "cutile": cutile,
                       "chunks": chunks, "tilegym_autotuned_at": [] if "tilegym" not in impls else
                       "everywhere" if tuned is None else sorted(tuned),
                       "copy_ceiling_tb_per_s": ceiling, "segments": a.segments})
    rows, path = [], None

    def checkpoint(shape_rows):
        """Write every row so far (after each row: a run cut short keeps what it measured)."""
        meta["seconds"] = round(time.time() - t0, 1)
        return write(rows + shape_rows, meta, a.out, a.append)

    for i, dname, dimpls in runs(shape_ids, impls, not a.no_fp32):
        rows += measure_shape(i, dname, dimpls, log=lambda r: print(r, flush=True), chunks=chunks, tuned=tuned,
                              done=checkpoint)
        path = checkpoint([])
    print(summary(rows))
    print(f"wrote {path} ({len(rows)} rows, {time.time() - t0:.0f} s)", flush=True)
    return 0


def summary(rows) -> str:
    """One line per (shape, dtype, chunk, feature set): each impl's us and rel_err, "-" if it failed."""
    lines, table = ["us (rel_err) per implementation:"], {}
    for r in rows:
        key = "b={b} L={L} h={h} p={p} n={n} g={g} {dtype} chunk={chunk} {features}".format(
            **{c: r.get(c, "") for c in ("b", "L", "h", "p", "n", "g", "dtype", "chunk", "features")})
        cell = f"{r['us']} ({r['rel_err']})" if r.get("us") not in (None, "") else "-"
        table.setdefault(key, []).append(f"{r.get('impl', '')} {cell}")
    lines += [f"  {key}: " + ", ".join(cells) for key, cells in table.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""Timing, ceilings and result files shared by every suite.

* ``time_ms``: CUDA events around each call, median of many calls after warm-up.
* ``copy_ceiling`` / ``read_ceiling``: the memory system's two speeds of light,
  measured in the same run as what is compared with them.
* ``write_suite``: ``book/data/<suite>.csv`` (one row per measurement, at least
  op, impl, dtype, M, N, tb_per_s, ceiling_tb_per_s) and ``<suite>.json`` (GPU,
  driver, versions, date, commit).
"""
from __future__ import annotations

import csv
import datetime as _dt
import importlib.metadata as md
import json
import os
import statistics
import subprocess
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parent.parent / "book" / "data"
GIB = 1 << 30


def time_ms(fn, warmup: int = 5, rep: int = 30) -> float:
    """Median milliseconds of ``fn()``, each call between its own pair of CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_rounds(fns: dict, rounds: int, warmup: int = 3, rep: int = 20, failed: dict | None = None) -> dict:
    """Each of ``fns`` (key -> callable) timed ``rounds`` times with ``time_ms``, the order of the
    keys reversed every other round, so that none is always first or last; returns key -> the
    list of its milliseconds. With ``failed`` (a dict), a callable that raises is left out of the
    later rounds and its error recorded there instead of raised."""
    times = {k: [] for k in fns}
    order = list(fns)
    for r in range(rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            if failed is not None and k in failed:
                continue
            try:
                times[k].append(time_ms(fns[k], warmup=warmup, rep=rep))
            except Exception as e:
                if failed is None:
                    raise
                failed[k] = f"{type(e).__name__}: {str(e)[:80]}"
    return times


def rounds_fields(times: dict, key, ref=None) -> dict:
    """Row fields for ``key`` timed in rounds (``time_rounds``): every round in microseconds
    (``rounds_us``) and, beside ``ref``, ref's median over key's (``x_<ref>``) and the rounds
    in which key was the faster (``rounds_ahead_of_<ref>``)."""
    fields = {"rounds_us": " ".join(f"{v * 1e3:.2f}" for v in times[key])}
    if ref is not None:
        fields[f"x_{ref}"] = round(statistics.median(times[ref]) / statistics.median(times[key]), 4)
        fields[f"rounds_ahead_of_{ref}"] = sum(a < b for a, b in zip(times[key], times[ref]))
    return fields


def tbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e12


def copy_ceiling(nbytes: int = 2 * GIB) -> float:
    """torch's device-to-device copy of an nbytes buffer; bytes read + written."""
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    del src, dst
    return tbps(2 * nbytes, ms)


def read_ceiling(nbytes: int = 2 * GIB) -> float:
    """The faster of our read probe and torch.sum over an nbytes fp32 buffer (bytes read)."""
    from kernels.hierarchy import read_probe
    x = torch.randn(nbytes // 4, device="cuda")
    out = torch.zeros(1, device="cuda")
    best = max(tbps(nbytes, time_ms(lambda: read_probe(x, out))), tbps(nbytes, time_ms(lambda: x.sum())))
    del x
    return best


def package_version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def metadata(extra: dict | None = None) -> dict:
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        smi = ""
    p = torch.cuda.get_device_properties(0)
    meta = {
        "gpu": torch.cuda.get_device_name(0),
        "sm_count": p.multi_processor_count,
        "nvidia_smi": smi,
        "driver": smi.split(",")[1].strip() if smi.count(",") >= 1 else None,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "nvidia-cutlass-dsl": package_version("nvidia-cutlass-dsl"),
        "quack-kernels": package_version("quack-kernels"),
        "liger-kernel": package_version("liger-kernel"),
        "triton": package_version("triton"),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": os.environ.get("GIT_COMMIT") or _git_commit(),
    }
    meta.update(extra or {})
    return meta


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=DATA.parent.parent).stdout.strip() or None
    except OSError:
        return None


COLUMNS = ["op", "impl", "variant", "dtype", "M", "N", "us", "tb_per_s", "ceiling_tb_per_s", "frac_of_ceiling"]


def row(op, impl, dtype, m, n, nbytes, ms, ceiling, variant="", **extra) -> dict:
    t = tbps(nbytes, ms) if ms == ms and ms > 0 else float("nan")
    r = {"op": op, "impl": impl, "variant": variant, "dtype": dtype, "M": m, "N": n, "us": round(ms * 1e3, 2),
         "tb_per_s": round(t, 4), "ceiling_tb_per_s": round(ceiling, 4), "frac_of_ceiling": round(t / ceiling, 4)}
    r.update(extra)
    return r


def write_suite(suite: str, rows: list[dict], meta: dict, out_dir: Path | None = None) -> Path:
    out_dir = Path(out_dir or DATA)
    out_dir.mkdir(parents=True, exist_ok=True)
    cols = COLUMNS + sorted({k for r in rows for k in r} - set(COLUMNS))
    path = out_dir / f"{suite}.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    with open(out_dir / f"{suite}.json", "w") as f:
        json.dump(meta, f, indent=2)
    return path

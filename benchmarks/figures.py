"""Load the committed results (book/data) and draw the book's figures from them.

Chapters call these instead of re-measuring: the book renders without a GPU, and
every number it shows comes from a file written by ``python -m benchmarks.run``.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "book" / "data"

STYLE = {  # impl -> (colour, marker)
    "ours": ("#d62728", "o"),
    "ours-out": ("#d62728", "o"),  # the same kernels, into a given output
    "ours-none": ("#d62728", "o"),  # cross-entropy's losses unreduced
    "quack": ("#1f77b4", "s"),
    "liger": ("#2ca02c", "^"),
    "torch.compile": ("#9467bd", "D"),
    "torch": ("#7f7f7f", "v"),
}


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return int(f) if f.is_integer() and "." not in str(v) and "e" not in str(v) else f


def load(suite: str):
    """(rows, meta): the CSV rows of a suite with numbers parsed, and its metadata."""
    with open(DATA / f"{suite}.csv") as f:
        rows = [{k: _num(v) for k, v in r.items()} for r in csv.DictReader(f)]
    with open(DATA / f"{suite}.json") as f:
        meta = json.load(f)
    return rows, meta


def select(rows, **where):
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def caption(meta: dict) -> str:
    return (f"Measured on {meta['gpu']} (driver {meta.get('driver')}), torch {meta['torch']}, "
            f"nvidia-cutlass-dsl {meta['nvidia-cutlass-dsl']}, {meta['date'][:10]}.")


def table(rows, cols, fmt=None) -> str:
    """A plain-text table of ``cols`` of ``rows`` (for printing in a cell)."""
    fmt = fmt or {}
    cells = [[(fmt.get(c, "{}").format(r.get(c, "")) if r.get(c, "") != "" else "") for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(line, widths)) for line in cells]
    return "\n".join(lines)


def bandwidth_vs_n(ax, rows, series, ceiling=None, ceiling_label="ceiling", title=None):
    """Plot TB/s against N, one line per series.

    series: list of (label, filter dict) picked from ``rows``; a series whose point is
    NaN (the implementation could not run that N) is marked with an x on the axis.
    """
    for label, where in series:
        pts = sorted((r["N"], r["tb_per_s"]) for r in select(rows, **where))
        if not pts:
            continue
        colour, marker = STYLE.get(where.get("impl", ""), (None, "o"))
        ok = [(n, t) for n, t in pts if isinstance(t, float) and not math.isnan(t)]
        bad = [n for n, t in pts if not (isinstance(t, float) and not math.isnan(t))]
        line, = ax.plot([n for n, _ in ok], [t for _, t in ok], marker=marker, color=colour, label=label)
        if bad:
            ax.plot(bad, [0.02] * len(bad), "x", color=line.get_color(), ms=9,
                    label=f"{label}: cannot run", transform=ax.get_xaxis_transform())
    if ceiling:
        ax.axhline(ceiling, ls="--", color="k", lw=1, label=f"{ceiling_label} {ceiling:.2f} TB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("row length N (elements)")
    ax.set_ylabel("bandwidth (TB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return ax

"""GPU-free: benchmarks/runs/timeline.py's split of a launch (outside the blocks, head, stream,
tail) on synthetic blocks, and the committed book/data/timeline.csv against the logs it was
rebuilt from (chapters 7-9 quote it)."""
import csv
from pathlib import Path

import numpy as np
import pytest

from benchmarks.runs import timeline

ROOT = Path(__file__).resolve().parent.parent


def test_analyse_splits_a_launch():
    # 4,000 blocks of 1 MB, 100 at a time, each 10 us: a steady 10 TB/s; the first wave starts
    # 2 us late on half its blocks, so the line through the middle meets zero after the start
    rng = np.random.default_rng(0)
    life = 10_000
    s = np.array([(i // 100) * life + rng.integers(0, 64) for i in range(4000)], dtype=np.int64)
    s[:50] += 2_000
    e = s + life
    ceiling = 10.0  # TB/s
    summ, *_ = timeline.analyse(s, e, 4000 * 1e6, (e.max() - s.min()) / 1e3 + 3.0, ceiling)
    assert summ["outside_us"] == pytest.approx(3.0, abs=1e-6)
    assert summ["rate"] == pytest.approx(1.0, abs=0.01)
    assert summ["span_us"] == pytest.approx(400.0, abs=0.2)
    assert summ["head_us"] + summ["tail_us"] == pytest.approx(summ["span_us"] - summ["stream_us"], abs=1e-6)
    assert summ["in_flight_median"] == 100 and summ["blocks"] == 4000


def test_committed_rows_are_the_logs_medians():
    with open(ROOT / "book" / "data" / "timeline.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows
    logs = {c: timeline.from_log(ROOT / "benchmarks" / "runs" / "logs" / f"timeline_{c}.log")
            for c in {r["commit"] for r in rows}}
    for r in rows:
        same = [g for g in logs[r["commit"]] if (g["op"], g["dtype"], g["N"], g["shape"]) ==
                (r["op"], r["dtype"], int(r["N"]), r["shape"])]
        assert len(same) == 1, r
        for k in ("outside_us", "head_plus_tail_us", "rate", "sms", "plain_us", "frac_of_ceiling_ref"):
            assert float(r[k]) == pytest.approx(float(same[0][k])), (r["op"], r["N"], k)

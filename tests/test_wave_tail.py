"""GPU-free: the line fitted by benchmarks/runs/wave_tail.py (time against rows at a fixed row
length), on a synthetic series and on the committed CSVs whose fits chapters 7-9 quote."""
import csv
from pathlib import Path

import pytest

from benchmarks.runs import wave_tail

ROOT = Path(__file__).resolve().parent.parent


def test_fit_recovers_a_line():
    ceiling = 4.0  # TB/s
    n, t0 = 262144, 7.5  # a bf16 softmax row moves 2 * n * 2 bytes
    rate = 0.95 * ceiling  # TB/s
    rows = [dict(op="softmax", dtype="bf16", N=n, impl="ours", M=m, us=t0 + m * 4 * n / (rate * 1e6),
                 ceiling_tb_per_s=ceiling) for m in range(512, 1537, 16)]
    rows[3]["us"] += 1.0  # one off-line point shows as the largest residual
    (got_t0, got_rate, resid), = wave_tail.fit(rows).values()
    assert got_t0 == pytest.approx(t0, abs=0.1) and got_rate == pytest.approx(0.95, abs=1e-3)
    assert 0.9 < resid < 1.0


# (CSV, op, dtype, N, impl) -> (launch cost in us, streaming rate in %) as the chapters quote them
QUOTED = {
    ("wave_tail", "rmsnorm", "bf16", 262144, "ours"): (8.4, 98.8),
    ("wave_tail", "rmsnorm", "bf16", 262144, "copy_"): (2.2, 99.0),
    ("wave_tail", "rmsnorm", "bf16", 65536, "ours"): (5.3, 99.0),
    ("wave_tail", "rmsnorm", "fp32", 262144, "ours"): (10.7, 95.6),
    ("wave_tail", "softmax", "bf16", 262144, "ours"): (7.5, 98.7),
    ("wave_tail", "softmax", "fp32", 262144, "ours"): (6.6, 98.6),
    ("wave_tail_ce", "cross_entropy", "bf16", 262144, "ours"): (7.3, 100.7),
    ("wave_tail_ce", "cross_entropy", "bf16", 262144, "read probe"): (4.6, 101.0),
    ("wave_tail_ce", "cross_entropy", "bf16", 1024, "ours"): (5.4, 98.2),
}


@pytest.mark.parametrize("key", list(QUOTED), ids=lambda k: "-".join(map(str, k)))
def test_committed_fits_match_what_the_chapters_quote(key):
    name, *series = key
    with open(ROOT / "book" / "data" / f"{name}.csv") as f:
        fits = wave_tail.fit(list(csv.DictReader(f)))
    t0, rate, _ = fits[tuple(series)]
    want_t0, want_rate = QUOTED[key]
    assert round(t0, 1) == want_t0 and round(100 * rate, 1) == want_rate

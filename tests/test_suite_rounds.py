"""The suites' timing protocol (benchmarks.run.suite_op), without a GPU: every implementation is
timed in alternating rounds, a row reports the median of its rounds, and a peer that cannot run
a size gets a row with its error instead of a time."""
import argparse

import pytest
import torch

import benchmarks.harness as H
import benchmarks.run as run


def test_rounds_alternate_and_rows_report_their_median(monkeypatch):
    calls = []

    def make(name, fail_at=None):
        def build(m, n, dt):
            if fail_at is not None and n >= fail_at:
                raise RuntimeError(f"{name} stops below {fail_at}")
            return lambda: calls.append(name)
        return build

    monkeypatch.setattr(run, "peer_impls", lambda op: [("ours", make("ours")), ("peer", make("peer")),
                                                       ("small", make("small", fail_at=4096))])
    monkeypatch.setattr(run, "OP_NS", [1024, 4096])
    monkeypatch.setattr(run, "DTYPES", {"bf16": torch.bfloat16})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    # each timing is the next of a fixed sequence per implementation, so the median is known
    seqs = {"ours": iter([3.0, 1.0, 2.0, 5.0, 4.0] * 2), "peer": iter([9.0, 7.0, 8.0, 6.0, 10.0] * 2),
            "small": iter([1.0, 1.0, 1.0, 1.0, 1.0])}
    order = []

    def fake_time(fn, warmup=5, rep=30):
        calls.clear()
        fn()
        order.append(calls[0])
        return next(seqs[calls[0]])

    monkeypatch.setattr(H, "time_ms", fake_time)
    rows = run.suite_op("rmsnorm")(argparse.Namespace(quick=False, rounds=5), {"copy": 4.0, "read": 4.5})
    # N = 1024: three implementations, five rounds, the order reversed every other round
    assert order[:15] == ["ours", "peer", "small", "small", "peer", "ours"] * 2 + ["ours", "peer", "small"]
    by = {(r["impl"], r["N"]): r for r in rows}
    assert by[("ours", 1024)]["us"] == 3000.0 and by[("peer", 1024)]["us"] == 8000.0
    assert by[("ours", 1024)]["rounds_us"] == "3000.00 1000.00 2000.00 5000.00 4000.00"
    assert by[("ours", 1024)]["first_call_s"] >= 0 and by[("ours", 1024)]["recompiles_after_first"] == 0
    # N = 4096: the peer that cannot run it gets a row with no time and its error
    small = by[("small", 4096)]
    assert small["us"] != small["us"] and "stops below 4096" in small["note"]
    assert [r["impl"] for r in rows if r["N"] == 4096] == ["ours", "peer", "small"]
    assert order[15:] == ["ours", "peer", "peer", "ours", "ours", "peer", "peer", "ours", "ours", "peer"]


@pytest.mark.parametrize("rounds", [1, 2])
def test_one_or_two_rounds_time_each_implementation_that_often(monkeypatch, rounds):
    monkeypatch.setattr(run, "peer_impls", lambda op: [("ours", lambda m, n, dt: (lambda: None)),
                                                       ("peer", lambda m, n, dt: (lambda: None))])
    monkeypatch.setattr(run, "OP_NS", [1024])
    monkeypatch.setattr(run, "DTYPES", {"fp32": torch.float32})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(H, "time_ms", lambda fn, warmup=5, rep=30: 0.5)
    rows = run.suite_op("cross_entropy")(argparse.Namespace(quick=False, rounds=rounds), {"copy": 4.0, "read": 4.5})
    assert [len(r["rounds_us"].split()) for r in rows] == [rounds, rounds]
    assert all(r["ceiling_tb_per_s"] == 4.5 for r in rows)  # cross-entropy against the read ceiling


def test_time_rounds_records_a_failing_implementation_and_times_the_rest(monkeypatch):
    monkeypatch.setattr(H, "time_ms", lambda fn, warmup=3, rep=20: fn())

    def broken():
        raise RuntimeError("cannot launch at this size")
    failed = {}
    times = H.time_rounds({"a": lambda: 1.0, "b": broken, "c": lambda: 2.0}, 4, failed=failed)
    assert times == {"a": [1.0] * 4, "b": [], "c": [2.0] * 4}
    assert failed == {"b": "RuntimeError: cannot launch at this size"}
    with pytest.raises(RuntimeError, match="cannot launch"):
        H.time_rounds({"b": broken}, 1)


def test_rounds_fields_against_a_reference():
    times = {"ours": [0.001, 0.003, 0.002], "quack": [0.002, 0.002, 0.002]}
    f = H.rounds_fields(times, "ours", "quack")
    assert f == {"rounds_us": "1.00 3.00 2.00", "x_quack": 1.0, "rounds_ahead_of_quack": 1}
    assert H.rounds_fields(times, "quack") == {"rounds_us": "2.00 2.00 2.00"}


def test_a_suite_cut_short_by_its_time_limit_writes_what_it_timed(monkeypatch, tmp_path):
    """SIGTERM (``timeout``'s signal) in the middle of a suite: the points timed before it are
    written, the JSON says the run was cut short, and the run exits 124; the previous handler of
    SIGTERM is back afterwards."""
    import json
    import os
    import signal

    monkeypatch.setattr(run, "peer_impls", lambda op: [("ours", lambda m, n, dt: (lambda: None))])
    monkeypatch.setattr(run, "OP_NS", [1024, 4096, 8192])
    monkeypatch.setattr(run, "DTYPES", {"bf16": torch.bfloat16})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(H, "copy_ceiling", lambda: 4.0)
    monkeypatch.setattr(H, "read_ceiling", lambda: 4.5)
    monkeypatch.setattr(H, "metadata", lambda extra=None: dict(extra or {}))
    timed_ns = []

    def fake_time(fn, warmup=5, rep=30):
        if len(timed_ns) == 2:  # the third point: the time limit
            os.kill(os.getpid(), signal.SIGTERM)
        return 1.0

    real_row = H.row

    def row(op, impl, dtype, m, n, *args, **kw):
        timed_ns.append(n)
        return real_row(op, impl, dtype, m, n, *args, **kw)

    monkeypatch.setattr(H, "time_ms", fake_time)
    monkeypatch.setattr(H, "row", row)
    before = signal.getsignal(signal.SIGTERM)
    assert run.main(["rmsnorm", "--out", str(tmp_path), "--rounds", "1"]) == 124
    assert signal.getsignal(signal.SIGTERM) is before
    assert not (tmp_path / "rmsnorm.csv").exists()  # (beside the suite's file, never over it)
    lines = (tmp_path / "rmsnorm.cut.csv").read_text().splitlines()
    assert len(lines) == 3 and [ln.split(",")[5] for ln in lines[1:]] == ["1024", "4096"]
    meta = json.loads((tmp_path / "rmsnorm.cut.json").read_text())
    assert "SIGTERM" in meta["cut_short"] and meta["copy_ceiling_end_tb_per_s"] is None


def test_a_time_limit_outside_a_suite_lets_it_be_written(monkeypatch, tmp_path):
    """SIGTERM while the suite's results are being written (here: in its closing metadata): the
    whole suite is written to its own file, the next suite does not start, and the run exits 124;
    SIGTERM before a suite's first point writes nothing."""
    import os
    import signal

    monkeypatch.setattr(run, "SUITES", {"a": lambda args, ceil: [{"op": "a", "N": 1}],
                                        "b": lambda args, ceil: [{"op": "b", "N": 1}]})
    monkeypatch.setattr(H, "copy_ceiling", lambda: 4.0)
    monkeypatch.setattr(H, "read_ceiling", lambda: 4.5)

    def metadata(extra=None):
        os.kill(os.getpid(), signal.SIGTERM)
        return dict(extra or {})
    monkeypatch.setattr(H, "metadata", metadata)
    assert run.main(["a", "b", "--out", str(tmp_path)]) == 124
    assert (tmp_path / "a.csv").exists() and not (tmp_path / "b.csv").exists()

    def stopped(args, ceil):
        os.kill(os.getpid(), signal.SIGTERM)
        return []
    monkeypatch.setattr(run, "SUITES", {"a": stopped})
    assert run.main(["a", "--out", str(tmp_path / "empty")]) == 124
    assert not (tmp_path / "empty").exists()

"""GPU-free: the Mamba-2 suite's bookkeeping (benchmarks/mamba2.py): what a run appended to an
earlier one keeps, and which TileGym rows were autotuned."""
import csv
import json
import os

from benchmarks import mamba2 as S


def _row(impl, chunk, us, features="full"):
    return dict(b=8, L=4096, h=64, p=64, n=128, g=1, dtype="bf16", chunk=chunk, features=features, impl=impl, us=us)


def test_append_replaces_only_what_the_new_run_measured(tmp_path):
    first = [_row("ours", 64, 1.0), _row("triton", 64, 2.0), _row("tilegym", 64, 3.0, "tilegym")]
    S.write(first, {"commit": "a", "date": "d1", "shapes": [S.SHAPES[0]]}, tmp_path)
    S.write([_row("tilegym", 64, 2.5, "tilegym")], {"commit": "b", "date": "d2", "shapes": [S.SHAPES[0]]}, tmp_path,
            append=True)
    with open(tmp_path / "mamba2.csv") as f:
        rows = {(r["impl"], r["features"]): float(r["us"]) for r in csv.DictReader(f)}
    assert rows == {("ours", "full"): 1.0, ("triton", "full"): 2.0, ("tilegym", "tilegym"): 2.5}
    meta = json.load(open(tmp_path / "mamba2.json"))
    assert [(p["commit"], p["date"]) for p in meta["parts"]] == [("a", "d1"), ("b", "d2")]
    # the suite writes after every shape: the same run written twice is one part
    S.write([_row("tilegym", 128, 9.0, "tilegym")], {"commit": "b", "date": "d2"}, tmp_path, append=True)
    assert len(json.load(open(tmp_path / "mamba2.json"))["parts"]) == 2


def test_without_append_the_run_stands_alone(tmp_path):
    S.write([_row("ours", 64, 1.0)], {"commit": "a", "date": "d1"}, tmp_path)
    S.write([_row("triton", 64, 2.0)], {"commit": "b", "date": "d2"}, tmp_path)
    with open(tmp_path / "mamba2.csv") as f:
        assert [r["impl"] for r in csv.DictReader(f)] == ["triton"]
    assert [p["commit"] for p in json.load(open(tmp_path / "mamba2.json"))["parts"]] == ["b"]


def test_tilegym_autotunes_only_where_asked(monkeypatch):
    monkeypatch.delenv("TILEGYM_DISABLE_AUTOTUNE", raising=False)
    assert S.tilegym_tuning(0, 64, {(0, 64)}) == "autotuned" and os.environ["TILEGYM_DISABLE_AUTOTUNE"] == "0"
    assert S.tilegym_tuning(1, 64, {(0, 64)}).startswith("autotune off")
    assert os.environ["TILEGYM_DISABLE_AUTOTUNE"] == "1"
    assert S.tilegym_tuning(3, 256, None) == "autotuned"


def test_each_measured_row_is_handed_on_at_once(monkeypatch, tmp_path):
    """measure_shape calls ``done`` after every row, so the suite writes its files before the next
    (minutes-long) measurement: a run cut short by a time limit keeps what it measured."""
    monkeypatch.setattr(S, "make_inputs", lambda *a, **k: ((), {}))
    monkeypatch.setattr(S, "as_tilegym_features", lambda a, k: (a, k))
    monkeypatch.setattr(S, "reference", lambda a, k: None)
    measured = []

    def fake_measure(impl, a, k, chunk, ref, reps):
        if impl == "tilegym" and chunk == 128:
            raise KeyboardInterrupt  # the time limit, during TileGym's tuning at the second chunk
        measured.append((impl, chunk))
        return {"us": 1.0 + len(measured), "rel_err": "1e-3"}

    monkeypatch.setattr(S, "measure", fake_measure)
    meta = {"commit": "c", "date": "d"}
    written = []

    def done(rows):
        S.write(rows, meta, tmp_path)
        written.append(len(rows))

    try:
        S.measure_shape(3, "bf16", ["ours", "tilegym"], log=lambda r: None, chunks=(64, 128), done=done)
    except KeyboardInterrupt:
        pass
    assert written == list(range(1, len(written) + 1))  # after every row
    with open(tmp_path / "mamba2.csv") as f:
        kept = [(r["impl"], r["chunk"], r["features"]) for r in csv.DictReader(f)]
    # chunk 64 whole (TileGym's row of the full features is its "unsupported" note), chunk 128 up to the cut
    assert kept == [("ours", "64", "full"), ("tilegym", "64", "full"), ("ours", "64", "tilegym"),
                    ("tilegym", "64", "tilegym"), ("ours", "128", "full"), ("tilegym", "128", "full"),
                    ("ours", "128", "tilegym")]

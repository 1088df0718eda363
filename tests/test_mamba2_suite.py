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

"""The book's exercises: every solution passes its check, every scaffold fails it.

Each exercise of a chapter (book/NN_name.myst.md) is an `exercise` directive with a label, a
code cell tagged `scaffold`, the solution's code cells between `solution-start <label>` and
`solution-end`, and a code cell tagged `check` (book/checks/__init__.py says how to write
one). For each, in a fresh namespace, with book/ as the working directory as in Jupyter:

* the chapter's cells tagged `setup`, then the solution, then the check: it must pass;
* the setup cells, then the scaffold (which must run), then the check: it must fail, with an
  AssertionError or a compile error (a check that cannot fail checks nothing).

Without a GPU the checks compile for sm_90a and skip their launches; with one they launch too.
"""
import contextlib
import io
import linecache
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"

# Chapters taught as a course: each has at least two exercises with scaffold, solution and check.
COURSE = ["01_memory_hierarchy", "02_coalescing", "03_thread_reduction", "04_warp_reduction", "05_block_reduction", "06_cluster_reduction", "07_rmsnorm", "08_softmax", "09_cross_entropy", "10_backward", "11_mamba2_ssd", "12_beyond_one_gpu"]
MIN_EXERCISES = 2

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # the DSL reads its target once, when it is first imported
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


@dataclass
class Exercise:
    chapter: str
    label: str
    scaffold: list = field(default_factory=list)  # (cell index, source)
    solution: list = field(default_factory=list)
    check: list = field(default_factory=list)


_EXERCISE = re.compile(r"^(:{3,}|`{3,})\{exercise\}.*?^:label:\s*(\S+)", re.M | re.S)
_START = re.compile(r"^(:{3,}|`{3,})\{solution-start\}\s+(\S+)", re.M)
_END = re.compile(r"^(:{3,}|`{3,})\{solution-end\}", re.M)


def parse(md: Path):
    """(setup cells, exercises) of a chapter: the cells as (index, source), in order."""
    cells = jupytext.read(md).cells
    setup, exercises, current, in_solution = [], [], None, False
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            for m in _EXERCISE.finditer(cell.source):
                current = Exercise(md.name.removesuffix(".myst.md"), m.group(2))
                exercises.append(current)
            start = _START.search(cell.source)
            if start:
                assert current is not None and start.group(2) == current.label, (
                    f"{md.name}: cell {i} starts the solution of {start.group(2)}, "
                    f"not of the exercise before it ({current and current.label})")
                in_solution = True
            if _END.search(cell.source):
                assert in_solution, f"{md.name}: cell {i} ends a solution that never started"
                in_solution = False
            continue
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        item = (i, cell.source)
        if "setup" in tags:
            assert not in_solution, f"{md.name}: setup cell {i} inside a solution"
            setup.append(item)
        if in_solution:
            current.solution.append(item)
        elif "scaffold" in tags:
            assert current is not None and not current.scaffold, f"{md.name}: scaffold cell {i} without its exercise"
            current.scaffold.append(item)
        elif "check" in tags:
            assert current is not None and not current.check, f"{md.name}: check cell {i} without its exercise"
            current.check.append(item)
    assert not in_solution, f"{md.name}: a solution is never ended"
    return setup, exercises


CHAPTERS = {md.name.removesuffix(".myst.md"): parse(md) for md in sorted(BOOK.glob("*.myst.md"))}
CASES = [(ex.chapter, ex.label) for _, exercises in CHAPTERS.values() for ex in exercises]


def _exercise(chapter, label):
    return next(ex for ex in CHAPTERS[chapter][1] if ex.label == label)


def test_course_chapters_have_exercises():
    """Every chapter of COURSE has at least two exercises, each with its three parts."""
    for chapter in COURSE:
        assert chapter in CHAPTERS, f"COURSE lists {chapter}, which has no book/{chapter}.myst.md"
        setup, exercises = CHAPTERS[chapter]
        assert setup, f"{chapter}: no cell tagged `setup` (the imports its exercises need)"
        assert len(exercises) >= MIN_EXERCISES, f"{chapter}: {len(exercises)} exercises, fewer than {MIN_EXERCISES}"
        for ex in exercises:
            missing = [part for part in ("scaffold", "solution", "check") if not getattr(ex, part)]
            assert not missing, f"{chapter}: exercise {ex.label} has no {' or '.join(missing)}"


def test_exercise_labels_are_unique():
    labels = [label for _, label in CASES]
    assert len(labels) == len(set(labels)), sorted(x for x in labels if labels.count(x) > 1)


def _run(chapter, cells):
    """Execute (index, source) cells in one fresh namespace, as a notebook kernel would (each
    cell's source registered with linecache, where the DSL reads a kernel's source back);
    returns what they printed."""
    ns = {"__name__": "__main__"}
    out = io.StringIO()
    for index, source in cells:
        name = f"<{chapter} cell {index}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        with contextlib.redirect_stdout(out):
            exec(compile(source, name, "exec"), ns)
    return out.getvalue()


@pytest.fixture
def in_book(monkeypatch):
    """The working directory and import path of a chapter executed in book/."""
    monkeypatch.chdir(BOOK)
    for path in (str(ROOT), str(BOOK)):
        if path not in sys.path:
            monkeypatch.syspath_prepend(path)
    import matplotlib
    matplotlib.use("Agg")


def _skip_without_tile(chapter, label):
    """Skip, with cuTile's reason, an exercise whose check compiles a cuTile kernel
    (``ch11.bmm_chunk``) where cuTile's compiler is missing (a machine without the ``tile``
    extra): the check cannot say anything about the solution there."""
    from kernels.mamba2.tile_env import have_tile
    ex = _exercise(chapter, label)
    if any("ch11.bmm_chunk" in source for _, source in ex.check):
        ok, why = have_tile()
        if not ok:
            pytest.skip(f"cuTile is not usable here: {why}")


def _failures():
    from cutlass.base_dsl.common import DSLBaseError
    return (AssertionError, DSLBaseError)


@pytest.mark.parametrize("chapter, label", CASES, ids=[label for _, label in CASES])
def test_solution_passes_its_check(chapter, label, in_book):
    _skip_without_tile(chapter, label)
    ex = _exercise(chapter, label)
    printed = _run(chapter, CHAPTERS[chapter][0] + ex.solution + ex.check)
    assert "PASS" in printed, f"{label}: the check printed no PASS line:\n{printed}"


@pytest.mark.parametrize("chapter, label", CASES, ids=[label for _, label in CASES])
def test_scaffold_fails_its_check(chapter, label, in_book):
    _skip_without_tile(chapter, label)
    ex = _exercise(chapter, label)
    setup = CHAPTERS[chapter][0]
    _run(chapter, setup + ex.scaffold)  # the scaffold itself runs harmlessly
    with pytest.raises(_failures()) as failure:
        _run(chapter, setup + ex.scaffold + ex.check)
    assert str(failure.value).strip(), f"{label}: the check failed the scaffold without saying why"

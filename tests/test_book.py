"""The book: it builds without warnings, its notebook pairs agree, and its
chapters are stored executed. None of this needs a GPU."""

import os
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
MYST = sorted(BOOK.glob("*.myst.md"))


def _ids(paths):
    return [p.name for p in paths]


def _toc_files(node):
    """Every `file:` entry of _toc.yml (paths without extension, relative to ROOT)."""
    if isinstance(node, dict):
        if "file" in node:
            yield node["file"]
        if "root" in node:
            yield node["root"]
        for value in node.values():
            yield from _toc_files(value)
    elif isinstance(node, list):
        for value in node:
            yield from _toc_files(value)


TOC_FILES = list(dict.fromkeys(_toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))))


@pytest.mark.skipif(
    os.environ.get("SKIP_BOOK_BUILD") == "1", reason="SKIP_BOOK_BUILD=1"
)
def test_book_builds_without_warnings(tmp_path):
    """`jupyter-book build -W -n` from the stored outputs, as `make book` runs it."""
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run(
        [str(jupyter_book), "build", str(ROOT), "--all", "-W", "-n", "--keep-going",
         "--path-output", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    assert (tmp_path / "_build" / "html" / "index.html").exists(), log[-3000:]


def test_toc_entries_exist():
    """Every TOC entry is a page or notebook in the repository."""
    missing = [f for f in TOC_FILES
               if not any((ROOT / f).with_suffix(s).exists() for s in (".md", ".ipynb"))]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


def test_every_notebook_is_in_the_toc():
    """A chapter left out of _toc.yml would silently not be built."""
    listed = {(ROOT / f).resolve() for f in TOC_FILES}
    unlisted = [p.name for p in NOTEBOOKS if p.with_suffix("").resolve() not in listed]
    assert not unlisted, f"add these to _toc.yml: {unlisted}"


def _cells(path):
    return [(c.cell_type, c.source.strip()) for c in jupytext.read(path).cells]


@pytest.mark.parametrize("md", MYST, ids=_ids(MYST))
def test_myst_twin_matches_notebook(md):
    """book/x.myst.md and book/x.ipynb hold the same cells (run `make sync`)."""
    ipynb = md.with_name(md.name.removesuffix(".myst.md") + ".ipynb")
    assert ipynb.exists(), f"{md.name} has no {ipynb.name}: run `make sync`"
    assert _cells(md) == _cells(ipynb), (
        f"{md.name} and {ipynb.name} differ: run `make sync`, then re-execute "
        f"{ipynb.name} if code changed"
    )


@pytest.mark.parametrize(
    "entry", [f for f in TOC_FILES if (ROOT / f).with_suffix(".ipynb").exists()]
)
def test_toc_notebook_has_myst_twin(entry):
    """Every notebook in the TOC is edited through its book/x.myst.md twin."""
    md = (ROOT / f"{entry}.myst.md")
    assert md.exists(), f"{entry}.ipynb has no {md.name}: run `jupytext --sync {entry}.ipynb`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_stored_executed(path):
    """Every code cell ran, top to bottom in one kernel, without error."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    hint = f"re-execute: jupyter nbconvert --to notebook --execute --inplace book/{path.name}"
    counts = [c.get("execution_count") for c in code]
    assert None not in counts, f"{path.name}: cells never run ({hint})"
    assert counts == sorted(set(counts)), f"{path.name}: cells run out of order {counts} ({hint})"
    assert any(c.outputs for c in code), f"{path.name}: no outputs stored ({hint})"
    errors = [o.get("ename") for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: stored errors {errors}"


def _source_listings(cell):
    """The code listings a stored cell shows: each IPython ``Code`` display (its text/plain is
    the source), and each block of a printed ``inspect.getsource`` that starts like code."""
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if 'class="highlight"' in data.get("text/html", ""):
            yield data["text/plain"]
        elif out.get("output_type") == "stream" and "getsource" in cell.source:
            for block in out["text"].split("\n\n"):
                if block.strip().startswith(("def ", "class ", "@", "#")):
                    yield block


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_stored_source_listings_match_the_code(nb):
    """A chapter that shows our code shows today's: every stored listing is a verbatim part of
    kernels/ or benchmarks/ (a change to a shown function means re-executing, or at least
    re-rendering, the chapter's listing)."""
    code = "\n".join(p.read_text() for d in ("kernels", "benchmarks") for p in (ROOT / d).rglob("*.py"))
    cells = [c for c in nbformat.read(nb, 4).cells if c.cell_type == "code"]
    stale = [listing.strip("\n")[:80] for c in cells for listing in _source_listings(c)
             if listing.strip("\n") not in code]
    assert not stale, f"{nb.name} shows code that is no longer in the repository: {stale}"

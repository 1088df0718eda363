"""The book: it builds without warnings, its notebook pairs agree, its chapters are
stored executed, its figures have captions and alt text, the rendered pages read well in a
real browser (Debian's Chromium, headless: tests/_browser.py), and the GitHub Pages workflow
builds it as `make book` does. None of this needs a GPU."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

import _browser

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


BOOK_BUILD = ["build", ".", "--all", "-W", "-n", "--keep-going"]  # as `make book` runs it
SKIP_BUILD = os.environ.get("SKIP_BOOK_BUILD") == "1"
SCREENSHOTS = ROOT / "_build" / "screenshots"


@pytest.fixture(scope="session")
def book_build(tmp_path_factory):
    """`jupyter-book build -W -n` from the stored outputs, once a session: (returncode, log, html)."""
    if SKIP_BUILD:
        pytest.skip("SKIP_BOOK_BUILD=1")
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run(
        [str(jupyter_book), *BOOK_BUILD, "--path-output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    return result.returncode, result.stdout + result.stderr, out / "_build" / "html"


def test_book_builds_without_warnings(book_build):
    """`jupyter-book build -W -n` from the stored outputs, as `make book` runs it."""
    returncode, log, html = book_build
    assert returncode == 0, log[-6000:]
    assert (html / "index.html").exists(), log[-3000:]


@pytest.fixture(scope="session")
def book_html(book_build):
    """The built book's HTML folder; skips when the build failed (its own test says why)."""
    returncode, _, html = book_build
    if returncode != 0 or not (html / "index.html").exists():
        pytest.skip("the book did not build (see test_book_builds_without_warnings)")
    return html


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


#: Chapters whose cells tagged `gpu` may be stored pending (never run, no outputs): new or changed since
#: their last execution on an H200, they wait for the next one. Every other chapter is stored
#: executed in full.
PENDING_GPU: set = set()


def _pending(c) -> bool:
    return "gpu" in c.metadata.get("tags", []) and c.get("execution_count") is None and not c.outputs


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_stored_executed(path):
    """Every code cell ran, top to bottom in one kernel, without error; in a chapter of
    PENDING_GPU, a cell tagged `gpu` may instead be pending until the chapter runs on a GPU
    (and such a chapter must still have one, so that the list cannot go stale)."""
    nb = nbformat.read(path, as_version=4)
    pending = path.name in PENDING_GPU
    if pending:
        assert any(_pending(c) for c in nb.cells if c.cell_type == "code"), f"{path.name}: nothing pending; " \
            "take it out of PENDING_GPU"
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip() and not (pending and _pending(c))]
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


# --- headings, figures: checked in the sources ---------------------------------------------

def _markdown_lines(md):
    """The lines of a .myst.md outside its fenced blocks (code cells, code examples)."""
    fence = None
    for line in md.read_text().splitlines():
        mark = re.match(r"^(`{3,}|~{3,})", line)
        if fence is None and mark:
            fence = mark.group(1)
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None:
            yield line


@pytest.mark.parametrize("md", MYST, ids=_ids(MYST))
def test_headings_are_not_numbered_by_hand(md):
    """The TOC numbers every section ("8.2. One pass"); a number written in the heading too
    shows twice ("8.2. 2. One pass")."""
    numbered = [line for line in _markdown_lines(md) if re.match(r"^#{1,6} +\d+(\.\d+)*\.? ", line)]
    assert not numbered, f"{md.name}: drop the hand-written numbers of {numbered}"


def _figure_cells(nb):
    return [(i, c) for i, c in enumerate(nbformat.read(nb, 4).cells) if c.cell_type == "code"
            and any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
                    for o in c.get("outputs", []))]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_figure_has_a_caption_and_alt_text(nb):
    """Each cell that draws a figure carries, in its metadata (the `mystnb` block of its
    code-cell in the .myst.md), a caption (which numbers the figure), a name, and alt text that
    describes the figure; set as metadata, they need no re-execution."""
    bare = []
    for i, cell in _figure_cells(nb):
        meta = cell.metadata.get("mystnb", {})
        figure, image = meta.get("figure", {}), meta.get("image", {})
        alt = str(image.get("alt", ""))
        if not figure.get("caption") or not figure.get("name") or len(alt.split()) < 8:
            bare.append(i)
    assert not bare, (f"{nb.name}: cells {bare} draw a figure without mystnb.figure.caption/name "
                      "and mystnb.image.alt (a sentence or more)")


def test_figure_names_are_unique():
    """Figure names are cross-reference targets: one name, one figure, in the whole book."""
    names = [c.metadata["mystnb"]["figure"]["name"] for nb in NOTEBOOKS for _, c in _figure_cells(nb)
             if c.metadata.get("mystnb", {}).get("figure", {}).get("name")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


# --- the GitHub Pages workflow and the light book build -------------------------------------

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def _workflow_steps():
    flow = yaml.safe_load(WORKFLOW.read_text())
    return flow, [step for job in flow["jobs"].values() for step in job.get("steps", [])]


def test_pages_workflow_has_its_steps():
    """checkout, setup-python, the book build, upload-pages-artifact, deploy-pages, in order."""
    flow, steps = _workflow_steps()
    uses = [step.get("uses", "").split("@")[0] for step in steps]
    wanted = ["actions/checkout", "actions/setup-python", "actions/upload-pages-artifact",
              "actions/deploy-pages"]
    assert [u for u in uses if u in wanted] == wanted, uses
    build = [i for i, step in enumerate(steps) if "run" in step and
             ("make book" in step["run"] or "jupyter-book build" in step["run"])]
    assert build and uses.index("actions/setup-python") < build[0] < uses.index(
        "actions/upload-pages-artifact"), "the book must be built between setup-python and the upload"
    upload = steps[uses.index("actions/upload-pages-artifact")]
    assert upload.get("with", {}).get("path", "").rstrip("/") == "_build/html", upload
    perms = flow.get("permissions", {})
    assert perms.get("pages") == "write" and perms.get("id-token") == "write", perms


def _make_book_recipe():
    """The commands `make book` runs, as make prints them (without running them)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-n", "-B", "book"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pages_workflow_builds_as_make_book_does():
    """The site is what `make book` builds: the workflow runs `make book`, or the same
    jupyter-book command with the same requirements file."""
    _, steps = _workflow_steps()
    runs = "\n".join(step.get("run", "") for step in steps)
    if re.search(r"^\s*make book\s*$", runs, re.M):
        return
    recipe = _make_book_recipe()
    command = re.search(r"jupyter-book build[^\n]*", recipe).group(0)
    assert command in runs, f"the workflow does not run {command!r}"
    assert "requirements-book.txt" in runs, "the workflow must install requirements-book.txt"


def test_make_book_installs_only_what_rendering_needs():
    """`make book` installs requirements-book.txt alone, into .venv-book, and runs the same
    build as the test above; that file names neither torch nor the DSL."""
    recipe = _make_book_recipe()
    installs = [line for line in recipe.splitlines() if "pip install" in line]
    assert installs and all("-r requirements-book.txt" in line and ".venv-book/" in line
                            for line in installs), installs
    assert " ".join(["jupyter-book", *BOOK_BUILD]) in recipe, recipe
    names = [re.split(r"[<>=!~\[; ]", line.strip())[0].lower()
             for line in (ROOT / "requirements-book.txt").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith(("#", "-"))]
    heavy = [n for n in names if n in ("torch", "nvidia-cutlass-dsl", "apache-tvm-ffi", "cuda-tile")
             or n.startswith("nvidia-")]
    assert not heavy, f"requirements-book.txt must not install {heavy}"


def test_readme_first_screen():
    """What the project is, and the two commands, before anything else."""
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:25])
    assert "make book" in first and "make test" in first, first
    assert "github.io" in first, "the README's first screen links the published site"


# --- the rendered book, in Chromium ---------------------------------------------------------

PAGES = [f"{entry}.html" for entry in TOC_FILES]
needs_chromium = pytest.mark.skipif(_browser.missing() is not None, reason=_browser.missing() or "")


@pytest.fixture(scope="module")
def browser():
    with _browser.chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def served(book_html):
    with _browser.serve(book_html) as base:
        yield base


@needs_chromium
@pytest.mark.parametrize("page", PAGES)
def test_page_reads_well_in_chromium(page, served, browser):
    """Each page at a 1400 px window, offline: no console error, every image loaded, every
    figure captioned and described, math typeset by the MathJax the book carries, no heading
    numbered twice, no code or output block wider than the page. A full-page screenshot of each
    is left in _build/screenshots/ to look at."""
    shot = SCREENSHOTS / (Path(page).stem + ".png")
    problems = _browser.check_page(browser, served + page, screenshot=shot)
    assert not problems, f"{page}:\n  " + "\n  ".join(problems)
    assert shot.stat().st_size > 10_000


def test_book_serves_mathjax_itself(book_html):
    """Pages load MathJax from the build (_static/mathjax), never from a CDN."""
    chapter = book_html / "book" / "07_rmsnorm.html"
    scripts = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', chapter.read_text())
    assert scripts and all("://" not in s for s in scripts), scripts
    assert (book_html / "_static" / "mathjax" / "tex-chtml.js").exists()


# The checker itself: it must fail a page whose image is missing or whose math does not render.

@pytest.fixture
def broken(book_html, tmp_path):
    """A copy of the built book to break, and a function that checks one page of it."""
    copy = tmp_path / "html"
    shutil.copytree(book_html, copy)

    def check(page, driver):
        with _browser.serve(copy) as base:
            return _browser.check_page(driver, base + page)

    return copy, check


@needs_chromium
def test_checker_reports_a_missing_image(broken, browser):
    copy, check = broken
    page = copy / "book" / "08_softmax.html"
    image = re.search(r'<img[^>]*src="\.\./(_images/[^"]+)"', page.read_text()).group(1)
    (copy / image).unlink()
    problems = check("book/08_softmax.html", browser)
    assert any(p.startswith("image not loaded") and image in p for p in problems), problems


@needs_chromium
@pytest.mark.parametrize("chapter, pattern, replacement, expected", [
    # MathJax's script gone
    ("07_rmsnorm", r'<script[^>]*mathjax/tex-chtml\.js[^>]*></script>', "", ("math not rendered",)),
    # MathJax from the CDN the book used to load it from, unreachable in the check, as offline
    ("09_cross_entropy", r'src="[^"]*mathjax/tex-chtml\.js[^"]*"',
     'src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"', ("math not rendered", "console error")),
])
def test_checker_reports_math_that_does_not_render(broken, browser, chapter, pattern, replacement, expected):
    copy, check = broken
    page = copy / "book" / f"{chapter}.html"
    page.write_text(re.sub(pattern, replacement, page.read_text()))
    problems = check(f"book/{chapter}.html", browser)
    for prefix in expected:
        assert any(p.startswith(prefix) for p in problems), problems


@needs_chromium
def test_checker_reports_twice_numbered_headings_wide_blocks_and_bare_figures(broken, browser):
    copy, check = broken
    page = copy / "book" / "03_thread_reduction.html"
    text = page.read_text()
    heading = re.search(r'(<h2><span class="section-number">[\d.]+ </span>)', text).group(1)
    text = text.replace(heading, heading + "1. ", 1)
    text = re.sub(r'(<img alt=")[^"]*(" src="(\.\./_images/[^"]+)")', r"\1\3\2", text, count=1)
    text = text.replace("</article>", '<div class="highlight"><pre style="white-space: pre">'
                        + "x = 1  # " + "long " * 400 + "</pre></div></article>", 1)
    page.write_text(text)
    problems = check("book/03_thread_reduction.html", browser)
    assert any(p.startswith("heading numbered twice") for p in problems), problems
    assert any(p.startswith("block wider than the page") for p in problems), problems
    assert any(p.startswith("image without alt text") for p in problems), problems


@needs_chromium
def test_checker_passes_the_untouched_copy(broken, browser):
    """The copy the tests above break reads well before it is broken."""
    _, check = broken
    assert check("book/08_softmax.html", browser) == []


#: A commit hash (7 to 40 hex digits, letters and digits both; not a PTX float literal such as
#: 0f3f800000 or 0d3ff0000000000000) or a run's name ("run K").
_PROVENANCE = re.compile(r"\b(?!0f[0-9a-f]{8}\b|0d[0-9a-f]{16}\b)(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b|\brun [A-Z]\b")
#: The most words of prose a chapter may have: the course's chapters 1-6, then the rest.
MAX_WORDS = {**{f"{i:02d}": 4000 for i in range(1, 7)}, "default": 4500}


def _prose_words(md):
    text = "\n".join(c.source for c in jupytext.read(md).cells if c.cell_type == "markdown")
    return len(re.findall(r"[A-Za-z][A-Za-z'-]*", re.sub(r"`[^`]*`|\$[^$]*\$", " ", text)))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_chapter_speaks_to_readers(nb):
    """No commit hash or run name in a chapter, in its prose or in what its cells print
    (provenance stays in book/data's JSON), and at most MAX_WORDS words of prose."""
    found = []
    for i, c in enumerate(nbformat.read(nb, 4).cells):
        texts = [c.source] if c.cell_type == "markdown" else [
            o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in c.get("outputs", [])]
        found += [(i, m.group(0)) for t in texts for m in _PROVENANCE.finditer("".join(t))]
    assert not found, f"{nb.name}: commit hashes or run names {found[:5]}"
    md = nb.with_suffix(".myst.md")
    limit = MAX_WORDS.get(nb.name[:2], MAX_WORDS["default"])
    assert _prose_words(md) <= limit, f"{md.name}: {_prose_words(md)} words of prose, more than {limit}"

"""Shared test setup: the `gpu` marker and fixture (see tests/_gpu.py), and the summary
line that says how many tests were skipped for want of a GPU."""

import pytest

from _gpu import HAS_GPU, requires_gpu


def pytest_collection_modifyitems(config, items):
    """Give every test marked `gpu` the skip of `requires_gpu` when there is no GPU."""
    if HAS_GPU:
        return
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(requires_gpu)


@pytest.fixture
def gpu():
    """The CUDA device, skipping the test where there is none."""
    if not HAS_GPU:
        pytest.skip(requires_gpu.kwargs["reason"])
    import torch

    return torch.device("cuda")


@pytest.fixture(autouse=True)
def no_bad_input_left_unreported():
    """A kernel's report of bad input (kernels.errors) must be consumed by the test that caused
    it: one left raised after a test is a failure (and is cleared, so the next test starts clean)."""
    yield
    if not HAS_GPU:
        return
    from kernels.errors import FLAGS, BadInputError
    if FLAGS.host is None:
        return
    import torch
    torch.cuda.synchronize()
    try:
        FLAGS.raise_if_set()
    except BadInputError as e:
        pytest.fail(f"a kernel reported bad input that the test did not expect: {e}")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """On a machine without a GPU, say in the summary how many GPU tests were skipped (after
    the list of skip reasons, before the final counts)."""
    yield
    if HAS_GPU:
        return
    reason = requires_gpu.kwargs["reason"]
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if reason in str(getattr(r, "longrepr", ""))]
    if skipped:
        terminalreporter.write_line(
            f"no GPU: {len(skipped)} GPU tests skipped ({reason}); "
            "on a Hopper GPU `make test` runs them", bold=True)


def pytest_runtest_logstart(nodeid, location):
    """With SOL_TEST_LOG=DIR, each test also goes to DIR/started.txt as it starts: a test that
    started and never finished when a time limit cut the run short is one that hung or was still
    running (``benchmarks/h200.sh tests`` lists them; a hang once stopped a worker for good and
    the tests queued behind it went unrun)."""
    import os
    out = os.environ.get("SOL_TEST_LOG")
    if out and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(os.path.join(out, "started.txt"), "a") as f:
            f.write(nodeid + "\n")


def pytest_runtest_logreport(report):
    """With SOL_TEST_LOG=DIR (the H200 runs, benchmarks/h200.sh tests), each test's outcome goes
    to DIR/outcomes.txt and each failure's report to DIR/fails.txt as it happens, so that a run
    cut short by its time limit still names its failures (written by the controller only, under
    pytest-xdist)."""
    import os
    out = os.environ.get("SOL_TEST_LOG")
    if not out or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if report.when == "call" or report.failed or report.skipped:
        with open(os.path.join(out, "outcomes.txt"), "a") as f:
            f.write(f"{report.outcome} {report.when} {report.duration:.1f} {report.nodeid}\n")
    if report.failed:
        with open(os.path.join(out, "fails.txt"), "a") as f:
            f.write(f"==== {report.when} {report.nodeid}\n{report.longreprtext[-3000:]}\n")

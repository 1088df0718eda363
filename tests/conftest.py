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

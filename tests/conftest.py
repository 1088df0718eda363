"""Shared test setup: the `gpu` marker and fixture (see tests/_gpu.py)."""

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

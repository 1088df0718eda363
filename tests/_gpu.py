"""Whether this machine can run kernels, for tests that must launch one.

Tests that only compile (CUTE_DSL_ARCH=sm_90a, set by `make test` on machines
without a GPU) need nothing from here. Tests that launch a kernel use either

    from _gpu import requires_gpu

    @requires_gpu
    def test_launch(): ...

or the equivalent marker `@pytest.mark.gpu`, which tests/conftest.py turns
into the same skip.
"""

import pytest

try:
    import torch
except ImportError:  # the book's venv (`make test-book`) has no torch, and so no GPU tests
    torch = None

HAS_GPU = torch is not None and torch.cuda.is_available()

requires_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="needs a CUDA GPU (sm_90a); this machine has none"
)

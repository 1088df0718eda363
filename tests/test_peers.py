"""GPU-free: the torch.compile peer compiles every point of a suite (benchmarks/peers.py)."""
import torch

from benchmarks.peers import compiled


def test_every_shape_and_dtype_gets_its_own_graph():
    """Sixteen points of one lambda (a suite's 8 N x 2 dtypes): without the reset in
    ``compiled``, Dynamo's recompile limit (8) would run the last eight eagerly."""
    from torch._dynamo.utils import counters
    counters.clear()
    for dt in (torch.float32, torch.bfloat16):
        for n in (8, 16, 24, 32, 40, 48, 56, 64):
            f = fresh_compile(lambda x: torch.softmax(x, -1), backend="eager")
            x = torch.randn(2, n, dtype=dt)
            torch.testing.assert_close(f(x), torch.softmax(x, -1))
            assert counters["stats"]["unique_graphs"] == 1, (dt, n)  # this point was compiled
            counters.clear()

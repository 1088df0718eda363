"""Running a test's workers in processes of their own (torch.distributed over gloo or NCCL)."""
import time

import pytest


def spawn(worker, args, nprocs: int = 2, seconds: float = 180, what: str = "the processes"):
    """Run ``worker(rank, *args)`` in ``nprocs`` processes; fail the test (killing them) if they
    have not all finished in ``seconds``. A worker's exception fails the test with its traceback."""
    import torch.multiprocessing as mp
    ctx = mp.spawn(worker, args=args, nprocs=nprocs, join=False)
    deadline = time.monotonic() + seconds
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{what} did not finish in {seconds:.0f} s")

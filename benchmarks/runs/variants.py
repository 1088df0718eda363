"""What the run scripts patch in ``kernels.mamba2.ssd`` to time a variant of the state kernel,
and put back afterwards (runs I-K wrote this out each; later runs import it)."""
from contextlib import contextmanager

from kernels.mamba2 import ssd


@contextmanager
def state_variant(tile, occupancy, hints):
    """The three-kernel pass's state kernel with this (p, n) tile, occupancy hint (16-bit
    inputs) and latency hints (x, B, step sizes, stores), for the duration of the block."""
    base_tile, base_lat = ssd.state_tile, ssd.STATE_LATENCY
    try:
        ssd.state_tile = lambda p, n, work: tile
        ssd.STATE_LATENCY = {(16, tile[1]): tuple(hints)}
        ssd.set_hints("state", 16, occupancy=occupancy)
        yield
    finally:
        ssd.state_tile, ssd.STATE_LATENCY = base_tile, base_lat
        ssd.set_hints("state", 16, occupancy=ssd.STATE_OCCUPANCY)

"""Thread-value layouts and copy atoms: how the threads of a block cover a tile of rows.

Every kernel in this package moves rows with the same partition: threads
``(rows_per_block, threads_per_row)`` in row-major order, each owning ``vec`` consecutive
elements per access (128 bits at most), so that a warp's 32 accesses are 32 neighbouring
pieces of one row::

    row 0 of the tile:  | t0: v v v v | t1: v v v v | t2: ... | t31: v v v v | t0 again ...
    row 1 of the tile:  | t32 ...                                                           |

Access ``k`` of thread ``t`` covers columns ``(k * threads_per_row + t) * vec`` onwards.
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute


def make_row_copy(dtype, cfg, coalesced: bool = True) -> cute.TiledCopy:
    """The thread-value layout of a row tile for a :class:`~kernels.config.RowConfig`.

    ``coalesced=False`` numbers the threads column-major instead: neighbouring lanes then sit in
    different rows, a whole row apart, and each warp-wide access touches 32 separate memory
    segments (the anti-pattern chapter 2 measures)."""
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=cfg.vec * dtype.width)
    order = (1, 0) if coalesced else (0, 1)
    thr_layout = cute.make_ordered_layout((cfg.rows_per_block, cfg.threads_per_row), order=order)
    val_layout = cute.make_layout((1, cfg.vec))
    return cute.make_tiled_copy_tv(atom, thr_layout, val_layout)


def access_atom(dtype, vec: int) -> cute.CopyAtom:
    """A plain load or store of ``vec`` elements (``ld.global.v4`` at 128 bits)."""
    return cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype, num_bits_per_copy=vec * dtype.width)


def make_stage_copy(dtype, vec: int) -> cute.CopyAtom:
    """The atom that copies a row from global into shared memory: ``cp.async`` of the access
    width (16 bytes: ``.cg``, past L1; 4 or 8 bytes: ``.ca``). ``cp.async`` moves at least 4
    bytes, so single 16-bit elements (a ragged bf16 row) go through a register instead
    (``ld.global`` then ``st.shared``)."""
    bits = vec * dtype.width
    if bits < 32:
        return access_atom(dtype, vec)
    mode = cute.nvgpu.LoadCacheMode.GLOBAL if bits == 128 else cute.nvgpu.LoadCacheMode.ALWAYS
    return cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=mode), dtype, num_bits_per_copy=bits)


@cute.jit
def column_predicate(tXcX: cute.Tensor, n: cutlass.Constexpr[int]) -> cute.Tensor:
    """One flag per access: does it start inside the row? (N is a multiple of the vector
    width, so an access is either wholly in or wholly out.)"""
    tXpX = cute.make_rmem_tensor(
        cute.make_layout(
            (cute.size(tXcX, mode=[0, 1]), cute.size(tXcX, mode=[1]), cute.size(tXcX, mode=[2])),
            stride=(cute.size(tXcX, mode=[2]), 0, 1),
        ),
        cutlass.Boolean,
    )
    for v in cutlass.range(tXpX.shape[0], unroll_full=True):
        for k in cutlass.range(tXpX.shape[2], unroll_full=True):
            tXpX[v, 0, k] = cute.elem_less(tXcX[(0, v), 0, k][1], n)
    return tXpX

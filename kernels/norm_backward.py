"""RMSNorm's and LayerNorm's backward: the input's gradient row by row, and the weight's (and
bias's) gradient summed over the rows.

Bytes that must move: read x and dy, write dx (3 M N elements), read the weight once; the saved
per-row statistics (rstd, and LayerNorm's mean) are M floats. The sums over rows are what is
new: each block (or cluster) of a *persistent* kernel walks rows bidx, bidx + P, ... (P of them,
as many as the GPU holds at once), adds each row's terms into fp32 registers, and writes one
partial row; the P partial rows are added up after (``sum(0)``, a fixed order), so the result is
the same bit for bit from run to run and no float atomics are used. The row is staged in shared
memory, two rows at a time (a 32-bit row of 256k: two of x and one of dy, refilled access by
access): the next row's copies are in flight while this one is reduced and written, and long
rows are split over a cluster (``RowOp.walk_staged``).
"""
from __future__ import annotations

import torch

import cutlass.cute as cute
from cutlass import Float32, Int32

from . import validate
from .config import MAX_N, SM_SMEM_BYTES, SMEM_RESERVED_PER_BLOCK, row_config
from .cubin import kernel_resources
from .reduce import SUM, SUM2
from .rowkernel import RowOp, one_row_a_block

#: The longest row the kernels take, by element width: every row the forward takes.
LONGEST = {16: MAX_N, 32: MAX_N}


def longest(dtype: torch.dtype) -> int:
    """The longest row of ``dtype`` the kernels take (0 for a dtype they do not take)."""
    return LONGEST.get(torch.finfo(dtype).bits, 0)


class NormBackward(RowOp):
    rows = ("x", "dy")
    cols = ("weight",)
    out = ("dx",)
    scalars = {"blocks": Int32}
    fold_uses_columns = True
    default_present = ("weight",)

    @classmethod
    def configure(cls, n, elem_bits, vec, options):
        return one_row_a_block(row_config(cls.table, n, elem_bits, vec=vec), n)

    @cute.jit
    def row_inputs(self, io, b):
        values = {name: Float32(0.0) for name in self.row_in}
        row = b.row
        if row < b.m:
            for name in self.row_in:
                values[name] = Float32(io.row_in[name][row])
        return values

    def g(self, v):
        return v.dy * v.weight if v.weight is not None else v.dy


class RMSNormBackward(NormBackward):
    """dx = rstd (g - xhat mean(g xhat)) with g = dy * weight and xhat = x * rstd (rstd saved by
    the forward); dweight = the sum over rows of dy * xhat."""

    table = "rmsnorm_bwd"
    row_in = ("rstd",)
    col_out = ("dweight",)
    reductions = (SUM,)  # sum(g x)

    def fold_input(self, v, i, results):
        return self.g(v) * v.x

    def epilogue(self, v, results, s):
        return {"dx": (self.g(v) - v.x * (v.rstd * v.rstd * results[0][0] / self.n)) * v.rstd}

    def col_values(self, v, results, s):
        return {"dweight": v.dy * v.x * v.rstd}


class LayerNormBackward(NormBackward):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * weight and xhat = (x - mean)
    rstd (mean and rstd saved by the forward); dweight and dbias = the sums over rows of dy * xhat
    and dy."""

    table = "layernorm_bwd"
    row_in = ("mean", "rstd")
    col_out = ("dweight", "dbias")
    reductions = (SUM2,)  # sum(g) and sum(g xhat), one exchange

    def fold_input(self, v, i, results):
        g = self.g(v)
        return g, g * ((v.x - v.mean) * v.rstd)

    def epilogue(self, v, results, s):
        sum_g, sum_gx = results[0]
        xhat = (v.x - v.mean) * v.rstd
        return {"dx": (self.g(v) - sum_g / self.n - xhat * (sum_gx / self.n)) * v.rstd}

    def col_values(self, v, results, s):
        return {"dweight": v.dy * ((v.x - v.mean) * v.rstd), "dbias": v.dy}


_BLOCKS: dict = {}


def resident_blocks(registers: int, smem_bytes: int, threads: int) -> int:
    """Blocks of ``threads`` threads one Hopper SM holds at once, with ``registers`` registers a
    thread (allocated 256 a warp at a time, 64 K an SM) and ``smem_bytes`` of shared memory a
    block (plus the 1 KiB the driver reserves for each); at most 32 blocks and 2,048 threads."""
    warps = -(-threads // 32)
    by_regs = 65536 // (warps * (-(-registers * 32 // 256) * 256)) if registers else 32
    by_smem = SM_SMEM_BYTES // (smem_bytes + SMEM_RESERVED_PER_BLOCK)
    return max(1, min(32, 2048 // threads, by_regs, by_smem))


def persistent_blocks(device: torch.device, compiled, smem_bytes: int) -> int:
    """Blocks (clusters, for a row split over a cluster) of a persistent kernel: as many as the
    device holds at once, so that every one walks the same number of rows and none waits for a
    second wave. A cluster must fit in one GPC: the driver counts them
    (``cuOccupancyMaxActiveClusters``)."""
    key = (device.index, compiled.key)
    if key not in _BLOCKS:
        cfg = compiled.config
        registers = max([k.registers for k in kernel_resources(compiled.cubin)] or [0])
        per_sm = resident_blocks(registers, smem_bytes, cfg.threads_per_block)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        blocks = sms * per_sm
        if cfg.cluster_n > 1:
            blocks = max_active_clusters(compiled, cfg, smem_bytes) or max(1, sms // cfg.cluster_n * per_sm * 3 // 4)
        _BLOCKS[key] = blocks
    return _BLOCKS[key]


def max_active_clusters(compiled, cfg, smem_bytes: int) -> int:
    """The driver's count of clusters of the compiled kernel the device holds at once (0 where
    it cannot tell)."""
    try:
        from cuda.bindings import driver as cu
        torch.cuda.init()
        err, module = cu.cuModuleLoadData(compiled.cubin)
        name = kernel_resources(compiled.cubin)[0].name
        err2, fn = cu.cuModuleGetFunction(module, name.encode())
        if err != cu.CUresult.CUDA_SUCCESS or err2 != cu.CUresult.CUDA_SUCCESS:
            return 0
        attr = cu.CUfunction_attribute
        cu.cuFuncSetAttribute(fn, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes)
        cu.cuFuncSetAttribute(fn, attr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        launch = cu.CUlaunchConfig()
        launch.gridDimX, launch.gridDimY, launch.gridDimZ = 1, cfg.cluster_n, 1
        launch.blockDimX, launch.blockDimY, launch.blockDimZ = cfg.threads_per_block, 1, 1
        launch.sharedMemBytes = smem_bytes
        cluster = cu.CUlaunchAttribute()
        cluster.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = 1, cfg.cluster_n, 1
        launch.attrs, launch.numAttrs = [cluster], 1
        err, count = cu.cuOccupancyMaxActiveClusters(fn, launch)
        return int(count) if err == cu.CUresult.CUDA_SUCCESS else 0
    except Exception:  # (no cuda-python, an older driver): the caller's estimate
        return 0


def autograd_backward(op, dy, x, weight, stats, key):
    """(dx, the sums over rows) of ``op`` for autograd's backward: through the kernel and block
    count a checked call remembered under ``key`` (``RowOp.fast``), else checked (and then
    remembered). Only for tensors whose shapes agree by construction, as autograd's do: the
    compiled signature checks each tensor alone, not that their M agree."""
    hit = op.fast.get(key) if x.ndim == 2 and x.shape[0] else None
    if hit is not None:
        fn, (blocks,) = hit
        dx = torch.empty_like(x)
        partials = tuple([torch.empty(blocks, x.shape[1], dtype=torch.float32, device=x.device) for _ in op.col_out])
        try:
            fn((x, dy, dx) + ((weight,) if weight is not None else ()) + tuple(stats) + partials + (blocks,))
            return dx, [p.sum(0) for p in partials]
        except (ValueError, TypeError):  # refused before launching: the checked path says why
            pass
    dx = torch.empty_like(x)
    return dx, _launch(op, dy, x, weight, tuple([t.reshape(-1) for t in stats]), dx, None, key)


def _launch(op, dy, x, weight, stats, dx, config, remember=None):
    rows = validate.rows(x, cuda=False)
    m, n = rows.shape
    validate.like(x, dy, "dy")
    validate.like(x, dx, "dx")
    if weight is not None:
        validate.column(weight, x, "weight")
    for name, t in zip(op.row_in, stats):
        validate.per_row(t, m, x.device, name)
    validate.on_cuda(x)
    partials = []

    def late(compiled):
        cfg = compiled.config
        smem = cfg.smem_bytes(torch.finfo(x.dtype).bits, *op.footprint(cfg))
        blocks = persistent_blocks(x.device, compiled, smem)
        partials.extend(torch.empty(blocks, n, dtype=torch.float32, device=x.device) for _ in op.col_out)
        return tuple(partials), (blocks,)
    op.launch(rows, config, rows=(rows, validate.rows(dy, "dy")), out=(validate.rows(dx, "dx"),), cols=(weight,),
              row_in=tuple(stats), late=late, remember=remember if config is None else None)
    return [p.sum(0) for p in partials]


def rmsnorm_backward_out(dy, x, weight, rstd, dx, *, config=None, remember=None):
    """Write RMSNorm's input gradient into ``dx`` from dy, the forward's x and rstd (fp32, one a
    row); returns the weight's gradient (fp32, N; None without a weight). ``remember``: the key
    under which :func:`autograd_backward` finds the kernel."""
    (dw,) = _launch(RMSNormBackward, dy, x, weight, (rstd,), dx, config, remember)
    return dw if weight is not None else None


def layernorm_backward_out(dy, x, weight, mean, rstd, dx, *, config=None, remember=None):
    """Write LayerNorm's input gradient into ``dx`` from dy, the forward's x, mean and rstd; returns
    the weight's and the bias's gradients (fp32, N; the weight's None without a weight).
    ``remember``: as :func:`rmsnorm_backward_out`'s."""
    dw, db = _launch(LayerNormBackward, dy, x, weight, (mean, rstd), dx, config, remember)
    return (dw if weight is not None else None), db

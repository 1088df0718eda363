"""Chapter 11's checks: a stage of the SSD written as a cuTile kernel, and the bytes that the
five-, three- and one-kernel pipelines move.

``cubin`` compiles a ``@ct.kernel`` for sm_90 without a GPU (cuTile's ``export_kernel`` on the
signature a launch with the given arguments would have); ``launch`` runs one on torch's current
stream. ``bmm_chunk`` compiles the reader's stage 4 and reads its machine code (Hopper's
warpgroup MMA, no local memory); on a GPU it launches it on a ragged sequence and compares with
the float64 reference. ``pipeline_bytes`` needs no GPU at all: it compares the reader's count
with the reference's per-stage counts (five kernels) and with the formulas below (three and one).
"""
from __future__ import annotations

import inspect
import io
import math

import torch

from kernels.mamba2 import reference as R

from . import expect_close, gpu, numbers_need_gpu, passed

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _signature(kernel, args):
    """The signature of a launch of ``kernel`` on ``args``: tensors (any device, ``meta`` too) as
    contiguous 16-byte-aligned arrays, ``ct.Constant`` parameters as their values, other
    numbers as int32."""
    import cuda.tile as ct
    from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, ScalarConstraint
    params = list(inspect.signature(kernel._annotated_function.pyfunc).parameters.values())
    if len(params) != len(args):
        raise AssertionError(f"{kernel._annotated_function.pyfunc.__name__} takes {len(params)} parameters "
                             f"({', '.join(p.name for p in params)}); the check passes {len(args)}")
    out = []
    for prm, a in zip(params, args):
        if isinstance(a, torch.Tensor):
            el = a.element_size()
            out.append(ArrayConstraint(
                getattr(ct, _DTYPES[a.dtype]), a.dim(), index_dtype=ct.int32, stride_lower_bound_incl=0,
                alias_groups=(), may_alias_internally=False, stride_constant=[None] * (a.dim() - 1) + [1],
                stride_divisible_by=[max(1, 16 // el)] * (a.dim() - 1) + [1], base_addr_divisible_by=16))
        elif "Constant" in str(prm.annotation):
            out.append(a)
        else:
            out.append(ScalarConstraint(ct.int32))
    return KernelSignature(out, CallingConvention.cutile_python_v1())


def cubin(kernel, *args, gpu_code: str = "sm_90") -> bytes:
    """``kernel`` (a ``@ct.kernel``) compiled for ``gpu_code`` without a GPU, for a launch on
    ``args`` (tensors may live on the ``meta`` device): the cubin's bytes."""
    from cuda.tile.compilation import export_kernel
    buf = io.BytesIO()
    export_kernel(kernel, [_signature(kernel, args)], buf, gpu_code=gpu_code, output_format="cubin")
    return buf.getvalue()


def machine_code(blob: bytes) -> dict:
    """What a cubin shows: registers and local memory a thread (``kernels.cubin``), and how many
    warpgroup MMAs (``wgmma.mma_async``) and TMA tile copies (``cp.async.bulk.tensor``) it names."""
    from kernels.cubin import kernel_resources
    (res,) = kernel_resources(blob)
    return dict(registers=res.registers, local_bytes=res.frame_bytes,
                wgmma=blob.count(b"wgmma.mma_async"), tma=blob.count(b"cp.async.bulk.tensor"))


def launch(grid, kernel, *args) -> None:
    """Launch ``kernel`` on ``grid`` (up to three block counts) on torch's current stream."""
    import cuda.tile as ct
    ct.launch(torch.cuda.current_stream(), tuple(grid), kernel, tuple(args))


# ---- exercise: stage 4 as a tile program -------------------------------------------------

def bmm_chunk(kernel, name="ch11.bmm_chunk"):
    """``kernel(C, B, cb, Q, N)``, launched on a grid (b, c, g): block (bi, k, gi) writes
    cb[bi, k, gi] = C_k B_k^T, the (Q x Q) product of chunk k's C and B (b, L, g, N) rows,
    in fp32, the steps past L read as zeros. Its bf16 cubin must run the product on the tensor
    cores (wgmma) with no local memory; on a GPU it must match float64 on a ragged sequence."""
    Q, N = 64, 128
    meta = dict(device="meta", dtype=torch.bfloat16)
    b, L, g = 2, 256, 2
    blob = cubin(kernel, torch.empty(b, L, g, N, **meta), torch.empty(b, L, g, N, **meta),
                 torch.empty(b, L // Q, g, Q, Q, device="meta", dtype=torch.float32), Q, N)
    mc = machine_code(blob)
    if not mc["wgmma"]:
        raise AssertionError(f"{name}: the cubin has no wgmma.mma_async: the (Q x N) by (N x Q) product never "
                             "reaches the tensor cores (is there a ct.mma of the C tile and the transposed B tile?)")
    if mc["local_bytes"]:
        raise AssertionError(f"{name}: {mc['local_bytes']} bytes of local memory a thread: the tiles spill")
    passed(name, f"bf16, Q = {Q}, N = {N}: {mc['wgmma']} x wgmma.mma_async, {mc['tma']} x cp.async.bulk.tensor, "
                 f"{mc['registers']} registers a thread, no local memory")
    if not gpu():
        return numbers_need_gpu(name, "launching it on (b, L, g) = (2, 200, 2)")
    gen = torch.Generator(device="cuda").manual_seed(0)
    b, L, g = 2, 200, 2  # 200 steps: the last of 4 chunks holds 8
    c = math.ceil(L / Q)
    Cm = torch.randn(b, L, g, N, device="cuda", generator=gen).bfloat16()
    Bm = torch.randn(b, L, g, N, device="cuda", generator=gen).bfloat16()
    cb = torch.full((b, c, g, Q, Q), float("nan"), device="cuda")
    launch((b, c, g), kernel, Cm, Bm, cb, Q, N)
    torch.cuda.synchronize()
    want = R.bmm_chunk(R._chunked(Cm.double().cpu(), Q), R._chunked(Bm.double().cpu(), Q))
    # bf16 products are exact in fp32; what differs is the order of the fp32 sums of N terms
    expect_close(name, cb, want, atol=1e-3, rtol=1e-4, what=f"(b, L, g, N) = {(b, L, g, N)}, chunk {Q}")


# ---- exercise: the bytes of the three pipelines ---------------------------------------------

FP32 = 4


def _bytes(impl, b, L, h, p, n, g, chunk, e):
    """The bytes each pipeline's kernels read and write, each tensor once per kernel that reads
    or writes it (the exercise's statement lists them)."""
    c = math.ceil(L / chunk)
    X, BC, DT = e * b * L * h * p, e * b * L * g * n, e * b * L * h
    STATE = FP32 * b * h * p * n  # the initial or the final state
    if impl == "five":
        return sum(R.ssd_bytes_and_flops(b, L, h, p, n, g, chunk, e, initial_states=True).stage_bytes.values())
    if impl == "three":
        steps = FP32 * b * c * chunk * h  # dt after softplus, or its running sum
        cb = e * b * c * g * chunk * chunk
        entering = e * b * c * h * p * n
        prep = DT + 2 * steps + 2 * BC + cb
        state = X + BC + 2 * steps + STATE + entering + STATE
        scan = X + BC + cb + 2 * steps + entering + X
        return prep + state + scan
    if impl == "one":
        T = min(chunk, 64)
        nt = math.ceil(L / T)
        steps = FP32 * b * nt * T * h
        cb = e * b * nt * g * T * T
        prep = DT + 2 * steps + 2 * BC + cb
        scan = X + 2 * BC + 2 * steps + cb + STATE + X + STATE
        return prep + scan
    raise ValueError(impl)


SHAPES = ((8, 4096, 64, 64, 128, 1), (1, 65536, 64, 64, 128, 1), (4, 16384, 8, 64, 128, 1),
          (8, 4096, 64, 64, 128, 8), (2, 1000, 6, 32, 64, 3))


def pipeline_bytes(fn, name="ch11.pipeline_bytes"):
    """``fn(impl, b, L, h, p, n, g, chunk, elem_bytes)``: the bytes the ``impl`` ("five",
    "three", "one") pipeline moves through device memory, checked on five shapes (one ragged),
    chunks 16 to 256, bf16 and fp32."""
    checked = 0
    for shp in SHAPES:
        for chunk in (16, 64, 128, 256):
            for e in (2, 4):
                for impl in ("five", "three", "one"):
                    want, got = _bytes(impl, *shp, chunk, e), fn(impl, *shp, chunk, e)
                    if got is None or not abs(got - want) <= 1e-9 * want:
                        must = R.ssd_bytes_and_flops(*shp, chunk, e, initial_states=True).bytes
                        raise AssertionError(
                            f"{name}: {impl} kernels, (b, L, h, p, n, g) = {shp}, chunk {chunk}, {e}-byte inputs: "
                            f"you count {(got or 0) / 1e6:.1f} MB, the count is {want / 1e6:.1f} MB "
                            f"(the unavoidable bytes alone: {must / 1e6:.1f} MB)")
                    checked += 1
    passed(name, f"{checked} counts match (5 shapes, chunks 16 to 256, 2- and 4-byte inputs, 3 pipelines)")

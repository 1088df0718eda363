"""Mamba-2's SSD forward pass in cuTile: the five stages as five kernels, fused into three, and
in one loop.

The algorithm and its notation are those of ``reference.py`` (b batch, L length, h heads,
p head dim, g groups, n state dim, l chunk size, c chunks). Each stage is one tile function
in ``tiles.py``; a kernel is a loop of tile functions over its share of the work, so the
versions of the pass share their arithmetic and differ in what goes through memory:

    staged (5 kernels)                  fused (3 kernels)
    1 chunk_cumsum   dt, dA_cumsum      prep kernel: stages 1 and 4 in one launch (both small,
    4 bmm_chunk      C B^T (per group)    both read only dt or B and C)
    2 chunk_state    states (fp32)      state kernel: chunk states and the scan over chunks in
    3 state_passing  states entering      one loop; the chunk states never leave the registers,
                                          only the states entering each chunk are stored (in
                                          x's dtype, as the next product reads them)
    5 chunk_scan     out                chunk-scan kernel (the same kernel)

    single (prep + 1 kernel): the prep kernel (stage 1 and C B^T for blocks of min(l, 64) steps),
    then one scan kernel in which a block carries a slice of a head's state (fp32) through the
    sequence (or, cut into segments, through its segment),
    producing each block of steps' output and then its update of the state. Only out and the
    final state are written. It needs many sequences (b * h) to fill the GPU; ``impl="auto"``
    (the default) takes it for 16-bit inputs with enough sequences (``single_min_sequences``), and the fused
    pass otherwise.

What we decide, not cuTile: the tile sizes, and that they are *not* the chunk size. The
chunk-scan kernel walks a chunk in (64 x 64) tiles of the (l x l) decay matrix, so a chunk of
256 costs 10 tile products, not one (256 x 256) tile as large as an SM's register file; the
one-kernel pass walks blocks of min(l, 64) steps whatever the chunk (the same result up to
rounding). bf16/fp16 products run on the tensor cores (wgmma) and accumulate in fp32; fp32
inputs are multiplied in fp32 on the CUDA cores (cuTile 1.7.0 emits FMAs for them, no tf32).
The running state, dt and the cumulative sums stay fp32 throughout.
"""
import math
from dataclasses import dataclass

import torch

from .. import validate
from .reference import check_shapes
from .tile_env import require_tile

ct = None  # cuda.tile, imported on first use (the package imports without it)


@dataclass(frozen=True)
class SSDConfig:
    """What the pass tunes, as data, passed in (``mamba_chunk_scan_combined(..., config=)``);
    :data:`DEFAULT` holds the measured choices (benchmarks/TUNING.md#mamba2-occupancy and the
    entries after it).

    occupancy:      cuTile's occupancy hint (blocks an SM should hold) of each kernel for 16-bit
                    inputs, (kernel, blocks) pairs; absent: cuTile's default. fp32 takes none
                    (its FMA products spill either way and are not tuned).
    state_latency:  the state kernel's latency hints for its loads of x, B and the step sizes
                    and its stores, by (input bits, n side of the state tile)
    pre_cs, pre_cb: the one-kernel pass leaves stage 1 (the step sizes and their sums) and
                    C B^T to a prep launch before it
    steps:          steps a block of the one-kernel pass takes (at most the chunk size)
    segments:       the one-kernel pass cuts each sequence into segments when sequences are too
                    few to fill the GPU: None, never; 0, as many as fill it; N, N
                    (measured slower than the three-kernel pass: off, TUNING.md#mamba-2-tried-and-lost)
    segment_min_blocks: the fewest blocks of steps a segment holds
    """

    occupancy: tuple = (("prep", 4), ("bmm", 4), ("chunk_state", 4), ("segment_state", 4), ("chunk_scan", 4),
                        ("scan", 2), ("state", 2))
    state_latency: tuple = (((16, 16), (2, 4, 4, 2)), ((16, 32), (6, 4, 4, 2)))
    pre_cs: bool = True
    pre_cb: bool = True
    steps: int = 64
    segments: int | None = None
    segment_min_blocks: int = 4

    def hints(self, kernel: str, bits: int) -> dict:
        occupancy = dict(self.occupancy).get(kernel) if bits == 16 else None
        return {} if occupancy is None else {"occupancy": occupancy}

    def blocks_per_sm(self, kernel: str) -> int:
        """The blocks an SM holds that the tile rules below fill (the 16-bit hint, or 1)."""
        return dict(self.occupancy).get(kernel, 1)


DEFAULT = SSDConfig()
_BUILT: dict = {}


def _build(bits: int, cfg: SSDConfig = DEFAULT):
    """Import cuda.tile and the kernels (``tiles.py``) on first use: the kernels for inputs of
    ``bits`` bits, with ``cfg``'s hints applied."""
    global ct
    key = (bits, cfg.occupancy)
    if key not in _BUILT:
        require_tile()
        import cuda.tile as _ct
        from .tiles import KERNELS
        ct = _ct
        _BUILT[key] = {k: (v.replace_hints(**cfg.hints(k, bits)) if cfg.hints(k, bits) else v)
                       for k, v in KERNELS.items()}
    return _BUILT[key]


# ---- host side ----------------------------------------------------------------------------
#: Chunk sizes the kernels take (powers of two; the decay-matrix tiles are min(64, l) wide).
CHUNK_SIZES = (16, 32, 64, 128, 256)
#: Head dims and state dims the kernels take (one tile spans each; powers of two).
HEAD_DIMS = (16, 32, 64, 128)
STATE_DIMS = (16, 32, 64, 128, 256)
IMPLS = ("auto", "single", "fused", "staged")


def sm_count(device) -> int:
    """Streaming multiprocessors of ``device``, whose count the tile rules below fill."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def _tile_block(l: int) -> int:
    """Rows and columns of the decay-matrix tiles of the chunk scan: 64, or the chunk if shorter."""
    return min(64, l)


def head_block(h: int, l: int) -> int:
    """Heads whose step sizes one block of stage 1 computes together: the largest power of
    two dividing h, at most 64 and at most 8192 / l (a tile of (l, heads) fp32 values)."""
    hb = 1
    while h % (hb * 2) == 0 and hb * 2 <= min(64, 8192 // l):
        hb *= 2
    return hb


def state_tile(p: int, n: int, work: int, sms: int, cfg: SSDConfig = DEFAULT) -> tuple[int, int]:
    """The (p, n) tile of the state one block of the state kernels carries. Smaller tiles give
    more blocks (each carries its tile through every chunk in turn), bigger ones reread x and
    B fewer times. ``work`` is b * h, the number of independent sequences. The p side stays 64
    (the M of Hopper's wgmma; below it cuTile falls back to slower products); the n side is
    halved, down to 16, while twice the blocks still fit in one wave (the state kernel's blocks
    an SM, on ``sms`` SMs): a block beyond the wave would wait for a whole walk through the
    sequence (TUNING.md#mamba2-state-tile)."""
    bp, bn = min(p, 64), min(n, 64)
    while bn > 16 and 2 * work * (p // bp) * (n // bn) <= cfg.blocks_per_sm("state") * sms:
        bn //= 2
    return bp, bn


def single_min_sequences(sms: int, cfg: SSDConfig = DEFAULT) -> int:
    """The sequences (b * h) the one-kernel pass needs to fill the GPU: each block walks one
    through all its steps, and below this it loses to the three-kernel pass, whose state kernel
    is the only sequential part (TUNING.md#mamba2-one-kernel-pass). fp32 takes the three-kernel
    pass."""
    return cfg.blocks_per_sm("scan") * sms


def choose_impl(b: int, h: int, bits: int, L: int = 1, chunk_size: int = 64, *, sms: int,
                cfg: SSDConfig = DEFAULT) -> str:
    """The pass ``impl="auto"`` runs: "single" for 16-bit inputs whose sequences, cut into
    segments where they are long enough (``single_segments``), number at least
    ``single_min_sequences``; else "fused"."""
    segs = single_segments(b, h, L, chunk_size, sms, cfg)
    return "single" if bits == 16 and b * h * segs >= single_min_sequences(sms, cfg) else "fused"


def scan_segments(work: int, nblocks: int, sms: int, cfg: SSDConfig = DEFAULT) -> int:
    """Segments each of ``work`` sequences of ``nblocks`` blocks of steps is cut into (see
    ``SSDConfig.segments``): as many as equal segments of ceil(nblocks / asked) blocks make (7
    asked of 11 blocks: 6 segments of 2)."""
    if cfg.segments is None:
        return 1
    s = max(1, min(cfg.segments, nblocks))
    if not cfg.segments:
        s = 1
        while work * s < single_min_sequences(sms, cfg) and nblocks // (2 * s) >= cfg.segment_min_blocks:
            s *= 2
    return math.ceil(nblocks / math.ceil(nblocks / s))


def single_segments(b: int, h: int, L: int, chunk_size: int, sms: int, cfg: SSDConfig = DEFAULT) -> int:
    """Segments the one-kernel pass cuts each sequence into for these inputs (1: none). They
    read the prep launch's step sizes, so none without ``pre_cs``."""
    nblocks = math.ceil(L / min(chunk_size, cfg.steps))
    return scan_segments(b * h, nblocks, sms, cfg) if cfg.pre_cs else 1


def scan_tile(p: int, work: int, sms: int, cfg: SSDConfig = DEFAULT) -> int:
    """Columns of the state (along p) one block of the one-kernel pass carries: all of p up to
    64, halved down to 16 while ``work`` (sequences, or segments of them) times the tiles a
    sequence splits into would leave an SM fewer blocks than the scan's occupancy. Each block
    walks its sequence in turn, so few long sequences need the split to fill the GPU."""
    bp = min(p, 64)
    while work * (p // bp) < cfg.blocks_per_sm("scan") * sms and bp > 16:
        bp //= 2
    return bp


def check_inputs(x, dt, A, B, C, chunk_size, D=None, initial_states=None, dt_bias=None):
    """Raise a clear error for anything the kernels do not take; return (b, L, h, p, g, n)."""
    tensors = dict(x=x, dt=dt, A=A, B=B, C=C, D=D, initial_states=initial_states, dt_bias=dt_bias)
    for name, t in tensors.items():
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    b, L, h, p, g, n = check_shapes(x, dt, A, B, C, D, initial_states, dt_bias)  # the reference's contract
    if x.dtype not in validate.FLOAT_DTYPES:
        raise TypeError(f"x must be bf16, fp16 or fp32, got {x.dtype}")
    if B.dtype != x.dtype or C.dtype != x.dtype:
        raise TypeError(f"B and C must have x's dtype {x.dtype}, got {B.dtype} and {C.dtype}")
    for name, t in tensors.items():
        if t is not None and name != "x" and not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size must be one of {CHUNK_SIZES}, got {chunk_size}")
    if p not in HEAD_DIMS:
        raise ValueError(f"head dim p must be one of {HEAD_DIMS}, got {p}")
    if n not in STATE_DIMS:
        raise ValueError(f"state dim n must be one of {STATE_DIMS}, got {n}")
    if L < 1 or b < 1:
        raise ValueError(f"b and L must be >= 1, got {b} and {L}")
    for name, t in tensors.items():
        if t is None:
            continue
        validate.on_cuda(t, name)
        if t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    return b, L, h, p, g, n


def plan(x, dt, A, B, C, chunk_size, D=None, initial_states=None, dt_bias=None, dt_softplus=False,
         impl="auto", *, sms: int, cfg: SSDConfig = DEFAULT):
    """The launches of one forward pass on a GPU of ``sms`` SMs, as data: ``(launches, out,
    final)`` where each launch is ``(kernel name, grid, args)``. Tensors are allocated on x's
    device, so the same plan runs on a GPU or, with tensors on the ``meta`` device, compiles
    without one (:func:`export_cubins`)."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    b, L, h, p = x.shape
    if impl == "auto":
        impl = choose_impl(b, h, torch.finfo(x.dtype).bits, L, chunk_size, sms=sms, cfg=cfg)
    g, n = B.shape[2], B.shape[3]
    Q, BM = chunk_size, _tile_block(chunk_size)
    nc = math.ceil(L / Q)
    r = h // g
    dev = x.device
    f32 = dict(device=dev, dtype=torch.float32)
    final = torch.empty(b, h, p, n, **f32)
    out = torch.empty_like(x)
    # An absent optional tensor is replaced by a stand-in of the same rank that is never read.
    bias_ = dt_bias if dt_bias is not None else torch.empty(1, **f32)
    D_ = D if D is not None else torch.empty(1, **f32)
    init_ = initial_states if initial_states is not None else torch.empty(1, 1, 1, 1, **f32)
    has_bias, has_init, has_D = dt_bias is not None, initial_states is not None, D is not None
    if impl == "single":  # blocks of T = min(l, 64) steps; nothing between the stages goes to memory
        T = min(Q, cfg.steps)
        nt = math.ceil(L / T)
        pre_cs, pre_cb = cfg.pre_cs, cfg.pre_cb
        segs = single_segments(b, h, L, Q, sms, cfg)
        seg_len = math.ceil(nt / segs)
        bp = scan_tile(p, b * h * segs, sms, cfg)
        dts = torch.empty(b, h, nt, T, **f32) if pre_cs else torch.empty(1, 1, 1, 1, **f32)
        cums = torch.empty_like(dts)
        cb = torch.empty(b, nt, g, T, T, device=dev, dtype=x.dtype) if pre_cb else torch.empty(1, 1, 1, 1, 1, **f32)
        launches = []
        if pre_cs or pre_cb:
            hb = head_block(h, T)
            launches.append(("prep", (b * nt, (h // hb if pre_cs else 0) + (g if pre_cb else 0), 1),
                             (dt, bias_, A, dts, cums, C, B, cb, L, nt, h // hb if pre_cs else 0, g, T, hb, T, n,
                              has_bias, bool(dt_softplus))))
        scan_init, scan_has_init = init_, has_init
        if segs > 1:  # each segment's contribution, then the states entering the segments (fp32)
            sp, sn = state_tile(p, n, b * h * segs, sms, cfg)
            seg_states = torch.empty(b, segs, h, p, n, **f32)
            seg_decay = torch.empty(b, h, segs, 1, **f32)
            entering = torch.empty(b, segs, h, p, n, **f32)
            launches += [
                ("segment_state", (b * segs * h, p // sp, n // sn),
                 (x, B, dts, cums, seg_states, seg_decay, nt, segs, seg_len, h, r, T, sp, sn)),
                ("state_passing", (b * h, p // sp, n // sn),
                 (seg_states, seg_decay, init_, entering, final, segs, h, 1, sp, sn, has_init)),
            ]
            scan_init, scan_has_init = entering.view(b * segs, h, p, n), True
        launches.append(("scan", (b * h, p // bp, segs),
                         (x, dt, bias_, A, B, C, D_, scan_init, dts, cums, cb, out, final, L, nt, segs, seg_len, h, r,
                          T, bp, n, has_bias, bool(dt_softplus), has_D, scan_has_init, pre_cs, pre_cb, segs > 1)))
        return launches, out, final

    dts = torch.empty(b, h, nc, Q, **f32)
    cums = torch.empty(b, h, nc, Q, **f32)
    entering = torch.empty(b, nc, h, p, n, device=dev, dtype=x.dtype)
    cb = torch.empty(b, nc, g, Q, Q, device=dev, dtype=x.dtype)
    bp, bn = state_tile(p, n, b * h, sms, cfg)
    hb = head_block(h, Q)
    if impl == "fused":
        r2 = (Q // BM) ** 2
        launches = [
            ("prep", (b * nc, h // hb + g * r2, 1),
             (dt, bias_, A, dts, cums, C, B, cb, L, nc, h // hb, g, Q, hb, BM, n, has_bias, bool(dt_softplus))),
            ("state", (b * h, p // bp, n // bn), (x, B, init_, dts, cums, entering, final, nc, h, r, Q, bp, bn, has_init,
                                                  *dict(cfg.state_latency).get((torch.finfo(x.dtype).bits, bn), (0, 0, 0, 0)))),
        ]
    else:
        states = torch.empty(b, nc, h, p, n, **f32)
        launches = [
            ("cumsum", (b, nc, h // hb), (dt, bias_, A, dts, cums, L, Q, hb, has_bias, bool(dt_softplus))),
            ("chunk_state", (b * nc * h, p // bp, n // bn), (x, B, dts, cums, states, nc, h, r, Q, bp, bn)),
            ("state_passing", (b * h, p // bp, n // bn), (states, cums, init_, entering, final, nc, h, Q, bp, bn, has_init)),
            ("bmm", (b * nc * g, Q // BM, Q // BM), (C, B, cb, nc, g, Q, BM, n)),
        ]
    launches.append(("chunk_scan", (b * nc * h, Q // BM, 1),
                     (x, C, cb, dts, cums, entering, D_, out, nc, h, r, Q, BM, p, n, has_D)))
    return launches, out, final


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, initial_states=None, dt_bias=None,
                              dt_softplus=False, return_final_states=False, *, impl="auto",
                              config: SSDConfig | None = None):
    """The SSD forward with the contract of mamba_ssm's function of the same name.

    x (b, L, h, p), dt (b, L, h), A (h), B and C (b, L, g, n), D (h), initial_states (b, h, p, n),
    dt_bias (h). Returns out (b, L, h, p) in x's dtype and, with ``return_final_states``, the
    final states (b, h, p, n) in fp32. ``impl``: "single" (a small prep launch, then one
    kernel loops over the sequence), "fused" (three kernels), "staged" (five, one per stage) or
    "auto" (:func:`choose_impl`). L need not be a multiple of chunk_size. ``config``: the
    tuned settings (default :data:`DEFAULT`).
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    check_inputs(x, dt, A, B, C, chunk_size, D, initial_states, dt_bias)
    cfg = config or DEFAULT
    K = _build(torch.finfo(x.dtype).bits, cfg)
    launches, out, final = plan(x, dt, A, B, C, chunk_size, D, initial_states, dt_bias, dt_softplus, impl,
                                sms=sm_count(x.device), cfg=cfg)
    stream = torch.cuda.current_stream(x.device)
    for name, grid, args in launches:
        ct.launch(stream, grid, K[name], args)
    return (out, final) if return_final_states else out


_TORCH_TO_TILE = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _signature(kernel, args):
    """The signature a launch with these arguments compiles to, built without a GPU: arrays are
    contiguous (last stride 1) and 16-byte aligned; ints not marked Constant are int32."""
    from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, ScalarConstraint
    import inspect as _inspect
    params = list(_inspect.signature(kernel._annotated_function.pyfunc).parameters.values())
    out = []
    for prm, a in zip(params, args):
        if isinstance(a, torch.Tensor):
            el = a.element_size()
            out.append(ArrayConstraint(
                getattr(ct, _TORCH_TO_TILE[a.dtype]), a.dim(), index_dtype=ct.int32, stride_lower_bound_incl=0,
                alias_groups=(), may_alias_internally=False, stride_constant=[None] * (a.dim() - 1) + [1],
                stride_divisible_by=[max(1, 16 // el)] * (a.dim() - 1) + [1], base_addr_divisible_by=16))
        elif prm.annotation is not _inspect.Parameter.empty and "Constant" in str(prm.annotation):
            out.append(a)
        else:
            out.append(ScalarConstraint(ct.int32))
    return KernelSignature(out, CallingConvention.cutile_python_v1())


def export_cubins(shape, dtype=torch.bfloat16, chunk_size=64, impl="auto", *, ngroups=1, gpu_code="sm_90",
                  has_D=True, has_init=True, has_bias=True, dt_softplus=True, sms: int = 132,
                  config: SSDConfig | None = None) -> dict[str, bytes]:
    """Compile every kernel of one forward pass for ``gpu_code`` without a GPU, as on a GPU of
    ``sms`` SMs (the H100's and H200's 132); returns ``{kernel name: cubin}``. ``shape`` is
    (b, L, h, p, n)."""
    import io
    from cuda.tile.compilation import export_kernel
    cfg = config or DEFAULT
    K = _build(torch.finfo(dtype).bits, cfg)
    b, L, h, p, n = shape
    meta = dict(device="meta")
    x = torch.empty(b, L, h, p, dtype=dtype, **meta)
    B = torch.empty(b, L, ngroups, n, dtype=dtype, **meta)
    f = dict(dtype=torch.float32, **meta)
    launches, _, _ = plan(
        x, torch.empty(b, L, h, **f), torch.empty(h, **f), B, torch.empty_like(B), chunk_size,
        torch.empty(h, **f) if has_D else None, torch.empty(b, h, p, n, **f) if has_init else None,
        torch.empty(h, **f) if has_bias else None, dt_softplus, impl, sms=sms, cfg=cfg)
    cubins = {}
    for name, _, args in launches:
        buf = io.BytesIO()
        export_kernel(K[name], [_signature(K[name], args)], buf, gpu_code=gpu_code, output_format="cubin")
        cubins[name] = buf.getvalue()
    return cubins

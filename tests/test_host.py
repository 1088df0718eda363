"""The host path every public op shares: CUDA-graph capture and replay with default arguments,
no host sync (a bad target still reported), the Hopper check, and the launch cache's key."""
import importlib
import pytest
import torch

import kernels
from kernels import validate

from _gpu import requires_gpu


def _inputs(n=4096, m=64, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(n + m)
    x = torch.randn(m, n, device="cuda", generator=g).to(dtype)
    w = torch.randn(n, device="cuda", generator=g).to(dtype)
    b = torch.randn(n, device="cuda", generator=g).to(dtype)
    t = torch.randint(0, n, (m,), device="cuda", generator=g)
    return x, w, b, t


PUBLIC = {
    "copy": lambda x, w, b, t: kernels.copy(x),
    "reduce_rows": lambda x, w, b, t: kernels.reduce_rows(x),
    "rmsnorm": lambda x, w, b, t: kernels.rmsnorm(x, w),
    "layernorm": lambda x, w, b, t: kernels.layernorm(x, w, b),
    "softmax": lambda x, w, b, t: kernels.softmax(x),
    "cross_entropy": lambda x, w, b, t: kernels.cross_entropy(x, t),
}


@requires_gpu
@pytest.mark.parametrize("op", sorted(PUBLIC))
@pytest.mark.parametrize("n", [4096, 131072])
def test_every_public_op_captures_in_a_cuda_graph(op, n):
    """Captured with default arguments, replayed on new values in the same buffers: the same
    result as an eager call (bit for bit: the same kernels)."""
    x, w, b, t = _inputs(n, 33)
    fn = PUBLIC[op]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up off the capture
        fn(x, w, b, t)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(x, w, b, t)
    for seed in range(3):
        x2, w2, b2, t2 = _inputs(n, 33 + seed + 1)
        x.copy_(x2[:33]), w.copy_(w2), b.copy_(b2), t.copy_(t2[:33])
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, fn(x, w, b, t)), f"{op}: replay {seed} differs from an eager call"
    kernels.check_errors()


@requires_gpu
def test_a_bad_target_in_a_graph_is_reported():
    x, w, b, t = _inputs(1000, 16)
    graph = torch.cuda.CUDAGraph()
    kernels.cross_entropy(x, t)
    with torch.cuda.graph(graph):
        loss = kernels.cross_entropy(x, t)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(loss)
    kernels.check_errors()
    t[7] = 1000
    graph.replay()
    with pytest.raises(kernels.BadInputError):
        kernels.check_errors()
    assert torch.isnan(loss)


@requires_gpu
def test_cross_entropy_does_not_wait_for_the_gpu():
    """The default call returns before its kernel ends: behind a long sleep on the stream, the
    call itself takes far less than the sleep."""
    import time
    x, w, b, t = _inputs(8192, 512)
    kernels.cross_entropy(x, t)
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # ~100 ms of GPU time ahead of the call
    t0 = time.perf_counter()
    kernels.cross_entropy(x, t)
    took = time.perf_counter() - t0
    torch.cuda.synchronize()
    assert took < 0.02, f"cross_entropy waited {took * 1e3:.1f} ms"


@requires_gpu
def test_a_second_call_finds_its_kernel_without_compiling():
    from kernels import compile as kc
    x, w, b, t = _inputs(4096, 8)
    for fn in PUBLIC.values():
        fn(x, w, b, t)
    before = len(kc.cache())
    x2, w2, b2, t2 = _inputs(4096, 999)
    for fn in PUBLIC.values():
        fn(x2, w2, b2, t2)
    assert len(kc.cache()) == before


def test_a_gpu_that_is_not_hopper_gets_a_clear_error(monkeypatch):
    """Without a GPU too: the check reads the device's compute capability and name."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(validate, "_CHECKED_DEVICES", set())
    with pytest.raises(RuntimeError, match=r"Hopper.*sm_90a.*A100-SXM4-80GB \(compute capability 8\.0\)"):
        validate.check_arch(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    validate.check_arch(torch.device("cuda", 0))  # an H100 or H200 passes


def test_access_width_is_the_widest_every_row_allows():
    """The launch key's access width: the largest power of two (<= 16 bytes) dividing N, every
    row stride and every base address, as the configuration's rule."""
    from kernels.config import vector_width

    class T:
        def __init__(self, stride, ptr):
            self.s, self.p = stride, ptr

        def stride(self, d):
            return self.s

        def data_ptr(self):
            return self.p
    for n in (1, 7, 64, 1000, 4096, 4100):
        for stride in (n, n + 1, n + 4, 2 * n):
            for ptr in (0, 2, 4, 8, 1024):
                for eb in (2, 4):
                    want = min(vector_width(n, eb * 8, stride, validate.ptr_align(T(0, ptr))), 16 // eb)
                    assert validate.access_width(n, eb, [T(stride, ptr)]) == want


def _signature(compiled, args) -> str:
    """The compiled function's argument contract, as TVM FFI states it when it refuses a call
    (here: CPU tensors, refused before any launch, so this runs without a GPU)."""
    with pytest.raises(ValueError, match="expected device_type=cuda") as e:
        compiled.fn(args)
    return str(e.value)


@pytest.mark.parametrize("per_row", [True, False])
def test_cross_entropy_backward_takes_one_dloss_or_one_a_row(per_row):
    """The backward of a mean or sum gets one dloss for every row, (1,); of reduction='none', one
    a row, (M,): the compiled signature must say so, or every such call is refused at launch."""
    from kernels.cross_entropy import CrossEntropyBackward
    c = CrossEntropyBackward.compile(torch.bfloat16, 1024, 8, (), (torch.int64, torch.float32, torch.float32),
                                     None, (per_row, False, False))
    x = torch.randn(4, 1024, dtype=torch.bfloat16)
    t, lse, g = torch.zeros(4, dtype=torch.int64), torch.zeros(4), torch.ones(4 if per_row else 1)
    sig = _signature(c, (x, torch.empty_like(x), t, lse, g, -100, 0.0, 0.0))
    dloss = sig.split("Tensor(")[5]
    assert dloss.startswith("[n2]" if per_row else "[1]"), sig


@pytest.mark.parametrize("op", ["rmsnorm", "layernorm", "softmax", "cross_entropy", "reduce_rows"])
def test_the_fast_path_refuses_what_its_kernel_was_not_built_for(op):
    """The fast path calls the remembered compiled function directly; whatever that function's
    signature refuses (here: tensors on the CPU, a wrong weight) must come back to the checked
    path and its clear error, never an FFI message or a launch. GPU-free: the compiled function
    is built here and remembered by hand, as a first call on a GPU would."""
    from kernels.cross_entropy import CrossEntropy
    from kernels.layernorm import LayerNorm
    from kernels.reduction import RowReduce
    from kernels.rmsnorm import RMSNorm
    from kernels.softmax import Softmax
    n, dt = 1024, torch.bfloat16
    t = torch.zeros(4, dtype=torch.int64)
    cls, key, call = {
        "rmsnorm": (RMSNorm, (dt, n, True), lambda x, w: kernels.rmsnorm(x, w)),
        "layernorm": (LayerNorm, (dt, n, True, True), lambda x, w: kernels.layernorm(x, w, w)),
        "softmax": (Softmax, (dt, n), lambda x, w: kernels.softmax(x)),
        "cross_entropy": (CrossEntropy, (dt, n, torch.int64), lambda x, w: kernels.cross_entropy(x, t)),
        "reduce_rows": (RowReduce, (dt, n), lambda x, w: kernels.reduce_rows(x)),
    }[op]
    cls.fast[key] = cls.compile(dt, n, 8).fn
    try:
        x, w = torch.randn(4, n, dtype=dt), torch.randn(n, dtype=dt)
        with pytest.raises(ValueError, match="must be on a CUDA device"):
            call(x, w)
        if op in ("rmsnorm", "layernorm"):
            with pytest.raises(ValueError, match=r"weight must have shape \(1024,\)"):
                call(x, torch.randn(n + 1, dtype=dt))
    finally:
        cls.fast.pop(key)


@requires_gpu
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm", "softmax", "cross_entropy", "reduce_rows"])
def test_the_fast_path_gives_what_the_checked_path_gives(op):
    """A second call takes the fast path and gives the first call's output bit for bit; a
    misaligned view (one element in, an odd row stride) is refused by the remembered kernel's
    signature and served by the checked path with narrower accesses, and the fast path keeps the
    widest kernel."""
    from kernels.cross_entropy import CrossEntropy
    from kernels.layernorm import LayerNorm
    from kernels.reduction import RowReduce
    from kernels.rmsnorm import RMSNorm
    from kernels.softmax import Softmax
    n = 4096
    x, w, b, t = _inputs(n)
    cls, key, call = {
        "rmsnorm": (RMSNorm, (x.dtype, n, True), lambda x: kernels.rmsnorm(x, w)),
        "layernorm": (LayerNorm, (x.dtype, n, True, True), lambda x: kernels.layernorm(x, w, b)),
        "softmax": (Softmax, (x.dtype, n), lambda x: kernels.softmax(x)),
        "cross_entropy": (CrossEntropy, (x.dtype, n, t.dtype), lambda x: kernels.cross_entropy(x, t)),
        "reduce_rows": (RowReduce, (x.dtype, n), lambda x: kernels.reduce_rows(x)),
    }[op]
    cls.fast.pop(key, None)
    first = call(x)
    fast = cls.fast[key]
    assert torch.equal(call(x), first)
    big = torch.randn(x.shape[0], n + 9, device="cuda", dtype=x.dtype)
    big[:, 1:n + 1] = x
    torch.testing.assert_close(call(big[:, 1:n + 1]).float(), first.float(), rtol=1.6e-2, atol=1e-2)
    assert cls.fast[key] is fast


@requires_gpu
def test_a_bad_target_is_reported_through_the_fast_path():
    """The fast path keeps cross-entropy's report: a bad target in one fast call raises in the next."""
    from kernels.errors import BadInputError
    x, _, _, t = _inputs(4096)
    kernels.cross_entropy(x, t)
    bad = t.clone()
    bad[3] = 5000
    kernels.cross_entropy(x, bad)  # fast: launches, flags the row
    torch.cuda.synchronize()
    with pytest.raises(BadInputError):
        kernels.cross_entropy(x, t)


@requires_gpu
def test_the_copy_fast_path():
    """copy's second call takes the fast path and copies exactly; a tensor it was not built for
    (misaligned by one element) is served by the checked path's error."""
    import importlib
    C = importlib.import_module("kernels.copy")
    x, _, _, _ = _inputs(4096)
    assert torch.equal(kernels.copy(x), x)
    assert (x.dtype, x.numel()) in C._FAST
    assert torch.equal(kernels.copy(x), x)
    flat = torch.randn(x.numel() + 8, device="cuda", dtype=x.dtype)
    with pytest.raises(ValueError, match="16-byte aligned"):
        kernels.copy(flat[1:x.numel() + 1])


def _parse_signature(message: str) -> list[str]:
    """The parameter types of a compiled function, from the signature TVM FFI prints when it
    refuses a call: ``__call__(args: Tuple[Tensor([n0, 1024], bfloat16), ..., float32])`` (a
    row op: one tuple) or ``__call__(mSrc: Tensor(...), mDst: Tensor(...))``."""
    inner = message.split("__call__(", 1)[1]
    if inner.startswith("args: Tuple["):
        inner = inner[len("args: Tuple["):]
    depth, cur, out = 0, "", []
    for ch in inner:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [t.split(": ", 1)[-1] for t in out if t]


def _matches(arg, typ: str) -> bool:
    if typ.startswith("Tensor("):
        dims, dtype = typ[len("Tensor(["):].rsplit("], ", 1)
        return (isinstance(arg, torch.Tensor) and arg.dim() == len(dims.split(","))
                and str(arg.dtype).removeprefix("torch.") == dtype.rstrip(")"))
    return isinstance(arg, float) if typ.startswith("float") else isinstance(arg, int) and not isinstance(arg, bool)


@pytest.mark.parametrize("op", ["rmsnorm", "rmsnorm_no_weight", "layernorm", "layernorm_weight_only", "softmax",
                                "reduce_rows", "copy", "cross_entropy"])
def test_the_fast_path_passes_what_the_kernel_takes(op):
    """The arguments each fast path hands the compiled function are the ones its signature
    declares, in order and by type (GPU-free: the fast path's call is recorded on CPU tensors,
    then the compiled function's own signature is read from its refusal of them)."""
    import importlib
    from kernels.layernorm import LayerNorm
    from kernels.reduction import RowReduce
    from kernels.rmsnorm import RMSNorm
    from kernels.softmax import Softmax
    C, CE = importlib.import_module("kernels.copy"), importlib.import_module("kernels.cross_entropy")
    n, dt = 1024, torch.bfloat16
    x, w = torch.randn(4, n, dtype=dt), torch.randn(n, dtype=dt)
    recorded = []

    def record(*args):
        recorded.append(args)
        raise ValueError("recorded")
    if op == "cross_entropy":
        compiled = CE.CrossEntropy.compile(dt, n, 8, (False, False, False, True, True), (torch.int64,), None,
                                           ("mean", False, False))
        t = torch.zeros(4, dtype=torch.int64)
        work, counter = CE.work_buffer(4, "cpu"), torch.zeros(18, dtype=torch.int32)
        args = (CE.mean_args(x, t, -100, work, counter, 0),)
    else:
        cls, key, call, present = {
            "rmsnorm": (RMSNorm, (dt, n, True), lambda: kernels.rmsnorm(x, w), None),
            "rmsnorm_no_weight": (RMSNorm, (dt, n, False), lambda: kernels.rmsnorm(x), (False, False)),
            "layernorm": (LayerNorm, (dt, n, True, True), lambda: kernels.layernorm(x, w, w), None),
            "layernorm_weight_only": (LayerNorm, (dt, n, True, False), lambda: kernels.layernorm(x, w),
                                      (True, False, False, False)),
            "softmax": (Softmax, (dt, n), lambda: kernels.softmax(x), None),
            "reduce_rows": (RowReduce, (dt, n), lambda: kernels.reduce_rows(x), None),
            "copy": (None, (dt, x.numel()), lambda: kernels.copy(x), None),
        }[op]
        fast = C._FAST if op == "copy" else cls.fast
        fast[key] = (record, C.COPY_WIDTH) if op == "copy" else record
        try:
            with pytest.raises(ValueError, match="CUDA device|must be on|device"):
                call()
        finally:
            fast.pop(key)
        (args,) = recorded
        compiled = C.compile_copy(dt) if op == "copy" else cls.compile(dt, n, 8, present)
    call_args = args if op == "copy" else (args[0],)
    with pytest.raises(ValueError, match="expected device_type=cuda") as e:
        compiled.fn(*call_args)
    flat = args if op == "copy" else args[0]
    types = _parse_signature(str(e.value))
    assert len(types) == len(flat), (types, [type(a) for a in flat])
    assert all(_matches(a, t) for a, t in zip(flat, types)), (types, [getattr(a, "dtype", type(a)) for a in flat])


def test_the_fast_path_never_swallows_a_bad_target_report(monkeypatch):
    """A report of an earlier bad target (a ValueError) must reach the caller from the fast
    path, not be taken for the compiled signature's refusal (also a ValueError) and cleared.
    GPU-free: the report is raised by hand, the remembered kernel compiled here."""
    from kernels import errors
    from kernels.cross_entropy import CrossEntropy
    n, dt = 1024, torch.bfloat16
    key = (dt, n, torch.int64)
    CrossEntropy.fast[key] = CrossEntropy.compile(dt, n, 8).fn

    def reported(word=None):
        raise errors.BadInputError("a target outside [0, N) (raised by hand)")
    monkeypatch.setattr(errors.FLAGS, "raise_if_set", reported)
    try:
        with pytest.raises(errors.BadInputError, match="raised by hand"):
            kernels.cross_entropy(torch.randn(4, n, dtype=dt), torch.zeros(4, dtype=torch.int64))
    finally:
        CrossEntropy.fast.pop(key)


def test_a_weight_that_is_not_a_tensor_gets_the_checked_error():
    with pytest.raises(ValueError, match="weight must have shape"):
        kernels.rmsnorm(torch.randn(4, 64), [1.0] * 64)


@pytest.mark.parametrize("path", ["rmsnorm", "layernorm", "softmax", "cross_entropy", "cross_entropy_rows",
                                  "softmax_bwd", "cross_entropy_bwd", "rmsnorm_bwd", "layernorm_bwd"])
def test_the_training_fast_paths_pass_what_the_kernel_takes(path, monkeypatch):
    """A training call's forward and backward take the kernel a checked call remembered: the
    arguments they hand it are the ones its signature declares, in order and by type, and a
    refusal sends them to the checked path (GPU-free, as above: the call recorded on CPU tensors,
    the eager path let through by hand)."""
    from types import SimpleNamespace

    from kernels import errors
    from kernels import functional as Fn
    from kernels.cross_entropy import CrossEntropy, CrossEntropyBackward
    from kernels.layernorm import LayerNorm
    from kernels.norm_backward import LayerNormBackward, RMSNormBackward
    from kernels.rmsnorm import RMSNorm
    from kernels.softmax import Softmax, SoftmaxBackward
    CE = importlib.import_module("kernels.cross_entropy")
    monkeypatch.setattr(Fn, "_eager", lambda *tensors: True)
    monkeypatch.setattr(CE, "_counter", lambda device: torch.zeros(18, dtype=torch.int32))
    monkeypatch.setattr(errors.FLAGS, "address", lambda word: 0)
    monkeypatch.setattr(errors.FLAGS, "raise_if_set", lambda word=None: None)
    n, dt, i64, f32 = 1024, torch.bfloat16, torch.int64, torch.float32
    m = 2 * CE.IN_LAUNCH_MAX_ROWS if path == "cross_entropy_rows" else 4
    x, dy, w, b = torch.randn(m, n, dtype=dt), torch.randn(m, n, dtype=dt), torch.randn(n, dtype=dt), torch.randn(n, dtype=dt)
    t, stat, stat2 = torch.zeros(m, dtype=i64), torch.ones(m), torch.ones(m)
    grads = lambda k: SimpleNamespace(needs_input_grad=(True,) * k)
    ce_ctx = SimpleNamespace(saved_tensors=(x, t, stat, torch.ones(1)), ignore_index=-100, reduction="mean",
                             inplace=False, smoothing=0.0, z=0.0)
    # (position, tensor): the caller's tensors where the kernel takes them, by identity
    at = {"rmsnorm": ((0, x), (2, w)), "layernorm": ((0, x), (2, w), (3, b)), "softmax": ((0, x),),
          "cross_entropy": ((0, x), (1, t)), "cross_entropy_rows": ((0, x), (1, t)),
          "softmax_bwd": ((0, x), (1, dy)), "cross_entropy_bwd": ((0, x), (2, t), (3, stat)),
          "rmsnorm_bwd": ((0, x), (1, dy), (3, w), (4, stat)),
          "layernorm_bwd": ((0, x), (1, dy), (3, w), (4, stat), (5, stat2))}[path]
    cls, key, call, compiled = {
        "rmsnorm": (RMSNorm, (dt, n, True, "rstd"), lambda: Fn._rmsnorm_fwd(x, w, 1e-6),
                    lambda: RMSNorm.compile(dt, n, 8, (True, True))),
        "layernorm": (LayerNorm, (dt, n, True, True, "stats"), lambda: Fn._layernorm_fwd(x, w, b, 1e-5),
                      lambda: LayerNorm.compile(dt, n, 8, (True, True, True, True))),
        "softmax": (Softmax, (dt, n), lambda: Fn._softmax_fwd(x), lambda: Softmax.compile(dt, n, 8)),
        "cross_entropy": (CrossEntropy, (dt, n, i64, "lse"),
                          lambda: Fn._cross_entropy_fwd_eager(x, t, -100, "mean", 0.0, 0.0, False),
                          lambda: CrossEntropy.compile(dt, n, 8, (False, True, False, True, True))),
        "cross_entropy_rows": (CrossEntropy, (dt, n, i64, "rows", "lse"),
                               lambda: Fn._cross_entropy_fwd_eager(x, t, -100, "mean", 0.0, 0.0, False),
                               lambda: CrossEntropy.compile(dt, n, 8, (True, True, True, False, False), None, None,
                                                            ("none", False, False))),
        "softmax_bwd": (SoftmaxBackward, (dt, n), lambda: Fn._softmax_bwd(SimpleNamespace(saved_tensors=(x,)), dy),
                        lambda: SoftmaxBackward.compile(dt, n, 8)),
        "cross_entropy_bwd": (CrossEntropyBackward, (dt, n, i64, False, False, False),
                              lambda: Fn._cross_entropy_bwd(ce_ctx, torch.ones(()), None, None),
                              lambda: CrossEntropyBackward.compile(dt, n, 8, (), (i64, f32, f32), None,
                                                                   (False, False, False))),
        "rmsnorm_bwd": (RMSNormBackward, (dt, n, True, -1),
                        lambda: Fn._rmsnorm_bwd(SimpleNamespace(saved_tensors=(x, w, stat), **vars(grads(2))), dy, None),
                        lambda: RMSNormBackward.compile(dt, n, 8, (True,))),
        "layernorm_bwd": (LayerNormBackward, (dt, n, True, -1),
                          lambda: Fn._layernorm_bwd(SimpleNamespace(saved_tensors=(x, w, stat, stat2), **vars(grads(3))),
                                                    dy, None, None),
                          lambda: LayerNormBackward.compile(dt, n, 8, (True,))),
    }[path]
    recorded = []

    def record(args):  # as a launch: the call returns what the kernel would have written
        recorded.append(args)

    def refuse(args):
        raise ValueError("refused")
    try:
        cls.fast[key] = (refuse, (4,)) if path.endswith("norm_bwd") else refuse
        with pytest.raises(ValueError, match="CUDA device|must be on|device"):
            call()  # refused: the checked path and its own error
        cls.fast[key] = (record, (4,)) if path.endswith("norm_bwd") else record
        got = call()
    finally:
        cls.fast.pop(key)
    (args,) = recorded
    assert all(args[i] is want for i, want in at), path
    # what the call returns is what the kernel wrote, in the places its signature names
    written = {"rmsnorm": ((0, 1), (1, 3)), "layernorm": ((0, 1), (1, 4), (2, 5)), "softmax": ((None, 1),),
               "cross_entropy": ((1, 2),), "cross_entropy_rows": ((1, 3),), "softmax_bwd": ((None, 2),),
               "cross_entropy_bwd": ((0, 1),), "rmsnorm_bwd": ((0, 2),), "layernorm_bwd": ((0, 2),)}[path]
    assert all((got if k is None else got[k]) is args[i] for k, i in written), path
    if path == "cross_entropy":  # the mean and the count: the first and the last element of the work buffer
        work = args[3]
        assert got[0].data_ptr() == work.data_ptr() and got[2].data_ptr() == work[-1:].data_ptr()
    if path == "cross_entropy_rows":  # the losses, the lse, the counts: rows 1 and 0 of one buffer, the lse apart
        loss, lse, valid = args[2:5]
        assert loss.untyped_storage().data_ptr() == valid.untyped_storage().data_ptr() != lse.data_ptr()
        assert valid.data_ptr() < loss.data_ptr()
    if path.endswith("norm_bwd"):  # a row of partials for each of the remembered blocks
        assert args[-1] == 4 and all(p.shape == (4, n) for p in args[-1 - len(cls.col_out):-1])
    with pytest.raises(ValueError, match="expected device_type=cuda") as e:
        compiled().fn(args)
    types = _parse_signature(str(e.value))
    assert len(types) == len(args), (types, [type(a) for a in args])
    assert all(_matches(a, t) for a, t in zip(args, types)), (types, [getattr(a, "dtype", type(a)) for a in args])


@requires_gpu
@pytest.mark.parametrize("m", [64, 4100])  # (cross-entropy's mean in the launch, and past IN_LAUNCH_MAX_ROWS)
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm", "softmax", "cross_entropy"])
def test_a_training_call_takes_the_fast_path_and_gives_the_checked_paths_gradients(op, m):
    """The first training step of a kind is checked and remembers its kernels; the second takes
    them directly (their keys are in ``fast``) and gives the first step's outputs and gradients
    bit for bit."""
    from kernels import functional as Fn
    x, w, b, t = _inputs(4096, m)
    x, w, b = (v.clone().requires_grad_() for v in (x, w, b))
    call = {"rmsnorm": lambda: kernels.rmsnorm(x, w), "layernorm": lambda: kernels.layernorm(x, w, b),
            "softmax": lambda: kernels.softmax(x), "cross_entropy": lambda: kernels.cross_entropy(x, t)}[op]
    leaves = {"rmsnorm": (x, w), "layernorm": (x, w, b)}.get(op, (x,))
    fwd, bwd, key = {
        "rmsnorm": (Fn._rms.RMSNorm, Fn._nb.RMSNormBackward, (x.dtype, 4096, True)),
        "layernorm": (Fn._ln.LayerNorm, Fn._nb.LayerNormBackward, (x.dtype, 4096, True)),
        "softmax": (Fn._sm.Softmax, Fn._sm.SoftmaxBackward, (x.dtype, 4096)),
        "cross_entropy": (Fn._ce.CrossEntropy, Fn._ce.CrossEntropyBackward, (x.dtype, 4096, t.dtype)),
    }[op]
    for cls in (fwd, bwd):
        cls.fast.clear()
    calls = {fwd: 0, bwd: 0}

    def counted(cls, fn):
        def call_and_count(args):
            calls[cls] += 1
            return fn(args)
        return call_and_count
    steps = []
    for step in range(2):
        y = call()
        dy = torch.ones_like(y) if op == "cross_entropy" else torch.randn(y.shape, device="cuda",
                                                                           generator=torch.Generator("cuda").manual_seed(1)).to(y.dtype)
        steps.append((y.detach(),) + torch.autograd.grad(y, leaves, dy))
        if step == 0:  # the checked step remembered its kernels: count their calls from here on
            for cls in (fwd, bwd):
                mine = [k for k in cls.fast if k[:len(key)] == key]
                assert mine, f"{op}: {cls.__name__}'s checked step remembered no kernel"
                for k in mine:
                    v = cls.fast[k]
                    cls.fast[k] = (counted(cls, v[0]), v[1]) if isinstance(v, tuple) else counted(cls, v)
    assert calls[fwd] == 1 and calls[bwd] == 1, (op, calls)  # the second step's forward and backward
    for first, second in zip(*steps):
        assert torch.equal(first, second), op


@requires_gpu
def test_the_mean_fast_path_refuses_targets_of_another_length():
    """The compiled signature checks each tensor alone: a target of another length than the
    logits' rows is refused by the fast path's own check and named by the checked path, never
    read past its end."""
    x, _, _, t = _inputs(4096)
    kernels.cross_entropy(x, t)  # remembers the kernel
    for bad in (t[:-1], torch.cat([t, t[:1]])):
        with pytest.raises(ValueError, match="target"):
            kernels.cross_entropy(x, bad)

"""The ops in autograd and torch.compile (kernels.functional, kernels.nn).

Without a GPU: the backward formulas against float64 autograd of the references (CPU tensors),
the fake implementations and a torch.compile(fullgraph=True) trace of forward and backward on
meta tensors, the nn modules' arguments, and the clear error where an output would otherwise
leave autograd. On the GPU: every gradient against float64, a small model eager against
compiled, a CUDA-graph-captured training step, and backward passes equal bit for bit."""
import pytest
import torch

import kernels
from kernels import functional as KF
from kernels import nn as knn

from _grid import assert_grad_close, dx_scale
from _gpu import requires_gpu

DT = [torch.float32, torch.bfloat16, torch.float16]


def _ref_grads(f, inputs, dy):
    """Float64 autograd of ``f`` at ``inputs`` (each cast to float64), for the cotangent dy."""
    leaves = [t.detach().double().requires_grad_() if t is not None and t.is_floating_point() else t for t in inputs]
    out = f(*leaves)
    grads = torch.autograd.grad(out, [t for t in leaves if t is not None and t.requires_grad], dy.double())
    return grads


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
def test_rmsnorm_backward_formula(n):
    """The PyTorch form of the backward (the reference the GPU-free tests stand in for the kernel),
    against autograd."""
    g = torch.Generator().manual_seed(n)
    x, w, dy = torch.randn(5, 3, n, generator=g), torch.randn(n, generator=g), torch.randn(5, 3, n, generator=g)
    rstd = torch.rsqrt(x.pow(2).mean(-1) + 1e-6)
    dx, dw = KF.rmsnorm_backward_torch(dy, x, w, rstd)
    ref = _ref_grads(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, (x, w), dy)
    torch.testing.assert_close(dx.double(), ref[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw.double(), ref[1], rtol=1e-4, atol=1e-4)
    dx0, dw0 = KF.rmsnorm_backward_torch(dy, x, None, rstd)
    assert dw0 is None
    torch.testing.assert_close(dx0.double(), _ref_grads(
        lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), (x,), dy)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
def test_layernorm_backward_formula(n):
    g = torch.Generator().manual_seed(n + 1)
    x, w, b, dy = (torch.randn(6, n, generator=g) * 3 + 1, torch.randn(n, generator=g), torch.randn(n, generator=g),
                   torch.randn(6, n, generator=g))
    mean, rstd = x.mean(-1), torch.rsqrt(x.var(-1, unbiased=False) + 1e-5)
    dx, dw, db = KF.layernorm_backward_torch(dy, x, w, mean, rstd, True)
    ref = _ref_grads(lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5), (x, w, b), dy)
    for got, want in zip((dx, dw, db), ref):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_softmax_backward_reference(n):
    """The formula the backward kernel computes (and the GPU tests compare it with)."""
    from kernels.softmax import softmax_backward_reference
    g = torch.Generator().manual_seed(n + 2)
    x, dy = torch.randn(9, n, generator=g), torch.randn(9, n, generator=g)
    dx = softmax_backward_reference(dy, torch.softmax(x.double(), -1))
    torch.testing.assert_close(dx, _ref_grads(lambda x: torch.softmax(x, -1), (x,), dy)[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("smoothing, z", [(0.0, 0.0), (0.1, 0.0), (0.0, 1e-3), (0.2, 1e-2)])
def test_cross_entropy_references_with_smoothing_and_z_loss(smoothing, z):
    """The forward reference is torch's loss with label smoothing plus z lse^2 a row kept; the
    backward reference is its gradient (autograd of the forward reference)."""
    from kernels.cross_entropy import cross_entropy_backward_reference, cross_entropy_reference
    g = torch.Generator().manual_seed(4)
    x, t = torch.randn(13, 200, generator=g), torch.randint(0, 200, (13,), generator=g)
    t[::5] = -100
    for reduction in ("mean", "sum", "none"):
        dloss = torch.randn(13 if reduction == "none" else (), generator=g)
        ref = _ref_grads(lambda x: cross_entropy_reference(x, t, -100, reduction, smoothing, z), (x,), dloss)[0]
        got = cross_entropy_backward_reference(dloss, x, t, -100, reduction, smoothing, z)
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
    plain = cross_entropy_reference(x, t, -100, "none", smoothing, 0.0)
    torch.testing.assert_close(plain, torch.nn.functional.cross_entropy(x.double(), t, reduction="none",
                                                                        label_smoothing=smoothing))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_backward_reference(reduction):
    """Each row's share of the loss's gradient (row_gradients, what the kernel is handed) and the
    formula the backward kernel computes, against autograd."""
    from kernels.cross_entropy import cross_entropy_backward_reference
    g = torch.Generator().manual_seed(3)
    x, t = torch.randn(11, 300, generator=g), torch.randint(0, 300, (11,), generator=g)
    t[::4] = -100
    dloss = torch.randn(11 if reduction == "none" else (), generator=g)
    dx = cross_entropy_backward_reference(dloss, x, t, -100, reduction)
    ref = _ref_grads(lambda x: torch.nn.functional.cross_entropy(x, t, reduction=reduction), (x,), dloss)[0]
    torch.testing.assert_close(dx, ref, rtol=1e-10, atol=1e-12)
    assert (dx[::4] == 0).all()


def _meta(*shape, grad=True):
    return torch.randn(*shape, device="meta", requires_grad=grad)


def test_outputs_keep_their_place_in_autograd():
    """An input that requires grad gives an output with a grad_fn, and the per-row statistics
    none (meta tensors: the fake implementations and the registered autograd, no GPU)."""
    x, w = _meta(4, 64), _meta(64)
    t = torch.zeros(4, dtype=torch.long, device="meta")
    outs = {"rmsnorm": kernels.rmsnorm(x, w), "layernorm": kernels.layernorm(x, w, w),
            "softmax": kernels.softmax(x), "cross_entropy": kernels.cross_entropy(x, t),
            "cross_entropy in place": kernels.cross_entropy(x, t, inplace_backward=True)}
    for name, y in outs.items():
        assert y.grad_fn is not None, name
    y, mean, rstd = kernels.layernorm(x, w, None, return_stats=True)
    assert mean.shape == rstd.shape == (4,)
    loss, lse = kernels.cross_entropy(x, t, reduction="none", return_lse=True)
    assert loss.shape == lse.shape == (4,)
    # the per-row statistics are not differentiable: they say so (a backward through one raises)
    # rather than take part in a gradient that would leave them out
    assert y.requires_grad and loss.requires_grad
    assert not (mean.requires_grad or rstd.requires_grad or lse.requires_grad)


def test_torch_compile_traces_a_model_forward_and_backward_without_a_graph_break():
    """fullgraph=True fails on any graph break; aot_eager traces the backward too. Meta tensors:
    the trace needs no GPU."""
    def model(x, w, b, lin, t):
        h = kernels.rmsnorm(x, w)
        h = kernels.layernorm(h, w, b)
        logits = h @ lin
        return (kernels.cross_entropy(logits, t) + kernels.softmax(logits).mean()
                + kernels.cross_entropy(logits * 2, t, reduction="sum", inplace_backward=True))
    x, w, b, lin = _meta(8, 64), _meta(64), _meta(64), _meta(64, 128)
    t = torch.zeros(8, dtype=torch.long, device="meta")
    torch._dynamo.reset()
    loss = torch.compile(model, fullgraph=True, backend="aot_eager")(x, w, b, lin, t)
    assert loss.shape == ()
    loss.backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape and b.grad.shape == b.shape
    assert lin.grad.shape == lin.shape


def test_modules_take_torchs_arguments_and_refuse_what_they_cannot_do():
    assert knn.RMSNorm(64).weight.shape == (64,) and knn.RMSNorm([64], elementwise_affine=False).weight is None
    ln = knn.LayerNorm(64, bias=False)
    assert ln.weight.shape == (64,) and ln.bias is None
    assert set(knn.LayerNorm(64).state_dict()) == set(torch.nn.LayerNorm(64).state_dict())
    assert set(knn.RMSNorm(64).state_dict()) == set(torch.nn.RMSNorm(64).state_dict())
    with pytest.raises(ValueError, match="last dim only"):
        knn.LayerNorm((4, 64))
    with pytest.raises(NotImplementedError, match="per-class weights"):
        knn.CrossEntropyLoss(weight=torch.ones(10))
    with pytest.raises(ValueError, match="label_smoothing"):
        knn.CrossEntropyLoss(label_smoothing=1.5)
    assert knn.CrossEntropyLoss(label_smoothing=0.1).label_smoothing == 0.1
    with pytest.raises(ValueError, match="reduction"):
        knn.CrossEntropyLoss(reduction="avg")
    x = _meta(3, 64)
    assert knn.RMSNorm(64, device="meta")(x).grad_fn is not None


@pytest.mark.parametrize("fn", ["kernels.rmsnorm.rmsnorm", "kernels.softmax.softmax", "kernels.layernorm.layernorm",
                                "reduce_rows", "copy"])
def test_functions_without_autograd_refuse_inputs_that_want_a_gradient(fn):
    """Never a silent detach: the op modules' own functions and the ops with no backward raise."""
    import importlib
    if fn.startswith("kernels."):
        mod, name = fn.rsplit(".", 1)
        f = getattr(importlib.import_module(mod), name)
    else:
        f = getattr(kernels, fn)
    x = torch.randn(4, 64, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        f(x)
    with torch.no_grad():
        with pytest.raises(ValueError, match="CUDA"):  # past the autograd check: the CPU tensor's error
            f(x)


def test_config_cannot_pass_through_autograd():
    from kernels.config import row_config
    with pytest.raises(ValueError, match="config="):
        kernels.softmax(_meta(4, 64), config=row_config("softmax", 64, 32))


# ---- on the GPU --------------------------------------------------------------------------------
def _grads(f, inputs, dy):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = f(*leaves)
    out.backward(dy)
    return out, [t.grad for t in leaves]


OPS = {
    "rmsnorm": (lambda x, w, b: kernels.rmsnorm(x, w), lambda x, w, b: torch.nn.functional.rms_norm(x, x.shape[-1:], w, 1e-6), 2),
    "layernorm": (lambda x, w, b: kernels.layernorm(x, w, b), lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b), 3),
    "softmax": (lambda x, w, b: kernels.softmax(x), lambda x, w, b: torch.softmax(x, -1), 1),
}


@requires_gpu
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("n", [1, 7, 1000, 4096, 65536, 131071, 262144])
@pytest.mark.parametrize("op", sorted(OPS))
def test_gradients_against_float64(op, n, dtype):
    ours, ref, k = OPS[op]
    for m in (1, 37, max(2, min(513, (1 << 24) // n))):
        x = (torch.randn(m, n, device="cuda") * 2 + 0.5).to(dtype)
        w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
        dy = torch.randn(m, n, device="cuda").to(dtype)
        y, grads = _grads(ours, (x, w, b), dy)
        want_y, want = _grads(ref, (x.double(), w.double(), b.double()), dy.double())
        assert_grad_close(y, want_y.detach(), dtype, f"{op} y")
        for name, got, w_ in zip(("dx", "dw", "db")[:k], grads, want):
            scale = dx_scale(op, x, w if op != "softmax" else None, dy) if name == "dx" else None
            assert_grad_close(got, w_, dtype, f"{op} {name} N={n} M={m}", scale)


@requires_gpu
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("n", [7, 1000, 50257, 131072])
def test_cross_entropy_gradient_against_float64(n, dtype, reduction):
    m = 64
    x = (torch.randn(m, n, device="cuda") * 3).to(dtype).requires_grad_()
    t = torch.randint(0, n, (m,), device="cuda")
    t[::5] = -100
    loss = kernels.cross_entropy(x, t, reduction=reduction)
    dl = torch.randn_like(loss)
    loss.backward(dl)
    x64 = x.detach().double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(x64, t, reduction=reduction)
    ref.backward(dl.double())
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-5)
    assert_grad_close(x.grad, x64.grad, dtype, f"dlogits N={n}")


@requires_gpu
@pytest.mark.parametrize("m,n,dtype", [(m, n, dt) for m, n in ((4099, 1000), (5000, 7)) for dt in DT]
                         + [(2**24 + 3, 2, torch.float32), (2**24 + 3, 2, torch.bfloat16)])
def test_cross_entropy_mean_over_many_rows_against_float64(m, n, dtype):
    """Past the rows whose mean the kernel finishes itself: the per-row losses and counts added up
    after (fp32 counts up to 2^24 rows, integer counts past that), and the count the backward
    divides by saved by the forward. (Past 2^24 rows a mean's gradient, about 1e-8, lies below
    fp16's smallest number: fp32 and bf16 only.)"""
    x = (torch.randn(m, n, device="cuda") * 3).to(dtype).requires_grad_()
    t = torch.randint(0, n, (m,), device="cuda")
    t[::5] = -100
    loss = kernels.cross_entropy(x, t)
    loss.backward(torch.tensor(0.5, device="cuda"))
    x64 = x.detach().double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(x64, t)
    (ref * 0.5).backward()
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-5)
    assert_grad_close(x.grad, x64.grad, dtype, f"dlogits M={m} N={n}")


class _Small(torch.nn.Module):
    def __init__(self, n, v):
        super().__init__()
        self.norm = knn.RMSNorm(n, eps=1e-6, device="cuda")
        self.lin = torch.nn.Linear(n, v, device="cuda")
        self.loss = knn.CrossEntropyLoss()

    def forward(self, x, t):
        return self.loss(self.lin(self.norm(x)), t)


@requires_gpu
def test_a_small_model_eager_and_compiled_agree():
    torch.manual_seed(0)
    model = _Small(512, 1000)
    x, t = torch.randn(64, 512, device="cuda"), torch.randint(0, 1000, (64,), device="cuda")
    eager = model(x, t)
    eager.backward()
    g_eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)(x, t)
    compiled.backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_eager, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@requires_gpu
def test_a_training_step_captures_in_a_cuda_graph():
    torch.manual_seed(1)
    model = _Small(256, 512)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, t = torch.randn(32, 256, device="cuda"), torch.randint(0, 512, (32,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = model(x, t)
        loss.backward()
        opt.step()
        return loss
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = step()
    losses = []
    for _ in range(5):
        graph.replay()
        losses.append(loss.item())
    assert losses == sorted(losses, reverse=True), f"the loss should fall step by step: {losses}"


@requires_gpu
@pytest.mark.parametrize("op", sorted(OPS) + ["cross_entropy"])
def test_two_backward_passes_are_equal_bit_for_bit(op):
    n = 8192
    x = torch.randn(300, n, device="cuda", dtype=torch.bfloat16)
    w, b = torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(n, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, n, (300,), device="cuda")
    runs = []
    for _ in range(2):
        leaves = [v.clone().requires_grad_() for v in (x, w, b)]
        out = kernels.cross_entropy(leaves[0], t) if op == "cross_entropy" else OPS[op][0](*leaves)
        out.backward(torch.ones_like(out))
        runs.append([v.grad for v in leaves if v.grad is not None])
    for a, b_ in zip(*runs):
        assert torch.equal(a, b_)


@requires_gpu
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("n", [1, 7, 64, 1000, 1024, 3000, 4096, 8192, 16384, 40000, 65536, 131071, 131072, 262144])
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm"])
def test_norm_backward_kernels_against_float64(op, n, dtype):
    """The persistent kernels: dx row by row, and the weight's (and bias's) gradient summed over
    rows by P blocks (clusters, from 16k elements); M of 1, odd, and many more rows than blocks
    (both of a walk's buffers, and rows that leave the second one idle); without a weight too."""
    from kernels import norm_backward as NB
    for m in (1, 37, max(3, min(5000, (1 << 26) // n))):
        x = (torch.randn(m, n, device="cuda") * 2 + 0.5).to(dtype)
        w = torch.randn(n, device="cuda").to(dtype)
        dy = torch.randn(m, n, device="cuda").to(dtype)
        x64 = x.double()
        if op == "rmsnorm":
            rstd = torch.rsqrt(x64.pow(2).mean(-1) + 1e-6).float()
            for weight in (w, None):
                dx = torch.empty_like(x)
                dw = NB.rmsnorm_backward_out(dy, x, weight, rstd, dx)
                want = KF.rmsnorm_backward_torch(dy.double(), x64, None if weight is None else weight.double(),
                                                 rstd.double())
                assert_grad_close(dx, want[0], dtype, f"dx N={n} M={m}", dx_scale(op, x, weight, dy))
                if weight is not None:
                    assert_grad_close(dw, want[1], torch.float32, f"dw N={n} M={m}")
        else:
            mean, rstd = x64.mean(-1).float(), torch.rsqrt(x64.var(-1, unbiased=False) + 1e-5).float()
            dx = torch.empty_like(x)
            dw, db = NB.layernorm_backward_out(dy, x, w, mean, rstd, dx)
            want = KF.layernorm_backward_torch(dy.double(), x64, w.double(), mean.double(), rstd.double(), True)
            for name, got, ref in (("dx", dx, want[0]), ("dw", dw, want[1]), ("db", db, want[2])):
                assert_grad_close(got, ref, dtype if name == "dx" else torch.float32, f"{name} N={n} M={m}",
                       dx_scale(op, x, w, dy) if name == "dx" else None)


def test_backward_passes_hand_their_kernels_contiguous_gradients(monkeypatch):
    """``y.sum().backward()`` gives autograd's gradient of a sum, one value expanded to y's
    shape (stride 0), which the backward kernels' entries refuse ("must be contiguous"): each
    op's backward makes it contiguous first. GPU-free: the kernels' entries are stood in for."""
    from types import SimpleNamespace
    ce = KF._ce  # (kernels.cross_entropy is the public function)
    seen = {}

    def stand_in(op, outputs):
        def entry(dy, *args):
            seen[op] = dy
            return (dy,) + (None,) * (outputs - 1) if outputs > 1 else dy
        return entry
    monkeypatch.setattr(KF, "rmsnorm_backward", stand_in("rmsnorm", 2))
    monkeypatch.setattr(KF, "layernorm_backward", stand_in("layernorm", 3))
    monkeypatch.setattr(KF, "_softmax_backward_op", stand_in("softmax", 1))
    monkeypatch.setattr(KF, "_cross_entropy_backward_op", stand_in("cross_entropy", 1))
    m, n = 4, 8
    x = torch.randn(m, n)
    ones = torch.ones(()).expand(m, n)
    assert not ones.is_contiguous()
    ctx = SimpleNamespace(saved_tensors=(x, None, torch.ones(m)), needs_input_grad=(True, False, False))
    KF._rmsnorm_bwd(ctx, ones, None)
    ctx = SimpleNamespace(saved_tensors=(x, None, torch.zeros(m), torch.ones(m)), has_bias=False,
                          needs_input_grad=(True, False, False))
    KF._layernorm_bwd(ctx, ones, None, None)
    KF._softmax_bwd(SimpleNamespace(saved_tensors=(x,)), ones)
    ctx = SimpleNamespace(saved_tensors=(x, torch.zeros(m, dtype=torch.long), torch.ones(m), torch.ones(1)),
                          ignore_index=-100, reduction="none", inplace=False, smoothing=0.0, z=0.0)
    KF._cross_entropy_bwd(ctx, torch.ones(()).expand(m), None, None)
    assert set(seen) == {"rmsnorm", "layernorm", "softmax", "cross_entropy"}
    for op, t in seen.items():
        assert t.is_contiguous(), f"{op}'s backward hands its kernel a gradient of strides {t.stride()}"
    assert torch.equal(ce.row_gradients(torch.ones(()).expand(m).contiguous(), None, -100, "none"), torch.ones(m))


@requires_gpu
@pytest.mark.parametrize("op", ["rmsnorm", "layernorm", "softmax", "cross_entropy"])
def test_the_gradient_of_a_sum(op):
    """``op(x).sum().backward()``, as a quick check in a notebook does it, against float64."""
    x = (torch.randn(37, 1000, device="cuda") * 2).requires_grad_()
    x64 = x.detach().double().requires_grad_()
    t = torch.randint(0, 1000, (37,), device="cuda")
    ours = {"rmsnorm": lambda v: kernels.rmsnorm(v), "layernorm": lambda v: kernels.layernorm(v),
            "softmax": lambda v: kernels.softmax(v) * torch.arange(1000, device="cuda"),
            "cross_entropy": lambda v: kernels.cross_entropy(v, t, reduction="none")}[op]
    ref = {"rmsnorm": lambda v: torch.nn.functional.rms_norm(v, (1000,), eps=1e-6),
           "layernorm": lambda v: torch.nn.functional.layer_norm(v, (1000,)),
           "softmax": lambda v: torch.softmax(v, -1) * torch.arange(1000, device="cuda"),
           "cross_entropy": lambda v: torch.nn.functional.cross_entropy(v, t, reduction="none")}[op]
    ours(x).sum().backward()
    ref(x64).sum().backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-5)


def test_eager_autograd_runs_each_ops_functions_without_its_custom_ops(monkeypatch):
    """An eager call that needs a gradient runs its op's forward, setup and backward as one
    autograd.Function, never through the custom ops (whose dispatch costs the host more than the
    kernels' launches). GPU-free: CPU float64 tensors stand for CUDA ones, PyTorch for the
    kernels' entries, and every custom op raises if called: each op's outputs and gradients
    against float64 autograd, with weights and biases wanting gradients, and the per-row
    statistics (mean, rstd, lse) not differentiable."""
    ce = KF._ce

    def boom(*args, **kwargs):
        raise AssertionError("an eager call went through a custom op")
    monkeypatch.setattr(KF, "_eager", lambda *tensors: True)
    for name in ("_rmsnorm_op", "_rmsnorm_backward_op", "_layernorm_op", "_layernorm_backward_op", "_softmax_op",
                 "_softmax_backward_op", "_cross_entropy_op", "_cross_entropy_backward_op",
                 "_cross_entropy_backward_inplace_op"):
        monkeypatch.setattr(KF, name, boom)

    def rmsnorm_out(x, w, out, eps, rstd, remember=None):
        r = torch.rsqrt(x.pow(2).mean(-1) + eps)
        rstd.copy_(r)
        out.copy_(x * r[:, None] * (w if w is not None else 1))

    def norm_backward(op, dy, x, w, stats, key):
        if op is KF._nb.RMSNormBackward:
            dx, dw = KF.rmsnorm_backward_torch(dy, x, w, stats[0])
            return dx, [dw]
        dx, dw, db = KF.layernorm_backward_torch(dy, x, w, *stats, True)
        return dx, [dw, db]

    def layernorm_fwd(x, w, b, eps, return_stats):
        mean, rstd = x.mean(-1), torch.rsqrt(x.var(-1, unbiased=False) + eps)
        y = (x - mean[:, None]) * rstd[:, None]
        return y * (w if w is not None else 1) + (b if b is not None else 0), mean, rstd

    def softmax_backward_out(dy, y, out, remember=None):
        return out.copy_(y * (dy - (dy * y).sum(-1, keepdim=True)))

    def cross_entropy_fwd(x, t, ignore_index, reduction, label_smoothing, lse_square_scale, return_lse, return_count):
        count = (t != ignore_index).sum(dtype=x.dtype).reshape(1)
        return ce.cross_entropy_reference(x, t, ignore_index, reduction), torch.logsumexp(x, -1), count

    def cross_entropy_backward_out(g, x, t, lse, out, ignore_index, label_smoothing, lse_square_scale, remember=None):
        keep = t != ignore_index
        onehot = torch.nn.functional.one_hot(torch.where(keep, t, 0), x.shape[-1]).double()
        rows = torch.where(keep, g.expand(t.shape), 0.0)
        return out.copy_((torch.exp(x - lse[:, None]) - onehot) * rows[:, None])
    monkeypatch.setattr(KF._rms, "rmsnorm_out", rmsnorm_out)
    monkeypatch.setattr(KF._nb, "autograd_backward", norm_backward)
    monkeypatch.setattr(KF._ln, "layernorm", layernorm_fwd)
    monkeypatch.setattr(KF._sm, "softmax", lambda x: torch.softmax(x, -1))
    monkeypatch.setattr(KF._sm, "softmax_backward_out", softmax_backward_out)
    monkeypatch.setattr(ce, "cross_entropy", cross_entropy_fwd)
    monkeypatch.setattr(ce, "cross_entropy_backward_out", cross_entropy_backward_out)

    m, n = 6, 16
    t = torch.randint(0, n, (m,))
    t[2] = -100
    cases = {
        "rmsnorm": (lambda x, w, b: kernels.rmsnorm(x, w),
                    lambda x, w, b: torch.nn.functional.rms_norm(x, (n,), w, 1e-6)),
        "layernorm": (lambda x, w, b: kernels.layernorm(x, w, b),
                      lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)),
        "softmax": (lambda x, w, b: kernels.softmax(x), lambda x, w, b: torch.softmax(x, -1)),
        "cross_entropy": (lambda x, w, b: kernels.cross_entropy(x, t),
                          lambda x, w, b: torch.nn.functional.cross_entropy(x, t)),
        "cross_entropy none": (lambda x, w, b: kernels.cross_entropy(x, t, reduction="none"),
                               lambda x, w, b: torch.nn.functional.cross_entropy(x, t, reduction="none")),
    }
    for name, (ours, ref) in cases.items():
        inputs = [torch.randn(m, n, dtype=torch.float64), torch.randn(n, dtype=torch.float64),
                  torch.randn(n, dtype=torch.float64)]
        leaves = [v.clone().requires_grad_() for v in inputs]
        want_leaves = [v.clone().requires_grad_() for v in inputs]
        y, want = ours(*leaves), ref(*want_leaves)
        assert y.grad_fn is not None and "Eager" in type(y.grad_fn).__name__, name
        dy = torch.randn_like(want)
        used = [v for v in leaves if v.requires_grad][: {"rmsnorm": 2, "layernorm": 3}.get(name, 1)]
        got = torch.autograd.grad(y, used, dy)
        expected = torch.autograd.grad(want, want_leaves[:len(used)], dy)
        torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-10, msg=lambda s: f"{name}: {s}")
        for g, e in zip(got, expected):
            # (the saved per-row statistics are fp32, as the kernels write them)
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6, msg=lambda s: f"{name} gradient: {s}")
    x = torch.randn(m, n, dtype=torch.float64, requires_grad=True)
    _, mean, rstd = kernels.layernorm(x, None, None, return_stats=True)
    _, lse = kernels.cross_entropy(x, t, reduction="none", return_lse=True)
    assert not (mean.requires_grad or rstd.requires_grad or lse.requires_grad)


@requires_gpu
def test_eager_calls_that_need_a_gradient_take_one_autograd_function():
    """On the GPU, an eager call that needs a gradient runs as one autograd.Function (_Eager): its
    output's backward node is _Eager's, for each op."""
    x = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 256, (8,), device="cuda")
    for y in (kernels.rmsnorm(x, w), kernels.layernorm(x, w, w), kernels.softmax(x), kernels.cross_entropy(x, t)):
        assert type(y.grad_fn).__name__ == "_EagerBackward", type(y.grad_fn).__name__
    # a module's weights are parameters (a subclass of Tensor): they take the same path
    from kernels import nn as knn
    for module in (knn.RMSNorm(256), knn.LayerNorm(256)):
        y = module.to("cuda", torch.bfloat16)(x)
        assert type(y.grad_fn).__name__ == "_EagerBackward", (type(module).__name__, type(y.grad_fn).__name__)

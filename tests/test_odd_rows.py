"""Rows of any length and any alignment on the GPU, against float64: odd N (real
vocabularies), views that start 1 to 7 elements into a 16-byte word, row strides that are no
multiple of 8, and outputs that do not line up with their inputs (each row's aligned window,
``RowConfig.head``, and its element-by-element path for rows whose tensors do not line up)."""
import pytest
import torch

import kernels
from kernels.cross_entropy import cross_entropy_reference
from kernels.layernorm import layernorm_reference
from kernels.rmsnorm import rmsnorm_out, rmsnorm_reference
from kernels.softmax import softmax_out, softmax_reference

from _grid import assert_close, assert_grad_close, dx_scale
from _gpu import requires_gpu

pytestmark = requires_gpu

# A kept row (one block; a cluster), staged over a cluster, a real vocabulary, the longest;
NS = [17, 1001, 3001, 4096, 50257, 131071, 262143]  # (4096: even, misaligned by the views)
DTYPES = [torch.float32, torch.bfloat16]


def view(m, n, dtype, offset=0, pad=0, scale=3.0, shift=0.0):
    """An (m, n) view with its first element ``offset`` elements into its storage and rows
    ``n + pad`` apart, filled with fresh random values (``shift`` + ``scale`` x a normal; the
    storage around it with NaN, so that a read past the row shows)."""
    base = torch.full((offset + m * (n + pad) + 8,), float("nan"), device="cuda", dtype=dtype)
    x = base[offset:offset + m * (n + pad)].view(m, n + pad)[:, :n]
    x.copy_((torch.randn(m, n, device="cuda") * scale + shift).to(dtype))
    return x


def ms(n):
    return [1, 37, max(2, min(1025, (1 << 23) // n) | 1)]


def shapes():
    """(offset, pad) of the views: contiguous, misaligned by 1..7, strided by 3 or 5."""
    return [(0, 0), (1, 0), (3, 0), (7, 0), (0, 3), (5, 5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_softmax_any_row(n, dtype):
    for offset, pad in shapes():
        for m in ms(n):
            x = view(m, n, dtype, offset, pad)
            assert_close(kernels.softmax(x), softmax_reference(x), dtype, f"M={m} offset={offset} pad={pad}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_rmsnorm_and_layernorm_any_row(n, dtype):
    w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
    for offset, pad in shapes():
        for m in ms(n):
            x = view(m, n, dtype, offset, pad, shift=5.0)  # a mean far from 0: LayerNorm's second fold sees it
            what = f"M={m} offset={offset} pad={pad}"
            assert_close(kernels.rmsnorm(x, w), rmsnorm_reference(x, w), dtype, "rmsnorm " + what)
            assert_close(kernels.layernorm(x, w, b), layernorm_reference(x, w, b), dtype, "layernorm " + what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1001, 3001, 50257])
def test_a_weight_that_is_not_16_byte_aligned(n, dtype):
    """A window kernel cuts its weight and bias out of their 16-byte words: a weight or bias
    that starts inside a word (a view one or three elements in) is copied to one that does
    first, and the call gives what an aligned one gives; the caller's tensors are left alone."""
    x = view(37, n, dtype, 1, shift=5.0)
    w, b = view(1, n, dtype, 1)[0], view(1, n, dtype, 3)[0]
    w0, b0 = w.clone(), b.clone()
    assert w.data_ptr() % 16 and b.data_ptr() % 16
    assert_close(kernels.rmsnorm(x, w), rmsnorm_reference(x, w), dtype, "rmsnorm")
    assert_close(kernels.layernorm(x, w, b), layernorm_reference(x, w, b), dtype, "layernorm")
    assert torch.equal(w, w0) and torch.equal(b, b0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", NS)
def test_outputs_that_do_not_line_up(n, dtype):
    """An output whose rows start elsewhere in their words than the input's: those rows are
    written element by element, and nothing around the output's rows is touched."""
    w = torch.randn(n, device="cuda").to(dtype)
    for x_off, y_off in ((0, 1), (3, 0), (2, 2), (5, 7)):
        m = 37
        x = view(m, n, dtype, x_off)
        for name, run, ref in (("softmax", lambda y: softmax_out(x, y), softmax_reference(x)),
                               ("rmsnorm", lambda y: rmsnorm_out(x, w, y), rmsnorm_reference(x, w))):
            y = view(m, n, dtype, y_off, pad=2)
            sentinel = y.as_strided((m, 2), (n + 2, 1), y.storage_offset() + n)  # the gap after each row
            run(y)
            assert_close(y, ref, dtype, f"{name} x offset {x_off}, out offset {y_off}")
            assert torch.isnan(sentinel).all(), f"{name}: wrote past a row"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1001, 50257, 128257, 151937])
def test_cross_entropy_any_row(n, dtype):
    for offset, pad in shapes():
        m = 37
        x = view(m, n, dtype, offset, pad)
        t = torch.randint(0, n, (m,), device="cuda")
        t[::5] = -100
        t[1] = n - 1  # the last column
        t[2] = 0  # the first
        for reduction in ("none", "mean"):
            got = kernels.cross_entropy(x, t, reduction=reduction)
            want = cross_entropy_reference(x, t, reduction=reduction)
            torch.testing.assert_close(got.double(), want.double().to(got.device), rtol=1e-5, atol=1e-5,
                                       msg=lambda s: f"{reduction} offset={offset} pad={pad}: {s}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1001, 3001, 50257])
def test_gradients_of_any_row(n, dtype):
    """Softmax's and cross-entropy's backward kernels (the rows' windows too) on misaligned,
    strided leaves, against float64 autograd."""
    for offset, pad in ((0, 0), (1, 0), (3, 5)):
        m = 37
        x = view(m, n, dtype, offset, pad).requires_grad_()
        dy = torch.randn(m, n, device="cuda").to(dtype)
        kernels.softmax(x).backward(dy)
        x64 = x.detach().double().requires_grad_()
        torch.softmax(x64, -1).backward(dy.double())
        assert_grad_close(x.grad, x64.grad, dtype, f"softmax dx offset={offset} pad={pad}", dx_scale("softmax", x, None, dy))

        x.grad = None
        t = torch.randint(0, n, (m,), device="cuda")
        t[::4] = -100
        kernels.cross_entropy(x, t).backward()
        x64.grad = None
        torch.nn.functional.cross_entropy(x64, t).backward()
        assert_close(x.grad, x64.grad, dtype, f"cross-entropy dlogits offset={offset} pad={pad}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [3001, 262143, 262144])
def test_norm_gradients_of_any_row(n, dtype):
    """RMSNorm's and LayerNorm's backward (the persistent walks; at 262k, 32-bit rows hold one
    buffer of dy, and a misaligned view's narrow accesses wait for all of a row's copies at once)
    on misaligned and strided leaves, against float64 autograd."""
    for offset, pad in ((0, 0), (1, 0), (3, 5)):
        m = 5
        x = view(m, n, dtype, offset, pad).requires_grad_()
        w = (torch.randn(n, device="cuda") + 1).to(dtype).requires_grad_()
        b = torch.randn(n, device="cuda").to(dtype).requires_grad_()
        dy = torch.randn(m, n, device="cuda").to(dtype)
        x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
        for name, ours, ref, leaves, leaves64 in (
                ("rmsnorm", lambda: kernels.rmsnorm(x, w), lambda: torch.nn.functional.rms_norm(x64, (n,), w64, 1e-6),
                 (x, w), (x64, w64)),
                ("layernorm", lambda: kernels.layernorm(x, w, b),
                 lambda: torch.nn.functional.layer_norm(x64, (n,), w64, b64, 1e-5), (x, w, b), (x64, w64, b64))):
            got = torch.autograd.grad(ours(), leaves, dy)
            want = torch.autograd.grad(ref(), leaves64, dy.double())
            for i, (g, g64) in enumerate(zip(got, want)):
                assert_grad_close(g, g64, dtype,
                                  f"{name} grad {i} N={n} offset={offset} pad={pad}",
                                  dx_scale(name, x, w, dy) if i == 0 else None)

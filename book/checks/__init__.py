"""Checks for the book's exercises: the reader writes code, a check says at once whether it is right.

A check compiles what the reader wrote, asserts what its machine code must show (``expect_ptx``)
and, on a GPU, launches it and compares its numbers with a float64 reference
(``expect_close``). Each part prints one ``PASS <check>: ...`` line or raises an AssertionError
that says what is wrong. Without a GPU a check does everything that needs no launch (compiling
for sm_90a, the PTX claims) and prints that the numeric part needs a GPU. One module per chapter
holds that chapter's checks (``checks/ch02.py``); chapters run with ``book/`` as their working
directory, so a chapter imports them as ``from checks import ch02``.

Writing an exercise
-------------------
In a chapter's ``book/NN_name.myst.md``, an exercise is four parts, in this order:

1. The statement, a markdown ``exercise`` directive with a label unique in the book
   (``ex-chNN-name``)::

       :::{exercise} A 64-bit copy
       :label: ex-ch02-copy64

       What to write, and what the check will assert.
       :::

2. The reader's starting code: one code cell tagged ``scaffold``. It runs harmlessly
   (definitions only: a ``@cute.kernel`` or function whose body is incomplete but valid,
   with ``# TODO`` lines), and it must fail the check.

3. The worked solution, hidden behind a toggle in the rendered book: code cells between the
   two gated directives (each in its own markdown cell)::

       :::{solution-start} ex-ch02-copy64
       :class: dropdown
       :::

       (code cells: they define the same names as the scaffold)

       :::{solution-end}
       :::

4. The check: one code cell tagged ``check`` that calls this chapter's check on the reader's
   names, e.g. ``ch02.copy64(copy64_host)``.

Run top to bottom, a notebook executes the scaffold, then the solution (which replaces the
scaffold's definitions), then the check, so the stored notebook shows the solution passing.
A reader edits the scaffold and runs the check, skipping the solution cells.

What a solution may use: the chapter's cells tagged ``setup`` (its imports, ``from checks
import chNN``, and the definitions its exercises build on, e.g. chapter 2's copy kernel). Setup
cells must run without a GPU and quickly. ``tests/test_exercises.py`` runs, for every exercise
of every chapter, setup + solution + check (it must pass) and setup + scaffold + check (it must
fail, with an AssertionError or a compile error: a check that cannot fail checks nothing), in a
fresh namespace, with ``CUTE_DSL_ARCH=sm_90a`` where there is no GPU. A chapter listed in its
``COURSE`` must have at least two exercises.

The other cell tags a chapter uses: ``gpu`` on a cell that launches kernels (it also starts
with a ``# GPU`` comment for the reader; such a cell may be stored unexecuted until the chapter
runs on a GPU, see ``tests/test_book.py``), ``nbval-check-output`` on a cell whose output nbval
compares when the chapters are re-executed on a GPU (a PASS line), ``nbval-ignore-output`` on
timing cells, ``hide-input`` on plotting and bookkeeping code (folded away in the book).

Writing a check
---------------
A check is a function of the reader's names in ``checks/chNN.py``: it compiles them with
:func:`compile` on fake tensors from :func:`fake` (the compile cache and fake tensors of
``kernels.compile``), calls :func:`expect_ptx` on the PTX, and, if :func:`gpu`, launches on
fresh random inputs and calls :func:`expect_close`; else :func:`numbers_need_gpu`.
"""
from __future__ import annotations

import math
import os
import re
from collections import Counter

import torch


def gpu() -> bool:
    """Is there a CUDA GPU to launch on?"""
    return torch.cuda.is_available()


if not gpu():  # the DSL reads its target once, on import: compile for Hopper
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from cutlass.base_dsl.common import DSLBaseError  # noqa: E402,F401  (what a failed compile raises)

from kernels.compile import TORCH_TO_CUTE, Compiled, _options, compile_once, fake_rows, fake_stream  # noqa: E402
from kernels.inspect import access_bits  # noqa: E402

#: The options the library compiles with: TVM FFI (the compiled function takes torch tensors and
#: launches on torch's current stream), and the PTX and cubin kept, in a folder of this process.
OPTIONS = _options()

__all__ = ["gpu", "OPTIONS", "DSLBaseError", "fake", "fake_stream", "compile", "opcodes", "count",
           "widths", "expect_ptx", "expect_close", "numbers_need_gpu", "passed"]


def fake(dtype, n: int, vec: int | None = None):
    """A fake (M, n) row-major tensor to compile for: M symbolic, n fixed; rows start on multiples
    of ``vec`` elements (default: 128 bits). ``dtype``: a torch or a CuTe dtype."""
    ct = TORCH_TO_CUTE.get(dtype, dtype)
    return fake_rows(ct, n, vec or 128 // ct.width)


def compile(fn, *args) -> Compiled:
    """``fn`` (a ``@cute.jit`` function) compiled on ``args`` with :data:`OPTIONS`, once per
    function, argument types and the values of plain numbers (a ``cutlass.Constexpr`` parameter
    compiles a kernel per value; kept in ``kernels.compile.cache()``): ``.ptx``, ``.cubin``, and
    the function to call on torch tensors."""
    key = ("book", fn, *(str(a) if not isinstance(a, (int, float)) else (type(a).__name__, a) for a in args))
    return compile_once(key, lambda: (fn, args, None))


_OPCODE = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)", re.M)


def opcodes(ptx: str) -> Counter:
    """How many times each instruction appears in the PTX: {"ld.global.v4.b32": 16, ...}."""
    body = "\n".join(line.split("//")[0] for line in ptx.splitlines())
    return Counter(m.group(1) for m in _OPCODE.finditer(body)
                   if not m.group(1).startswith(".") and not m.group(1).endswith(":"))


def count(ptx: str, opcode: str) -> int:
    """Instructions whose opcode is ``opcode`` or starts with it at a dot: ``count(ptx,
    "ld.global.v4")`` counts ``ld.global.v4.b32`` and ``ld.global.v4.f32``, not ``ld.global.b32``."""
    return sum(n for op, n in opcodes(ptx).items() if op == opcode or op.startswith(opcode + "."))


def _listing(ptx: str, family: str = "global") -> str:
    ops = sorted((op, n) for op, n in opcodes(ptx).items() if f".{family}" in op and op[:2] in ("ld", "st"))
    return ", ".join(f"{n} x {op}" for op, n in ops) or f"no {family} loads or stores"


def widths(ptx: str, opcode: str = "ld.global") -> set:
    """The access widths in bits of the instructions ``opcode...``: {128} for ld.global.v4.b32."""
    return {access_bits(op) for op in opcodes(ptx) if op == opcode or op.startswith(opcode + ".")}


def passed(name: str, what: str) -> None:
    print(f"PASS {name}: {what}")


def expect_ptx(name: str, ptx: str, has=(), lacks=("ld.local", "st.local"), counts=None,
               bits: int | None = None) -> None:
    """Assert machine-code claims on ``ptx``: every opcode prefix in ``has`` appears, none in
    ``lacks`` does (by default: no local memory, i.e. no spills), ``counts`` ({prefix: n})
    appear exactly n times each, and with ``bits`` every global load and store moves that many
    bits (``ld.global.v2.b64`` and ``ld.global.v4.b32`` are both 128)."""
    if bits is not None:
        for op in ("ld.global", "st.global"):
            found = widths(ptx, op)
            if found - {bits}:
                raise AssertionError(f"{name}: every {op} should move {bits} bits; these move "
                                     f"{sorted(found)} bits: {_listing(ptx)}")
    for op in has:
        if not count(ptx, op):
            raise AssertionError(f"{name}: the PTX has no {op} instruction; its global accesses are: "
                                 f"{_listing(ptx)}")
    for op in lacks:
        if count(ptx, op):
            found = ", ".join(f"{n} x {o}" for o, n in opcodes(ptx).items() if o == op or o.startswith(op + "."))
            raise AssertionError(f"{name}: the PTX should have no {op} instruction, and has {found}")
    for op, want in (counts or {}).items():
        got = count(ptx, op)
        if got != want:
            raise AssertionError(f"{name}: the PTX should have {want} x {op}, and has {got} "
                                 f"(its global accesses: {_listing(ptx)})")
    others = [f"{count(ptx, op)} x {op}" for op in has if ".global" not in op]
    parts = [_listing(ptx)] + others + ([f"no {', '.join(lacks)}"] if lacks else [])
    if bits is not None:
        parts.insert(0, f"only {bits}-bit global accesses")
    passed(name, "PTX has " + "; ".join(parts))


def expect_close(name: str, got, want64, atol: float = 0.0, rtol: float = 0.0, what: str = "") -> None:
    """Assert ``|got - want64| <= atol + rtol * |want64|`` elementwise (NaN in ``got`` fails),
    ``want64`` being the float64 reference; ``what`` names the inputs in the PASS line."""
    got, want = (x.detach().to("cpu", torch.float64) if isinstance(x, torch.Tensor)
                 else torch.tensor(x, dtype=torch.float64) for x in (got, want64))
    if got.shape != want.shape:
        raise AssertionError(f"{name}: the result has shape {tuple(got.shape)}, the reference {tuple(want.shape)}")
    err = (got - want).abs()
    bad = ~(err <= atol + rtol * want.abs())  # NaN compares False: it is bad
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), got.shape)) if got.dim() else ()
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {got.numel()} values differ from the float64 reference by more "
            f"than {atol:g} + {rtol:g} x |reference|; the first at index {idx}: got {got.flatten()[i].item():.9g}, "
            f"want {want.flatten()[i].item():.9g}")
    worst = err.max().item() if err.numel() else 0.0
    rel = (err / want.abs().clamp_min(1e-300)).max().item() if err.numel() else 0.0
    shown = f"max error {worst:.3g}" + ("" if worst == 0 or math.isinf(rel) else f" (relative {rel:.2g})")
    passed(name, f"{what + ': ' if what else ''}{got.numel()} values match the float64 reference, {shown}")


_FRESH: dict = {}


def fresh_op(cls):
    """A subclass of the reader's ``RowOp`` with a name of its own: the library's compile cache
    keys a kernel by its class's name, and a corrected class of the same name must compile afresh."""
    if cls not in _FRESH:
        _FRESH[cls] = type(f"{cls.__name__}_{len(_FRESH)}", (cls,), {})
    return _FRESH[cls]


def compile_op(name: str, op, dtype, n: int, present=None):
    """The reader's ``RowOp`` (made fresh with :func:`fresh_op`) compiled for rows of ``n``
    elements of ``dtype``; the template refusing its configuration fails the check."""
    from kernels.compile import NAME_BY_TORCH
    try:
        return op.compile(dtype, n, present=present)
    except ValueError as e:  # the template refuses a configuration for this op
        raise AssertionError(f"{name}: the template refuses {NAME_BY_TORCH[dtype]} rows of {n}: {e}") from None


def expect_row_op(name: str, cls, needs: str, why: str, n: int = 4096, present=None) -> None:
    """The reader's row op compiled for bf16 and fp32 rows of ``n``: its PTX must show 128-bit
    loads and stores, the butterfly of its reduction, no local memory, and the instruction
    ``needs`` (``why`` says what its absence means)."""
    import torch
    from kernels.compile import NAME_BY_TORCH
    op = fresh_op(cls)
    for dtype in (torch.bfloat16, torch.float32):
        ptx = compile_op(name, op, dtype, n, present).ptx
        expect_ptx(f"{name} {NAME_BY_TORCH[dtype]} N={n}", ptx, has=("ld.global.v4", "st.global.v4", "shfl.sync.bfly"))
        if not count(ptx, needs):
            raise AssertionError(f"{name}: the {NAME_BY_TORCH[dtype]} PTX has no {needs}: {why}")


def per_row_output(name: str, m: int, launch, pad: int = 8, device: str = "cuda"):
    """Call ``launch(out)`` on an (M,) fp32 output that sits at the start of a NaN-filled buffer
    ``pad`` values longer, and return the output; a kernel that writes past its M rows (a
    missing row guard) fails here, since NaN is what an untouched value stays."""
    import torch
    buf = torch.full((m + pad,), float("nan"), device=device, dtype=torch.float32)
    launch(buf[:m])
    if buf.is_cuda:
        torch.cuda.synchronize()
    if buf[m:].isfinite().any():
        raise AssertionError(f"{name}: the kernel wrote past the last of the {m} rows: a missing row guard?")
    return buf[:m]


def numbers_need_gpu(name: str, what: str) -> None:
    """The line a check prints instead of its numeric part on a machine without a GPU."""
    print(f"SKIP {name}: {what} needs a GPU, and this machine has none (what needs none passed above)")

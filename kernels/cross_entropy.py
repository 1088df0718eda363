"""Cross-entropy forward: loss[i] = logsumexp(logits[i]) - logits[i, target[i]].

Bytes that must move: read the logits once (M * N), read the targets and write one
fp32 per row. The logits are never needed again, so the kernel *streams* the row:
each pass folds 128 bytes per thread into a running (max, sum of exp(x - max)) pair,
and the toolkit merges the pairs across warp, block and cluster in one exchange.
Accumulation is fp32 whatever the input dtype. The pair carries its max in log2 units
(``kernels.reduce.LOGSUMEXP2``: one fma a term), and a bf16 pass is folded from its
registers as they were loaded (its max over bf16 pairs, each element widened once).

Targets outside [0, N) that are not ``ignore_index`` give a NaN loss and raise a
flag on the device; ``cross_entropy`` reads the flag after the launch (one 4-byte
copy) and raises ``ValueError``. Pass ``check_target=False`` to skip that sync
(e.g. under CUDA graphs): bad rows then stay NaN. The kernel compares targets as
32-bit integers, so unchecked int64 targets must lie in the int32 range. The flag is
a buffer kept per device and stream, zero between calls (reset only when a call
raises), so a call launches no memset for it.
"""
from __future__ import annotations

import math

import torch

import cutlass.cute as cute
from cutlass import Float32, Int32

from . import validate
from .compile import TORCH_TO_CUTE, compile_once, fake_rows, fake_stream, fake_vector
from .config import RowConfig, ce_target_order, row_config
from .reduce import LOG2_E, LOGSUMEXP2
from .rowkernel import RowKernel


#: Where the kernel loads each row's target and its logit: None takes the table's choice for
#: the row length (``kernels.config.CE_TARGET_ORDER``); False after the reduction, by the thread
#: that writes the loss (two dependent round trips, the logit's address depending on the
#: target); True both right after the row's first loads; "split" the target before the row's
#: loads and its logit after the fold, before the exchange. Early (True) measured on the H200
#: (``benchmarks.sweep --prologue --table-only``, book/data/sweep_prologue.csv) ahead by at most
#: about 0.5% of the read ceiling and behind by up to 9 points for bf16 at 4k-131k (32k: 77.8
#: against 86.7%), so no row takes it; "split" is in the table where it measured ahead.
EARLY_TARGET: bool | str | None = None
LN_2 = math.log(2.0)


class CrossEntropy(RowKernel):
    op = LOGSUMEXP2
    keep_row = False
    writes_rows = False

    def __init__(self, dtype, n: int, cfg: RowConfig, early_target: bool | str):
        self.early_prologue = early_target
        super().__init__(dtype, n, cfg)

    @cute.jit
    def scalar_prologue(self, row, m, mX, mT, ignore_index):
        """The row's target and, when it names a class, its logit (rows past M: none)."""
        target = Int32(ignore_index)
        x_t = Float32(0.0)
        if row < m:
            target = Int32(mT[row])
            x_t = self.target_logit(target, row, mX)
        return target, x_t

    @cute.jit
    def scalar_prologue_index(self, row, m, mT, ignore_index):
        """early_target "split", before the row's loads: the row's target (ignore_index past M)."""
        target = Int32(ignore_index)
        if row < m:
            target = Int32(mT[row])
        return target

    @cute.jit
    def scalar_prologue_gather(self, target, row, m, mX, tidx, rank):
        """early_target "split", after the fold: the target's logit, loaded by the thread that
        writes the loss while the exchange runs."""
        x_t = Float32(0.0)
        if tidx % self.cfg.threads_per_row == 0 and rank == 0 and row < m:
            x_t = self.target_logit(target, row, mX)
        return target, x_t

    @cute.jit
    def target_logit(self, target, row, mX):
        """Row ``row``'s logit of class ``target`` where the target names a class, else 0."""
        x_t = Float32(0.0)
        if target >= 0 and target < self.n:
            x_t = Float32(mX[row, target])
        return x_t

    def loss(self, result, x_t):
        """The loss from the row's reduced pair, (M, s) with M = fl(max log2 e) and
        s = sum of exp2(x log2 e - M), and its target's logit: ln 2 (M - x_t log2 e) + ln s,
        the first term one fma (x_t log2 e exact inside it), so that M's rounding, which
        scales every term of s alike, cancels; with x_t the max it leaves ln s alone."""
        big, denom = result
        return cute.math.fma(x_t, Float32(-LOG2_E), big) * LN_2 + cute.math.log(denom, fastmath=False)

    @cute.jit
    def scalar_epilogue(self, result, row, mX, mT, mErr, ignore_index, pre):
        target, x_t = pre
        loss = Float32(0.0)
        if target != ignore_index:
            if target >= 0 and target < self.n:
                loss = self.loss(result, x_t)
            else:
                loss = Float32(math.nan)
                mErr[0] = Int32(1)
        return loss


def compile_cross_entropy(dtype: torch.dtype, n: int, target_dtype: torch.dtype = torch.int64, *,
                          config: RowConfig | None = None, vec: int | None = None,
                          early_target: bool | str | None = None):
    cfg = config or row_config(n, torch.finfo(dtype).bits, keep_row=False, vec=vec)
    early = early_target if early_target is not None else (
        EARLY_TARGET if EARLY_TARGET is not None else ce_target_order(n, torch.finfo(dtype).bits))
    ct = TORCH_TO_CUTE[dtype]
    key = ("cross_entropy", str(dtype), str(target_dtype), n, cfg, early)

    def build():
        m = cute.sym_int()
        return CrossEntropy(ct, n, cfg, early), (fake_rows(ct, n, cfg.vec), fake_vector(Float32, m), None,
                                                 fake_vector(TORCH_TO_CUTE[target_dtype], m), fake_vector(Int32, 1),
                                                 Int32(-100), fake_stream())
    return compile_once(key, build)


_FLAGS: dict[tuple, torch.Tensor] = {}


def _error_flag(device: torch.device, checked: bool) -> torch.Tensor:
    """The kernel's bad-target flag (one int32) for calls on the current stream of ``device``:
    zeroed once when created, and again only by a checked call that found it raised. Unchecked
    calls get a flag of their own that nothing reads, so that they never leave a checked call a
    raised flag."""
    key = (device, torch.cuda.current_stream(device).cuda_stream, checked)
    if key not in _FLAGS:
        _FLAGS[key] = torch.zeros(1, dtype=torch.int32, device=device)
    return _FLAGS[key]


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  reduction: str = "mean", *, check_target: bool = True,
                  config: RowConfig | None = None, early_target: bool | str | None = None) -> torch.Tensor:
    """Cross-entropy of logits (M, N) against integer targets (M,), as torch's
    ``F.cross_entropy`` (fp32 accumulation; output fp32 for "none", else a scalar).
    ``config`` and ``early_target`` (False, True or "split") override the tables."""
    validate.check_rows(logits, "logits", cuda=False)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D (M, N), got shape {tuple(logits.shape)}")
    if not isinstance(target, torch.Tensor):
        raise TypeError("target must be a torch.Tensor")
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"target must be int64 or int32, got {target.dtype}")
    if target.shape != logits.shape[:1]:
        raise ValueError(f"target must have shape ({logits.shape[0]},), got {tuple(target.shape)}")
    validate.check_cuda(logits, "logits")
    validate.check_same_device(logits, target, "target")
    if not -(2**31) <= ignore_index < 2**31:
        raise ValueError("ignore_index must fit in int32")
    m, n = logits.shape
    loss = torch.empty(m, dtype=torch.float32, device=logits.device)
    if m:
        target_c = target.contiguous()
        err = _error_flag(logits.device, check_target)
        vec = validate.access_width(n, (logits,))
        kernel = compile_cross_entropy(logits.dtype, n, target.dtype, config=config, vec=vec,
                                       early_target=early_target)
        kernel(logits, loss, None, target_c, err, int(ignore_index))
        # The kernel compares targets as 32-bit integers; an int64 target outside that range
        # would alias a valid class, so the checked path also looks for those (same sync).
        if check_target and (err[0] + (target_c.dtype == torch.int64 and
                                       (target_c != target_c.to(torch.int32).to(torch.int64)).any())).item():
            err.zero_()  # the next call on this stream starts from a clear flag
            bad = target_c[((target_c < 0) | (target_c >= n)) & (target_c != ignore_index)]
            raise ValueError(f"target values must be in [0, {n}) or ignore_index={ignore_index}; "
                             f"got e.g. {bad[:4].tolist()}")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (target != ignore_index).sum().to(torch.float32)


def cross_entropy_reference(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                            reduction: str = "mean") -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.double(), target.long(), ignore_index=ignore_index,
                                             reduction=reduction)

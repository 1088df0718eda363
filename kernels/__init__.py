"""Speed of Light: memory-bound GPU kernels in CuTe DSL for Hopper (sm_90a).

Public ops (CUDA tensors; fp32, bf16, fp16; rows of up to 262144 elements):

    copy(x)                       device copy with 128-bit accesses
    reduce_rows(x, "sum"|"max")   one fp32 per row
    rmsnorm(x, weight, eps)       RMSNorm over the last dim
    layernorm(x, weight, bias, eps)  LayerNorm over the last dim
    softmax(x, dim=-1)            softmax over the last dim
    cross_entropy(logits, target, ignore_index=-100, reduction="mean")
    distributed.vocab_parallel_cross_entropy(logits_shard, target, group=None, ...)
                                  the same loss, the vocabulary split across torch.distributed ranks
    check_errors()                wait for the GPU; raise if a kernel found bad input

rmsnorm, layernorm, softmax and cross_entropy are differentiable (torch.library custom ops with
their autograd, traceable by torch.compile); ``kernels.nn`` has them as modules.
vocab_parallel_cross_entropy is differentiable in eager mode (an autograd Function around its
collectives); on CPU tensors it runs PyTorch over gloo.

Configuration (threads per row, cluster size, ...) comes from ``kernels.config``;
``python -m kernels.inspect`` shows what the compiler made of any op.
"""
import os as _os

if "CUTE_DSL_ARCH" not in _os.environ:
    import torch as _torch

    if not _torch.cuda.is_available():
        # No GPU to detect: compile for the book's target (Hopper, sm_90a) rather than the
        # DSL's own default. The DSL reads this once, so it is set before cutlass is imported.
        _os.environ["CUTE_DSL_ARCH"] = "sm_90a"

from .copy import copy  # noqa: E402
from .errors import BadInputError, check_errors  # noqa: E402
from .functional import cross_entropy, layernorm, rmsnorm, softmax  # noqa: E402
from .reduction import reduce_rows  # noqa: E402

__all__ = ["copy", "reduce_rows", "rmsnorm", "layernorm", "softmax", "cross_entropy", "check_errors",
           "BadInputError"]

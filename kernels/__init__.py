"""Speed of Light: memory-bound GPU kernels in CuTe DSL for Hopper (sm_90a).

Public ops (CUDA tensors; fp32, bf16, fp16; rows of up to 262144 elements):

    copy(x)                       device copy with 128-bit accesses
    reduce_rows(x, "sum"|"max")   one fp32 per row
    rmsnorm(x, weight, eps)       RMSNorm over the last dim
    softmax(x, dim=-1)            softmax over the last dim
    cross_entropy(logits, target, ignore_index=-100, reduction="mean")

Configuration (threads per row, cluster size, ...) comes from ``kernels.config``;
``python -m kernels.inspect`` shows what the compiler made of any op.
"""
from .copy import copy
from .cross_entropy import cross_entropy
from .reduction import reduce_rows
from .rmsnorm import rmsnorm
from .softmax import softmax

__all__ = ["copy", "reduce_rows", "rmsnorm", "softmax", "cross_entropy"]

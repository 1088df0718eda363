"""The bytes each op must move through device memory: every input read once, every
output written once. Bandwidth = these bytes / time."""


def bytes_moved(op: str, m: int, n: int, elem_bytes: int) -> int:
    if op == "copy":
        return 2 * m * n * elem_bytes
    if op == "reduce":
        return m * n * elem_bytes + m * 4
    if op == "rmsnorm":
        return 2 * m * n * elem_bytes + n * elem_bytes
    if op == "layernorm":
        return 2 * m * n * elem_bytes + 2 * n * elem_bytes
    if op == "softmax":
        return 2 * m * n * elem_bytes
    if op == "cross_entropy":
        return m * n * elem_bytes + m * 8 + m * 4  # logits, int64 targets, fp32 losses
    raise ValueError(op)

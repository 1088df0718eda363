"""What the compiler made of a kernel, without a GPU.

    python -m kernels.inspect softmax --dtype bf16 --n 65536
    python -m kernels.inspect copy --dtype fp32 --bits 64 --ptx

prints the global load and store widths, asynchronous copies (``cp.async``, with their
sizes), shuffles, shared and distributed-shared memory operations, barriers, registers
per thread and local-memory (spill) bytes of the kernel that op would launch for rows
of N elements. Chapters call
:func:`inspect_op` to show the machine code behind each claim; tests assert on it.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

OPS = ("copy", "reduce_sum", "reduce_max", "rmsnorm", "layernorm", "softmax", "cross_entropy", "softmax_backward",
       "cross_entropy_backward", "rmsnorm_backward", "layernorm_backward", "vocab_shard", "vocab_shard_backward")

# PTX instruction families worth counting, by regex on the opcode.
_FAMILIES = {
    "global loads": r"ld\.global(\.nc)?(\.L1::\w+|\.L2::\w+)*\.(v[248]\.)?[bfsu]\d+",
    "global stores": r"st\.global(\.L1::\w+)*\.(v[248]\.)?[bfsu]\d+",
    "async copies": r"cp\.async\.(ca|cg)\.shared(::cta)?\.global(\.L2::\w+)*",
    "async copy groups": r"cp\.async\.(commit_group|wait_group|wait_all)",
    "warp shuffles": r"shfl\.sync\.\w+\.b32",
    "shared loads": r"ld\.shared(::cta)?\.(v[248]\.)?[bfsu]\d+",
    "shared stores": r"st\.shared(::cta)?\.(v[248]\.)?[bfsu]\d+",
    "cluster address maps": r"mapa(\.shared::cluster)?\.u\d+|mapa\.\w+",
    "remote shared stores": r"st\.async\.shared::cluster[\w.:]*",
    "remote shared loads": r"ld\.shared::cluster[\w.]*",
    "block barriers": r"bar\.sync|barrier\.sync(\.aligned)?",
    "cluster barriers": r"barrier\.cluster\.\w+(\.\w+)*",
    "mbarrier ops": r"mbarrier\.[\w.:]+",
    "local memory": r"(ld|st)\.local\.(v[248]\.)?[bfsu]\d+",
}


# The size in bytes of a cp.async is an operand, not part of the opcode.
_CP_ASYNC_SIZE = re.compile(r"cp\.async\.(?:ca|cg)\.shared(?:::cta)?\.global[\w.:]*\s+\[[^\]]*\],\s*\[[^\]]*\],\s*(\d+)")


def access_bits(opcode: str) -> int:
    """Width in bits of one ld/st: ``ld.global.v4.b32`` -> 128."""
    m = re.search(r"\.(?:v(\d)\.)?[bfsu](\d+)$", opcode)
    if not m:
        return 0
    return int(m.group(1) or 1) * int(m.group(2))


@dataclass
class Report:
    op: str
    dtype: str
    n: int
    config: object
    registers: int
    frame_bytes: int
    compile_seconds: float
    counts: dict = field(default_factory=dict)  # family -> Counter(opcode -> count in PTX)
    ptx: str = ""

    def widths(self, family: str) -> set:
        """Access widths in bits of the instructions of ``family`` in the PTX."""
        if family == "async copies":
            return {8 * size for size in self.async_copy_bytes()}
        return {access_bits(op) for op in self.counts.get(family, {})}

    def async_copy_bytes(self) -> Counter:
        """cp.async instructions by the bytes each copies: e.g. {16: 8}."""
        return Counter(int(m.group(1)) for m in _CP_ASYNC_SIZE.finditer(self.ptx))

    def has(self, family: str) -> bool:
        return bool(self.counts.get(family))

    def __str__(self) -> str:
        lines = [f"{self.op}  dtype={self.dtype}  N={self.n}",
                 f"  config: {self.config}",
                 f"  registers/thread: {self.registers}   local memory (spill/stack) bytes/thread: {self.frame_bytes}",
                 f"  compile time: {self.compile_seconds:.2f} s"]
        for fam in _FAMILIES:
            c = self.counts.get(fam)
            if c:
                ops = ", ".join(f"{k} x{v}" for k, v in sorted(c.items()))
                if fam == "async copies":
                    ops += " (" + ", ".join(f"{b} B x{v}" for b, v in sorted(self.async_copy_bytes().items())) + ")"
                lines.append(f"  {fam:<22} {ops}")
        return "\n".join(lines)


def _count(ptx: str) -> dict:
    body = [ln.split("//")[0].strip() for ln in ptx.splitlines()]
    out = {}
    for fam, pat in _FAMILIES.items():
        rx = re.compile(r"(?:^|\s|\})(" + pat + r")(?=\s|;|$)")
        c = Counter()
        for ln in body:
            for m in rx.finditer(ln):
                c[m.group(1)] += 1
        if c:
            out[fam] = dict(c)
    return out


def compile_op(op: str, dtype: str, n: int, **kw):
    """Compile (or fetch from the cache) the kernel ``op`` launches for rows of n, as its
    public function calls it with default arguments on a contiguous tensor (``config``
    overrides the table; ``head`` chooses the rows' aligned windows, by default where N is not
    a multiple of the 128-bit vector)."""
    from .compile import TORCH_BY_NAME
    tdt = TORCH_BY_NAME[dtype]
    if op == "copy":
        from .copy import compile_copy
        return compile_copy(tdt, kw.get("bits", 128), kw.get("coalesced", True), n)
    if op in ("reduce_sum", "reduce_max"):
        from .reduction import compile_reduce
        return compile_reduce(tdt, n, op.split("_")[1], max_tier=kw.get("max_tier", "cluster"),
                              stream=kw.get("stream", True), config=kw.get("config"))
    row_ops = _row_ops()
    if op in row_ops:
        from .config import vector_width
        cls, eb = row_ops[op], tdt.itemsize
        head = kw.get("head", cls.takes_window(n, eb, vector_width(n, 8 * eb)))
        return cls.compile(tdt, n, config=kw.get("config"), head=head)
    raise ValueError(f"op must be one of {OPS}, got {op!r}")


_INSTR = re.compile(r"^\s*(@!?(%p\d+)\s+)?([a-z][\w.:]*)\s*(.*?);")
_LABEL = re.compile(r"^(\$L\w+):")
_REG = re.compile(r"%[a-z]+\d+|%(?:tid|laneid)(?:\.[xyz])?")


def divergent_shuffles(ptx: str) -> list[str]:
    """The ``shfl.sync`` instructions of ``ptx`` that only some lanes of a warp may reach: those
    after a forward branch whose predicate depends on the thread's index (%tid, %laneid) and
    before its target. A shfl.sync names every lane of its mask (here the whole warp) and waits
    for them, so one inside a branch that lane 0 alone takes waits forever: the GPU hangs. Each
    entry is 'line N: instruction (guarded by the branch at line K)'."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, ln in enumerate(lines) if (m := _LABEL.match(ln.strip()))}
    tainted = {"%tid.x", "%tid.y", "%tid.z", "%laneid"}
    found, open_ = [], []  # open_: (end line, branch line) of thread-dependent forward branches
    for i, ln in enumerate(lines):
        open_ = [(end, at) for end, at in open_ if end > i]
        m = _INSTR.match(ln)
        if not m:
            continue
        guard, op, operands = m.group(2), m.group(3), m.group(4)
        regs = _REG.findall(operands)
        if op.startswith("bra"):
            target = operands.strip().split()[-1]
            if guard in tainted and labels.get(target, -1) > i:
                open_.append((labels[target], i))
            continue
        if op.startswith("shfl.sync") and open_:
            found.append(f"line {i + 1}: {ln.strip()} (guarded by the branch at line {open_[-1][1] + 1})")
        if regs and not op.startswith(("st.", "atom.", "red.", "bar", "shfl")) and any(r in tainted for r in regs[1:]):
            tainted.add(regs[0])
    return found


def _row_ops():
    from .cross_entropy import CrossEntropy, CrossEntropyBackward
    from .layernorm import LayerNorm
    from .norm_backward import LayerNormBackward, RMSNormBackward
    from .rmsnorm import RMSNorm
    from .softmax import Softmax, SoftmaxBackward
    from .vocab_parallel import VocabShard, VocabShardBackward
    return {"rmsnorm": RMSNorm, "layernorm": LayerNorm, "softmax": Softmax, "cross_entropy": CrossEntropy,
            "softmax_backward": SoftmaxBackward, "cross_entropy_backward": CrossEntropyBackward,
            "rmsnorm_backward": RMSNormBackward, "layernorm_backward": LayerNormBackward, "vocab_shard": VocabShard,
            "vocab_shard_backward": VocabShardBackward}


def inspect_op(op: str, dtype: str = "bf16", n: int = 4096, **kw) -> Report:
    """Compile ``op`` for rows of n elements and report what the compiler made."""
    return report(compile_op(op, dtype, n, **kw), op, dtype, n)


def report(c, op: str = "", dtype: str = "", n: int = 0) -> Report:
    """What the compiler made of ``c``, a compiled kernel (``kernels.compile.Compiled``), e.g.
    one an op's ``compile`` built with flags the public function does not pass by default."""
    from .cubin import kernel_resources
    res = kernel_resources(c.cubin)
    regs = max(r.registers for r in res)
    frame = max(r.frame_bytes for r in res)
    return Report(op, dtype, n, c.config, regs, frame, c.seconds, _count(c.ptx), c.ptx)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.inspect", description=__doc__.split("\n\n")[0])
    p.add_argument("op", choices=OPS)
    p.add_argument("--dtype", default="bf16", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--n", type=int, default=4096, help="row length N (copy: row width of the 2-D view)")
    p.add_argument("--arch", default=None, help="target, e.g. sm_90a (default: the GPU's, or sm_90a without one)")
    p.add_argument("--ptx", action="store_true", help="print the PTX too")
    p.add_argument("--max-tier", default="cluster", choices=("thread", "warp", "block", "cluster"))
    p.add_argument("--keep", action="store_true", help="row reductions: hold the whole row in registers")
    p.add_argument("--bits", type=int, default=128, help="copy: bits per access")
    p.add_argument("--strided", action="store_true", help="copy: uncoalesced thread order")
    a = p.parse_args(argv)
    if a.arch and os.environ.get("CUTE_DSL_ARCH") != a.arch:
        # The DSL reads its target once, when it is imported (kernels/__init__ already did):
        # start again with the target in the environment.
        env = dict(os.environ, CUTE_DSL_ARCH=a.arch)
        args = sys.argv[1:] if argv is None else list(argv)
        os.execve(sys.executable, [sys.executable, "-m", "kernels.inspect", *args], env)
    rep = inspect_op(a.op, a.dtype, a.n, max_tier=a.max_tier, stream=not a.keep, bits=a.bits,
                     coalesced=not a.strided)
    print(rep)
    if a.ptx:
        print(rep.ptx)
    return 0


if __name__ == "__main__":
    sys.exit(main())

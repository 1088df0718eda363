"""Does a committed benchmark still describe the kernels? Without a GPU, compile the kernels a
suite of ``benchmarks.run`` launches (every dtype and N, every tier of the reduction suite) and
print a hash of each one's machine code (the cubin's .text sections). Run it in a checkout of
the commit a result names (its .json) and in this one: equal hashes mean the same machine
code, so the measurement still holds.

    CUTE_DSL_ARCH=sm_90a python -m benchmarks.machine_code reduction rmsnorm layernorm softmax cross_entropy
"""
import argparse

from benchmarks.run import OP_NS, REDUCTION_NS, TIERS
from kernels.cubin import text_hash
from kernels.inspect import compile_op


def kernels(suite: str):
    """(label, compile_op arguments) of every kernel the suite times."""
    for dt in ("bf16", "fp32"):
        if suite == "reduction":
            for n in REDUCTION_NS:
                for tier, kw, nmax in TIERS:
                    if n <= nmax:
                        yield f"{suite} {dt} {n} {tier}", ("reduce_sum", dt, n), kw
        else:
            for n in OP_NS:
                yield f"{suite} {dt} {n}", (suite, dt, n), {}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("suites", nargs="+", choices=["reduction", "rmsnorm", "layernorm", "softmax", "cross_entropy"])
    for suite in p.parse_args(argv).suites:
        for label, args, kw in kernels(suite):
            print(label, text_hash(compile_op(*args, **kw).cubin), flush=True)


if __name__ == "__main__":
    main()

"""Every forward and backward kernel once, at ragged and cluster row lengths (odd N included,
and views that start inside a 16-byte word: the rows' aligned windows and their edges), for
compute-sanitizer (``bash benchmarks/h200.sh sanitize`` runs it under memcheck, racecheck and
synccheck, with ``--report-api-errors no``: the DSL probes driver symbols, which the sanitizer
would report as host API errors that are not kernel errors).

    compute-sanitizer --tool memcheck --report-api-errors no python -m benchmarks.sanitize [--n 3001 ...]
        [--dtype bf16 ...]

``--n``, ``--dtype`` and ``--offset`` run a slice of the points, so that the slices run side by
side (the sanitizer's instrumentation is slow on the host: racecheck over every point took past
170 s, and at N = 262144 one (N, dtype) slice of three offsets past 370 s).

Synccheck (compute-sanitizer 2025.3.1, H200) cannot run a cluster of 16 blocks that exchange
through ``st.async`` while several blocks share an SM: the instrumented kernel stops with an
illegal address and the tool reports 0 errors. ``--probe CLUSTER CLUSTERS SMEM`` shows it with
the smallest such kernel, one exchange of the toolkit (:func:`kernels.reduce.row_reduce`):
40 clusters of 16 blocks of 8 KB fail under synccheck; the same with 120 KB blocks (one an SM),
with clusters of 8, or with one cluster pass, and every one is right without the tool. So under
synccheck ``--max-clusters 4`` launches the norm backwards' persistent kernels with at most 4
clusters of 16 (each then walks 9 or 10 of the 37 rows, the same compiled kernel); the forward
kernels' 3 rows at N > 65536 take 3 clusters already.
"""
import argparse
import sys

import torch

import kernels
from kernels.cross_entropy import cross_entropy_backward_out
from kernels.norm_backward import layernorm_backward_out, rmsnorm_backward_out
from kernels.softmax import softmax_backward_out

#: Row lengths: one element, odd (rows in aligned windows), an even vocabulary whose last column
#: tile N does not fill (staged rows read past N), odd at a cluster, and a full cluster row.
NS = (1, 3001, 50257, 128256, 131071, 262144)
#: Offsets (elements) of the misaligned views, each at every N.
OFFSETS = (0, 1, 7)


def run(n: int, dt: torch.dtype, offset: int = 0) -> None:
    m = 3 if n > 65536 else 37
    x = torch.randn(m * n + offset, device="cuda", dtype=dt)[offset:].view(m, n)
    # the weight and bias start where x does in their 16-byte words, and 3 elements later
    w = torch.randn(n + offset, device="cuda", dtype=dt)[offset:]
    b = torch.randn(n + offset + 3, device="cuda", dtype=dt)[offset + 3:]
    t = torch.randint(0, n, (m,), device="cuda")
    if offset == 0 and x.numel() % 8 == 0:  # copy takes aligned tensors whose size is a multiple of 16 bytes
        kernels.copy(x)
    kernels.reduce_rows(x)
    y = kernels.rmsnorm(x, w)
    kernels.layernorm(x, w, b)
    p = kernels.softmax(x)
    loss, lse = kernels.cross_entropy(x, t, reduction="none", return_lse=True)
    kernels.cross_entropy(x, t)
    dy = torch.randn_like(y)
    softmax_backward_out(dy, p, torch.empty_like(p))
    cross_entropy_backward_out(torch.ones(m, device="cuda"), x, t, lse, torch.empty_like(x))
    # the saved statistics computed on the host: racecheck reports PyTorch's own reduction
    # kernels (its mean and var over a row), whose warp-synchronous exchanges it cannot see
    # through, and this script checks ours
    xf = x.double().cpu()
    rstd = torch.rsqrt(xf.pow(2).mean(-1) + 1e-6).float().cuda()
    rmsnorm_backward_out(dy, x, w, rstd, torch.empty_like(x))
    mean, var = xf.mean(-1), xf.var(-1, unbiased=False)
    layernorm_backward_out(dy, x, w, mean.float().cuda(), torch.rsqrt(var + 1e-5).float().cuda(),
                           torch.empty_like(x))
    torch.cuda.synchronize()
    kernels.check_errors()


#: The probe's (cluster, clusters, shared bytes a block): clusters of 16 that share SMs (synccheck
#: stops), of 16 one an SM, of 8 that share SMs, and one cluster of 16 (each runs right).
PROBES = ((16, 40, 8192), (16, 40, 122880), (8, 80, 8192), (16, 1, 8192))


def limit_clusters(k: int) -> None:
    """The norm backwards' persistent kernels launch at most ``k`` clusters of 16 blocks."""
    from kernels import norm_backward
    full = norm_backward.persistent_blocks

    def limited(device, compiled, smem):
        blocks = full(device, compiled, smem)
        return min(blocks, k) if compiled.config.cluster_n == 16 else blocks
    norm_backward.persistent_blocks = limited


def compile_probe(cluster: int, clusters: int, smem: int):
    """``clusters`` clusters of ``cluster`` blocks of 128 threads and ``smem`` bytes of shared
    memory each; each block exchanges its thread count with every peer (one cluster tier of
    the toolkit) and writes the cluster's sum."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32, Int64
    from kernels.compile import compile_once, fake_stream, fake_vector
    from kernels.reduce import SUM, cluster_reduce_setup, row_reduce
    threads = 128

    class Probe:
        @cute.jit
        def __call__(self, mOut: cute.Tensor, stream):
            self.kernel(mOut).launch(grid=[clusters, cluster, 1], block=[threads, 1, 1], cluster=[1, cluster, 1],
                                     stream=stream)

        @cute.kernel
        def kernel(self, mOut: cute.Tensor):
            tidx, _, _ = cute.arch.thread_idx()
            bidx, rank, _ = cute.arch.block_idx()
            alloc = cutlass.memory.SmemAllocator()
            buf = alloc.allocate_tensor(Float32, cute.make_ordered_layout((1, threads // 32 * cluster, 1),
                                                                          order=(2, 1, 0)), byte_alignment=16)
            mbar = alloc.allocate_array(Int64, num_elems=1)
            pad = alloc.allocate_tensor(Float32, cute.make_layout(smem // 4), byte_alignment=16)  # the footprint
            pad[tidx] = Float32(0.0)
            cluster_reduce_setup(mbar, 1)
            (total,) = row_reduce((Float32(1.0) + pad[tidx],), SUM, threads, cluster, buf, mbar)
            cute.arch.cluster_arrive_relaxed()  # no block leaves while a peer may write into it
            cute.arch.cluster_wait()
            if tidx == 0:
                mOut[bidx * cluster + rank] = total

    return compile_once(("sanitize_probe", cluster, clusters, smem),
                        lambda: (Probe(), (fake_vector(Float32, clusters * cluster), fake_stream()), None))


def probe(cluster: int, clusters: int, smem: int) -> bool:
    """Launch :func:`compile_probe`'s kernel: True if every block wrote cluster * 128."""
    fn = compile_probe(cluster, clusters, smem)
    out = torch.zeros(clusters * cluster, device="cuda")
    fn.fn(out)
    torch.cuda.synchronize()
    return bool((out == cluster * 128).all())


DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=list(NS))
    p.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--offset", type=int, nargs="+", default=list(OFFSETS), choices=list(OFFSETS))
    p.add_argument("--max-clusters", type=int, default=0, help="the norm backwards launch at most this many "
                   "clusters of 16 blocks (synccheck: see above)")
    p.add_argument("--probe", type=int, nargs=3, metavar=("CLUSTER", "CLUSTERS", "SMEM"),
                   help="run only the probe kernel (see above)")
    a = p.parse_args(argv)
    if a.probe:
        ok = probe(*a.probe)
        print(f"probe: {a.probe[1]} clusters of {a.probe[0]} blocks, {a.probe[2]} bytes of shared memory a block: "
              f"{'right' if ok else 'WRONG'}", flush=True)
        return 0 if ok else 1
    if a.max_clusters:
        limit_clusters(a.max_clusters)
    for n in a.n:
        for dt in (DTYPES[d] for d in a.dtype):
            for offset in a.offset:
                run(n, dt, offset)
            print(f"ran every kernel at N = {n}, {dt}, views at offsets {tuple(a.offset)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

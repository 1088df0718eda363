"""Do latency hints change the chunk-scan kernel at all? (no GPU)

``ssd.SCAN_LATENCY`` (at commit bde92b5) passes cuTile latency hints to the chunk scan's loads of C,
of the state entering the chunk, of C B^T and of x, as ``ssd.STATE_LATENCY`` does for the state
kernel, where they took that kernel from 761 to 637 us (runs I and J). Here every set of the four
hints from {0, 2, 4, 8} (256 sets) is compiled for sm_90 without a GPU, for (1, 65536, 64) at chunk
64 and (4, 16384, 8) at chunk 128, and the cubins are grouped by the hash of their code.

    python benchmarks/runs/scan_hint_codes.py WORKERS

Ran at bde92b5: one machine code for all 256 sets on each shape (3d9b724806ae and a28872ff516e,
the shipped kernel's; 64 registers, no spills), so the hints were removed again and no GPU time
was spent on them. The grouped result is book/data/scan_hint_codes.csv.
"""
import io, itertools, os, sys
sys.path.insert(0, os.getcwd())
import multiprocessing as mp
import torch

def work(args):
    shape, chunk, hints = args
    from kernels.mamba2 import ssd
    from kernels.cubin import text_hash, kernel_resources
    from cuda.tile.compilation import export_kernel
    ssd.SCAN_LATENCY = {(16, chunk): hints}
    K = ssd._build(16)
    b, L, h, p, n = shape
    meta = dict(device="meta")
    x = torch.empty(b, L, h, p, dtype=torch.bfloat16, **meta)
    B = torch.empty(b, L, 1, n, dtype=torch.bfloat16, **meta)
    f = dict(dtype=torch.float32, **meta)
    launches, _, _ = ssd.plan(x, torch.empty(b, L, h, **f), torch.empty(h, **f), B, torch.empty_like(B), chunk,
                              torch.empty(h, **f), torch.empty(b, h, p, n, **f), torch.empty(h, **f), True, "fused")
    for name, _, a in launches:
        if name == "chunk_scan":
            buf = io.BytesIO()
            export_kernel(K[name], [ssd._signature(K[name], a)], buf, gpu_code="sm_90", output_format="cubin")
            c = buf.getvalue()
            r = kernel_resources(c)[0]
            return (shape, chunk, hints, text_hash(c), r.registers, r.frame_bytes)

if __name__ == "__main__":
    vals = (0, 2, 4, 8)
    jobs = [((1, 65536, 64, 64, 128), 64, hs) for hs in itertools.product(vals, repeat=4)]
    jobs += [((4, 16384, 8, 64, 128), 128, hs) for hs in itertools.product(vals, repeat=4)]
    with mp.get_context("spawn").Pool(int(sys.argv[1])) as pool:
        res = pool.map(work, jobs, chunksize=4)
        from collections import defaultdict
    for key in {(r[0], r[1]) for r in res}:
        groups = defaultdict(list)
        for r in res:
            if (r[0], r[1]) == key:
                groups[r[3]].append(r[2])
        print(key, len(groups), "distinct codes")
        for hsh, hs in groups.items():
            print("  ", hsh, len(hs), hs[:4], [r[4:] for r in res if r[3] == hsh][0])

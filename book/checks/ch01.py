"""Chapter 1's checks: Little's law as a function, and working sets that put a chase in each level."""
from __future__ import annotations

import torch

from . import expect_close, gpu, numbers_need_gpu, passed

#: Hopper's datasheet sizes (chapter 1's table): L1 and shared memory share 256 KB per SM; the L2.
L1_BYTES = 256 * 1024
L2_BYTES = 50 * 10**6
LEVELS = ("l1", "l2", "hbm")
LINK = 32  # elements between two links of a chain (128 bytes: one cache line)


def littles_law(in_flight_per_sm, name="ch01.littles_law"):
    """``in_flight_per_sm(tb_per_s, latency_ns, sms)``: the bytes each of ``sms`` SMs must keep in
    flight for a memory that answers after ``latency_ns`` to deliver ``tb_per_s`` TB/s."""
    g = torch.Generator().manual_seed(1)
    n = 64
    tb = 10 ** (torch.rand(n, generator=g, dtype=torch.float64) * 2.5 - 0.5)  # 0.3 to 100 TB/s
    ns = 10 ** (torch.rand(n, generator=g, dtype=torch.float64) * 2 + 1)  # 10 to 1000 ns
    sms = torch.randint(1, 200, (n,), generator=g)
    got = [float(in_flight_per_sm(float(b), float(l), int(s))) for b, l, s in zip(tb, ns, sms)]
    expect_close(name, got, tb * 1e12 * ns * 1e-9 / sms, rtol=1e-9,
                 what=f"{n} random bandwidths, latencies and SM counts")


def _size(nbytes):
    unit = max((u for u in (0, 10, 20, 30) if nbytes >= 1 << u))
    return f"{nbytes / (1 << unit):.4g} {['B', 'KiB', 'MiB', 'GiB'][unit // 10]}"


def _l2_bytes():
    return torch.cuda.get_device_properties(0).L2_cache_size if gpu() else L2_BYTES


def working_sets(chain_elems, name="ch01.working_sets"):
    """``chain_elems(level)``, for level "l1", "l2", "hbm": the int32 elements of a chase chain
    (``hierarchy.make_chain(n, 32)``: links 128 bytes apart) that lives in that level. With a GPU,
    the chases run and must be slower level by level."""
    n = {level: int(chain_elems(level)) for level in LEVELS}
    size = {level: 4 * v for level, v in n.items()}
    l2 = _l2_bytes()
    kib, mib = 1 << 10, 1 << 20
    for level, v in n.items():
        if v % LINK or v < 2 * LINK:
            raise AssertionError(f"{name}: the {level} chain must be a multiple of {LINK} elements, at least "
                                 f"two links; got {v}")
    rules = [
        ("l1", size["l1"] <= L1_BYTES // 4, f"at most a quarter of the {L1_BYTES // kib} KiB of L1, so that it "
                                            "stays there"),
        ("l2", 4 * L1_BYTES <= size["l2"] <= l2 // 2, f"at least 4 x the L1 ({4 * L1_BYTES // kib} KiB), so that "
                                                      f"it misses there, and at most half the L2 ({l2 // 2 // mib} MiB)"),
        ("hbm", 4 * l2 <= size["hbm"] <= 4 << 30, f"at least 4 x the L2 ({4 * l2 // mib} MiB), so that it misses "
                                                  "there, and at most 4 GiB"),
    ]
    for level, ok, why in rules:
        if not ok:
            raise AssertionError(f"{name}: the {level} chain is {_size(size[level])}; it should be {why}")
    passed(name, ", ".join(f"{level} chain {_size(size[level])}" for level in LEVELS)
           + ": each fits its level and overflows the one below")
    if not gpu():
        return numbers_need_gpu(name, "timing the three chases")
    from benchmarks.harness import time_ms
    from kernels import hierarchy

    # Enough steps that the HBM chase touches more lines than the L2 holds (each run follows the
    # same links from the start, so a short run would find its lines in the L2 from the first);
    # the launch's few microseconds are lost in the run's hundreds of milliseconds.
    steps = 1 << 20
    kernel, res = hierarchy.compile_chase(False), torch.zeros(1, dtype=torch.int32, device="cuda")
    lat = {}
    for level in LEVELS:
        chain = hierarchy.make_chain(n[level], LINK)
        lat[level] = time_ms(lambda: kernel(chain, res, steps), warmup=1, rep=3) * 1e6 / steps
        del chain
    shown = ", ".join(f"{level} {v:.0f} ns" for level, v in lat.items())
    if not lat["l1"] * 1.3 < lat["l2"] < lat["hbm"] / 1.3:
        raise AssertionError(f"{name}: one dependent load should cost more at each level down; measured {shown}")
    passed(name, f"latency of one dependent load: {shown}")

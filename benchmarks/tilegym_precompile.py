"""Compile, in parallel, every configuration TileGym's Mamba-2 tuner will try on one shape of the
suite (``benchmarks.mamba2.SHAPES``) and one chunk size, into cuTile's disk cache
(~/.cache/cutile-python), so that the suite's TileGym tuning on the same inputs then only times
them. Nothing here is timed; run it on the GPU machine, in the same call as the suite, before it:

    python -m benchmarks.tilegym_precompile SHAPE_INDEX CHUNK [WORKERS]
    python -m benchmarks.tilegym_precompile 3 256 15 && bash benchmarks/h200.sh mamba2 --shapes 3 --chunks 256 ...

Why: TileGym's tuner compiles its configurations one after another (on (1, 65536, 64) at chunk 256,
15 + 36 + 64 of them, 6-7 s each for its output kernel), and tuning that shape at every chunk ran
past a call's time limit twice. Compiled here first with 15 workers (115 configurations in 96 s),
the suite's tuning at chunk 256 then took 47 s.

How: each worker process builds the suite's inputs, forces one configuration of one of TileGym's
three tuned kernels (the others at their first), and runs TileGym's forward once with its tuner
off; that launch compiles and caches the cubin, keyed by the kernel's bytecode and hints, which is
what the tuner's own launch compiles too. One line a configuration (its seconds, and its error if
it failed: the others go on).
"""
import argparse
import multiprocessing as mp
import os
import sys
import time

_STATE = {}


def _init(shape_index: int, chunk: int) -> None:
    os.environ["TILEGYM_DISABLE_AUTOTUNE"] = "1"
    import torch
    from benchmarks import mamba2 as M
    from benchmarks import peers_mamba2 as peers

    b, L, h, p, n, g = M.SHAPES[shape_index]
    args, kw = M.make_inputs(b, L, h, p, n, g, torch.bfloat16, seed=shape_index)
    targs, tkw = M.as_tilegym_features(args, kw)
    _STATE.update(f=peers.tilegym_forward(), args=peers.tilegym_args(*targs, chunk, **tkw),
                  tg=sys.modules["tilegym.ops.cutile.mamba2"])


def jobs(tg, chunk: int, h: int, p: int, n: int) -> list[tuple[str, int]]:
    """(generator attribute, configuration index) of every configuration TileGym's three tuned
    kernels try for these sizes, the output kernel's (the slowest compiles) first."""
    out = "_compute_out_swap_configs" if chunk == 64 else "_compute_out_configs"
    sizes = {out: dict(head_size=p, state_size=n),
             "_chunk_cumsum_autotune_configs": dict(num_heads=h),
             "_fwd_pass_state_autotune_configs": dict(state_size=n, head_size=p, chunk_size=chunk)}
    return [(name, i) for name, kw in sizes.items() for i in range(len(list(getattr(tg, name)(**kw))))]


def _compile(job):
    import torch
    name, i = job
    tg = _STATE["tg"]
    gen = getattr(tg, name)
    t0 = time.perf_counter()
    try:
        setattr(tg, name, lambda *a, _g=gen, _i=i, **k: iter([list(_g(*a, **k))[_i]]))
        for cache in ("_chunk_cumsum_tune_cache", "_fwd_pass_state_tune_cache", "_compute_out_tune_cache"):
            getattr(tg, cache).clear()
        _STATE["f"](*_STATE["args"])
        torch.cuda.synchronize()
        err = ""
    except Exception as e:  # noqa: BLE001  (reported, the others go on)
        err = f"{type(e).__name__}: {str(e)[:160]}"
    finally:
        setattr(tg, name, gen)
    return name, i, round(time.perf_counter() - t0, 1), err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape_index", type=int, help="index into benchmarks.mamba2.SHAPES")
    ap.add_argument("chunk", type=int, help="chunk size, as the suite's --chunks")
    ap.add_argument("workers", type=int, nargs="?", default=14, help="compiling processes (default 14)")
    a = ap.parse_args(argv)
    shape_index, chunk, workers = a.shape_index, a.chunk, a.workers
    from benchmarks import mamba2 as M
    from benchmarks import peers_mamba2 as peers
    peers.tilegym_forward()
    tg = sys.modules["tilegym.ops.cutile.mamba2"]
    b, L, h, p, n, g = M.SHAPES[shape_index]
    todo = jobs(tg, chunk, h, p, n)
    print(f"{len(todo)} configurations of shape {M.SHAPES[shape_index]} at chunk {chunk}, {workers} workers",
          flush=True)
    t0 = time.time()
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, initializer=_init, initargs=(shape_index, chunk)) as pool:
        for name, i, s, err in pool.imap_unordered(_compile, todo):
            print(f"{name}[{i}] {s} s {err}", flush=True)
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()

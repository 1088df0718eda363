"""The vocabulary-parallel suite: cross-entropy with the vocabulary split across W GPUs of one
host, one process a GPU over NCCL (``kernels.distributed``), W = 2, 4, 8 beside the one-GPU op.

    python -m benchmarks.vocab_parallel --gpus 2,4,8 --out DIR

For each world size W that the machine has (and W = 1, the baseline), each vocabulary N
(Llama 3's 128,256 and Gemma's 256,000), split as evenly as possible (:func:`shard_widths`), every
GPU holds M x N/W = 2^28 logits (:func:`rows_per_gpu`; bf16 by default), so the bytes a GPU moves
stay the same as W grows and the rows grow with it (weak scaling). Implementations:

    ours      kernels.distributed.vocab_parallel_cross_entropy, each protocol (``protocol``
              column), the shard widths given (no gather of them, no host sync)
    liger     Liger's LigerVocabParallelCEFunction, where liger_kernel has it
    megatron  Megatron-LM's tensor_parallel.vocab_parallel_cross_entropy, where megatron-core
              installs (its model-parallel state set up with tensor parallelism W)
    torch     Megatron's algorithm in plain torch ops (:class:`TorchVocabParallelCE`): max
              all-reduce, then one sum all-reduce of the sums of exp and target logits
    ours, W = 1: kernels.cross_entropy on the full (M, N) logits

Each is timed through autograd as ``benchmarks.backward`` times a training step ("fwd", "bwd",
"fwd+bwd": ``pass`` column), every call between CUDA events, the median of ``--rounds`` rounds
(each the median of 20 calls after 3 warm-up, the order of the implementations alternating),
each round's time the slowest rank's. A peer that is not installed, or cannot run a split, gets
rows with a note instead of times.

Bytes, per GPU and pass (columns ``bytes_shard`` and ``bytes_collective``; ``tb_per_s`` is
``bytes_shard`` over the time, against the copy ceiling measured on GPU 0 in the same job):
the shard is read once forward, read and its gradient written backward (M n, 2 M n, 3 M n
elements, :func:`bytes_shard`); the collectives move fp32 numbers a row, forward only
(:func:`bytes_collective`): "allreduce" is called on k M of them in two collectives (the max,
then the rescaled rest), "allgather" receives the W ranks' k M; k = 3 rows of partials without
label smoothing (``kernels.vocab_parallel.PARTIALS``); the peers all-reduce 3 M (Liger and
Megatron in three collectives, the torch reference in two).

``--shards 16384,32768,65536,131072`` times instead the shard kernels alone on one GPU
(:func:`shard_suite`, ``DIR/vocab_shard.csv``): the partials against the read ceiling (the shard
read once), the backward against the copy ceiling (read, and its gradient written), at M x n = 2^28.

Once per configuration, before timing, each implementation's loss and gradient on the first
``--check-rows`` rows are compared on rank 0 with the single-GPU ``kernels.cross_entropy`` of the
logits gathered there, and the loss with float64 (columns ``loss_err``, ``loss_err_f64``,
``grad_err``, ``check``). Writes ``DIR/vocab_parallel.csv`` (after each W, so that a run cut short
keeps what it measured) and ``DIR/vocab_parallel.json`` (GPU, driver, versions, NCCL, topology,
date, commit, the ceilings of every job). NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernels.distributed import PROTOCOLS
from kernels.vocab_parallel import PARTIALS

from . import harness as H
from .backward import PASSES, calls, elements

SUITE = "vocab_parallel"
OP = "vocab_parallel_cross_entropy"
VOCABULARIES = {"Llama 3": 128256, "Gemma": 256000}
TOTAL = 1 << 28  # logits a GPU holds
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
K = len(PARTIALS) - 1  # fp32 partials a row without label smoothing: big, sum, target_logit
#: Collectives a forward calls: ours by protocol, the peers (all-reduces of 3 M fp32 each time).
COLLECTIVES = {("ours", "allreduce"): 2, ("ours", "allgather"): 1, ("liger", "allreduce"): 3,
               ("megatron", "allreduce"): 3, ("torch", "allreduce"): 2, ("ours", "none"): 0}
#: What a reader of the rows should know about the peers' passes (the JSON's "notes").
NOTES = {"liger bwd": "timed on one kept graph: Liger's backward writes the gradient over the exp buffer its "
                      "forward saved, so the calls after the first compute on that (the same bytes move)",
         "megatron bwd": "Megatron's backward edits its saved softmax in place: differentiating one kept graph "
                         "again may raise (the row then has no time and the error as its note); its fwd+bwd "
                         "builds a fresh graph each call"}
TOLERANCE = {"bf16": 1e-2, "fp32": 1e-5}  # grad_err, relative to the largest gradient
LOSS_TOLERANCE = 2e-5


# ---- what a configuration is, and the bytes it must move (pure: no GPU) -----------------------------

def shard_widths(n: int, world: int) -> list[int]:
    """The classes of each rank, n over ``world`` as evenly as possible: the first n % world
    ranks one wider."""
    return [n // world + (r < n % world) for r in range(world)]


def rows_per_gpu(n: int, world: int, total: int = TOTAL) -> int:
    """M such that M times the shard's n / world classes is ``total`` to the nearest row."""
    return max(1, round(total * world / n))


def bytes_shard(m: int, n_shard: int, elem_bytes: int, pass_: str) -> int:
    """Bytes of device memory a pass must move on one GPU: the (m, n_shard) shard read forward,
    read and its gradient written backward (``benchmarks.backward.elements``)."""
    return elements("cross_entropy", pass_) * m * n_shard * elem_bytes


def bytes_collective(protocol: str, world: int, m: int, pass_: str = "fwd", k: int = K) -> int:
    """Bytes of the buffers a pass's collectives are called on, on one GPU (fp32 numbers a row):
    "allreduce" k m (the max, then k - 1 rows), "allgather" world k m (every rank's partials);
    the backward and one GPU none."""
    if pass_ == "bwd" or world == 1 or protocol == "none":
        return 0
    if protocol == "allreduce":
        return k * m * 4
    if protocol == "allgather":
        return world * k * m * 4
    raise ValueError(f"unknown protocol {protocol!r}")


def make_row(impl: str, protocol: str, dtype: str, world: int, n: int, m: int, pass_: str, ms: float,
             ceiling: float, rounds_ms=None, note: str = "", **extra) -> dict:
    """One CSV row in the suites' schema (``benchmarks.harness.row``: M is the rows a GPU, N the
    whole vocabulary), with ``world``, ``protocol``, ``pass``, ``n_shard`` (the widest shard),
    ``bytes_shard`` (the bytes ``tb_per_s`` counts), ``bytes_collective`` and ``collectives``."""
    n_shard = max(shard_widths(n, world))
    nbytes = bytes_shard(m, n_shard, torch.finfo(DTYPES[dtype]).bits // 8, pass_)
    fields = {"world": world, "protocol": protocol, "pass": pass_, "n_shard": n_shard, "bytes_shard": nbytes,
              "bytes_collective": bytes_collective(protocol, world, m, pass_),
              "collectives": 0 if pass_ == "bwd" else COLLECTIVES[impl, protocol], "note": note}
    if rounds_ms:
        fields["rounds_us"] = " ".join(f"{v * 1e3:.2f}" for v in rounds_ms)
    return H.row(OP, impl, dtype, m, n, nbytes, ms, ceiling, **fields, **extra)


def slowest(per_rank: list[dict]) -> dict:
    """Each key's rounds (milliseconds), each round the slowest rank's: ``per_rank`` holds every
    rank's ``time_rounds`` result, in rank order."""
    return {k: [max(r[k][i] for r in per_rank) for i in range(min(len(r[k]) for r in per_rank))]
            for k in per_rank[0]}


def vs_one_gpu(rows: list[dict]) -> list[dict]:
    """Add ``vs_one_gpu`` to each timed row of W > 1: the one-GPU op's time for the same N,
    dtype and pass over this row's (1.0: a GPU of W as fast on its 2^28 logits as one GPU alone
    on as many)."""
    base = {(r["N"], r["dtype"], r["pass"]): r["us"] for r in rows if r["world"] == 1 and r["us"] == r["us"]}
    for r in rows:
        one = base.get((r["N"], r["dtype"], r["pass"]))
        if r["world"] > 1 and one and r["us"] == r["us"] and r["us"] > 0:
            r["vs_one_gpu"] = round(one / r["us"], 4)
    return rows


# ---- the implementations --------------------------------------------------------------------------

class TorchVocabParallelCE(torch.autograd.Function):
    """Megatron-LM's vocabulary-parallel cross-entropy in plain torch ops, no gather of logits:
    the rows' max all-reduced (MAX), then the shard's sums of exp against it and the target's
    logit where the shard holds it all-reduced together (SUM); the mean loss over the rows. The
    forward keeps the fp32 softmax of the shard for the backward (as Megatron does), which does
    not overwrite it (so that a kept graph can be differentiated again)."""

    @staticmethod
    def forward(ctx, x, target, start: int, group):
        import torch.distributed as dist
        x32 = x.float()
        big = x32.amax(-1)
        dist.all_reduce(big, dist.ReduceOp.MAX, group=group)
        e = torch.exp(x32 - big.unsqueeze(-1))
        col = target.long() - start
        held = (col >= 0) & (col < x.shape[1])
        x_t = torch.where(held, x32.gather(1, col.clamp(0, x.shape[1] - 1).unsqueeze(-1)).squeeze(-1), 0.0)
        sums = torch.stack([e.sum(-1), x_t])
        dist.all_reduce(sums, dist.ReduceOp.SUM, group=group)
        e /= sums[0].unsqueeze(-1)
        ctx.save_for_backward(e, col, held)
        ctx.dtype = x.dtype
        return (torch.log(sums[0]) + big - sums[1]).mean()

    @staticmethod
    def backward(ctx, dloss):
        p, col, held = ctx.saved_tensors
        g = dloss / p.shape[0]
        dx = p * g
        rows = torch.arange(p.shape[0], device=p.device)[held]
        dx[rows, col[held]] -= g
        return dx.to(ctx.dtype), None, None, None


def implementations(widths: list[int], rank: int, group=None, dtype=torch.bfloat16):
    """(impl, protocol, make) for W = len(widths) ranks and shards of ``dtype``: ``make()``
    returns ``f(shard, target)``, the mean loss, differentiable in the shard, or raises where the
    implementation cannot run."""
    from kernels.distributed import vocab_parallel_cross_entropy
    world, start = len(widths), sum(widths[:rank])

    def ours(protocol):
        return lambda: (lambda x, t: vocab_parallel_cross_entropy(x, t, group, protocol=protocol,
                                                                  shard_widths=widths))

    def even():
        if len(set(widths)) > 1:
            raise NotImplementedError(f"an even split only (its shard r starts at r n), got widths {widths}")

    def liger():
        even()
        import torch.distributed as dist
        try:
            from liger_kernel.ops.vocab_parallel_cross_entropy import LigerVocabParallelCEFunction
        except ImportError as e:
            raise ImportError(f"liger_kernel has no vocab-parallel cross-entropy here ({e})") from None
        tp = group or dist.group.WORLD  # None would mean one rank to Liger
        return lambda x, t: LigerVocabParallelCEFunction.apply(x.view(x.shape[0], 1, -1), t.view(-1, 1), tp, -100,
                                                               0.0, "pytorch", "global").mean()

    def megatron():
        even()
        if dtype == torch.float32:  # its .float() is then the shard itself, which it overwrites with exp
            raise NotImplementedError("Megatron's forward writes exp over fp32 logits in place (the input "
                                      "every implementation shares here)")
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.cross_entropy import vocab_parallel_cross_entropy as mvp
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
        return lambda x, t: mvp(x.view(x.shape[0], 1, -1), t.view(-1, 1)).mean()

    def torch_reference():
        return lambda x, t: TorchVocabParallelCE.apply(x, t, start, group)

    return [("ours", p, ours(p)) for p in PROTOCOLS] + [("liger", "allreduce", liger),
                                                         ("megatron", "allreduce", megatron),
                                                         ("torch", "allreduce", torch_reference)]


def gather_rows(x: torch.Tensor, widths: list[int], group=None):
    """The (m, n_r) shards of every rank side by side, (m, N), on rank 0 (None elsewhere)."""
    import torch.distributed as dist
    wide = max(widths)
    mine = torch.nn.functional.pad(x, (0, wide - x.shape[1])).contiguous()
    parts = [torch.empty_like(mine) for _ in widths] if dist.get_rank(group) == 0 else None
    dist.gather(mine, parts, dst=0, group=group)
    return None if parts is None else torch.cat([p[:, :w] for p, w in zip(parts, widths)], dim=1)


def check(f, x, t, widths: list[int], dtype: str, single=None, group=None) -> dict | None:
    """The loss and gradient of ``f`` on the shards ``x`` (m, n_r) against ``single(logits, t)``
    ((loss, gradient) of the gathered logits; default the single-GPU kernels.cross_entropy) and
    the loss against float64, on rank 0 (None elsewhere); every rank must call it."""
    import torch.distributed as dist
    from kernels.cross_entropy import cross_entropy_reference
    xs = x.detach().clone().requires_grad_()
    loss = f(xs, t)
    (g,) = torch.autograd.grad(loss, xs)
    losses = [torch.empty(1, dtype=loss.dtype, device=loss.device) for _ in widths]
    dist.all_gather(losses, loss.detach().reshape(1), group=group)
    full, gfull = gather_rows(xs.detach(), widths, group), gather_rows(g, widths, group)
    if full is None:
        return None
    want, want_g = (single or _single_gpu)(full, t)
    want64 = cross_entropy_reference(full, t).item()
    loss_err = abs(loss.item() - want.item()) / max(abs(want.item()), 1e-30)
    grad_err = ((gfull.double() - want_g.double()).abs().max() / want_g.double().abs().max()).item()
    ok = (loss_err <= LOSS_TOLERANCE and grad_err <= TOLERANCE[dtype]
          and all(torch.equal(v, losses[0]) for v in losses))
    return {"loss_err": f"{loss_err:.2e}", "loss_err_f64": f"{abs(loss.item() - want64) / abs(want64):.2e}",
            "grad_err": f"{grad_err:.2e}", "check": "pass" if ok else "FAIL"}


def _single_gpu(full, t):
    import kernels
    leaf = full.clone().requires_grad_()
    loss = kernels.cross_entropy(leaf, t)
    (g,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), g


# ---- one job: W processes, one a GPU ------------------------------------------------------------------

def _passes(f, x, t):
    """The three passes of ``f(x, t)``, each called once (the first compiles)."""
    none = x.new_empty(0)
    passes = calls(lambda x_, w, b, t_: f(x_, t_), "cross_entropy", x, none, none, t)
    for fn in passes.values():
        fn()
    torch.cuda.synchronize()
    return passes


def _timed(fns: dict, world: int, rounds: int, group=None) -> tuple[dict, dict]:
    """(key -> rounds in ms, the slowest rank's; key -> error) of ``fns``, every rank timing the
    same calls in the same order."""
    failed = {}
    times = H.time_rounds(fns, rounds, failed=failed)
    if world > 1:
        import torch.distributed as dist
        every = [None] * world
        dist.all_gather_object(every, (times, failed), group=group)
        failed = {k: v for _, f in every for k, v in f.items()}
        times = slowest([{k: v for k, v in t.items() if k not in failed} for t, _ in every])
    return times, failed


def _config(rank: int, world: int, n: int, dtype: str, ceiling: float, cfg: dict) -> list[dict]:
    """The rows of one (W, N, dtype) on rank 0 (every rank runs it; the others return [])."""
    import torch.distributed as dist
    dt = DTYPES[dtype]
    widths = shard_widths(n, world)
    m = rows_per_gpu(n, world)
    gen = torch.Generator(device="cuda").manual_seed(1000 * world + rank)
    x = (torch.randn(m, widths[rank], device="cuda", generator=gen) * 2).to(dt).requires_grad_()
    t = torch.randint(0, n, (m,), generator=torch.Generator().manual_seed(n)).cuda()  # the same on every rank
    skip = set(cfg["skip"])
    if world == 1:
        import kernels
        impls = [("ours", "none", lambda: (lambda x_, t_: kernels.cross_entropy(x_, t_)))]
    else:
        impls = implementations(widths, rank, dtype=dt)
    fns, notes, checks = {}, {}, {}
    for impl, protocol, make in impls:
        if impl in skip:
            continue
        try:
            f = make()
            for p, fn in _passes(f, x, t).items():
                fns[impl, protocol, p] = fn
        except Exception as e:  # not installed, or cannot run this split: the same on every rank
            notes[impl, protocol] = f"{type(e).__name__}: {str(e)[:160]}"
            continue
        if world > 1:
            rows_checked = min(m, cfg["check_rows"])
            checks[impl, protocol] = check(f, x[:rows_checked], t[:rows_checked], widths, dtype)
    times, failed = _timed(fns, world, cfg["rounds"])
    rows = []
    if rank == 0:
        for impl, protocol, _ in impls:
            if impl in skip:
                continue
            extra = checks.get((impl, protocol)) or {}
            if world > 1 and extra:
                extra["check_rows"] = min(m, cfg["check_rows"])
            for p in PASSES:
                key = (impl, protocol, p)
                note = notes.get((impl, protocol)) or failed.get(key, "")
                if key in times and times[key]:
                    rows.append(make_row(impl, protocol, dtype, world, n, m, p, statistics.median(times[key]), ceiling,
                                         times[key], note, **extra))
                else:
                    rows.append(make_row(impl, protocol, dtype, world, n, m, p, math.nan, ceiling, note=note, **extra))
                print(rows[-1], flush=True)
    del fns, x
    torch.cuda.empty_cache()
    if world > 1:
        dist.barrier()
    return rows


def _job(rank: int, world: int, cfg: dict) -> dict:
    import torch.distributed as dist
    ceiling = H.copy_ceiling() if rank == 0 else math.nan
    if world > 1:
        dist.barrier()
    rows = [r for dtype in cfg["dtypes"] for n in cfg["ns"] for r in _config(rank, world, n, dtype, ceiling, cfg)]
    end = H.copy_ceiling() if rank == 0 else math.nan
    meta = H.metadata({"nccl": ".".join(map(str, torch.cuda.nccl.version())), "topology": _topology(),
                       "gpus_on_machine": torch.cuda.device_count()}) if rank == 0 and world == 1 else None
    return {"rows": rows, "copy_ceiling_tb_per_s": ceiling, "copy_ceiling_end_tb_per_s": end, "meta": meta}


def _topology() -> str:
    import subprocess
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _worker(rank: int, world: int, port: int, cfg: dict, result: str) -> None:
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off, before NCCL starts
    torch.cuda.set_device(rank)
    import torch.distributed as dist
    if world > 1:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=cfg["nccl_timeout_s"]),
                                device_id=torch.device("cuda", rank))
    try:
        out = _job(rank, world, cfg)
        if rank == 0:
            Path(result).write_text(json.dumps(out))
    finally:
        if world > 1:
            dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(world: int, cfg: dict, seconds: float) -> dict:
    """Spawn the job of ``world`` processes (GPUs 0..world-1) and return rank 0's results."""
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        ctx = mp.spawn(_worker, args=(world, free_port(), cfg, result), nprocs=world, join=False)
        deadline = time.monotonic() + seconds
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise TimeoutError(f"the job of {world} GPUs did not finish in {seconds:.0f} s")
        return json.loads(Path(result).read_text())


#: Shard widths of the one-GPU suite (``--shards``): a 128k-256k vocabulary over 2 to 8 GPUs.
SHARDS = (16384, 32768, 65536, 131072)


def shard_points(widths=SHARDS, total: int = TOTAL):
    """(M, n) of the one-GPU shard suite: each width n with M x n = ``total`` logits."""
    return [(max(1, total // n), n) for n in widths]


def shard_suite(widths, dtypes, rounds: int, ceil: dict, total: int = TOTAL) -> list[dict]:
    """The shard kernels alone, on one GPU: for each dtype and shard width, the partials
    (``variant`` "partials": M n elements read, against the read ceiling) and the backward
    ("backward": read and written, 2 M n, against the copy ceiling) of a shard that holds classes
    [0, n) of a vocabulary of 2n, half the targets in it, as a training step calls them."""
    from kernels.cross_entropy import row_gradients
    from kernels.vocab_parallel import shard_backward, shard_partials
    rows = []
    for name in dtypes:
        dt = DTYPES[name]
        for m, n in shard_points(widths, total):
            x = torch.randn(m, n, device="cuda", dtype=dt)
            t = torch.randint(0, 2 * n, (m,), device="cuda")
            lse = torch.logsumexp(x.float(), -1) + math.log(2.0)
            g = row_gradients(torch.tensor(1.0, device="cuda"), t, -100, "mean")
            fns = {"partials": lambda: shard_partials(x, t, 0),
                   "backward": lambda: shard_backward(g, x, t, lse, 0, 2 * n)}
            times = H.time_rounds(fns, rounds)
            for variant, (k, ceiling) in (("partials", (1, ceil["read"])), ("backward", (2, ceil["copy"]))):
                rows.append(H.row("vocab_shard", "ours", name, m, n, k * m * n * x.element_size(),
                                  statistics.median(times[variant]), ceiling, variant=variant,
                                  **H.rounds_fields(times, variant)))
            del x, t, lse
            torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", default="2,4,8", help="world sizes, comma-separated; those past the machine's GPUs "
                   "are left out (and named in the JSON); W = 1, the baseline, always runs")
    p.add_argument("--out", default=None, help="folder for vocab_parallel.csv and .json (default book/data)")
    p.add_argument("--ns", default=",".join(map(str, VOCABULARIES.values())), help="vocabularies (default %(default)s)")
    p.add_argument("--dtypes", default="bf16", help="bf16, fp32 or both (default %(default)s)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of timing (default %(default)s)")
    p.add_argument("--check-rows", type=int, default=2048, help="rows of the check against the single-GPU op")
    p.add_argument("--skip", default="", help="implementations left out, comma-separated (liger, megatron, torch)")
    p.add_argument("--job-timeout", type=float, default=1800, help="seconds a world size's job may take")
    p.add_argument("--shards", default="", help="shard widths, comma-separated: time the shard kernels alone on "
                   "one GPU instead (vocab_shard.csv; e.g. %s)" % ",".join(map(str, SHARDS)))
    a = p.parse_args(argv)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    have = torch.cuda.device_count()
    if have < 1:
        print("benchmarks.vocab_parallel needs CUDA GPUs (one process a GPU, NCCL); this machine has none")
        return 2
    if a.shards:
        t0 = time.time()
        ceil = {"copy": H.copy_ceiling(), "read": H.read_ceiling()}
        rows = shard_suite([int(v) for v in a.shards.split(",")], a.dtypes.split(","), a.rounds, ceil)
        meta = H.metadata({"suite": "vocab_shard", "copy_ceiling_tb_per_s": ceil["copy"],
                           "read_ceiling_tb_per_s": ceil["read"], "copy_ceiling_end_tb_per_s": H.copy_ceiling(),
                           "total_elements": TOTAL, "rounds": a.rounds, "seconds": round(time.time() - t0, 1),
                           "timing": "median of the rounds (rounds_us), each the median of 20 calls after 3 warm-up"})
        print(f"wrote {H.write_suite('vocab_shard', rows, meta, a.out)} ({len(rows)} rows)", flush=True)
        return 0
    asked = sorted({1} | {int(w) for w in a.gpus.split(",") if w})
    worlds = [w for w in asked if w <= have]
    cfg = {"ns": [int(v) for v in a.ns.split(",")], "dtypes": a.dtypes.split(","), "rounds": a.rounds,
           "check_rows": a.check_rows, "skip": [s for s in a.skip.split(",") if s], "nccl_timeout_s": 600}
    rows, meta, jobs, errors = [], {}, {}, {}
    t0 = time.time()
    for w in worlds:
        try:
            res = run_world(w, cfg, a.job_timeout)
            rows += res["rows"]
            meta = res["meta"] or meta
            jobs[w] = {k: res[k] for k in ("copy_ceiling_tb_per_s", "copy_ceiling_end_tb_per_s")}
        except Exception as e:  # one world size's failure leaves the others' rows
            errors[w] = f"{type(e).__name__}: {str(e)[-400:]}"
            print(f"world {w}: {errors[w]}", flush=True)
        if rows:  # after every world size, so that a run cut short keeps what it measured
            info = {"suite": SUITE, "worlds": worlds, "worlds_left_out": [v for v in asked if v > have],
                    "jobs": jobs, "errors": errors, "NCCL_NVLS_ENABLE": "0", "total_elements_per_gpu": TOTAL,
                    "vocabularies": cfg["ns"], "rounds": a.rounds, "check_rows": a.check_rows, "notes": NOTES,
                    "timing": "median of the rounds (rounds_us), each round the slowest rank's median of 20 calls "
                              "after 3 warm-up, the order of the implementations alternating",
                    "seconds": round(time.time() - t0, 1)}
            path = H.write_suite(SUITE, vs_one_gpu(rows), {**meta, **info}, a.out)
            print(f"world {w}: wrote {path} ({len(rows)} rows, {time.time() - t0:.0f} s)", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

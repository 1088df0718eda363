"""The Mamba-2 SSD forwards ours is measured against, imported without their packages' __init__.

* **Triton**: ``mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`` (mamba_ssm 2.3.2),
  our contract exactly (ours copies it). ``mamba_ssm/__init__.py`` imports the CUDA extensions
  (selective_scan_cuda, causal_conv1d, ...) that a wheel built without them lacks, so the package
  is registered bare (``bare_package``) and only the Triton modules are imported. Those need, past
  torch and triton: ``einops`` and ``packaging`` (``causal_conv1d`` is optional: a try/except).
* **TileGym** (cuTile): ``tilegym.ops.cutile.mamba2.mamba2_chunk_forward`` (tilegym 1.5.1).
  ``tilegym/__init__.py`` imports every op and tries transformers; bare ``tilegym``,
  ``tilegym.ops`` and ``tilegym.ops.cutile`` leave torch, cuda.tile (with cuda.tile.tune) and
  ``tilegym.backend`` / ``tilegym.autotune`` / ``tilegym.logger`` (standard library only). The
  backend selector probes for its C++ backend (cuda.bindings, cuda.core) inside a try/except.

TileGym's contract against ours (``tilegym_args`` converts, outside any timed region):

- arguments ``(x, a, b, c, d, dt, init_state, chunk_size)``, positional; the same layouts as ours:
  x (b, L, h, p), a (h), b and c (b, L, g, n), d (h), dt (b, L, h), init_state (b, h, p, n);
- D and the initial states are required: zeros stand for "none";
- the final states are always returned, in init_state's dtype (fp32 here);
- no dt_bias and no softplus: it takes the step sizes as they are, so its feature set gets
  softplus(dt + dt_bias) computed beforehand (``TILEGYM_LACKS``);
- L must be a multiple of chunk_size;
- the states entering each chunk are stored in C's dtype (bf16 for bf16 inputs), as in mamba_ssm;
- every kernel is tuned by an exhaustive search on the first call for each shape.
"""
from __future__ import annotations

import importlib.util
import sys
import types

TILEGYM_LACKS = ("dt_bias", "dt_softplus")  # what TileGym's forward does not compute itself


def bare_package(name: str) -> types.ModuleType:
    """Register package ``name`` in sys.modules without running its ``__init__``.

    Its submodules then import as usual (``import name.sub`` finds them on the bare package's
    ``__path__``). Parents must be registered first. A package already imported is left alone.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)  # locates, does not execute, for a top-level name
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"no package {name!r} on sys.path")
    mod = types.ModuleType(name)
    mod.__path__ = list(spec.submodule_search_locations)
    mod.__spec__ = spec
    mod.__package__ = name
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)
    return mod


def mamba_ssm_triton():
    """mamba_ssm's Triton ``mamba_chunk_scan_combined`` (ImportError if it cannot be imported)."""
    bare_package("mamba_ssm")
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    return mamba_chunk_scan_combined


def tilegym_forward():
    """TileGym's cuTile ``mamba2_chunk_forward`` (ImportError if it cannot be imported)."""
    for name in ("tilegym", "tilegym.ops", "tilegym.ops.cutile"):
        bare_package(name)
    from tilegym.ops.cutile.mamba2 import mamba2_chunk_forward

    return mamba2_chunk_forward


def tilegym_args(x, dt, A, B, C, chunk_size, D=None, initial_states=None, dt_bias=None, dt_softplus=False):
    """Our arguments as TileGym's positional ones (x, a, b, c, d, dt, init_state, chunk_size).

    Raises ValueError for what TileGym cannot express: dt_bias or dt_softplus (apply them to dt
    first, as ``benchmarks.mamba2`` does for its TileGym feature set), or L not a multiple of the
    chunk. A missing D or initial state becomes zeros (fp32), which computes the same thing.
    """
    import torch

    missing = [k for k, v in (("dt_bias", dt_bias is not None), ("dt_softplus", dt_softplus)) if v]
    if missing:
        raise ValueError(f"TileGym's mamba2_chunk_forward does not apply {' or '.join(missing)}")
    b, L, h, p = x.shape
    if L % chunk_size:
        raise ValueError(f"TileGym needs L ({L}) to be a multiple of chunk_size ({chunk_size})")
    n = B.shape[-1]
    d = D if D is not None else torch.zeros(h, device=x.device, dtype=torch.float32)
    init = initial_states if initial_states is not None else torch.zeros(b, h, p, n, device=x.device,
                                                                          dtype=torch.float32)
    return (x.contiguous(), A.contiguous(), B.contiguous(), C.contiguous(), d.contiguous(), dt.contiguous(),
            init.contiguous(), chunk_size)


def peer_versions() -> dict:
    """Versions of the peers and of what they run on, for the suite's metadata."""
    from benchmarks.harness import package_version

    return {pkg: package_version(pkg) for pkg in ("mamba_ssm", "tilegym", "cuda-tile", "triton", "einops")}

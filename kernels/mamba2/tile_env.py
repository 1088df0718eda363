"""Can this machine compile cuTile kernels? ``have_tile()`` answers, ``require_tile()`` insists.

cuTile (pip ``cuda-tile``) is an optional extra of this package: the rest of ``kernels`` needs only
the CuTe DSL. It turns each ``@ct.kernel`` into Tile IR bytecode in Python and hands that to
NVIDIA's ``tileiras`` compiler (CUDA 13.2 or later; tileiras in turn needs libnvvm and ptxas of
its own version). cuda.tile 1.7.0 looks for tileiras in this order (``_find_compiler_bin`` in
``cuda/tile/_compile.py``):

1. the pip wheels ``nvidia-cuda-tileiras``, ``nvidia-nvvm`` and ``nvidia-cuda-nvcc``, all three
   installed with one major.minor version: ``<site-packages>/nvidia/cu13/bin/tileiras``;
2. ``tileiras`` on ``PATH`` (the GPU kit's wrapper, or a CUDA toolkit's bin folder);
3. ``$CUDA_HOME/bin``;
4. the default toolkit folders (``/usr/local/cuda*``).

Compiling needs no GPU (``cuda.tile.compilation.export_kernel`` writes an sm_90 cubin on a CPU
machine); launching needs one with a CUDA 13 driver (r580 or later).
"""
from __future__ import annotations

import re
import subprocess

MIN_TILEIRAS = (13, 2)

INSTALL = (
    "install the optional cuTile extra: `pip install -e '.[tile]'` (or `make venv`, which does so on "
    "machines without a GPU): cuda-tile 1.7.0 plus tileiras, libnvvm and ptxas 13.4 from pip; or put "
    f"the tileiras of a CUDA {MIN_TILEIRAS[0]}.{MIN_TILEIRAS[1]}+ toolkit on PATH"
)


def _tileiras_path() -> str:
    """Where cuda.tile will find tileiras (FileNotFoundError if nowhere)."""
    try:
        from cuda.tile._compile import _find_compiler_bin  # the search cuda.tile itself runs
    except ImportError:  # a cuda.tile whose private layout moved: look on PATH and in CUDA_HOME
        import os
        import shutil

        home = os.environ.get("CUDA_HOME")
        found = shutil.which("tileiras") or (home and shutil.which("tileiras", path=os.path.join(home, "bin")))
        if not found:
            raise FileNotFoundError("'tileiras' not found on PATH or in $CUDA_HOME/bin") from None
        return found
    return _find_compiler_bin().path


def _tileiras_release(path: str) -> tuple[int, int] | None:
    """(major, minor) from ``tileiras --version`` ("... release 13.4, V13.4.92"), None if unreadable."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def have_tile() -> tuple[bool, str]:
    """(True, what was found) if cuda.tile imports and its compiler is usable, else (False, why).

    Checks the import and the compiler only: whether a GPU is present is a separate question.
    """
    try:
        import cuda.tile as ct
    except Exception as e:  # ImportError, or an OSError from its C extension
        return False, f"cuda.tile does not import ({type(e).__name__}: {e}); {INSTALL}"
    version = getattr(ct, "__version__", "?")
    try:
        path = _tileiras_path()
    except FileNotFoundError as e:
        return False, f"cuda.tile {version} imports but its compiler is missing ({e}); {INSTALL}"
    release = _tileiras_release(path)
    if release is None:
        return False, f"cuda.tile {version}: {path} --version does not run or names no release; {INSTALL}"
    if release < MIN_TILEIRAS:
        return False, (f"cuda.tile {version}: {path} is release {release[0]}.{release[1]}, older than "
                       f"{MIN_TILEIRAS[0]}.{MIN_TILEIRAS[1]}; {INSTALL}")
    return True, f"cuda.tile {version}, tileiras {release[0]}.{release[1]} at {path}"


def require_tile() -> None:
    """Raise RuntimeError, with how to install the cuTile parts, unless ``have_tile()``."""
    ok, why = have_tile()
    if not ok:
        raise RuntimeError(f"the Mamba-2 cuTile kernels need cuTile: {why}")

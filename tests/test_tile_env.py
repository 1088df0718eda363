"""cuTile's toolchain, without a GPU: ``have_tile`` / ``require_tile``, and an sm_90 cubin export."""
import io
import struct
import sys

import pytest

from kernels.mamba2.tile_env import have_tile, require_tile

TILE_OK, TILE_WHY = have_tile()


def test_have_tile_says_what_or_why():
    ok, why = have_tile()
    assert isinstance(ok, bool) and why
    if ok:
        assert "tileiras" in why and "cuda.tile" in why
    else:
        assert "pip install" in why  # how to get it


def test_require_tile_explains_a_missing_cuda_tile(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.tile", None)  # makes `import cuda.tile` fail
    ok, why = have_tile()
    assert not ok and "does not import" in why
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[tile\]'"):
        require_tile()


@pytest.mark.skipif(not TILE_OK, reason=f"cuTile is not usable here: {TILE_WHY}")
def test_export_a_kernel_to_an_sm90_cubin():
    """Load two tiles, add, store: compiled by tileiras for sm_90 with no GPU involved."""
    import cuda.tile as ct
    from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, export_kernel

    @ct.kernel
    def add(x, y, out, tile: ct.Constant[int]):
        i = ct.bid(0)
        ct.store(out, index=(i,), tile=ct.load(x, index=(i,), shape=(tile,)) + ct.load(y, index=(i,), shape=(tile,)))

    def vector():
        return ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                               may_alias_internally=False, stride_constant=(1,))

    buf = io.BytesIO()
    signature = KernelSignature([vector(), vector(), vector(), 256], CallingConvention.cutile_python_v1())
    export_kernel(add, [signature], buf, gpu_code="sm_90", output_format="cubin")  # "sm_90a" is refused
    cubin = buf.getvalue()
    assert cubin[:4] == b"\x7fELF"
    assert (struct.unpack_from("<I", cubin, 48)[0] >> 8) & 0xFF == 90  # e_flags: the SM the cubin is for

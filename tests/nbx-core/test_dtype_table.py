"""The dtype table holds every dtype nbx promises, and refuses unknown ones by name."""
import ml_dtypes
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import dtypes
from nbx.core.errors import UnknownDTypeError

REQUIRED = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
            "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "complex64", "complex128"]


@pytest.mark.parametrize("name", REQUIRED)
def test_every_required_dtype_has_consistent_facts(name):
    dt = dtypes.TABLE[name]
    assert dt.bits == 8 * dt.itemsize
    assert dt.host.itemsize == dt.itemsize
    assert str(dt).endswith(name)  # Triton reads the element type from this suffix
    assert dtypes.from_dlpack(*dt.dlpack) is dt
    assert dtypes.from_key(dt.key) is dt
    if dt.safetensors:
        assert dtypes.from_safetensors(dt.safetensors) is dt


def test_each_dtype_is_one_long_lived_object():
    assert nbx.as_dtype("float16") is nbx.float16 is dtypes.as_dtype(np.float16)
    assert nbx.as_dtype(ml_dtypes.bfloat16) is nbx.bfloat16
    import pickle
    assert pickle.loads(pickle.dumps(nbx.bfloat16)) is nbx.bfloat16


@pytest.mark.parametrize("bad", ["float128", "int4", "nbx.half"])
def test_an_unknown_dtype_name_is_refused_by_name(bad):
    with pytest.raises(UnknownDTypeError, match=f"unknown dtype '{bad}'"):
        nbx.as_dtype(bad)


def test_unknown_codes_of_the_file_formats_are_refused():
    with pytest.raises(UnknownDTypeError, match="safetensors dtype code 'F4'"):
        dtypes.from_safetensors("F4")
    with pytest.raises(UnknownDTypeError, match=r"DLPack dtype \(code=2, bits=8, lanes=1\)"):
        dtypes.from_dlpack(2, 8, 1)


def test_complex128_has_no_safetensors_code_and_complex_has_no_triton_type():
    assert dtypes.TABLE["complex128"].safetensors is None
    assert dtypes.TABLE["complex64"].triton is None
    assert dtypes.TABLE["float8_e4m3fn"].triton == "fp8e4nv"


def test_finfo_and_iinfo_follow_the_host_dtype():
    assert nbx.finfo(nbx.bfloat16).eps == 2.0 ** -7
    assert nbx.iinfo(nbx.uint16).max == 65535
    with pytest.raises(UnknownDTypeError, match="iinfo needs an integer dtype"):
        nbx.iinfo(nbx.float32)

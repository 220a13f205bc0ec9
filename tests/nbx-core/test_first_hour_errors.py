"""What a newcomer's first mistakes meet: named errors, numpy's keywords, floats printed as floats."""
import gc
import json
import sys

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import dlpack
from nbx.core.errors import (ArgumentError, FileFormatError, NotSupportedError, PathNotFoundError, ShapeError)


def test_bfloat16_and_float8_print_their_values_as_floats():
    assert repr(nbx.asarray([1.0, 2.0]).astype(nbx.bfloat16)) == "Tensor([1., 2.], dtype=bfloat16)"
    assert repr(nbx.asarray([1.0, 2.5]).astype(nbx.float8_e4m3fn)) == "Tensor([1. , 2.5], dtype=float8_e4m3fn)"
    assert repr(nbx.asarray([[3.0]]).astype(nbx.float8_e5m2)) == "Tensor([[3.]], dtype=float8_e5m2)"


@pytest.mark.parametrize("dtype", [nbx.bfloat16, nbx.float8_e4m3fn, nbx.float8_e5m2], ids=str)
def test_numpy_refusing_a_dtype_over_dlpack_is_a_clean_error_and_the_export_is_released(dtype):
    unraisable = []
    old_hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        before = dlpack.live_exports()
        t = nbx.asarray([1.0, 2.0]).astype(dtype)
        with pytest.raises((BufferError, RuntimeError), match="(?i)dtype") as info:
            np.from_dlpack(t)
        assert not isinstance(info.value, SystemError)
        del info
        gc.collect()
        assert dlpack.live_exports() == before
    finally:
        sys.unraisablehook = old_hook
    assert unraisable == []  # the deleter never raised (no "Exception ignored ... _delete_export")


def test_numpy_still_takes_what_it_can_over_dlpack_and_releases_it():
    before = dlpack.live_exports()
    back = np.from_dlpack(nbx.arange(3, dtype=nbx.float32))
    assert back.tolist() == [0.0, 1.0, 2.0] and dlpack.live_exports() == before + 1
    del back
    gc.collect()
    assert dlpack.live_exports() == before


def test_a_broadcasting_mismatch_on_the_cpu_is_a_shape_error_as_on_the_kernels():
    with pytest.raises(ShapeError, match=r"shapes \(2,\), \(3,\) do not broadcast"):
        nbx.asarray([1.0, 2.0]) + nbx.asarray([1.0, 2.0, 3.0])
    with pytest.raises(ShapeError, match="do not broadcast"):
        nbx.where(nbx.asarray([True, False]), nbx.ones(3), 0.0)


def test_an_integer_matmul_is_refused_by_name_on_the_cpu_as_on_the_kernels():
    a = nbx.asarray([[1, 2], [3, 4]])
    with pytest.raises(NotSupportedError, match=r"refused on every device: matmul does not take int64 \(x1\)"):
        a @ a
    assert (a.float() @ a.float()).tolist() == [[7.0, 10.0], [15.0, 22.0]]


def test_numpy_keywords_axis_and_keepdims_work_at_the_top_level_and_as_methods():
    x = nbx.asarray([[1.0, 2.0], [3.0, 4.0]])
    assert nbx.sum(x, axis=0).tolist() == [4.0, 6.0]
    assert x.mean(axis=1, keepdims=True).tolist() == [[1.5], [3.5]]
    assert nbx.max(x, axis=-1).tolist() == [2.0, 4.0]
    assert nbx.argmax(x, axis=0).tolist() == [1, 1]
    assert nbx.cumsum(x, axis=1).tolist() == [[1.0, 3.0], [3.0, 7.0]]
    np.testing.assert_allclose(nbx.softmax(x, axis=0).numpy(), nbx.softmax(x, dim=0).numpy())
    with pytest.raises(ArgumentError, match="sum got both dim= and axis="):
        nbx.sum(x, axis=0, dim=1)


def test_a_ragged_nested_list_is_a_named_shape_error():
    with pytest.raises(ShapeError, match=r"ragged .*row lengths at the first uneven level: \[2, 1\]"):
        nbx.asarray([[1, 2], [3]])
    with pytest.raises(ShapeError, match="ragged"):
        nbx.asarray([[1.0, 2.0], [3.0]], dtype=nbx.float32)


def test_a_file_that_is_not_safetensors_is_said_to_be_so(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096}))
    with pytest.raises(FileFormatError, match=r"config\.json: not a safetensors file"):
        nbx.load_safetensors(config)


def test_saving_into_a_missing_folder_names_the_folder(tmp_path):
    missing = tmp_path / "no" / "such"
    with pytest.raises(PathNotFoundError, match=f"the folder {missing} does not exist") as info:
        nbx.save_safetensors({"w": nbx.ones(2)}, missing / "w.safetensors")
    assert isinstance(info.value, FileNotFoundError) and ".tmp" not in str(info.value)


def test_a_negative_seed_wraps_to_uint64_as_documented_and_one_out_of_range_is_refused():
    assert nbx.Generator(seed=-1).seed == 2**64 - 1
    assert "negative seed wraps" in nbx.Generator.__doc__
    assert nbx.randn(3, generator=nbx.Generator(seed=-1)).tolist() == \
        nbx.randn(3, generator=nbx.Generator(seed=2**64 - 1)).tolist()
    with pytest.raises(ArgumentError, match="outside"):
        nbx.Generator(seed=-2**63 - 1)

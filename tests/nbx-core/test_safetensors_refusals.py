"""A malformed or truncated safetensors file is a named error, never a crash or an over-read."""
from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
import safetensors
from hypothesis import given, settings
from hypothesis import strategies as st

import nbx.core as nbx
from nbx.core import dtypes
from nbx.core.errors import FileFormatError, UnknownDTypeError


def write_file(path: Path, header, data: bytes = b"", length: int | None = None) -> Path:
    """A file from a header (a JSON-able object, or raw bytes) and a data region, padded to 8 bytes."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


@pytest.fixture
def f(tmp_path):
    return tmp_path / "bad.safetensors"


def load_all(path):
    loaded = nbx.load_safetensors(path)
    return {name: loaded[name].numpy() for name in loaded}


def test_a_file_shorter_than_the_length_prefix_is_refused(f):
    f.write_bytes(b"\x05\x00\x00")
    with pytest.raises(FileFormatError, match=r"bad\.safetensors: file is 3 bytes, shorter than the 8-byte"):
        nbx.load_safetensors(f)


def test_an_empty_file_is_refused(f):
    f.write_bytes(b"")
    with pytest.raises(FileFormatError, match="file is 0 bytes"):
        nbx.load_safetensors(f)


def test_a_header_length_beyond_the_file_is_refused(f):
    write_file(f, {"a": entry()}, b"\0" * 8, length=4096)
    with pytest.raises(FileFormatError, match="header length 4096 runs past the end of the file"):
        nbx.load_safetensors(f)


def test_a_header_length_over_the_100_mb_limit_is_refused(f):
    f.write_bytes(struct.pack("<Q", 2**63) + b"{}      ")
    with pytest.raises(FileFormatError, match=f"header length {2**63} exceeds the 100000000-byte limit"):
        nbx.load_safetensors(f)


def test_a_file_truncated_inside_its_data_is_refused(tmp_path):
    path = tmp_path / "full.safetensors"
    nbx.save_safetensors({"a": nbx.ones(16), "b": nbx.ones(16)}, path)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(FileFormatError, match=r"data_offsets \[64, 128\] beyond the data region \(118 bytes\)"):
        nbx.load_safetensors(path)


def test_a_file_truncated_inside_its_header_is_refused(tmp_path):
    path = tmp_path / "full.safetensors"
    nbx.save_safetensors({"a": nbx.ones(16)}, path)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(FileFormatError, match="runs past the end of the file"):
        nbx.load_safetensors(path)


@pytest.mark.parametrize("header, message", [
    (b"\xff\xfe{}", r"not valid UTF-8 \(byte 0\)"),
    (b'{"a": ', "not valid JSON"),
    (b"", "not valid JSON"),
    (b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 0]}}', "NaN is not a JSON number"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"[1, 2]", "header is a JSON list, not an object"),
    (b'"text"', "header is a JSON str, not an object"),
    (b'{"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, '
     b'"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}', "header names 'a' twice"),
])
def test_a_header_that_is_not_a_json_object_is_refused(f, header, message):
    write_file(f, header)
    with pytest.raises(FileFormatError, match=message):
        nbx.load_safetensors(f)


@pytest.mark.parametrize("header, message", [
    ({"__metadata__": ["x"]}, "__metadata__ is a JSON list, not an object"),
    ({"__metadata__": {"n": 1}}, r"__metadata__\['n'\] is a JSON int; metadata values are strings"),
    ({"a": [1]}, "tensor 'a' is described by a JSON list, not an object"),
    ({"a": {"dtype": "F32", "shape": [2]}}, "tensor 'a' lacks the field 'data_offsets'"),
    ({"a": {**entry(), "order": "big"}}, r"tensor 'a' has fields the format does not define: \['order'\]"),
    ({"a": entry(dtype=4)}, "tensor 'a' has dtype 4, not a dtype code string"),
    ({"a": entry(shape=(-2,))}, r"shape \[-2\], not a list of non-negative integers"),
    ({"a": entry(shape=(2.0,))}, r"shape \[2.0\], not a list of non-negative integers"),
    ({"a": entry(shape=(True, 2))}, r"shape \[True, 2\], not a list"),
    ({"a": {**entry(), "shape": 2}}, "shape 2, not a list"),
    ({"a": entry(offsets=(0, 8, 9))}, r"data_offsets \[0, 8, 9\], not two non-negative integers"),
    ({"a": entry(offsets=(-8, 0))}, r"data_offsets \[-8, 0\], not two"),
    ({"a": entry(shape=(0,), offsets=(8, 0))}, r"data_offsets \[8, 0\]: begin after end"),
    ({"a": entry(offsets=(8, 16))}, r"data_offsets \[8, 16\] beyond the data region \(8 bytes\)"),
    ({"a": entry(shape=(2, 3), offsets=(0, 8))}, r"has 8 bytes but shape \[2, 3\] of float32 needs 24"),
    ({"a": entry(shape=(1,), offsets=(0, 4)), "b": entry(shape=(2,), offsets=(0, 8))},
     r"tensors 'a' \[0, 4\] and 'b' \[0, 8\] overlap|tensors 'b' \[0, 8\] and 'a' \[0, 4\] overlap"),
    ({"a": entry(shape=(1,), offsets=(4, 8))}, r"bytes \[0, 4\) of the data region belong to no tensor \(a hole\)"),
    ({"a": entry(shape=(1,), offsets=(0, 4))}, r"bytes \[4, 8\) .* \(after the last tensor\)"),
])
def test_every_malformed_header_entry_is_refused_by_name(f, header, message):
    write_file(f, header, b"\0" * 8)
    with pytest.raises(FileFormatError, match=r"bad\.safetensors: .*" + message):
        nbx.load_safetensors(f)


def test_overlapping_tensors_are_refused_whatever_their_order_in_the_header(f):
    write_file(f, {"b": entry(shape=(1,), offsets=(4, 8)), "a": entry(shape=(2,), offsets=(0, 8))}, b"\0" * 8)
    with pytest.raises(FileFormatError, match=r"tensors 'a' \[0, 8\] and 'b' \[4, 8\] overlap"):
        nbx.load_safetensors(f)


def test_an_unknown_dtype_code_is_refused_as_an_unknown_dtype(f):
    write_file(f, {"a": entry(dtype="F4")}, b"\0" * 8)
    with pytest.raises(UnknownDTypeError, match=r"bad\.safetensors: tensor 'a': safetensors dtype code 'F4'"):
        nbx.load_safetensors(f)


def test_empty_tensors_may_sit_anywhere_inside_the_data_region(f):
    write_file(f, {"e": entry(shape=(0, 3), offsets=(4, 4)), "a": entry(offsets=(0, 8))}, b"\0" * 8)
    loaded = load_all(f)
    assert loaded["e"].shape == (0, 3) and loaded["a"].tolist() == [0.0, 0.0]


def test_a_file_with_no_tensors_loads_as_an_empty_mapping(f):
    write_file(f, {"__metadata__": {"k": "v"}})
    loaded = nbx.load_safetensors(f)
    assert len(loaded) == 0 and loaded.metadata == {"k": "v"}


# ---- property: corrupting header bytes never crashes nor over-reads -------------------------

def _valid_file() -> bytes:
    rng = np.random.default_rng(7)
    tensors = {  # distinct dtypes and sizes
        "wq": rng.standard_normal((3, 4)).astype(np.float32),
        "b": rng.standard_normal(5).astype(dtypes.TABLE["bfloat16"].host),
        "ids": np.arange(6, dtype=np.int64),
        "mask": np.array([True, False, True]),
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "valid.safetensors"
        nbx.save_safetensors(tensors, path, metadata={"format": "np"})
        return path.read_bytes()


VALID = _valid_file()
HEADER_END = 8 + struct.unpack("<Q", VALID[:8])[0]
ORIGINAL_HEADER = json.loads(VALID[8:HEADER_END])
ORIGINAL = dict(safetensors.deserialize(VALID))
# Corruptions: digits of the numbers changed (these reach the offset, shape and overlap checks),
# JSON's own characters anywhere, and now and then an arbitrary byte.
DIGITS = [i for i in range(8, HEADER_END) if chr(VALID[i]).isdigit()]
DIGIT_CHANGE = st.tuples(st.sampled_from(DIGITS), st.sampled_from(b"0123456789"))
JSON_BYTE = st.tuples(st.integers(0, HEADER_END - 1), st.sampled_from(b'0123456789[]{},:"- .eE+FIUBOL'))
ANY_BYTE = st.tuples(st.integers(0, HEADER_END - 1), st.integers(0, 255))
CORRUPTION = st.lists(st.one_of(DIGIT_CHANGE, DIGIT_CHANGE, JSON_BYTE, ANY_BYTE), min_size=1, max_size=4)


@settings(max_examples=400, deadline=None)
@given(CORRUPTION)
def test_corrupted_headers_load_the_same_bytes_or_raise_a_named_error(corruption):
    blob = bytearray(VALID)
    for position, value in corruption:
        blob[position] = value
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.safetensors"
        path.write_bytes(bytes(blob))
        try:
            loaded = load_all(path)
        except (FileFormatError, UnknownDTypeError):
            return
    # It loaded: every tensor must be exactly the bytes its (possibly changed) header names,
    # as the safetensors package reads them too.
    theirs = dict(safetensors.deserialize(bytes(blob)))
    assert set(theirs) == set(loaded)
    for name, arr in loaded.items():
        assert arr.dtype == dtypes.from_safetensors(theirs[name]["dtype"]).host
        assert list(arr.shape) == theirs[name]["shape"]
        assert np.ascontiguousarray(arr).tobytes() == bytes(theirs[name]["data"])
    if blob[:8] == VALID[:8] and json.loads(bytes(blob[8:HEADER_END]).decode()) == ORIGINAL_HEADER:
        assert {n: bytes(v["data"]) for n, v in theirs.items()} == {n: bytes(v["data"]) for n, v in ORIGINAL.items()}

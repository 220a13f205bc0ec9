"""safetensors load/save: round trips, cross-checks with the `safetensors` package, laziness, devices."""
from __future__ import annotations

import gc
import json
import os
import struct

import numpy as np
import pytest
import safetensors
import safetensors.numpy as st_numpy

import nbx.core as nbx
from nbx.core import dtypes
from nbx.core import safetensors as nbx_st
from nbx.core.cpu import HostMemoryBackend
from nbx.core.device import register_backend
from nbx.core.errors import DTypeError, FileFormatError, NotSupportedError
from nbx.core.storage import Storage

CODED = [dt for dt in dtypes.TABLE.values() if dt.safetensors]
NATIVE_NUMPY = [dt for dt in CODED if dt.host.type.__module__ == "numpy"]  # what safetensors.numpy loads


def sample(dt, shape=(3, 5), seed=0) -> np.ndarray:
    """Values of dt covering its bit patterns (random bytes for numbers, 0/1 for bool)."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    if dt.kind == "bool":
        return rng.integers(0, 2, count).astype(bool).reshape(shape)
    raw = rng.integers(0, 256, count * dt.itemsize, dtype=np.uint8)
    return raw.view(dt.host).reshape(shape)


def as_bytes(arr) -> bytes:
    return np.ascontiguousarray(arr).tobytes()


@pytest.mark.parametrize("dt", CODED, ids=lambda d: d.name)
def test_every_dtype_with_a_safetensors_code_round_trips_bit_for_bit(tmp_path, dt):
    arr = sample(dt)
    path = tmp_path / "one.safetensors"
    nbx.save_safetensors({"x": nbx.from_numpy(arr), "empty": nbx.from_numpy(arr[:0])}, path)
    loaded = nbx.load_safetensors(path)
    assert loaded["x"].dtype is dt and loaded["x"].shape == arr.shape
    assert as_bytes(loaded["x"].numpy()) == as_bytes(arr)
    assert loaded["empty"].shape == (0, 5) and loaded["empty"].dtype is dt


@pytest.mark.parametrize("dt", CODED, ids=lambda d: d.name)
def test_files_written_by_the_safetensors_package_load_identically(tmp_path, dt):
    arr = sample(dt, (4, 3), seed=1)
    path = tmp_path / "theirs.safetensors"
    st_numpy.save_file({"x": arr, "y": np.arange(7, dtype=np.int64)}, str(path), metadata={"who": "them"})
    loaded = nbx.load_safetensors(path)
    assert loaded.metadata == {"who": "them"}
    assert loaded["x"].dtype is dt and as_bytes(loaded["x"].numpy()) == as_bytes(arr)
    assert loaded["y"].numpy().tolist() == list(range(7))


@pytest.mark.parametrize("dt", CODED, ids=lambda d: d.name)
def test_files_nbx_writes_parse_identically_in_the_safetensors_package(tmp_path, dt):
    arr = sample(dt, (2, 6), seed=2)
    path = tmp_path / "ours.safetensors"
    nbx.save_safetensors({"x": nbx.from_numpy(arr), "z": nbx.arange(5, dtype=nbx.int32)}, path,
                         metadata={"format": "np"})
    parsed = dict(safetensors.deserialize(path.read_bytes()))
    assert parsed["x"]["dtype"] == dt.safetensors and parsed["x"]["shape"] == [2, 6]
    assert bytes(parsed["x"]["data"]) == as_bytes(arr)
    if dt in NATIVE_NUMPY:  # the package's numpy API loads only numpy's own dtypes
        theirs = st_numpy.load_file(str(path))
        assert theirs["x"].dtype == dt.host and as_bytes(theirs["x"]) == as_bytes(arr)
        assert theirs["z"].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("dt", CODED, ids=lambda d: d.name)
def test_a_single_tensor_file_is_byte_identical_to_the_safetensors_package_output(tmp_path, dt):
    arr = sample(dt, (3, 2), seed=3)
    nbx.save_safetensors({"w": nbx.from_numpy(arr)}, tmp_path / "ours.safetensors")
    assert (tmp_path / "ours.safetensors").read_bytes() == st_numpy.save({"w": arr})


def test_the_header_is_padded_with_spaces_so_data_starts_8_byte_aligned_and_tensors_itemsize_aligned(tmp_path):
    path = tmp_path / "align.safetensors"
    tensors = {"a": nbx.ones(3, dtype=nbx.uint8), "b": nbx.ones(3, dtype=nbx.float64),
               "c": nbx.ones(1, dtype=nbx.int16), "d": nbx.ones(2, dtype=nbx.float32)}
    nbx.save_safetensors(tensors, path, metadata={"k": "v"})
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    assert (8 + length) % 8 == 0
    text = blob[8:8 + length].decode()
    assert text.rstrip(" ").endswith("}") and len(text) - len(text.rstrip(" ")) < 8
    header = json.loads(text)
    for name, t in tensors.items():
        assert header[name]["data_offsets"][0] % t.itemsize == 0
    assert [n for n in header if n != "__metadata__"] == ["b", "d", "c", "a"]  # by itemsize, then name


def test_saving_the_same_tensors_in_another_order_gives_the_same_file(tmp_path):
    tensors = {"x": nbx.ones((2, 2)), "a": nbx.zeros(3, dtype=nbx.float16), "m": nbx.arange(4)}
    nbx.save_safetensors(tensors, tmp_path / "one.safetensors")
    nbx.save_safetensors(dict(reversed(list(tensors.items()))), tmp_path / "two.safetensors")
    assert (tmp_path / "one.safetensors").read_bytes() == (tmp_path / "two.safetensors").read_bytes()


def test_non_contiguous_tensors_are_written_in_row_major_order(tmp_path, monkeypatch):
    monkeypatch.setattr(nbx_st, "WRITE_CHUNK_BYTES", 16)  # several chunks for the transposed tensor
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    views = {"t": nbx.from_numpy(base).T, "step": nbx.from_numpy(base)[::2, ::-3],
             "broadcast": nbx.from_numpy(base[:1]).expand(3, 6)}
    path = tmp_path / "strided.safetensors"
    nbx.save_safetensors(views, path)
    loaded = nbx.load_safetensors(path)
    np.testing.assert_array_equal(loaded["t"].numpy(), base.T)
    np.testing.assert_array_equal(loaded["step"].numpy(), base[::2, ::-3])
    np.testing.assert_array_equal(loaded["broadcast"].numpy(), np.broadcast_to(base[:1], (3, 6)))
    assert st_numpy.load_file(str(path))["t"].tolist() == base.T.tolist()


def test_cpu_tensors_view_the_map_read_only_and_keep_it_alive(tmp_path):
    path = tmp_path / "view.safetensors"
    nbx.save_safetensors({"w": nbx.arange(10, dtype=nbx.float32)}, path)
    loaded = nbx.load_safetensors(path)
    w = loaded["w"]
    assert w.storage.readonly and w.storage.owner is loaded._map
    assert not w.numpy().flags.writeable
    with pytest.raises(NotSupportedError, match="read-only"):
        w[0] = 5.0
    del loaded
    gc.collect()
    assert not w.storage.owner.closed
    assert w.numpy().tolist() == list(range(10))
    copy = w.clone()
    copy[0] = 5.0
    assert copy.numpy()[0] == 5.0 and w.numpy()[0] == 0.0


def test_only_the_header_is_read_when_a_file_is_opened(tmp_path, monkeypatch):
    path = tmp_path / "big.safetensors"
    nbx.save_safetensors({"a": nbx.zeros(1 << 16), "b": nbx.ones(1 << 16)}, path)
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    read = []

    class Spy:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            data = self.f.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(nbx_st, "open", lambda *a, **k: Spy(open(*a, **k)), raising=False)
    nbx.load_safetensors(path)
    assert sum(read) == 8 + length


def test_only_the_tensors_asked_for_are_touched(tmp_path, monkeypatch):
    path = tmp_path / "lazy.safetensors"
    nbx.save_safetensors({n: nbx.full((4,), float(i)) for i, n in enumerate("abcd")}, path)
    touched = []
    original = nbx_st.SafetensorsFile._raw
    monkeypatch.setattr(nbx_st.SafetensorsFile, "_raw",
                        lambda self, entry: (touched.append(entry.name), original(self, entry))[1])
    loaded = nbx.load_safetensors(path)
    assert sorted(loaded) == ["a", "b", "c", "d"] and touched == []
    assert loaded["c"].numpy().tolist() == [2.0] * 4
    assert touched == ["c"]


def test_an_asked_tensor_loads_whatever_garbage_the_other_tensors_hold(tmp_path):
    path = tmp_path / "garbage.safetensors"
    nbx.save_safetensors({"good": nbx.arange(4, dtype=nbx.int32), "junk": nbx.zeros(64, dtype=nbx.uint8)}, path)
    blob = bytearray(path.read_bytes())
    blob[-64:] = os.urandom(64)  # "junk" is last (itemsize 1)
    path.write_bytes(bytes(blob))
    assert nbx.load_safetensors(path)["good"].numpy().tolist() == [0, 1, 2, 3]


class FakeDeviceBackend(HostMemoryBackend):
    """A device whose memory numpy cannot view: tensors on it must be copies."""

    host_accessible = False

    def allocate(self, nbytes, device):
        buffer = np.zeros(nbytes, np.uint8)
        return Storage(device, nbytes, buffer.ctypes.data if nbytes else 0, host=None, owner=buffer)

    def upload(self, storage, byte_offset, data):
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        storage.owner[byte_offset:byte_offset + flat.nbytes] = flat

    def download(self, storage, byte_offset, nbytes):
        return storage.owner[byte_offset:byte_offset + nbytes].copy()


register_backend(FakeDeviceBackend("safetensors_fake_device"))


def test_tensors_for_another_device_are_copied_there(tmp_path):
    path = tmp_path / "dev.safetensors"
    arr = sample(dtypes.TABLE["bfloat16"], (5, 4), seed=4)
    nbx.save_safetensors({"w": nbx.from_numpy(arr)}, path)
    loaded = nbx.load_safetensors(path, device="safetensors_fake_device")
    w = loaded["w"]
    assert str(w.device) == "safetensors_fake_device" and w.storage.host is None
    assert w.storage.owner is not loaded._map and not w.storage.readonly
    assert as_bytes(w.numpy()) == as_bytes(arr)


@pytest.mark.parametrize("source", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float64"])
def test_dtype_on_load_converts_floating_tensors_and_leaves_the_others_as_stored(tmp_path, source):
    dt = dtypes.TABLE[source]
    values = np.linspace(-4, 4, 33).astype(dt.host)
    path = tmp_path / "conv.safetensors"
    nbx.save_safetensors({"w": nbx.from_numpy(values), "ids": nbx.arange(3)}, path)
    loaded = nbx.load_safetensors(path, dtype=nbx.float32)
    w = loaded["w"]
    assert w.dtype is nbx.float32 and not w.storage.readonly
    np.testing.assert_array_equal(w.numpy(), values.astype(np.float32))
    assert loaded["ids"].dtype is nbx.int64 and loaded["ids"].numpy().tolist() == [0, 1, 2]
    on_device = nbx.load_safetensors(path, device="safetensors_fake_device", dtype="float32")["w"]
    np.testing.assert_array_equal(on_device.numpy(), values.astype(np.float32))


def test_dtype_on_load_spreads_a_large_conversion_over_the_host_pool(tmp_path, monkeypatch):
    calls = []
    original = nbx_st.parallel_convert
    monkeypatch.setattr(nbx_st, "parallel_convert", lambda src, dt: (calls.append(src.shape), original(src, dt))[1])
    path = tmp_path / "conv.safetensors"
    nbx.save_safetensors({"w": nbx.ones((64, 32), dtype=nbx.bfloat16)}, path)
    w = nbx.load_safetensors(path, dtype=nbx.float32)["w"]
    assert calls == [(64, 32)] and w.numpy().sum() == 64 * 32


def test_dtype_on_load_refuses_a_non_floating_target(tmp_path):
    path = tmp_path / "x.safetensors"
    nbx.save_safetensors({"w": nbx.ones(2)}, path)
    with pytest.raises(DTypeError, match="int8 is not floating"):
        nbx.load_safetensors(path, dtype=nbx.int8)


def test_saving_a_dtype_without_a_safetensors_code_is_refused_by_name(tmp_path):
    with pytest.raises(DTypeError, match="complex128 has no safetensors dtype code"):
        nbx.save_safetensors({"z": nbx.zeros(2, dtype=nbx.complex128)}, tmp_path / "z.safetensors")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tensors, metadata, message", [
    ({1: nbx.ones(1)}, None, "names are strings"),
    ({"__metadata__": nbx.ones(1)}, None, "cannot be named '__metadata__'"),
    ({"x": [1.0, 2.0]}, None, "is a list; save_safetensors takes Tensors or numpy arrays"),
    ({"x": nbx.ones(1)}, {"n": 3}, "maps strings to strings"),
])
def test_saving_what_the_format_cannot_hold_is_refused_by_name(tmp_path, tensors, metadata, message):
    with pytest.raises(FileFormatError, match=message):
        nbx.save_safetensors(tensors, tmp_path / "bad.safetensors", metadata=metadata)


def test_numpy_arrays_can_be_saved_directly(tmp_path):
    nbx.save_safetensors({"a": np.arange(3, dtype=np.uint16)}, tmp_path / "np.safetensors")
    assert nbx.load_safetensors(tmp_path / "np.safetensors")["a"].numpy().tolist() == [0, 1, 2]


def test_a_failed_save_leaves_the_old_file_and_no_temporary_behind(tmp_path, monkeypatch):
    path = tmp_path / "keep.safetensors"
    nbx.save_safetensors({"old": nbx.ones(2)}, path)
    before = path.read_bytes()

    def fail(f, arr):
        raise OSError("disk full")

    monkeypatch.setattr(nbx_st, "_write_row_major", fail)
    with pytest.raises(OSError, match="disk full"):
        nbx.save_safetensors({"new": nbx.zeros(2)}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.safetensors"]


def test_a_saved_file_gets_the_umask_permissions_not_a_private_temporary_mode(tmp_path):
    path = tmp_path / "mode.safetensors"
    nbx.save_safetensors({"x": nbx.ones(1)}, path)
    umask = os.umask(0)
    os.umask(umask)
    assert (path.stat().st_mode & 0o777) == (0o666 & ~umask)


def test_the_mapping_reports_names_metadata_and_entries(tmp_path):
    path = tmp_path / "m.safetensors"
    nbx.save_safetensors({"b": nbx.ones((2, 3)), "a": nbx.ones(4, dtype=nbx.int8)}, path)
    loaded = nbx.load_safetensors(path)
    assert len(loaded) == 2 and set(loaded) == {"a", "b"} and "a" in loaded and "q" not in loaded
    assert loaded.metadata == {}
    assert loaded.entries["b"].shape == (2, 3) and loaded.entries["b"].dtype is nbx.float32
    with pytest.raises(KeyError):
        loaded["q"]

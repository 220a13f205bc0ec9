"""safetensors files: load as a lazy mapping over a memory map, save atomically.

    weights = nbx.load_safetensors("model.safetensors")             # header validated, nothing read
    w = weights["lm_head.weight"]                                   # cpu: a read-only view of the map
    w32 = nbx.load_safetensors(path, dtype=nbx.float32)["lm_head.weight"]  # converted on all cores
    nbx.save_safetensors({"w": w}, "out.safetensors", metadata={"format": "pt"})

The header is validated in full when the file is opened (safetensors_format); a tensor's bytes are
touched only when that tensor is asked for. On cpu the tensor views the map without a copy and
keeps it alive through its storage; on any other device the bytes are copied there.
"""
from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Iterator, Mapping

import numpy as np

from . import dtypes
from .device import CPU, as_device
from .dtypes import DType
from .errors import DTypeError, FileFormatError, NotSupportedError, PathNotFoundError
from .host import parallel_convert
from .safetensors_format import (LENGTH_BYTES, TensorEntry, build_header, parse_header,
                                 read_header_length, safetensors_code)
from .storage import Storage
from .tensor import Tensor, from_numpy

WRITE_CHUNK_BYTES = 64 << 20  # bounds the temporary copy of a non-contiguous tensor while saving


def _require_little_endian() -> None:
    if sys.byteorder != "little":  # the format is little-endian; nbx's host views assume native order
        raise NotSupportedError("safetensors files are little-endian; nbx reads them on little-endian hosts only")


class SafetensorsFile(Mapping):
    """A read-only mapping from tensor names to tensors over one memory-mapped safetensors file.

    Each lookup builds a fresh tensor: on cpu a zero-copy read-only view (cheap), elsewhere a copy
    on the device (nothing cached, so device memory belongs to the caller). The map is released
    when this object and every tensor viewing it are gone.
    """

    def __init__(self, path, device=None, dtype=None):
        _require_little_endian()
        self.path = os.fspath(path)
        self.device = as_device(device)
        self.dtype = None if dtype is None else dtypes.as_dtype(dtype)
        if self.dtype is not None and not self.dtype.is_floating:
            raise DTypeError(f"dtype= converts floating-point tensors; {self.dtype.name} is not floating")
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            length = read_header_length(f.read(LENGTH_BYTES), size, self.path, lambda: f.read(1))
            raw = f.read(length)
            if len(raw) != length:  # the file shrank under us
                raise FileFormatError(f"{self.path}: header of {length} bytes could not be read in full: truncated?")
            header = parse_header(raw, size, self.path)
            # mmap keeps its own handle, so the file object can close; the map lives with its views
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._bytes = np.frombuffer(self._map, np.uint8)  # read-only: the map is ACCESS_READ
        self._data_start = header.data_start
        self.metadata: dict[str, str] = header.metadata
        self.entries: dict[str, TensorEntry] = header.entries

    def __getitem__(self, name: str) -> Tensor:
        entry = self.entries[name]
        if self.dtype is not None and entry.dtype.is_floating and entry.dtype is not self.dtype:
            return self._converted(entry)
        if self.device == CPU:
            return self._view(entry)
        return from_numpy(self._host_array(entry), self.device, copy=True)

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"SafetensorsFile({self.path!r}, {len(self)} tensors, device={self.device})"

    # ---- the bytes of one tensor, touched only here -----------------------------------------
    def _raw(self, entry: TensorEntry) -> np.ndarray:
        begin = self._data_start + entry.begin
        _advise_will_need(self._map, begin, entry.nbytes)
        return self._bytes[begin:begin + entry.nbytes]

    def _host_array(self, entry: TensorEntry) -> np.ndarray:
        """A read-only numpy view of the tensor's bytes in the map (unaligned offsets are allowed)."""
        raw = self._raw(entry)
        return np.ndarray(entry.shape, entry.dtype.host, buffer=raw) if entry.nbytes else \
            np.empty(entry.shape, entry.dtype.host)

    def _view(self, entry: TensorEntry) -> Tensor:
        raw = self._raw(entry)
        ptr = raw.ctypes.data if entry.nbytes else 0
        storage = Storage(CPU, entry.nbytes, ptr, host=raw, owner=self._map, readonly=True)
        return Tensor(storage, entry.dtype, entry.shape)

    def _converted(self, entry: TensorEntry) -> Tensor:
        out = parallel_convert(self._host_array(entry), self.dtype.host)
        return from_numpy(out, self.device, copy=None if self.device == CPU else True)


def _advise_will_need(mapping: mmap.mmap, begin: int, nbytes: int) -> None:
    """Start the kernel's read-ahead over the asked tensor's pages (and only those)."""
    advice = getattr(mmap, "MADV_WILLNEED", None)
    if advice is None or nbytes == 0:
        return
    start = begin - begin % mmap.PAGESIZE
    mapping.madvise(advice, start, begin + nbytes - start)


def load_safetensors(path, device=None, dtype=None) -> SafetensorsFile:
    """A lazy read-only mapping name -> Tensor over the file at path (`.metadata`: its __metadata__).

    device: where the tensors go (cpu views the file; others get copies). dtype: a floating dtype
    that every floating-point tensor is converted to on load, on all host cores (other tensors stay
    as stored). A malformed or truncated file is a FileFormatError naming the file and the problem.
    """
    return SafetensorsFile(path, device=device, dtype=dtype)


def save_safetensors(tensors: Mapping, path, metadata: Mapping[str, str] | None = None) -> None:
    """Write tensors (name -> Tensor or numpy array) to path as safetensors, atomically.

    Tensors are laid out by decreasing itemsize, then name, so each starts aligned to its
    itemsize; non-contiguous tensors are written in row-major order. The file appears complete
    or not at all (a temporary file in the same folder, then os.replace).
    """
    _require_little_endian()
    path = os.fspath(path)
    arrays = {name: _as_host_array(name, value) for name, value in _checked_items(tensors)}
    meta = None if metadata is None else _checked_metadata(metadata)
    entries, offset = [], 0
    order = sorted(arrays.items(), key=lambda item: (-item[1][0].itemsize, item[0]))
    for name, (dt, arr) in order:
        entries.append(TensorEntry(name, dt, arr.shape, offset, offset + arr.nbytes))
        offset += arr.nbytes
    header = build_header(entries, meta)
    _write_atomically(path, header, [arr for _, (_, arr) in order])


def _checked_items(tensors: Mapping):
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise FileFormatError(f"safetensors names are strings; got {name!r}")
        if name == "__metadata__":
            raise FileFormatError("a tensor cannot be named '__metadata__' (the header's metadata key)")
        yield name, value


def _checked_metadata(metadata: Mapping) -> dict[str, str]:
    for key, value in metadata.items():
        if not (isinstance(key, str) and isinstance(value, str)):
            raise FileFormatError(f"safetensors metadata maps strings to strings; got {key!r}: {value!r}")
    return dict(metadata)


def _as_host_array(name: str, value) -> tuple[DType, np.ndarray]:
    """The tensor's values as a host array (a view when the tensor is on cpu), its dtype checked."""
    if isinstance(value, Tensor):
        safetensors_code(value.dtype, name)
        return value.dtype, value.numpy()
    if isinstance(value, np.ndarray):
        dt = dtypes.as_dtype(value.dtype)
        safetensors_code(dt, name)
        return dt, value.astype(dt.host, copy=False)
    raise FileFormatError(
        f"tensor {name!r} is a {type(value).__name__}; save_safetensors takes Tensors or numpy arrays")


def _write_atomically(path: str, header: bytes, arrays: list[np.ndarray]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):  # else the error would name the temporary file
        raise PathNotFoundError(f"cannot save {path}: the folder {folder} does not exist")
    temp = _create_temp(folder, os.path.basename(path))
    try:
        with open(temp, "wb") as f:
            f.write(header)
            for arr in arrays:
                _write_row_major(f, arr)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def _create_temp(folder: str, base: str) -> str:
    """A new empty file next to the target, created with the umask's permissions (unlike mkstemp's 0600)."""
    while True:
        temp = os.path.join(folder, f".{base}.{os.urandom(6).hex()}.tmp")
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return temp
        except FileExistsError:
            continue


def _write_row_major(f, arr: np.ndarray) -> None:
    if arr.flags.c_contiguous:
        if arr.nbytes:
            f.write(arr.reshape(-1).view(np.uint8).data)
        return
    rows = max(1, WRITE_CHUNK_BYTES // max(1, arr[0].nbytes))
    for start in range(0, arr.shape[0], rows):
        f.write(np.ascontiguousarray(arr[start:start + rows]).reshape(-1).view(np.uint8).data)

"""The safetensors file format: its header, validated in full before any byte of data is used.

Layout: 8 bytes little-endian u64 N, N bytes of UTF-8 JSON (an object mapping tensor names to
{"dtype", "shape", "data_offsets"}, plus an optional "__metadata__" object of strings), then the
data region. Offsets count from the start of the data region; the tensors partition it exactly.
Every check here turns a malformed file into a FileFormatError (or UnknownDTypeError for a dtype
code nbx does not know) that names the file and the problem, so no later read can go out of bounds.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass

from . import dtypes
from .dtypes import DType
from .errors import DTypeError, FileFormatError, UnknownDTypeError

LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100_000_000  # the format's own limit; a larger length is corruption, not a header
ALIGNMENT = 8  # header padded so the data region starts 8-byte aligned
METADATA_KEY = "__metadata__"
_FIELDS = ("dtype", "shape", "data_offsets")


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header: its dtype, shape and byte range within the data region."""
    name: str
    dtype: DType
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    metadata: dict[str, str]
    entries: dict[str, TensorEntry]  # in the header's order
    data_start: int  # file offset of the data region


def read_header_length(prefix: bytes, file_size: int, path, next_byte=lambda: b"") -> int:
    """The header's byte length from the file's first 8 bytes, refused unless it fits the file.

    next_byte reads the 9th byte, asked only of a length that cannot be a header's: with no JSON
    object after it, the file is of another format (a config.json, say), and the error says so.
    """
    if file_size < LENGTH_BYTES:
        raise FileFormatError(f"{path}: file is {file_size} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", prefix[:LENGTH_BYTES])
    plausible = length <= MAX_HEADER_BYTES and LENGTH_BYTES + length <= file_size
    if not plausible:
        start = prefix[:LENGTH_BYTES] + next_byte()
        if start[LENGTH_BYTES:] != b"{":
            raise FileFormatError(
                f"{path}: not a safetensors file (a safetensors file starts with an 8-byte little-endian "
                f"header length and a JSON object; this one starts with {start!r})")
    if length > MAX_HEADER_BYTES:
        raise FileFormatError(
            f"{path}: header length {length} exceeds the {MAX_HEADER_BYTES}-byte limit of the format")
    if LENGTH_BYTES + length > file_size:
        raise FileFormatError(
            f"{path}: header length {length} runs past the end of the file ({file_size} bytes): truncated?")
    return length


def parse_header(raw: bytes, file_size: int, path) -> Header:
    """Validate the header bytes (after the length prefix) against a file of file_size bytes."""
    data_start = LENGTH_BYTES + len(raw)
    data_size = file_size - data_start
    doc = _decode_json(raw, path)
    if not isinstance(doc, dict):
        raise FileFormatError(f"{path}: header is a JSON {type(doc).__name__}, not an object")
    metadata = _check_metadata(doc.get(METADATA_KEY, {}), path)
    entries = {name: _check_entry(name, info, data_size, path)
               for name, info in doc.items() if name != METADATA_KEY}
    _check_partition(entries.values(), data_size, path)
    return Header(metadata, entries, data_start)


def _decode_json(raw: bytes, path):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"{path}: header is not valid UTF-8 (byte {exc.start})") from None

    def unique_keys(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise FileFormatError(f"{path}: header names {key!r} twice")
            seen[key] = value
        return seen

    def no_constant(name):
        raise FileFormatError(f"{path}: header is not valid JSON: {name} is not a JSON number")

    try:
        return json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise FileFormatError(f"{path}: header is not valid JSON: {exc}") from None
    except RecursionError:
        raise FileFormatError(f"{path}: header is not valid JSON: nested too deeply") from None


def _check_metadata(metadata, path) -> dict[str, str]:
    if not isinstance(metadata, dict):
        raise FileFormatError(f"{path}: {METADATA_KEY} is a JSON {type(metadata).__name__}, not an object")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise FileFormatError(
                f"{path}: {METADATA_KEY}[{key!r}] is a JSON {type(value).__name__}; metadata values are strings")
    return dict(metadata)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_entry(name: str, info, data_size: int, path) -> TensorEntry:
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise FileFormatError(f"{where} is described by a JSON {type(info).__name__}, not an object")
    for field in _FIELDS:
        if field not in info:
            raise FileFormatError(f"{where} lacks the field {field!r}")
    extra = sorted(set(info) - set(_FIELDS))
    if extra:
        raise FileFormatError(f"{where} has fields the format does not define: {extra}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str):
        raise FileFormatError(f"{where} has dtype {code!r}, not a dtype code string")
    try:
        dtype = dtypes.from_safetensors(code)
    except UnknownDTypeError as exc:
        raise UnknownDTypeError(f"{where}: {exc}") from None
    if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
        raise FileFormatError(f"{where} has shape {shape!r}, not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(n) for n in offsets)):
        raise FileFormatError(f"{where} has data_offsets {offsets!r}, not two non-negative integers")
    begin, end = offsets
    if begin > end:
        raise FileFormatError(f"{where} has data_offsets [{begin}, {end}]: begin after end")
    if end > data_size:
        raise FileFormatError(
            f"{where} has data_offsets [{begin}, {end}] beyond the data region ({data_size} bytes): truncated?")
    expected = math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise FileFormatError(
            f"{where} has {end - begin} bytes but shape {shape} of {dtype.name} needs {expected}")
    return TensorEntry(name, dtype, tuple(shape), begin, end)


def _check_partition(entries, data_size: int, path) -> None:
    """The tensors must cover the data region exactly once: no overlap, no hole, nothing after."""
    covered = 0
    previous = None
    for entry in sorted((e for e in entries if e.nbytes), key=lambda e: e.begin):
        if entry.begin < covered:
            raise FileFormatError(
                f"{path}: tensors {previous.name!r} [{previous.begin}, {previous.end}] and "
                f"{entry.name!r} [{entry.begin}, {entry.end}] overlap")
        if entry.begin > covered:
            raise FileFormatError(
                f"{path}: bytes [{covered}, {entry.begin}) of the data region belong to no tensor (a hole)")
        covered, previous = entry.end, entry
    if covered != data_size:
        raise FileFormatError(
            f"{path}: bytes [{covered}, {data_size}) of the data region belong to no tensor (after the last tensor)")


def safetensors_code(dtype: DType, name: str) -> str:
    if dtype.safetensors is None:
        raise DTypeError(f"tensor {name!r}: {dtype.name} has no safetensors dtype code; convert it first")
    return dtype.safetensors


def build_header(entries: list[TensorEntry], metadata: dict[str, str] | None) -> bytes:
    """Length prefix + JSON header padded with spaces so that the data region starts aligned."""
    doc: dict = {}
    if metadata is not None:
        doc[METADATA_KEY] = metadata
    for e in entries:
        doc[e.name] = {"dtype": safetensors_code(e.dtype, e.name), "shape": list(e.shape),
                       "data_offsets": [e.begin, e.end]}
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % ALIGNMENT)
    return struct.pack("<Q", len(text)) + text

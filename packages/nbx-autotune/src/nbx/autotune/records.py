"""Keys files: the launch keys a run recorded, or a census listed without running anything.

    {"schema": 1, "kind": "nbx-autotune-keys",
     "keys": [{"kernel": "elementwise", "key": "n=65536,dtype=f32,dense=1", "device_file": "nvidia/hopper",
               "device_class": "nvidia-h200-140gb", "compiler": "triton-3.6.0-cuda", "observed": {"n": 50000}}]}

`device_file` names the file whose ladders classed the key; `device_class` and `compiler` are those
of the device that launched it (null in a census made without one). `observed` keeps the largest
size launched per classed field (keys.CLASSED: a row's own width too, where the key holds its power
of two): the certifier's stand-in where a ladder's last row has no top, and the launch `nbx warmup
--keys` runs and screens, so that the verdict it keeps is the one a run of that launch reads.
`nbx autotune certify` and `coverage` read these files; `record` and NBX_AUTOTUNE_RECORD write them,
merged with what the file already holds.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from nbx.core.errors import FileFormatError

from .store import locked

SCHEMA = 1
KIND = "nbx-autotune-keys"
FIELDS = ("kernel", "key", "device_file", "device_class", "compiler", "observed")


@dataclass(frozen=True)
class KeyRecord:
    kernel: str
    key: str
    device_file: str
    device_class: str | None = None
    compiler: str | None = None
    observed: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def identity(self) -> tuple:
        return (self.kernel, self.key, self.device_file, self.device_class, self.compiler)

    def as_json(self) -> dict:
        return {name: getattr(self, name) for name in FIELDS}


def _bad(path, problem):
    raise FileFormatError(f"keys file {path}: {problem}")


def parse(doc, path) -> list[KeyRecord]:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("kind") != KIND:
        _bad(path, f"not a keys file (schema {SCHEMA}, kind {KIND!r})")
    if not isinstance(doc.get("keys"), list):
        _bad(path, "keys must be a list")
    records = []
    for i, item in enumerate(doc["keys"]):
        if not isinstance(item, dict) or sorted(item) != sorted(FIELDS):
            _bad(path, f"keys[{i}] must have exactly the fields {list(FIELDS)}")
        for name in ("kernel", "key", "device_file"):
            if not isinstance(item[name], str) or not item[name]:
                _bad(path, f"keys[{i}].{name} must be a non-empty text")
        for name in ("device_class", "compiler"):
            if item[name] is not None and not isinstance(item[name], str):
                _bad(path, f"keys[{i}].{name} must be a text or null")
        observed = item["observed"]
        if not isinstance(observed, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in observed.values()):
            _bad(path, f"keys[{i}].observed must map field names to sizes")
        records.append(KeyRecord(**item))
    return records


def load(path) -> list[KeyRecord]:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _bad(path, f"cannot be read as JSON: {exc}")
    return parse(doc, path)


def _launch_size(observed) -> tuple:
    """The order merge keeps the largest launch by: its sizes' product, then the sizes."""
    return math.prod(observed.values()), tuple(sorted(observed.items()))


def merge(*groups) -> list[KeyRecord]:
    """One record per identity, the observed sizes of its largest launch (all of one launch: a row
    kernel's width and elements stay a pair some launch had, which warmup's screen runs and keeps its
    verdict under); in first-seen order."""
    merged: dict[tuple, KeyRecord] = {}
    for group in groups:
        for rec in group:
            known = merged.get(rec.identity)
            if known is None or _launch_size(rec.observed) > _launch_size(known.observed):
                merged[rec.identity] = rec
    return list(merged.values())


def save(path, new_records) -> list[KeyRecord]:
    """Merge records into the keys file at path (created if absent), atomically and under a lock."""
    path = Path(path)
    with locked(path.parent):
        current = load(path) if path.exists() else []
        records = merge(current, new_records)
        doc = {"schema": SCHEMA, "kind": KIND, "keys": [r.as_json() for r in records]}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(doc, handle, indent=1, sort_keys=True)
                handle.write("\n")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return records


class Recorder:
    """The keys a process forms (largest size observed per field), written to a keys file at flush."""

    def __init__(self, path):
        self.path = Path(path)
        self._records: dict[tuple, KeyRecord] = {}
        self._lock = threading.Lock()

    def add(self, record: KeyRecord) -> None:
        with self._lock:
            known = self._records.get(record.identity)
            self._records[record.identity] = record if known is None else merge([known, record])[0]

    def flush(self) -> int:
        """Write what was recorded since the last flush; the number of keys written."""
        with self._lock:
            pending, self._records = list(self._records.values()), {}
        if pending:
            save(self.path, pending)
        return len(pending)

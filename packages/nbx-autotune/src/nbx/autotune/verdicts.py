"""Screen verdicts kept across processes: a neighbour's setting is screened on a key once per machine, not per run.

A key served a certified neighbour's setting is screened against the float64 oracle first
(neighbours.py): a workload made on the device, the oracle on the host, a kernel launch that
compiles (or loads) a specialization of its own. Every process of a warm run would repeat it for
every such key. The verdict (passed or failed, the deviation, why) is kept in the local cache,

    <cache>/<vendor>/<device class>/<compiler>/screens/<kernel>.json

and read instead of screening again when all that decides it is the same: the kernel, the key, the
setting, the device class and compiler (the folder), the tolerance and the bytes compared (device
file facts), the nbx version and a fingerprint of the sources of nbx.core, nbx.kernels and
nbx.autotune (each file's path, size and modification time: the kernels' code, the oracle and the
screen itself). Why that is safe: the screen is deterministic. Its inputs are a pure function of the
key and its observed sizes (keys.launched or keys.smallest, fixed values: a key parsed from a keys
file by `nbx warmup` names the same verdict as the run that recorded it), its oracle a pure function
of the inputs, its kernel the compiled code of that source under that compiler for that device
class, and its verdict a pure function of the output and the oracle. A verdict whose record differs in any of these is not read
(it is screened again, and the new verdict replaces it). A failed verdict is kept too: that setting
is never served to that key, in this process or a later one.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from pathlib import Path

from nbx.core.errors import CertificateError

from . import store
from .screen import Verdict

SCHEMA = 1
KIND = "nbx-autotune-screen-verdicts"
_SOURCE_PACKAGES = ("nbx.core", "nbx.kernels", "nbx.autotune")
_fingerprint: str | None = None


def sources_fingerprint() -> str:
    """A hash of the paths, sizes and modification times of nbx.core's, nbx.kernels' and nbx.autotune's
    sources (once per process): a verdict screened under other code is not read."""
    global _fingerprint
    if _fingerprint is None:
        import importlib.util
        digest = hashlib.sha256()
        for package in _SOURCE_PACKAGES:
            found = importlib.util.find_spec(package)
            for folder in sorted(found.submodule_search_locations or []) if found else []:
                for path in sorted(Path(folder).rglob("*.py")):
                    stat = path.stat()
                    digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        _fingerprint = digest.hexdigest()[:16]
    return _fingerprint


def context(facts, max_bytes_fact: str) -> dict:
    """What a verdict was decided under, besides kernel, key, setting, device class and compiler: the nbx
    version and sources, the device file's tolerances (hashed) and the bytes of rows compared."""
    from .version import __version__
    tolerances = json.dumps(facts.value("autotune.screen_tolerance"), sort_keys=True, default=str)
    return {"nbx_version": __version__, "sources": sources_fingerprint(),
            "tolerances": hashlib.sha256(tolerances.encode()).hexdigest()[:16],
            "max_bytes": int(facts.value(max_bytes_fact)), "device_file": str(getattr(facts, "name", ""))}


def entry_name(key: str, setting) -> str:
    return f"{key};{json.dumps(dict(setting), sort_keys=True)}"


class VerdictCache:
    """The screen verdicts of one device class and compiler under a folder (None: kept in this process only)."""

    def __init__(self, folder: Path | None):
        self.folder = None if folder is None else Path(folder)
        self._kept: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.read = self.written = 0

    def path(self, kernel: str) -> Path | None:
        return None if self.folder is None else self.folder / "screens" / f"{kernel}.json"

    def _verdicts(self, kernel: str) -> dict:
        with self._lock:
            if kernel not in self._kept:
                self._kept[kernel] = _load(self.path(kernel), kernel)
            return self._kept[kernel]

    def get(self, kernel: str, key: str, setting, where: dict) -> Verdict | None:
        found = self._verdicts(kernel).get(entry_name(key, setting))
        if found is None or found.get("context") != where:
            return None
        self.read += 1
        return Verdict(dict(setting), found["deviation"], bool(found["passed"]), found["reason"])

    def put(self, kernel: str, key: str, verdict: Verdict, where: dict) -> None:
        """Keep a verdict here and on disk (merged with what other processes wrote, replaced atomically);
        a folder that cannot be written keeps it for this process only."""
        record = {"passed": verdict.passed, "deviation": _finite(verdict.deviation), "reason": verdict.reason,
                  "context": where}
        name = entry_name(key, verdict.setting)
        self._verdicts(kernel)[name] = record
        path = self.path(kernel)
        if path is None:
            return
        with contextlib.suppress(OSError, CertificateError):
            with store.locked(path.parent):
                merged = _load(path, kernel)
                merged[name] = record
                store.replace_json(path, {"schema": SCHEMA, "kind": KIND, "kernel": kernel, "verdicts": merged})
            self.written += 1


def _finite(value):
    return None if value is None else (value if value == value and abs(value) != float("inf") else str(value))


def _load(path: Path | None, kernel: str) -> dict:
    """The verdicts on disk; a file that is missing, unreadable or not of this schema holds none (they are
    screened again and the file rewritten)."""
    if path is None or not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("kind") != KIND \
            or doc.get("kernel") != kernel or not isinstance(doc.get("verdicts"), dict):
        return {}
    out = {}
    for name, record in doc["verdicts"].items():
        if isinstance(record, dict) and {"passed", "deviation", "reason", "context"} <= set(record):
            deviation = record["deviation"]
            if isinstance(deviation, str):
                with contextlib.suppress(ValueError):
                    record = dict(record, deviation=float(deviation))
            out[name] = record
    return out


def folder_for(cache: store.CertificateStore, identity) -> Path | None:
    """<the local cache's writable folder>/<class>/<compiler>, or None where the cache has no folder."""
    try:
        return Path(cache.writable_folder(identity.vendor)) / identity.device_class / identity.compiler
    except (OSError, CertificateError, ValueError):
        return None


__all__ = ["VerdictCache", "context", "sources_fingerprint", "folder_for", "entry_name"]

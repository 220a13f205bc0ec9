"""Certificate files: their schema, where they are found, and locked, atomic, merged writes.

A certificate is `<vendor>/<device class>/<compiler>/<kernel>.json`:

    {"schema": 1, "kind": "nbx-autotune-certificate", "kernel": "elementwise", "vendor": "nvidia",
     "device_class": "nvidia-h200-140gb", "compiler": "triton-3.6.0-cuda",
     "parameters": ["block", "num_warps"], "key_fields": ["n", "dtype", "dense"],
     "entries": {"n=65536,dtype=f32,dense=1": {"setting": {...}, "proof": {...}}}}

A file is refused whole (CertificateError, and the run report names it) when it fails this schema,
when its folder and its header disagree (kernel, device class, compiler), when it names parameters
its kernel does not have or lacks some it has, when a key does not have the kernel's key fields, or
when an entry's own proof shows a deviation above its tolerance. The local cache of swept settings
uses the same files under the user's cache folder. Writes hold a lock on the folder (flock; a lock
file where flock is missing), merge with what is on disk, and replace the file atomically.
"""
from __future__ import annotations

import contextlib
import importlib.resources
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nbx.core.errors import CertificateError, LaunchKeyError

from . import candidates, device_class, keys

SCHEMA = 1
KIND = "nbx-autotune-certificate"
HEADER = ("schema", "kind", "kernel", "vendor", "device_class", "compiler", "parameters", "key_fields", "entries")
NUMBER = (int, float)
PROOF = {
    "deviation": NUMBER, "tolerance": NUMBER, "dtype": str, "best_ms": NUMBER, "second_ms": NUMBER + (type(None),),
    "default_ms": NUMBER + (type(None),), "candidates_tried": int, "pruned": int, "excluded": list,
    "witness": dict, "clocks": (dict, type(None)), "date": str, "machine": str, "nbx_version": str,
    "representative": dict, "timing": dict, "windows": list,
}
WITNESS = {"name": str, "before_ms": NUMBER, "after_ms": NUMBER, "drift": NUMBER, "tolerance": NUMBER}
TIMING = {"warmup": int, "repeats": int, "flush_bytes": int, "flush": str, "attempts": int, "held_ms": NUMBER,
          "host_bound": bool}


@dataclass(frozen=True)
class Entry:
    setting: dict
    proof: dict


@dataclass(frozen=True)
class Certificate:
    path: Path
    kernel: str
    vendor: str
    device_class: str
    compiler: str
    parameters: tuple[str, ...]
    key_fields: tuple[str, ...]
    entries: dict


@dataclass(frozen=True)
class Refusal:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _refuse(path, problem: str):
    error = CertificateError(f"certificate {path}: {problem}")
    error.reason = problem
    raise error


def reason_of(error: CertificateError) -> str:
    return getattr(error, "reason", str(error))


def _typed(value, kinds, where, path):
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        _refuse(path, f"{where} is {value!r}, not a {kinds}")
    if not isinstance(value, kinds):
        names = [k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,))]
        _refuse(path, f"{where} must be {' or '.join(names)}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        _refuse(path, f"{where} is {value!r}; JSON numbers here are finite")


def _fields(record, spec: dict, where: str, path) -> None:
    if not isinstance(record, dict):
        _refuse(path, f"{where} must be an object with {sorted(spec)}")
    missing = sorted(set(spec) - set(record))
    unknown = sorted(set(record) - set(spec))
    if missing or unknown:
        _refuse(path, f"{where}: missing field(s) {missing}, unknown field(s) {unknown}")
    for name, kinds in spec.items():
        _typed(record[name], kinds, f"{where}.{name}", path)


def validate(doc, path: Path, tunable=None, facts=None) -> Certificate:
    """The certificate in `doc` (parsed JSON), refused by CertificateError naming the path and the field.

    With the kernel's Tunable, its parameters and key fields are checked; with facts, every key too.
    """
    if not isinstance(doc, dict):
        _refuse(path, "a certificate is a JSON object")
    missing, unknown = sorted(set(HEADER) - set(doc)), sorted(set(doc) - set(HEADER))
    if missing or unknown:
        _refuse(path, f"missing field(s) {missing}, unknown field(s) {unknown}; a certificate has {list(HEADER)}")
    if doc["schema"] != SCHEMA or doc["kind"] != KIND:
        _refuse(path, f"schema {doc['schema']!r} kind {doc['kind']!r}; this nbx reads schema {SCHEMA}, kind {KIND!r}")
    for name in ("kernel", "vendor", "device_class", "compiler"):
        _typed(doc[name], str, name, path)
    try:
        device_class.check_class(doc["device_class"])
        device_class.check_compiler(doc["compiler"])
    except Exception as exc:
        _refuse(path, str(exc))
    params, key_fields = doc["parameters"], doc["key_fields"]
    for name, listed in (("parameters", params), ("key_fields", key_fields)):
        if not isinstance(listed, list) or not listed or not all(isinstance(x, str) for x in listed):
            _refuse(path, f"{name} must be a non-empty list of names")
    if tunable is not None:
        if doc["kernel"] != tunable.name:
            _refuse(path, f"kernel says {doc['kernel']!r}, checked as kernel {tunable.name!r}")
        problem = tunable.parameter_problems(dict.fromkeys(params))
        if problem:
            _refuse(path, problem)
        if key_fields != [n for n, _ in tunable.key_fields]:
            _refuse(path, f"key_fields {key_fields} are not kernel {tunable.name!r}'s "
                          f"{[n for n, _ in tunable.key_fields]}")
    if not isinstance(doc["entries"], dict):
        _refuse(path, "entries must be an object from key to {setting, proof}")
    filled = {} if tunable is None else {p: v for p, v in tunable.implied.items() if p not in params}
    if filled:   # parameters added after this file was made: its settings ran with their implied values
        params = sorted([*params, *filled])
    entries = {}
    for key, entry in doc["entries"].items():
        if filled and isinstance(entry, dict) and isinstance(entry.get("setting"), dict):
            entry = {**entry, "setting": {**entry["setting"], **filled}}
        entries[key] = _entry(key, entry, params, path, tunable, facts)
    return Certificate(Path(path), doc["kernel"], doc["vendor"], doc["device_class"], doc["compiler"],
                       tuple(params), tuple(key_fields), entries)


def _entry(key: str, entry, params, path, tunable, facts) -> Entry:
    where = f"entries[{key!r}]"
    _fields(entry, {"setting": dict, "proof": dict}, where, path)
    setting = entry["setting"]
    if sorted(setting) != sorted(params):
        extra, lacking = sorted(set(setting) - set(params)), sorted(set(params) - set(setting))
        _refuse(path, f"{where}.setting names {extra} beyond and lacks {lacking} of the file's parameters {params}")
    for name, value in setting.items():
        _typed(value, (int, str, bool), f"{where}.setting.{name}", path)
    proof = entry["proof"]
    _fields(proof, PROOF, f"{where}.proof", path)
    _fields(proof["witness"], WITNESS, f"{where}.proof.witness", path)
    _fields(proof["timing"], TIMING, f"{where}.proof.timing", path)
    witness = proof["witness"]
    if witness["drift"] > witness["tolerance"]:
        _refuse(path, f"{where}: its witness drifted by {witness['drift']:.3g}, above its tolerance "
                      f"{witness['tolerance']:.3g}; a timing under a changing regime proves nothing")
    if proof["deviation"] > proof["tolerance"]:
        _refuse(path, f"{where}: its proof shows deviation {proof['deviation']} above tolerance "
                      f"{proof['tolerance']}; a setting that fails the screen is never served")
    if tunable is not None and facts is not None:
        try:
            keys.parse(tunable.name, tunable.key, key, facts)
        except LaunchKeyError as exc:
            _refuse(path, str(exc))
    elif tunable is not None and [p.split("=", 1)[0] for p in key.split(",")] != [n for n, _ in tunable.key_fields]:
        _refuse(path, f"key {key!r} does not have kernel {tunable.name!r}'s fields "
                      f"{[n for n, _ in tunable.key_fields]}")
    return Entry(dict(setting), dict(proof))


def read(path: Path, tunable=None, facts=None) -> Certificate:
    """A certificate file, validated, its header checked against the folders it lies in."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _refuse(path, f"cannot be read as JSON: {exc}")
    cert = validate(doc, path, tunable, facts)
    folders = {"kernel": path.stem, "compiler": path.parent.name, "device_class": path.parent.parent.name}
    for name, folder in folders.items():
        if getattr(cert, name) != folder:
            _refuse(path, f"{name} says {getattr(cert, name)!r} but the file lies where {folder!r} is "
                          f"expected (<device class>/<compiler>/<kernel>.json)")
    return cert


def document(cert_header: Mapping, entries: Mapping[str, Entry]) -> dict:
    doc = {name: cert_header[name] for name in HEADER if name != "entries"}
    doc["entries"] = {k: {"setting": entries[k].setting, "proof": entries[k].proof} for k in sorted(entries)}
    return doc


def header(tunable, identity) -> dict:
    return {"schema": SCHEMA, "kind": KIND, "kernel": tunable.name, "vendor": identity.vendor,
            "device_class": identity.device_class, "compiler": identity.compiler,
            "parameters": tunable.parameters, "key_fields": [n for n, _ in tunable.key_fields]}


def path_in(folder: Path, identity, kernel: str) -> Path:
    """Where a kernel's file lies in a vendor-level folder (<class>/<compiler>/<kernel>.json)."""
    return Path(folder) / identity.device_class / identity.compiler / f"{kernel}.json"


_write_lock = threading.Lock()


@contextlib.contextmanager
def locked(folder: Path, timeout_s: float = 60.0):
    """An exclusive lock on a folder across processes: flock on the folder itself, else a lock file."""
    folder.mkdir(parents=True, exist_ok=True)
    with _write_lock:
        try:
            import fcntl
        except ImportError:
            fcntl = None
        if fcntl is not None:
            fd = os.open(folder, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        lock = folder / ".nbx-autotune.lock"
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                break
            except FileExistsError:
                if time.monotonic() > deadline:
                    raise CertificateError(f"{lock} held for more than {timeout_s} s; remove it if no nbx "
                                           f"process is writing certificates") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)


def write(path: Path, head: Mapping, entries: Mapping[str, Entry], tunable=None) -> Certificate:
    """Merge entries into the file at path (new keys replace old ones), atomically and under a lock.

    A file on disk that fails validation, or whose header differs (another parameter space), is not
    merged into: it is refused by name and left as it is.
    """
    path = Path(path)
    with locked(path.parent):
        merged: dict[str, Entry] = {}
        if path.exists():
            current = read(path, tunable)
            for name in ("kernel", "vendor", "device_class", "compiler", "parameters", "key_fields"):
                mine, theirs = head[name], getattr(current, name)
                differs = list(mine) != list(theirs) if isinstance(mine, (list, tuple)) else mine != theirs
                if differs:
                    _refuse(path, f"on disk its {name} is {theirs!r}, the entries written have {mine!r}; "
                                  f"not merged (move the old file away to replace it)")
            merged.update(current.entries)
        merged.update(entries)
        doc = document(head, merged)
        validate(doc, path, tunable)
        replace_json(path, doc)
    return read(path, tunable)


def replace_json(path: Path, doc) -> None:
    """Write doc to path atomically (a temporary file beside it, synced, then renamed over it); the
    caller holds locked(path.parent) where other processes may write it too."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle, indent=1, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---- where certificates are found --------------------------------------------------------------

_extra_trees: list[Path] = []


def add_tree(folder) -> None:
    """Serve certificates from a folder laid out <vendor>/<class>/<compiler>/<kernel>.json (first)."""
    folder = Path(folder).resolve()
    if folder not in _extra_trees:
        _extra_trees.insert(0, folder)


def repo_certificates_dir() -> Path | None:
    parents = Path(__file__).resolve().parents
    root = parents[5] if len(parents) > 5 else None
    if root is None or not (root / "packages" / "nbx-autotune").is_dir() or not (root / "certificates").is_dir():
        return None
    return root / "certificates"


def packaged_folder(vendor: str) -> Path | None:
    """The vendor package's certificates (an installed wheel, or a source tree's symlink), else the repo's."""
    try:
        folder = importlib.resources.files(f"nbx.devices.{vendor}").joinpath("data").joinpath("certificates")
        if isinstance(folder, os.PathLike) and Path(folder).is_dir():
            return Path(folder)
    except Exception:  # no such vendor package: the repository's folder, if any
        pass
    repo = repo_certificates_dir()
    return repo / vendor if repo is not None and (repo / vendor).is_dir() else None


class CertificateStore:
    """Certified entries per (identity, kernel), read once; the files refused, for the run report."""

    def __init__(self, trees=None, packaged: bool = True):
        self._trees = None if trees is None else [Path(t) for t in trees]
        self._packaged = packaged
        self._cache: dict[tuple, dict[str, Entry]] = {}
        self._lock = threading.Lock()
        self.refusals: list[Refusal] = []
        # (device class, compiler of this process) -> the compilers certificates were made under instead
        self.other_compilers: dict[tuple[str, str], set[str]] = {}

    def folders(self, vendor: str) -> list[Path]:
        """Vendor-level folders in the order they are consulted (an earlier one's key wins)."""
        if self._trees is None:
            from_env = [Path(p) for p in os.environ.get("NBX_AUTOTUNE_CERTIFICATES", "").split(os.pathsep) if p]
            trees = list(_extra_trees) + from_env
        else:
            trees = self._trees
        found = [t / vendor for t in trees if (t / vendor).is_dir()]
        if self._packaged:
            folder = packaged_folder(vendor)
            if folder is not None and folder.resolve() not in {f.resolve() for f in found}:
                found.append(folder)
        return found

    def writable_folder(self, vendor: str) -> Path:
        """The vendor-level folder of this store's first tree (where a local cache writes)."""
        if not self._trees:
            raise CertificateError("a store over the packaged certificates has no folder to write into; "
                                   "certificates are written by `nbx autotune certify --out`")
        return self._trees[0] / vendor

    def entries(self, identity, tunable, facts=None) -> dict[str, Entry]:
        cache_key = (identity, tunable.name)
        with self._lock:
            if cache_key not in self._cache:
                self._cache[cache_key] = self._load(identity, tunable, facts)
            return self._cache[cache_key]

    def _refused(self, path: Path, reason: str) -> None:
        refusal = Refusal(path, reason)
        if refusal not in self.refusals:
            self.refusals.append(refusal)

    def _load(self, identity, tunable, facts) -> dict[str, Entry]:
        merged: dict[str, Entry] = {}
        found_any = False
        for folder in self.folders(identity.vendor):
            path = path_in(folder, identity, tunable.name)
            if not path.is_file():
                continue
            found_any = True
            try:
                cert = read(path, tunable, facts)
            except CertificateError as exc:
                self._refused(path, reason_of(exc))
                continue
            for key, entry in cert.entries.items():
                merged.setdefault(key, entry)
        if not found_any:
            for folder in self.folders(identity.vendor):
                for other in sorted((Path(folder) / identity.device_class).glob(f"*/{tunable.name}.json")):
                    self.other_compilers.setdefault((identity.device_class, identity.compiler),
                                                    set()).add(other.parent.name)
                    self._refused(other, f"made under compiler {other.parent.name!r}; this process compiles with "
                                         f"{identity.compiler!r}, and a setting is served only under the compiler "
                                         f"that proved it: certify it again")
        return merged


def check_folder(folder: Path, vendor: str | None = None) -> list[tuple[Path, str | None, int]]:
    """Validate every certificate in a vendor-level folder: (path, None or the refusal, entries)."""
    results = []
    declared = candidates.declared()
    for path in sorted(Path(folder).glob("*/*/*.json")):
        tunable = declared.get(path.stem)
        try:
            if tunable is None:
                _refuse(path, f"kernel {path.stem!r} is declared by no installed kernel (nbx.kernels), so its "
                              f"parameters cannot be checked; it would never be served")
            cert = read(path, tunable)
            if vendor is not None and cert.vendor != vendor:
                _refuse(path, f"vendor says {cert.vendor!r} but the file lies in the {vendor!r} folder")
            if device_class.vendor_of_class(cert.device_class) != cert.vendor:
                _refuse(path, f"device class {cert.device_class!r} does not start with its vendor {cert.vendor!r}")
            results.append((path, None, len(cert.entries)))
        except CertificateError as exc:
            results.append((path, reason_of(exc), 0))
    return results

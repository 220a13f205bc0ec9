"""The device fact files: which file serves a target, the merged facts, and where each fact comes from.

    facts = device_files.for_arch("sm_90")          # or in_force() for the current GPU
    facts.value("memory.max_shared_memory_per_block")   # 232448
    facts.provenance("memory.max_shared_memory_per_block")
    facts.value("memory.vmm.chunk_bytes")             # MissingFactError naming the key and the files

A backend reports the target string of a device (`backend.target(device) -> str`, see HasTarget);
the vendor file with the longest prefix of it serves the target, its family file's facts beneath
its own. An application may add its own file (add_application_file): its keys sit beside the
vendor's, and a key stated by both is refused by name. docs/device_files.md says more.

Where the vendor files are found, for each vendor package of the nbx.devices namespace (and each
folder of the repository's devices/): first the package's own `data/devices` folder through
importlib.resources (an installed wheel; in a source tree it is a symlink to devices/<vendor>), then
the repository's devices/<vendor> folder beside nbx.core's source (a source checkout without it).
"""
from __future__ import annotations

import importlib
import importlib.resources
import os
import pkgutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from .device import Device, as_device, backends, get_backend, plugin_errors
from .device_schema import Fact, load_yaml, validate_application_file, validate_vendor_file
from .errors import (
    FactConflictError,
    FileFormatError,
    MissingFactError,
    NoDeviceFileError,
    ShapeError,
    UnknownTargetError,
)

PACKAGE_DATA = ("data", "devices")


@runtime_checkable
class HasTarget(Protocol):
    """What a GPU backend offers the loader: the target string of one of its devices.

    NVIDIA: f"sm_{major}{minor}" ('sm_90'); AMD: the gcnArchName ('gfx942:sramecc+:xnack-');
    Apple: the device name lowercased and hyphenated ('apple-m4-pro').
    """

    def target(self, device: Device) -> str: ...


@dataclass(frozen=True)
class VendorFile:
    path: Path
    vendor: str
    name: str
    family: str | None
    architecture: str
    targets: tuple[str, ...]
    facts: dict = field(repr=False)


@dataclass(frozen=True)
class ApplicationFile:
    path: Path
    application: str
    targets: tuple[str, ...]
    facts: dict = field(repr=False)


class DeviceFacts:
    """The facts in force for one target: a vendor file over its family, plus application files."""

    def __init__(self, target: str, vendor_file: VendorFile, files: tuple[Path, ...], facts: dict[str, Fact]):
        self.target = target
        self.vendor = vendor_file.vendor
        self.name = f"{vendor_file.vendor}/{vendor_file.name}"
        self.architecture = vendor_file.architecture
        self.path = vendor_file.path
        self.files = files
        self._facts = facts

    def __repr__(self) -> str:
        return f"DeviceFacts({self.target!r}: {self.name}, {len(self._facts)} facts)"

    def get(self, key: str) -> Fact:
        """The Fact at a dotted key; a key inside a record or dtype map ('tiles.matmul.block_m') too."""
        fact = self._facts.get(key)
        if fact is not None:
            return fact
        parts = key.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            outer = self._facts.get(".".join(parts[:cut]))
            if outer is None:
                continue
            value = outer.value
            for part in parts[cut:]:
                if not hasattr(value, "keys") or part not in value:
                    raise MissingFactError(
                        f"device fact {key!r} is not stated for target {self.target!r}: {outer.key!r} "
                        f"({outer.file}) has no {part!r}; it holds {_fields(value)}")
                value = value[part]
            return Fact(key, value, outer.kind, outer.text, outer.file)
        below = sorted(k for k in self._facts if k.startswith(key + "."))
        hint = f"; {key!r} is a group, ask for one of {below}" if below else (
            "; a fact not yet known is absent: measure it and add it with its provenance")
        raise MissingFactError(f"device fact {key!r} is not stated for target {self.target!r}; files consulted: "
                               f"{', '.join(str(p) for p in self.files)}{hint}")

    def value(self, key: str):
        return self.get(key).value

    def provenance(self, key: str) -> str:
        return self.get(key).provenance

    def __contains__(self, key: str) -> bool:
        try:
            self.get(key)
        except MissingFactError:
            return False
        return True

    def keys(self) -> list[str]:
        return sorted(self._facts)


def _fields(value) -> str:
    return str(sorted(value.keys())) if hasattr(value, "keys") else f"a {type(value).__name__}, not a mapping"


_lock = threading.RLock()
_catalogue: list[VendorFile] | None = None
_merged: dict[str, DeviceFacts] = {}
_in_force: dict[tuple, DeviceFacts] = {}  # (device, its backend): every launch asks, and a target never changes
_application_paths: list[Path] = []
_applications: list[ApplicationFile] | None = None


def repo_devices_dir() -> Path | None:
    """devices/ of the repository this nbx.core is a source checkout of, or None (an installed wheel)."""
    root = Path(__file__).resolve().parents[5] if len(Path(__file__).resolve().parents) > 5 else None
    if root is None or not (root / "packages" / "nbx-core").is_dir() or not (root / "devices").is_dir():
        return None
    return root / "devices"


def _vendor_names() -> list[str]:
    names = set()
    try:
        namespace = importlib.import_module("nbx.devices")
        names |= {info.name for info in pkgutil.iter_modules(namespace.__path__) if info.ispkg}
    except ImportError:
        pass
    repo = repo_devices_dir()
    if repo is not None:
        names |= {p.name for p in repo.iterdir() if p.is_dir()}
    return sorted(names)


def _package_data(vendor: str) -> Path | None:
    try:
        root = importlib.resources.files(f"nbx.devices.{vendor}")
    except Exception:  # no such package, or one that fails to import: the repository fallback decides
        return None
    folder = root
    for part in PACKAGE_DATA:
        folder = folder.joinpath(part)
    if isinstance(folder, os.PathLike) and Path(folder).is_dir():
        return Path(folder)
    return None


def search_dirs() -> list[tuple[str, Path]]:
    """(vendor, folder) where each vendor's files are read from: its package data, else the repository."""
    found = []
    repo = repo_devices_dir()
    for vendor in _vendor_names():
        folder = _package_data(vendor)
        if folder is None and repo is not None and (repo / vendor).is_dir():
            folder = repo / vendor
        if folder is not None:
            found.append((vendor, folder))
    return found


def vendor_files() -> list[VendorFile]:
    """Every vendor file found, validated against the schema (read once; forget() reads them again)."""
    global _catalogue
    with _lock:
        if _catalogue is None:
            _catalogue = _read_catalogue()
        return list(_catalogue)


def _read_catalogue() -> list[VendorFile]:
    files = []
    for vendor, folder in search_dirs():
        for path in sorted(p.resolve() for p in folder.glob("*.yml")):
            data = load_yaml(path)
            facts = validate_vendor_file(data, path, vendor)
            files.append(VendorFile(path, vendor, data["name"], data.get("family"), data["architecture"],
                                    tuple(data["targets"]), facts))
    by_name = {(f.vendor, f.name): f for f in files}
    claimed: dict[str, VendorFile] = {}
    for f in files:
        if f.family is not None:
            family = by_name.get((f.vendor, f.family))
            if family is None:
                raise FileFormatError(f"{f.path}: family: names {f.family!r}, but {f.vendor} has no {f.family}.yml")
            if family.family is not None:
                raise FileFormatError(f"{f.path}: family: {f.family!r} is itself a variant; a family file has "
                                      f"no family")
        for prefix in f.targets:
            if prefix in claimed:
                raise FileFormatError(f"target prefix {prefix!r} is claimed by both {claimed[prefix].path} and "
                                      f"{f.path}; a target is served by one file")
            claimed[prefix] = f
    return files


def add_application_file(path) -> None:
    """Add an application's facts beside the vendor's; the file is validated now."""
    path = Path(path).resolve()
    _read_application(path)
    with _lock:
        if path not in _application_paths:
            _application_paths.append(path)
        _forget_merged()


def remove_application_file(path) -> None:
    path = Path(path).resolve()
    with _lock:
        if path not in _application_paths:
            raise FileFormatError(f"{path} is not an added application file; added: "
                                  f"{[str(p) for p in _application_paths]}")
        _application_paths.remove(path)
        _forget_merged()


def application_files() -> list[Path]:
    with _lock:
        return list(_application_paths)


def _read_application(path: Path) -> ApplicationFile:
    data = load_yaml(path)
    facts = validate_application_file(data, path)
    return ApplicationFile(path, data["application"], tuple(data["targets"]), facts)


def _application_list() -> list[ApplicationFile]:
    global _applications
    if _applications is None:
        _applications = [_read_application(p) for p in _application_paths]
    return _applications


def _forget_merged() -> None:
    global _applications
    _merged.clear()
    _in_force.clear()
    _applications = None


def forget() -> None:
    """Drop every file read and every merge; the next lookup reads the files again.

    Added application files stay added (remove_application_file takes one away). The generation
    moves on, so whatever was derived from the old facts (kernel launch plans) is derived again.
    """
    global _catalogue
    with _lock:
        _catalogue = None
        _forget_merged()
    advance_generation()


_generation = 0


def generation() -> int:
    """A counter that moves whenever the facts or the settings served may have changed: caches of
    what follows from them (nbx.kernels.plans) key on it."""
    return _generation


def advance_generation() -> None:
    """Mark every derived launch plan stale (forget() and the autotune serving reset call it)."""
    global _generation
    _generation += 1
    for listener in _generation_listeners:
        listener()


_generation_listeners: list = []


def on_generation(listener) -> None:
    """Call listener() whenever the generation moves (nbx.core.spec drops its prepared signatures
    then, so that a repeat tests no counter)."""
    _generation_listeners.append(listener)


def match(target: str) -> VendorFile:
    """The vendor file whose prefix matches `target` longest."""
    if not isinstance(target, str) or not target:
        raise UnknownTargetError(f"a target is a non-empty string such as 'sm_90', got {target!r}")
    best, best_len = None, -1
    files = vendor_files()
    for f in files:
        for prefix in f.targets:
            if target.startswith(prefix) and len(prefix) > best_len:
                best, best_len = f, len(prefix)
    if best is None:
        claimed = "; ".join(f"{f.vendor}/{f.name}: {', '.join(f.targets)}" for f in files) or "none found"
        where = ", ".join(str(d) for _, d in search_dirs()) or "no folder found"
        raise UnknownTargetError(f"no device file claims target {target!r} (searched {where}); prefixes claimed: "
                                 f"{claimed}. Add devices/<vendor>/<name>.yml for it")
    return best


def for_arch(target: str) -> DeviceFacts:
    """The facts in force for a target string: variant over family, then application files beside them."""
    with _lock:
        cached = _merged.get(target)
        if cached is not None:
            return cached
        chosen = match(target)
        chain = [chosen]
        if chosen.family is not None:
            chain.insert(0, next(f for f in vendor_files() if f.vendor == chosen.vendor and f.name == chosen.family))
        facts: dict[str, Fact] = {}
        for f in chain:
            facts.update(f.facts)
        apps = [a for a in _application_list() if any(target.startswith(p) for p in a.targets)]
        for app in apps:
            for key, fact in app.facts.items():
                _refuse_conflict(key, fact, facts)
                facts[key] = fact
        result = DeviceFacts(target, chosen, tuple(f.path for f in chain) + tuple(a.path for a in apps), facts)
        _merged[target] = result
        return result


def _refuse_conflict(key: str, fact: Fact, facts: dict[str, Fact]) -> None:
    clash = facts.get(key)
    if clash is None:
        clash = next((f for k, f in facts.items() if k.startswith(key + ".") or key.startswith(k + ".")), None)
    if clash is not None:
        raise FactConflictError(f"device fact {key!r} of application file {fact.file} collides with {clash.key!r} "
                                f"stated by {clash.file}: an application adds keys beside the vendor's, it does "
                                f"not restate or override them")


def in_force(device=None) -> DeviceFacts:
    """The facts of a device ('cuda:0', a Device), or of the first GPU backend's current device."""
    if device is not None:
        dev = device if isinstance(device, Device) else as_device(device)
        backend = get_backend(dev.type)
        found = _in_force.get((dev, backend))
        if found is not None:
            return found
        dev = as_device(dev)  # the first lookup checks the ordinal
        if not isinstance(backend, HasTarget):
            raise NoDeviceFileError(f"device {str(dev)!r} has no device file: the {dev.type!r} backend runs no GPU "
                                    f"kernels and reports no target")
        found = _in_force[dev, backend] = for_arch(backend.target(dev))
        return found
    seen = []
    for name, backend in sorted(backends().items()):
        if not isinstance(backend, HasTarget) or backend.host_accessible:
            continue  # host-memory devices (cpu, Triton's interpreter) are asked for by name only
        try:
            count = backend.device_count()
        except Exception as exc:
            seen.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        if count > 0:
            return for_arch(backend.target(Device(name, backend.current_device() if backend.indexed else None)))
        seen.append(f"{name}: no device")
    errors = "; ".join(f"{n}: {e.splitlines()[0]}" for n, e in sorted(plugin_errors().items())) or "none"
    raise NoDeviceFileError(f"no GPU backend has a device, so no device file is in force (the CPU backend has none: "
                            f"it runs numpy references, not kernels). Backends with targets: {seen or 'none'}; "
                            f"plugin errors: {errors}")


def bucket(ladder, n: int) -> int:
    """The class of a size on a ladder: n rounded up to the step of the first row whose up_to holds it."""
    if not isinstance(n, int) or n < 0:
        raise ShapeError(f"a ladder classes sizes >= 0, got {n!r}")
    for row in ladder:
        if row["up_to"] is None or n <= row["up_to"]:
            return -(-n // row["step"]) * row["step"]
    raise ShapeError(f"{n} is above the ladder's last row {ladder[-1]}; a ladder ends with up_to: null")

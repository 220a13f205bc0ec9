"""What `nbx info` reports, gathered without assuming any GPU or any vendor distribution is present."""
from __future__ import annotations

import importlib
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

from .device import ENTRY_POINT_GROUP, backends, plugin_errors

_VERSION_LINE = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\']', re.MULTILINE)


def _namespace_dirs(package: str) -> list[Path]:
    try:
        module = importlib.import_module(package)
    except ImportError:
        return []
    return [Path(p) for p in getattr(module, "__path__", [])]


def vendor_dirs() -> dict[str, Path]:
    """Each vendor package folder of the nbx.devices namespace, found on disk (nothing imported)."""
    found: dict[str, Path] = {}
    for base in _namespace_dirs("nbx.devices"):
        for child in sorted(base.iterdir()) if base.is_dir() else []:
            if child.name.isidentifier() and any((child / f).is_file() for f in ("__init__.py", "version.py")):
                found.setdefault(child.name, child)
    return found


def plugin_modules() -> list[tuple[str, object]]:
    """(name, module) of each vendor plugin that imports: entry points first, then the namespace scan.

    A plugin that fails to import is left out here; `nbx info` shows its error (device.plugin_errors).
    """
    modules: dict[str, object] = {}
    seen: set[str] = set()
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        seen.add(ep.value.split(":")[0])
        try:
            modules.setdefault(ep.name, ep.load())
        except Exception:
            continue
    for name in vendor_dirs():
        module_name = f"nbx.devices.{name}"
        if module_name in seen or name in modules:
            continue
        try:
            modules[name] = importlib.import_module(module_name)
        except Exception:
            continue
    return list(modules.items())


def _distribution_of(package_dir: Path, base: Path) -> str:
    """nbx/core -> nbx-core, nbx/devices/amd -> nbx-devices-amd."""
    return "nbx-" + "-".join(package_dir.relative_to(base).parts)


def source_versions() -> dict[str, tuple[str, Path]]:
    """Distribution name -> (version.py's version, package folder) for every nbx package on the path."""
    found: dict[str, tuple[str, Path]] = {}
    for base in _namespace_dirs("nbx"):
        candidates = list(base.glob("*/version.py")) + list(base.glob("devices/*/version.py"))
        for version_file in sorted(candidates):
            match = _VERSION_LINE.search(version_file.read_text())
            name = _distribution_of(version_file.parent, base)
            found.setdefault(name, (match.group(1) if match else "unknown", version_file.parent))
    return found


def installed_versions() -> dict[str, str]:
    found = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("nbx-"):
            found.setdefault(name, dist.version)
    return found


def distribution_lines() -> list[str]:
    installed, source = installed_versions(), source_versions()
    lines = []
    for name in sorted(set(installed) | set(source)):
        version, where = source.get(name, (None, None))
        if name in installed:
            note = "installed"
            if version is not None and version != installed[name]:
                note += f"; its source says {version}: reinstall"
            lines.append(f"{name:<20} {installed[name]:<10} {note}")
        else:
            lines.append(f"{name:<20} {version:<10} source tree, no metadata ({where})")
    return lines or ["none found"]


def backend_lines() -> list[str]:
    lines = []
    for name, backend in sorted(backends().items()):
        try:
            count = backend.device_count()
        except Exception as exc:
            lines.append(f"{name:<8} device_count failed: {type(exc).__name__}: {exc}")
            continue
        if not backend.indexed:
            devices = [name] if count else []
        else:
            # a one-line summary (name, capability, memory, runtime library) where the backend has one
            describe = getattr(backend, "device_summary", None) or getattr(backend, "device_name", None)
            devices = [f"{name}:{i}" + (f" ({_safe(describe, i)})" if callable(describe) else "") for i in range(count)]
        lines.append(f"{name:<8} {count} device(s)" + (": " + ", ".join(devices) if devices else ""))
    return lines


def _safe(fn, *args) -> str:
    try:
        return str(fn(*args))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _gpu_devices() -> list[str]:
    found = []
    for name, backend in sorted(backends().items()):
        if backend.indexed and not backend.host_accessible:
            try:
                found += [f"{name}:{i}" for i in range(backend.device_count())]
            except Exception:
                continue
    return found


def _no_gpu_device_reasons() -> list[str]:
    """Each GPU backend's one-line account of why it has no device."""
    found = []
    for name, backend in sorted(backends().items()):
        if backend.indexed and not backend.host_accessible:
            try:
                count = backend.device_count()
            except Exception as exc:
                found.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                continue
            if not count:
                found.append(f"{name}: no device found")
    return found


def device_file_lines() -> list[str]:
    """The device file in force for each GPU device; with none, the loader's own account of why."""
    from . import device_files
    if not _gpu_devices():  # the CPU runs numpy references and needs no device file: nothing is wrong
        why = _no_gpu_device_reasons()
        return [f"none (no GPU device: {'; '.join(why)})" if why else "none (no GPU backend)"]
    lines = []
    for device in _gpu_devices():
        label = f"{device}: " if device else ""
        try:
            facts = device_files.in_force(device)
        except Exception as exc:
            lines.append(f"{label}{type(exc).__name__}: {exc}")
            continue
        lines.append(f"{label}{facts.name} ({facts.path}); {_proven(facts)}")
    return lines


def _proven(facts) -> str:
    """Whether this architecture passed nbx's GPU suite, with the file's account of it."""
    if "validation.proven" not in facts:
        return "proven: not stated"
    state = "proven" if facts.value("validation.proven") else "not proven"
    return f"{state} ({facts.provenance('validation.proven')})"


def certificate_lines() -> list[str]:
    lines = []
    for vendor, folder in sorted(vendor_dirs().items()):
        root = folder / "data" / "certificates"
        if not root.is_dir():
            lines.append(f"{vendor}: no certificates folder ({root})")
            continue
        classes = {}
        for cert in root.rglob("*.json"):
            device_class = cert.relative_to(root).parts[0]
            classes[device_class] = classes.get(device_class, 0) + 1
        summary = ", ".join(f"{c}: {n}" for c, n in sorted(classes.items())) or "none yet"
        lines.append(f"{vendor}: {sum(classes.values())} kernel certificate(s) ({summary})")
        compilers = sorted({cert.parent.name for cert in root.glob("*/*/*.json")})
        if compilers:
            lines.append(_compiler_line(compilers))
    return lines or ["no vendor distribution found (pip install \"nbx-core[nvidia]\" for NVIDIA GPUs)"]


def installed_triton() -> str | None:
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def _compiler_line(compilers: list[str]) -> str:
    """Whether the installed Triton is one the certificates were proven under, and what follows if not."""
    versions = sorted({c.split("-")[1] for c in compilers if c.count("-") >= 2})
    made = f"made under {', '.join(compilers)}"
    triton = installed_triton()
    if triton is None:
        return f"  {made}; no Triton installed, so no kernel runs here (install nbx-kernels)"
    if triton in versions:
        return f"  {made}; the installed Triton {triton} is served them"
    return (f"  {made}; the installed Triton {triton} has NO certificates: no certified setting is served, "
            f"each launch key takes the device file's setting after an oracle check (nothing is swept "
            f"unasked), or is refused in certified-only mode; install triton=={versions[-1]} to be served them" if versions else
            f"  {made}; the installed Triton {triton} has no certificates")


def print_info(out=None) -> int:
    out = out or sys.stdout
    import numpy

    from .version import __version__

    sections = [
        ("distributions", distribution_lines()),
        ("backends", backend_lines()),
        ("plugin errors", [f"{n}: {e}" for n, e in sorted(plugin_errors().items())] or ["none"]),
        ("device file in force", device_file_lines()),
        ("certificates", certificate_lines()),
    ]
    print(f"nbx {__version__} (Python {platform.python_version()}, numpy {numpy.__version__})", file=out)
    for title, lines in sections:
        print(f"{title}:", file=out)
        for line in lines:
            print(f"  {line}", file=out)
    return 0

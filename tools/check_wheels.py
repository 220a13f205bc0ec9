"""Build every nbx wheel and sdist, open them, and list what is wrong.

    python tools/check_wheels.py                  # builds into a temporary folder (sdist, then the
                                                  # wheel from the sdist: `python -m build`)
    python tools/check_wheels.py --dist dist      # checks what `hatch build --all` left in dist/
    python tools/check_wheels.py nbx-core --no-isolation

What must hold for each wheel: no `nbx/__init__.py` nor `nbx/devices/__init__.py` (the namespace
is shared, PEP 420); files only under the distribution's own package; METADATA name and version
right; every nbx-* requirement pinned `==` the lock-step version; dependencies pointing one way
(core <- memory <- autotune <- kernels; devices and models on core and memory); nbx-core's extras
nvidia, amd and apple pulling exactly memory, autotune, kernels and that vendor (never nbx-models); a vendor wheel carrying its
device files and certificates and its entry point in the group `nbx.devices`. Exits 1 with the
list of problems.
"""
from __future__ import annotations

import argparse
import email.parser
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
VENDORS = ("nvidia", "amd", "apple")
LAYERS = ("nbx-core", "nbx-memory", "nbx-autotune", "nbx-kernels")  # each may depend on those before it
VENDOR_DEPENDENCIES = {"nbx-core", "nbx-memory"}
MODELS_DEPENDENCIES = {"nbx-core", "nbx-memory"}  # nbx-models: no kernel or vendor package (its speed is the plugins')
EXTRA_MEMBERS = {"nbx-memory", "nbx-autotune", "nbx-kernels"}  # plus nbx-devices-<vendor>
NAMESPACE_INITS = ("nbx/__init__.py", "nbx/devices/__init__.py")


def distributions(root: Path = ROOT) -> list[str]:
    return sorted(p.parent.name for p in root.glob("packages/*/pyproject.toml"))


def package_prefix(name: str) -> str:
    """The folder a distribution owns inside the namespace: nbx-devices-amd -> nbx/devices/amd/."""
    return "nbx/" + name.removeprefix("nbx-").replace("-", "/") + "/"


def vendor_of(name: str) -> str | None:
    return name.removeprefix("nbx-devices-") if name.startswith("nbx-devices-") else None


def build(names: list[str], outdir: Path, root: Path = ROOT, isolation: bool = True) -> list[str]:
    """Each distribution's sdist, then its wheel built from that sdist, into outdir.

    With isolation, `python -m build` (a fresh build environment per distribution, as pip does).
    Without, the installed hatchling runs in this process: the same two steps, no interpreter per step.
    """
    if not isolation:
        return _build_here(names, outdir, root)
    failures = []
    for name in names:
        cmd = [sys.executable, "-m", "build", str(root / "packages" / name), "--outdir", str(outdir)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            failures.append(f"{name}: build failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return failures


def _build_here(names: list[str], outdir: Path, root: Path) -> list[str]:
    from hatchling.build import build_sdist, build_wheel  # hatchling's PEP 517 hooks work on the cwd

    failures, cwd = [], os.getcwd()
    try:
        for name in names:
            try:
                os.chdir(root / "packages" / name)
                sdist = outdir / build_sdist(str(outdir))
                with tempfile.TemporaryDirectory(prefix="nbx-sdist-") as tmp, tarfile.open(sdist) as tar:
                    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                    tar.extractall(tmp, **safe)
                    os.chdir(Path(tmp) / sdist.name.removesuffix(".tar.gz"))
                    build_wheel(str(outdir))
                    os.chdir(cwd)
            except Exception as exc:
                failures.append(f"{name}: build failed: {type(exc).__name__}: {exc}")
    finally:
        os.chdir(cwd)
    return failures


def read_metadata(wheel: zipfile.ZipFile) -> tuple[email.message.Message, str]:
    infos = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    if len(infos) != 1:
        raise ValueError(f"{len(infos)} METADATA files")
    meta = email.parser.Parser().parsestr(wheel.read(infos[0]).decode())
    entry_points = infos[0].replace("METADATA", "entry_points.txt")
    return meta, wheel.read(entry_points).decode() if entry_points in wheel.namelist() else ""


def parse_entry_points(text: str) -> dict[str, dict[str, str]]:
    groups: dict[str, dict[str, str]] = {}
    group = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            group = groups.setdefault(line[1:-1], {})
        elif "=" in line and group is not None:
            key, _, value = line.partition("=")
            group[key.strip()] = value.strip()
    return groups


def repo_files(folder: Path) -> set[str]:
    """Files under folder (through symlinks), relative, posix style."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def check_requirements(name: str, meta, version: str) -> list[str]:
    found = []
    plain, by_extra = set(), {}
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        dep = canonicalize_name(req.name)
        if not dep.startswith("nbx-"):
            continue
        if str(req.specifier) != f"=={version}":
            found.append(f"{name}: requirement {line!r} is not pinned =={version}")
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            plain.add(dep)
        for extra in meta.get_all("Provides-Extra") or []:
            if req.marker is not None and req.marker.evaluate({"extra": extra}):
                by_extra.setdefault(extra, set()).add(dep)
    if name in LAYERS:
        allowed = set(LAYERS[:LAYERS.index(name)])
    elif name == "nbx-models":
        allowed = MODELS_DEPENDENCIES
    else:
        allowed = VENDOR_DEPENDENCIES
    for dep in sorted(plain - allowed):
        found.append(f"{name}: depends on {dep}, against the one-way order {' <- '.join(LAYERS)}")
    if name == "nbx-core":
        provided = set(meta.get_all("Provides-Extra") or [])
        for vendor in VENDORS:
            want = EXTRA_MEMBERS | {f"nbx-devices-{vendor}"}
            if vendor not in provided:
                found.append(f"nbx-core: no extra [{vendor}]")
            elif by_extra.get(vendor, set()) != want:
                found.append(f"nbx-core[{vendor}] pulls {sorted(by_extra.get(vendor, set()))}, expected {sorted(want)}")
    return found


def check_wheel(path: Path, version: str, root: Path = ROOT) -> list[str]:
    """Problems of one wheel, each a line naming the wheel."""
    label = path.name
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        try:
            meta, entry_text = read_metadata(wheel)
        except (ValueError, KeyError) as exc:
            return [f"{label}: unreadable metadata: {exc}"]
    name = canonicalize_name(meta.get("Name", ""))
    found = []
    if name not in distributions(root):
        return [f"{label}: METADATA name {meta.get('Name')!r} is no distribution under packages/"]
    if meta.get("Version") != version:
        found.append(f"{label}: METADATA version {meta.get('Version')} != {version}")
    for init in NAMESPACE_INITS:
        if init in names:
            found.append(f"{label}: contains {init}, which would shadow the shared nbx namespace")
    prefix = package_prefix(name)
    for member in names:
        if ".dist-info/" not in member and not member.startswith(prefix) and member not in NAMESPACE_INITS:
            found.append(f"{label}: {member} lies outside {prefix}")
    if f"{prefix}version.py" not in names:
        found.append(f"{label}: no {prefix}version.py")
    found += [f"{label}: {line}" for line in check_requirements(name, meta, version)]
    entry_points = parse_entry_points(entry_text)
    if name == "nbx-core" and entry_points.get("console_scripts", {}).get("nbx") != "nbx.core.cli:main":
        found.append(f"{label}: no console script nbx = nbx.core.cli:main")
    vendor = vendor_of(name)
    if vendor:
        want = f"nbx.devices.{vendor}"
        if entry_points.get("nbx.devices", {}).get(vendor) != want:
            found.append(f"{label}: no entry point {vendor} = {want} in the group nbx.devices")
        found += [f"{label}: {line}" for line in check_vendor_data(names, prefix, vendor, root)]
    return found


def check_vendor_data(names: list[str], prefix: str, vendor: str, root: Path) -> list[str]:
    """Every file of devices/<vendor> and certificates/<vendor> ships under <prefix>data/."""
    found = []
    for kind in ("devices", "certificates"):
        shipped = {n.removeprefix(f"{prefix}data/{kind}/") for n in names if n.startswith(f"{prefix}data/{kind}/")}
        source = root / kind / vendor
        expected = repo_files(source) if source.is_dir() else set()
        if kind == "devices" and not any(f.endswith(".yml") for f in expected):
            found.append(f"devices/{vendor} has no device file (*.yml) to ship")
        elif not expected:
            found.append(f"{kind}/{vendor} is missing or empty")
        for missing in sorted(expected - shipped):
            found.append(f"{kind}/{vendor}/{missing} missing from the wheel")
    return found


def check_sdist(path: Path, version: str) -> list[str]:
    """An sdist must carry its vendor data as plain files, so the wheel built from it has them."""
    found = []
    with tarfile.open(path) as sdist:
        members = sdist.getmembers()
    top = path.name.removesuffix(".tar.gz")
    names = {m.name for m in members}
    for needed in ("pyproject.toml", "PKG-INFO", "README.md"):
        if f"{top}/{needed}" not in names:
            found.append(f"{path.name}: no {needed}")
    if not top.endswith(f"-{version}"):
        found.append(f"{path.name}: version is not {version}")
    for member in members:
        if member.issym() or member.islnk():
            found.append(f"{path.name}: {member.name} is a link; building from the sdist elsewhere would lose it")
    return found


def check_dist(dist: Path, names: list[str], root: Path = ROOT) -> list[str]:
    version = (root / "VERSION").read_text().strip()
    found = []
    for name in names:
        stem = name.replace("-", "_")
        wheels = sorted(dist.glob(f"{stem}-{version}-*.whl"))
        sdists = sorted(dist.glob(f"{stem}-{version}.tar.gz"))
        if len(wheels) != 1:
            found.append(f"{name}: {len(wheels)} wheels of version {version} in {dist}")
        if len(sdists) != 1:
            found.append(f"{name}: {len(sdists)} sdists of version {version} in {dist}")
        for wheel in wheels:
            found += check_wheel(wheel, version, root)
        for sdist in sdists:
            found += check_sdist(sdist, version)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build and inspect every nbx wheel and sdist.")
    parser.add_argument("names", nargs="*", help="distributions to check (default: all under packages/)")
    parser.add_argument("--dist", type=Path, help="check the artifacts already in this folder; build nothing")
    parser.add_argument("--no-isolation", action="store_true",
                        help="build with the installed hatchling, in this process, instead of `python -m build`")
    args = parser.parse_args(argv)
    names = args.names or distributions()
    unknown = sorted(set(names) - set(distributions()))
    if unknown:
        parser.error(f"no such distribution: {', '.join(unknown)}")
    if args.dist:
        found = check_dist(args.dist, names)
    else:
        with tempfile.TemporaryDirectory(prefix="nbx-wheels-") as tmp:
            found = build(names, Path(tmp), isolation=not args.no_isolation)
            found += check_dist(Path(tmp), names)
    for line in found:
        print(line, file=sys.stderr)
    print(f"{len(names)} distributions checked: " + (f"{len(found)} problem(s)" if found else "all right"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

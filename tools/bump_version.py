"""Move every nbx distribution to one version, or check that they all agree.

    python tools/bump_version.py 0.2.0     # writes VERSION, each pyproject's version and nbx-* pins,
                                           # and each distribution's version.py
    python tools/bump_version.py --check   # exit 1 with the disagreements listed

The root VERSION file is the one source: distributions move in lock-step, so a pin between two of
them is always `==` the shared version.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION_FILE = ROOT / "VERSION"
# PEP 440 public versions such as 1.2.3, 1.2.3rc1, 1.2.3.post1, 1.2.3.dev4
VERSION_PATTERN = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
PROJECT_VERSION = re.compile(r'^(version\s*=\s*")([^"]*)(")', re.MULTILINE)
PIN = re.compile(r'(["\'])(nbx-[a-z0-9-]+)==([^"\';\s]+)')
MODULE_VERSION = re.compile(r'^(__version__\s*=\s*")([^"]*)(")', re.MULTILINE)


def pyprojects(root: Path = ROOT) -> list[Path]:
    return sorted(root.glob("packages/*/pyproject.toml"))


def version_modules(root: Path = ROOT) -> list[Path]:
    """Each distribution's version.py: nbx/<name>/version.py or nbx/devices/<vendor>/version.py."""
    found = []
    for src in sorted(root.glob("packages/*/src/nbx")):
        found += sorted(src.glob("*/version.py")) + sorted(src.glob("devices/*/version.py"))
    return found


def read_version(root: Path = ROOT) -> str:
    return (root / "VERSION").read_text().strip()


def problems(root: Path = ROOT) -> list[str]:
    """Every place whose version disagrees with VERSION, one line each."""
    version = read_version(root)
    found = []
    if not VERSION_PATTERN.match(version):
        found.append(f"VERSION: {version!r} is not a PEP 440 version")
    for path in pyprojects(root):
        text = path.read_text()
        rel = path.relative_to(root)
        declared = PROJECT_VERSION.findall(text)
        if len(declared) != 1:
            found.append(f"{rel}: expected one literal `version = \"...\"`, found {len(declared)}")
        elif declared[0][1] != version:
            found.append(f"{rel}: version {declared[0][1]} != {version}")
        for _, name, pinned in PIN.findall(text):
            if pinned != version:
                found.append(f"{rel}: pin {name}=={pinned} != {version}")
    modules = version_modules(root)
    if len(modules) != len(pyprojects(root)):
        found.append(f"{len(modules)} version.py files for {len(pyprojects(root))} distributions")
    for path in modules:
        declared = MODULE_VERSION.findall(path.read_text())
        rel = path.relative_to(root)
        if len(declared) != 1:
            found.append(f"{rel}: expected one `__version__ = \"...\"`")
        elif declared[0][1] != version:
            found.append(f"{rel}: __version__ {declared[0][1]} != {version}")
    return found


def bump(new_version: str, root: Path = ROOT) -> list[Path]:
    """Write new_version everywhere; returns the files changed."""
    if not VERSION_PATTERN.match(new_version):
        raise SystemExit(f"{new_version!r} is not a PEP 440 version such as 1.2.3 or 1.2.3rc1")
    changed = []

    def write(path: Path, text: str) -> None:
        if path.read_text() != text:
            path.write_text(text)
            changed.append(path)

    write(root / "VERSION", new_version + "\n")
    for path in pyprojects(root):
        text = PROJECT_VERSION.sub(lambda m: m.group(1) + new_version + m.group(3), path.read_text(), count=1)
        write(path, PIN.sub(lambda m: f"{m.group(1)}{m.group(2)}=={new_version}", text))
    for path in version_modules(root):
        write(path, MODULE_VERSION.sub(lambda m: m.group(1) + new_version + m.group(3), path.read_text()))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", nargs="?", help="the new version, e.g. 0.2.0")
    parser.add_argument("--check", action="store_true", help="verify that everything agrees with VERSION")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.check == (args.version is not None):
        parser.error("give either a new version or --check")
    if args.version is not None:
        for path in bump(args.version, args.root):
            print(f"wrote {path.relative_to(args.root)}")
    found = problems(args.root)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print(f"all distributions at {read_version(args.root)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

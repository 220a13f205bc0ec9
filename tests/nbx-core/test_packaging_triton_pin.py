"""The [nvidia] extra pins the Triton that the NVIDIA certificates were proven under, so a fresh
install is served them (docs/autotune.md, "Which Triton")."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def certified_triton_versions() -> set[str]:
    return {re.fullmatch(r"triton-(.+)-cuda", p.name).group(1)
            for p in (ROOT / "certificates" / "nvidia").glob("*/triton-*-cuda") if any(p.glob("*.json"))}


def test_the_nvidia_extra_pins_exactly_the_triton_the_certificates_were_proven_under():
    text = (ROOT / "packages" / "nbx-core" / "pyproject.toml").read_text()
    extra = re.search(r"^nvidia = \[(.*?)\]", text, re.MULTILINE | re.DOTALL).group(1)
    pins = re.findall(r'"(triton[^"]*)"', extra)
    assert len(pins) == 1, pins
    pinned = re.fullmatch(r"triton==([0-9.]+)\s*;\s*sys_platform == 'linux'", pins[0])
    assert pinned, f"{pins[0]!r} is not an exact pin"
    assert certified_triton_versions() == {pinned.group(1)}


def test_the_readme_clone_install_for_nvidia_names_the_same_triton():
    project = (ROOT / "packages" / "nbx-core" / "pyproject.toml").read_text()
    version = re.search(r'"triton==([0-9.]+)', project).group(1)
    assert f'"triton=={version}"' in (ROOT / "README.md").read_text()

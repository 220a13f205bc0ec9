"""Lock-step versions: VERSION is the one source, tools/bump_version.py moves and checks them."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"nbx_tools_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bump_version = load_tool("bump_version")


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """VERSION, the pyprojects and the version.py files of the repository, copied."""
    shutil.copy(ROOT / "VERSION", tmp_path / "VERSION")
    for path in bump_version.pyprojects(ROOT) + bump_version.version_modules(ROOT):
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return tmp_path


def test_every_distribution_agrees_with_the_version_file():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bump_version.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"all distributions at {bump_version.read_version(ROOT)}" in done.stdout


def test_every_distribution_has_a_pyproject_and_a_version_module():
    assert len(bump_version.pyprojects(ROOT)) == 8
    assert len(bump_version.version_modules(ROOT)) == 8


def test_bump_writes_version_file_pyprojects_pins_and_version_modules(repo_copy: Path):
    changed = bump_version.bump("2.3.4rc1", repo_copy)
    assert len(changed) == 1 + 8 + 8
    assert (repo_copy / "VERSION").read_text() == "2.3.4rc1\n"
    core = (repo_copy / "packages/nbx-core/pyproject.toml").read_text()
    assert 'version = "2.3.4rc1"' in core
    assert '"nbx-devices-nvidia==2.3.4rc1"' in core and "==0.1.0" not in core
    amd_version = repo_copy / "packages/nbx-devices-amd/src/nbx/devices/amd/version.py"
    assert amd_version.read_text() == '__version__ = "2.3.4rc1"\n'
    assert bump_version.problems(repo_copy) == []


def test_check_lists_each_pin_and_version_that_disagrees(repo_copy: Path):
    pyproject = repo_copy / "packages/nbx-memory/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"nbx-core==', '"nbx-core==9.9.9x'))
    module = repo_copy / "packages/nbx-kernels/src/nbx/kernels/version.py"
    module.write_text('__version__ = "0.0.1"\n')
    version = bump_version.read_version(repo_copy)
    found = bump_version.problems(repo_copy)
    assert any(line.startswith("packages/nbx-memory/pyproject.toml: pin nbx-core==9.9.9x") for line in found)
    assert f"packages/nbx-kernels/src/nbx/kernels/version.py: __version__ 0.0.1 != {version}" in found
    assert len(found) == 2
    assert bump_version.main(["--check", "--root", str(repo_copy)]) == 1


def test_bump_refuses_a_version_that_is_not_pep_440(repo_copy: Path):
    with pytest.raises(SystemExit, match="'v1.0' is not a PEP 440 version"):
        bump_version.bump("v1.0", repo_copy)
    assert bump_version.problems(repo_copy) == []

"""tools/check_wheels.py: real wheels of two distributions pass; each kind of broken wheel is named."""
from __future__ import annotations

import importlib.util
import io
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"nbx_tools_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_wheels = load_tool("check_wheels")
VERSION = (ROOT / "VERSION").read_text().strip()


def make_wheel(folder: Path, name: str, version: str = VERSION, requires=(), extras=(), files=(),
               entry_points: str = "") -> Path:
    stem = name.replace("-", "_")
    path = folder / f"{stem}-{version}-py3-none-any.whl"
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}"]
    lines += [f"Provides-Extra: {e}" for e in extras] + [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as wheel:
        for member in files:
            wheel.writestr(member, "")
        wheel.writestr(f"{stem}-{version}.dist-info/METADATA", "\n".join(lines) + "\n")
        if entry_points:
            wheel.writestr(f"{stem}-{version}.dist-info/entry_points.txt", entry_points)
    return path


def test_built_core_and_nvidia_wheels_and_sdists_pass_every_check(tmp_path: Path):
    """Built as pip builds them (sdist, then the wheel from the sdist), with the installed hatchling."""
    names = ["nbx-core", "nbx-devices-nvidia"]
    assert check_wheels.build(names, tmp_path, isolation=False) == []
    assert check_wheels.check_dist(tmp_path, names) == []
    wheel = zipfile.ZipFile(next(tmp_path.glob("nbx_devices_nvidia-*.whl")))
    shipped = {n.removeprefix("nbx/devices/nvidia/data/devices/") for n in wheel.namelist()
               if n.startswith("nbx/devices/nvidia/data/devices/")}
    assert {p.name for p in (ROOT / "devices/nvidia").glob("*.yml")} <= shipped
    assert any(n.startswith("nbx/devices/nvidia/data/certificates/") for n in wheel.namelist())


def test_a_namespace_init_and_a_file_of_another_package_are_named(tmp_path: Path):
    wheel = make_wheel(tmp_path, "nbx-memory", requires=[f"nbx-core=={VERSION}"],
                       files=["nbx/__init__.py", "nbx/memory/version.py", "nbx/core/tensor.py"])
    found = check_wheels.check_wheel(wheel, VERSION, ROOT)
    assert any("contains nbx/__init__.py, which would shadow the shared nbx namespace" in f for f in found)
    assert any("nbx/core/tensor.py lies outside nbx/memory/" in f for f in found)
    assert len(found) == 2


def test_a_wrong_version_and_a_loose_pin_are_named(tmp_path: Path):
    wheel = make_wheel(tmp_path, "nbx-memory", version="9.9.9", requires=["nbx-core>=0.1"],
                       files=["nbx/memory/version.py"])
    found = check_wheels.check_wheel(wheel, VERSION, ROOT)
    assert any(f"METADATA version 9.9.9 != {VERSION}" in f for f in found)
    assert any(f"requirement 'nbx-core>=0.1' is not pinned =={VERSION}" in f for f in found)


def test_a_dependency_against_the_one_way_order_is_named(tmp_path: Path):
    wheel = make_wheel(tmp_path, "nbx-memory", requires=[f"nbx-kernels=={VERSION}"], files=["nbx/memory/version.py"])
    found = check_wheels.check_wheel(wheel, VERSION, ROOT)
    assert found == [f"{wheel.name}: nbx-memory: depends on nbx-kernels, against the one-way order "
                     "nbx-core <- nbx-memory <- nbx-autotune <- nbx-kernels"]


def test_an_extra_that_pulls_the_wrong_distributions_is_named(tmp_path: Path):
    pins = [f"nbx-{d}=={VERSION}; extra == '{{v}}'" for d in ("memory", "autotune", "kernels")]
    requires = [p.format(v=v) for v in ("nvidia", "amd") for p in pins]
    requires += [f"nbx-devices-nvidia=={VERSION}; extra == 'nvidia'", f"nbx-devices-nvidia=={VERSION}; extra == 'amd'"]
    wheel = make_wheel(tmp_path, "nbx-core", requires=requires, extras=["nvidia", "amd"], files=["nbx/core/version.py"],
                       entry_points="[console_scripts]\nnbx = nbx.core.cli:main\n")
    found = check_wheels.check_wheel(wheel, VERSION, ROOT)
    assert any("nbx-core[amd] pulls ['nbx-autotune', 'nbx-devices-nvidia', 'nbx-kernels', 'nbx-memory'], "
               "expected ['nbx-autotune', 'nbx-devices-amd', 'nbx-kernels', 'nbx-memory']" in f for f in found)
    assert any("nbx-core: no extra [apple]" in f for f in found)
    assert len(found) == 2


def test_a_vendor_wheel_without_entry_point_or_data_is_named(tmp_path: Path):
    wheel = make_wheel(tmp_path, "nbx-devices-amd", requires=[f"nbx-core=={VERSION}"],
                       files=["nbx/devices/amd/version.py"])
    found = check_wheels.check_wheel(wheel, VERSION, ROOT)
    assert any("no entry point amd = nbx.devices.amd in the group nbx.devices" in f for f in found)
    assert any("certificates/amd/README.md missing from the wheel" in f for f in found)


def test_an_sdist_that_stores_a_symlink_is_named(tmp_path: Path):
    path = tmp_path / f"nbx_devices_amd-{VERSION}.tar.gz"
    top = f"nbx_devices_amd-{VERSION}"
    with tarfile.open(path, "w:gz") as sdist:
        for member in ("pyproject.toml", "PKG-INFO", "README.md"):
            info = tarfile.TarInfo(f"{top}/{member}")
            sdist.addfile(info, io.BytesIO(b""))
        link = tarfile.TarInfo(f"{top}/src/nbx/devices/amd/data/devices")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../../../../../devices/amd"
        sdist.addfile(link)
    assert check_wheels.check_sdist(path, VERSION) == [
        f"{path.name}: {top}/src/nbx/devices/amd/data/devices is a link; "
        "building from the sdist elsewhere would lose it"]


def test_the_built_models_wheel_passes_and_pulls_only_nbx_core(tmp_path: Path):
    assert check_wheels.build(["nbx-models"], tmp_path, isolation=False) == []
    assert check_wheels.check_dist(tmp_path, ["nbx-models"]) == []
    wheel = zipfile.ZipFile(next(tmp_path.glob("nbx_models-*.whl")))
    meta, _ = check_wheels.read_metadata(wheel)
    assert [r for r in meta.get_all("Requires-Dist") if r.startswith("nbx-")] == [f"nbx-core=={VERSION}"]
    assert "nbx/models/cli.py" in wheel.namelist()


def test_a_models_wheel_that_depends_on_the_kernels_is_named(tmp_path: Path):
    wheel = make_wheel(tmp_path, "nbx-models", requires=[f"nbx-kernels=={VERSION}"], files=["nbx/models/version.py"])
    found = check_wheels.check_wheel(wheel, VERSION, ROOT)
    assert found == [f"{wheel.name}: nbx-models: depends on nbx-kernels, against the one-way order "
                     "nbx-core <- nbx-memory <- nbx-autotune <- nbx-kernels"]

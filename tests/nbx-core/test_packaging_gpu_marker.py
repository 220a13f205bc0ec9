"""tests/conftest.py skips tests marked `gpu` with a reason when no CUDA device is found, and only then."""
from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

from nbx.core import device as DEVICE

ROOT = Path(__file__).resolve().parents[2]

GPU_TEST = '''
import pytest

@pytest.mark.gpu
def test_needs_a_gpu():
    pass
'''


def load_conftest():
    spec = importlib.util.spec_from_file_location("nbx_suite_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeItem:
    def __init__(self, gpu: bool):
        self.gpu, self.markers = gpu, []

    def get_closest_marker(self, name):
        return object() if name == "gpu" and self.gpu else None

    def add_marker(self, marker):
        self.markers.append(marker)


class FakeCuda:
    def __init__(self, count):
        self.count = count

    def device_count(self):
        if isinstance(self.count, Exception):
            raise self.count
        return self.count


def skip_reasons(monkeypatch, found_backends: dict, errors: dict | None = None) -> list[str | None]:
    """The skip reason conftest gives a gpu-marked item and an unmarked one, with these backends."""
    monkeypatch.setattr(DEVICE, "backends", lambda: found_backends)
    monkeypatch.setattr(DEVICE, "plugin_errors", lambda: errors or {})
    items = [FakeItem(gpu=True), FakeItem(gpu=False)]
    load_conftest().pytest_collection_modifyitems(None, items)
    return [item.markers[0].mark.kwargs["reason"] if item.markers else None for item in items]


def test_gpu_tests_are_skipped_with_a_reason_in_a_real_run_here(tmp_path: Path, source_env):
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_gpu_only.py").write_text(GPU_TEST)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--assert=plain", "--import-mode=importlib", str(suite)],
                          capture_output=True, text=True, env=source_env, cwd=suite)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    # without nbx-devices-nvidia there is no cuda backend; with it but no GPU, a backend with no device
    assert re.search(r"SKIPPED .* needs a GPU: (no 'cuda' backend|the cuda backend (found no device|cannot count))",
                     done.stdout), done.stdout


def test_without_a_cuda_backend_the_reason_names_the_plugin_errors(monkeypatch):
    reasons = skip_reasons(monkeypatch, {"cpu": object()}, {"nvidia": "OSError: libcuda.so.1 not found"})
    assert reasons == ["needs a GPU: no 'cuda' backend (plugin errors: nvidia: OSError: libcuda.so.1 not found)", None]
    assert skip_reasons(monkeypatch, {"cpu": object()}) == [
        "needs a GPU: no 'cuda' backend (nbx-devices-nvidia not installed)", None]


def test_a_cuda_backend_without_devices_or_failing_to_count_skips_with_that_reason(monkeypatch):
    assert skip_reasons(monkeypatch, {"cuda": FakeCuda(0)}) == ["needs a GPU: the cuda backend found no device", None]
    assert skip_reasons(monkeypatch, {"cuda": FakeCuda(RuntimeError("driver too old"))}) == [
        "needs a GPU: the cuda backend cannot count devices: RuntimeError: driver too old", None]


def test_gpu_tests_run_when_a_cuda_backend_has_a_device(monkeypatch):
    assert skip_reasons(monkeypatch, {"cuda": FakeCuda(1)}) == [None, None]

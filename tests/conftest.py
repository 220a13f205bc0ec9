"""Suite-wide settings: the `gpu` marker's skip, hypothesis's CI profile, a source-tree environment."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# Kernel tests run on the `interp` device, Triton's interpreter, unless the runner chose already:
# tools/gpu_run.sh sets TRITON_INTERPRET=0 to run the same kernels on the GPU. Triton reads it at
# import, so it is set here, before any test module imports triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = sorted(str(p) for p in ROOT.glob("packages/*/src"))

try:
    from hypothesis import settings
except ImportError:  # hypothesis is a test dependency; without it only its tests fail
    pass
else:
    # A loaded 2-core CI machine makes per-example deadlines flaky; the examples stay the same.
    settings.register_profile("ci", deadline=None)
    if os.environ.get("CI"):
        settings.load_profile("ci")


@pytest.fixture(scope="session")
def interp():
    """The interp device with every kernel family registered. A GPU run (TRITON_INTERPRET=0) skips
    the tests that take it; with the interpreter on, a missing interp device is a broken plugin."""
    from nbx import kernels
    from nbx.core import as_device
    from nbx.core.device import backends, plugin_errors
    kernels.register()
    if "interp" not in backends():
        reason = plugin_errors().get("interp", "the interp device is not registered")
        if os.environ.get("TRITON_INTERPRET") == "1":
            pytest.fail(f"the interp device failed to register: {reason}")
        pytest.skip(f"interp unavailable (a GPU run: TRITON_INTERPRET is not 1): {reason}")
    return as_device("interp")


def gpu_unavailable_reason() -> str | None:
    """Why tests marked `gpu` cannot run here, or None when a CUDA device is present."""
    from nbx.core.device import backends, plugin_errors

    cuda = backends().get("cuda")
    if cuda is None:
        errors = "; ".join(f"{n}: {e}" for n, e in sorted(plugin_errors().items()))
        why = f"plugin errors: {errors}" if errors else "nbx-devices-nvidia not installed"
        return f"no 'cuda' backend ({why})"
    try:
        count = cuda.device_count()
    except Exception as exc:
        return f"the cuda backend cannot count devices: {type(exc).__name__}: {exc}"
    return None if count > 0 else "the cuda backend found no device"


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = gpu_unavailable_reason()
    if reason:
        skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def source_env() -> dict[str, str]:
    """os.environ with every distribution's src/ first on PYTHONPATH: for tests that start a fresh python."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(SOURCE_DIRS + [p for p in [env.get("PYTHONPATH")] if p])
    return env

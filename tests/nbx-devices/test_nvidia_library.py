"""Opening the CUDA libraries: lazily, in the documented order, and a named error listing every
place tried when none opens. ctypes is replaced so that these hold on machines with or without CUDA."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
from nbx.devices.nvidia import library, runtime
from nbx.devices.nvidia.errors import CudaError, CudaLibraryNotFound


@pytest.fixture
def no_cuda(monkeypatch):
    """A machine where no CUDA library opens and no wheel is installed."""
    tried = []

    def refuse(path):
        tried.append(path)
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.setattr(library.ctypes, "CDLL", refuse)
    monkeypatch.setattr(library.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    monkeypatch.setattr(library, "_package_dirs", lambda package: [])
    monkeypatch.setattr(library, "_opened", {})
    return tried


def test_a_missing_runtime_is_a_named_error_listing_every_place_tried(no_cuda):
    with pytest.raises(CudaLibraryNotFound, match="CUDA runtime \\(libcudart\\) library could not be opened") as info:
        library.open_library("runtime")
    text = str(info.value)
    for place in ("nvidia/cuda_runtime/lib/libcudart.so.12 (package nvidia.cuda_runtime is not installed)",
                  "nvidia/cu13/lib/libcudart.so.13", "libcudart.so.12 (libcudart.so.12: cannot open",
                  "libcudart.so.13 (libcudart.so.13: cannot open", "find_library('cudart') (found nothing)",
                  "/usr/local/cuda/lib64/libcudart.so* (no match)"):
        assert place in text
    assert info.value.tried == [line.strip() for line in text.splitlines()[1:-1]]
    assert no_cuda == ["libcudart.so.12", "libcudart.so.13", "libcudart.so"]


def test_a_missing_driver_is_a_named_error_listing_every_place_tried(no_cuda):
    with pytest.raises(CudaLibraryNotFound, match=r"driver \(libcuda\)[\s\S]*libcuda.so.1 \(libcuda.so.1: cannot open"):
        library.open_library("driver")


def test_using_cuda_without_a_runtime_raises_the_named_error_not_an_oserror(no_cuda, monkeypatch):
    monkeypatch.setattr(runtime, "_runtime", None)
    monkeypatch.setattr(runtime, "_count", None)
    with pytest.raises(CudaLibraryNotFound, match="places tried"):
        runtime.device_count()
    assert runtime.available() is False


def test_the_cu12_wheel_is_preferred_over_the_cuda_13_runtime(monkeypatch, tmp_path):
    wheel = tmp_path / "nvidia" / "cuda_runtime"
    (wheel / "lib").mkdir(parents=True)
    (wheel / "lib" / "libcudart.so.12").write_bytes(b"")
    opened = []
    monkeypatch.setattr(library.ctypes, "CDLL", lambda path: opened.append(path) or object())
    monkeypatch.setattr(library, "_package_dirs",
                        lambda package: [str(wheel)] if package == "nvidia.cuda_runtime" else [])
    monkeypatch.setattr(library, "_opened", {})
    _, path = library.open_library("runtime")
    assert path == os.path.join(str(wheel), "lib", "libcudart.so.12")
    assert opened == [path]


def test_a_wheel_folder_without_the_file_is_listed_and_passed_over(monkeypatch, tmp_path):
    wheel = tmp_path / "nvidia" / "cuda_runtime"
    wheel.mkdir(parents=True)
    monkeypatch.setattr(library, "_package_dirs",
                        lambda package: [str(wheel)] if package == "nvidia.cuda_runtime" else [])
    places = [shown for shown, _ in library.runtime_candidates()]
    assert places[0] == os.path.join(str(wheel), "lib", "libcudart.so.12")
    assert places.index("libcudart.so.12") < places.index("libcudart.so.13")


def test_importing_and_registering_the_plugin_opens_no_library():
    code = ("import nbx.core as nbx; from nbx.devices import nvidia; nvidia.register();"
            "from nbx.core.device import get_backend; from nbx.core.dispatch import has_implementation;"
            "import nbx.devices.nvidia.backend, nbx.devices.nvidia.copies, nbx.devices.nvidia.streams;"
            "from nbx.devices.nvidia import library, runtime;"
            "assert get_backend('cuda').name == 'cuda';"
            "assert has_implementation('copy_', 'cuda') and has_implementation('fill_', 'cuda');"
            "assert library._opened == {} and runtime._runtime is None, library._opened;"
            "import sys; assert 'triton' not in sys.modules and 'torch' not in sys.modules")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


class _FakeRuntimeLib:
    """Just enough of libcudart for CudaRuntime: every function returns the code it is given."""

    def __init__(self, codes):
        self.cleared = 0
        for name in runtime.PROTOTYPES:
            setattr(self, name, _Returns(codes.get(name, 0)))
        self.cudaGetLastError = _Returns(0, on_call=self._clear)
        self.cudaGetErrorName = _Returns(b"cudaErrorMemoryAllocation")
        self.cudaGetErrorString = _Returns(b"out of memory")

    def _clear(self):
        self.cleared += 1


class _Returns:
    def __init__(self, value, on_call=None):
        self.value, self.on_call = value, on_call

    def __call__(self, *args):
        if self.on_call:
            self.on_call()
        return self.value


def test_a_failing_call_carries_function_code_and_name_and_clears_the_last_error():
    lib = _FakeRuntimeLib({"cudaHostAlloc": 2})
    rt = runtime.CudaRuntime(lib, "fake")
    expected = r"^cudaHostAlloc failed with cudaErrorMemoryAllocation \(2\): out of memory \[64 bytes\]$"
    with pytest.raises(CudaError, match=expected) as info:
        rt.call("cudaHostAlloc", None, 64, 0, context="64 bytes")
    assert (info.value.function, info.value.code, info.value.name) == ("cudaHostAlloc", 2, "cudaErrorMemoryAllocation")
    assert lib.cleared == 1


def test_a_query_is_false_while_not_ready_and_an_error_otherwise():
    assert runtime.CudaRuntime(_FakeRuntimeLib({"cudaStreamQuery": 600}), "fake").query("cudaStreamQuery", 0) is False
    assert runtime.CudaRuntime(_FakeRuntimeLib({}), "fake").query("cudaEventQuery", 0) is True
    with pytest.raises(CudaError, match="cudaEventQuery failed"):
        runtime.CudaRuntime(_FakeRuntimeLib({"cudaEventQuery": 2}), "fake").query("cudaEventQuery", 0)


def test_the_real_runtime_names_its_error_codes_where_one_is_installed():
    try:
        rt = runtime.CudaRuntime(*library.open_library("runtime"))
    except CudaLibraryNotFound as exc:
        pytest.skip(f"no CUDA runtime on this machine: {exc.tried[:3]}")
    assert rt.error_name(2) == "cudaErrorMemoryAllocation"
    assert rt.error_name(101) == "cudaErrorInvalidDevice"
    assert rt.error("cudaMalloc", 2).name == "cudaErrorMemoryAllocation"


class _DriverlessCudart:
    """A libcudart on a machine without any NVIDIA driver: every call answers cudaErrorInsufficientDriver."""

    def __getattr__(self, name):
        answers = {"cudaGetErrorName": lambda code: b"cudaErrorInsufficientDriver",
                   "cudaGetErrorString": lambda code: b"CUDA driver version is insufficient for CUDA runtime version",
                   "cudaGetLastError": lambda: 0}
        fn = answers.get(name, lambda *args: runtime.ERROR_INSUFFICIENT_DRIVER)
        setattr(self, name, fn)  # a plain function: CudaRuntime may set its argtypes
        return fn


def test_no_driver_at_all_is_said_in_one_line_as_a_device_error_not_as_an_old_driver(no_cuda, monkeypatch):
    from nbx.core.errors import DeviceError
    from nbx.devices.nvidia.errors import NvidiaDriverNotFound
    monkeypatch.setattr(runtime, "_runtime", runtime.CudaRuntime(_DriverlessCudart(), "libcudart.so.13"))
    monkeypatch.setattr(runtime, "_count", None)
    with pytest.raises(NvidiaDriverNotFound) as info:
        runtime.device_count()
    text = str(info.value)
    assert isinstance(info.value, DeviceError) and isinstance(info.value, CudaError)
    assert "\n" not in text and "insufficient" not in text
    assert text.startswith("no NVIDIA driver found on this machine (the driver library libcuda opens nowhere; "
                           "looked for libcuda.so.1, libcuda.so, ")
    assert info.value.code == runtime.ERROR_INSUFFICIENT_DRIVER


def test_an_old_driver_that_opens_keeps_cudas_own_insufficient_driver_error(monkeypatch):
    monkeypatch.setattr(runtime, "_runtime", runtime.CudaRuntime(_DriverlessCudart(), "libcudart.so.13"))
    monkeypatch.setattr(runtime, "_count", None)
    monkeypatch.setattr(library, "open_library", lambda kind: (object(), "libcuda.so.1"))
    with pytest.raises(CudaError, match="cudaErrorInsufficientDriver \\(35\\): CUDA driver version is insufficient"):
        runtime.device_count()

"""NCCL without NCCL: finding the library (a named error listing every place tried when it is absent),
naming its error codes through a fake library object, the unique id's round trips through a file and
an environment variable, and the dtype / reduction mapping with its refusals."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time

import nbx.core as nbx
import pytest
from nbx.core.errors import ArgumentError, DTypeError
from nbx.devices.nvidia import nccl_bootstrap, nccl_library, nccl_types
from nbx.devices.nvidia.nccl_bootstrap import UniqueId
from nbx.devices.nvidia.nccl_errors import NcclBootstrapError, NcclDTypeError, NcclError, NcclLibraryNotFound


# ---- finding the library ------------------------------------------------------------------------
@pytest.fixture
def no_nccl(monkeypatch):
    """A machine where no libnccl opens and no wheel is installed; records what was opened."""
    tried = []

    def refuse(path):
        tried.append(path)
        raise OSError(f"{path}: cannot open shared object file")

    monkeypatch.delenv(nccl_library.ENV_LIBRARY, raising=False)
    monkeypatch.setattr(nccl_library.ctypes, "CDLL", refuse)
    monkeypatch.setattr(nccl_library.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    monkeypatch.setattr(nccl_library, "_package_dirs", lambda package: [])
    monkeypatch.setattr(nccl_library, "_library", None)
    return tried


def test_without_nccl_the_error_is_named_and_lists_every_place_tried(no_nccl):
    with pytest.raises(NcclLibraryNotFound, match="the NCCL library \\(libnccl.so.2\\) could not be opened; "
                                                  "places tried") as info:
        nccl_library.nccl()
    tried = info.value.tried
    assert tried[0] == "$NBX_NCCL_LIBRARY (not set)"
    assert tried[1].startswith("nvidia/nccl/lib/libnccl.so.2 (package nvidia.nccl is not installed")
    assert "libnccl.so.2 (libnccl.so.2: cannot open shared object file)" in tried
    assert "ctypes.util.find_library('nccl') (found nothing)" in tried
    assert "/usr/local/cuda/lib64/libnccl.so* (no match)" in tried
    assert no_nccl == ["libnccl.so.2", "libnccl.so"]   # only the sonames reached the loader
    assert "pip install nvidia-nccl-cu12" in str(info.value) and "nvidia-nccl-cu13" in str(info.value)
    assert nccl_library.available() is False


def test_making_a_unique_id_without_nccl_is_the_named_error_not_an_oserror(no_nccl):
    with pytest.raises(NcclLibraryNotFound, match="places tried"):
        nccl_bootstrap.unique_id()


def test_the_wheel_folder_is_tried_before_the_loader_and_a_missing_file_is_listed(no_nccl, monkeypatch, tmp_path):
    wheel = tmp_path / "nvidia" / "nccl"
    (wheel / "lib").mkdir(parents=True)
    monkeypatch.setattr(nccl_library, "_package_dirs", lambda package: [str(wheel)] if package == "nvidia.nccl" else [])
    places = [shown for shown, _ in nccl_library.candidates()]
    expected = os.path.join(str(wheel), "lib", "libnccl.so.2")
    assert places.index(expected) < places.index("libnccl.so.2")
    with pytest.raises(NcclLibraryNotFound) as info:
        nccl_library.nccl()
    assert f"{expected} (no such file)" in info.value.tried


def test_the_library_named_in_the_environment_comes_first(no_nccl, monkeypatch, tmp_path):
    named = tmp_path / "libnccl.so.2"
    named.write_bytes(b"")
    monkeypatch.setenv(nccl_library.ENV_LIBRARY, str(named))
    assert nccl_library.candidates()[0] == (str(named), str(named))
    with pytest.raises(NcclLibraryNotFound) as info:
        nccl_library.nccl()
    assert info.value.tried[0].startswith(f"{named} ({named}: cannot open")


def test_an_nccl_too_old_for_nbx_is_passed_over_for_the_next_place(no_nccl, monkeypatch, tmp_path):
    old, new = tmp_path / "old" / "libnccl.so.2", tmp_path / "new" / "libnccl.so.2"
    for path in (old, new):
        path.parent.mkdir()
        path.write_bytes(b"")
    monkeypatch.setenv(nccl_library.ENV_LIBRARY, str(old))
    monkeypatch.setattr(glob, "glob", lambda pattern: [str(new)] if "x86_64" in pattern else [])
    too_old = _FakeNcclLib()
    del too_old.ncclSend, too_old.ncclRecv
    libraries = {str(old): too_old, str(new): _FakeNcclLib()}

    def opener(path):
        if path not in libraries:
            raise OSError(f"{path}: cannot open shared object file")
        return libraries[path]

    monkeypatch.setattr(nccl_library.ctypes, "CDLL", opener)
    lib = nccl_library.nccl()
    assert lib.path == str(new) and lib.version == (2, 27, 3)
    monkeypatch.setattr(nccl_library, "_library", None)
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    with pytest.raises(NcclLibraryNotFound, match=r"libnccl.so.2 \(lacks ncclSend, ncclRecv: nbx needs NCCL 2.7 "
                                                  r"or newer\)"):
        nccl_library.nccl()


def test_importing_the_nccl_modules_opens_no_library(source_env):
    code = ("from nbx.devices.nvidia import nccl, parallel, nccl_launch, nccl_library, library, runtime;"
            "assert nccl_library._library is None and library._opened == {} and runtime._runtime is None;"
            "import sys; assert 'torch' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], env=source_env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# ---- error codes through a fake library object ----------------------------------------------------
class _Returns:
    def __init__(self, value, effect=None):
        self.value, self.effect = value, effect

    def __call__(self, *args):
        if self.effect:
            self.effect(*args)
        return self.value


class _FakeNcclLib:
    """Just enough of libnccl for NcclLibrary: each function returns the code it is given."""

    def __init__(self, codes=(), version=22703, last_error=b"proxy.cc:1234 NCCL WARN simulated\n"):
        codes = dict(codes)
        for name in nccl_library.PROTOTYPES:
            setattr(self, name, _Returns(codes.get(name, 0)))
        self.ncclGetVersion = _Returns(0, lambda p: setattr(p._obj, "value", version))
        self.ncclGetErrorString = _Returns(b"unhandled system error (run with NCCL_DEBUG=INFO for details)")
        if last_error is not None:
            self.ncclGetLastError = _Returns(last_error)


def test_a_failing_call_carries_function_code_name_and_nccls_own_words():
    lib = nccl_library.NcclLibrary(_FakeNcclLib({"ncclAllReduce": 2}), "fake")
    expected = (r"^ncclAllReduce failed with ncclSystemError \(2\): unhandled system error \(run with "
                r"NCCL_DEBUG=INFO for details\) \[proxy.cc:1234 NCCL WARN simulated\]$")
    with pytest.raises(NcclError, match=expected) as info:
        lib.call("ncclAllReduce", 0, 0, 1, 7, 0, None, None)
    assert (info.value.function, info.value.code, info.value.name) == ("ncclAllReduce", 2, "ncclSystemError")


@pytest.mark.parametrize("code, name", [(1, "ncclUnhandledCudaError"), (3, "ncclInternalError"),
                                        (4, "ncclInvalidArgument"), (5, "ncclInvalidUsage"),
                                        (6, "ncclRemoteError"), (42, "ncclResult 42")])
def test_every_nccl_result_code_is_named(code, name):
    lib = nccl_library.NcclLibrary(_FakeNcclLib({"ncclGroupEnd": code}), "fake")
    with pytest.raises(NcclError, match=rf"ncclGroupEnd failed with {name} \({code}\)"):
        lib.call("ncclGroupEnd")


def test_an_nccl_without_ncclGetLastError_still_names_its_errors():
    lib = nccl_library.NcclLibrary(_FakeNcclLib({"ncclGroupEnd": 5}, last_error=None), "fake")
    with pytest.raises(NcclError, match=r"ncclGroupEnd failed with ncclInvalidUsage \(5\): unhandled") as info:
        lib.call("ncclGroupEnd")
    assert info.value.detail == ""


@pytest.mark.parametrize("code, version", [(22703, (2, 27, 3)), (21000, (2, 10, 0)), (2804, (2, 8, 4))])
def test_nccl_version_codes_split_in_both_encodings(code, version):
    assert nccl_library.split_version(code) == version
    assert nccl_library.NcclLibrary(_FakeNcclLib(version=code), "fake").version == version


# ---- the unique id ------------------------------------------------------------------------------
RAW = bytes(range(128))


def test_a_unique_id_round_trips_through_a_file(tmp_path):
    path = UniqueId(RAW).to_file(tmp_path / "id.hex")
    assert UniqueId.from_file(path) == UniqueId(RAW)
    assert path.read_text().strip() == RAW.hex()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["id.hex"]   # the temporary file was renamed away


def test_a_unique_id_round_trips_through_an_environment_variable(monkeypatch):
    monkeypatch.delenv(nccl_bootstrap.ENV_UNIQUE_ID, raising=False)
    UniqueId(RAW).to_env()
    assert os.environ[nccl_bootstrap.ENV_UNIQUE_ID] == RAW.hex()
    assert UniqueId.from_env() == UniqueId(RAW)
    env = {}
    UniqueId(RAW[::-1]).to_env("OTHER", env)
    assert UniqueId.from_env("OTHER", env).raw == RAW[::-1]


def test_a_reader_waits_for_the_file_rank_0_writes_later(tmp_path):
    path = tmp_path / "id.hex"
    writer = threading.Timer(0.2, lambda: UniqueId(RAW).to_file(path))
    writer.start()
    started = time.monotonic()
    assert UniqueId.from_file(path, timeout=10).raw == RAW
    assert time.monotonic() - started >= 0.15
    writer.join()


def test_unique_id_refusals_are_named(tmp_path):
    with pytest.raises(NcclBootstrapError, match="an NCCL unique id is 128 bytes, got 5"):
        UniqueId(b"short")
    with pytest.raises(NcclBootstrapError, match=r"\$NBX_NCCL_UNIQUE_ID holds 4 characters; an NCCL unique id is "
                                                 r"256 hex digits"):
        UniqueId.from_env(environ={"NBX_NCCL_UNIQUE_ID": "abcd"})
    with pytest.raises(NcclBootstrapError, match=r"\$NBX_NCCL_UNIQUE_ID is not hex"):
        UniqueId.from_env(environ={"NBX_NCCL_UNIQUE_ID": "zz" * 128})
    with pytest.raises(NcclBootstrapError, match=r"\$NBX_NCCL_UNIQUE_ID is not set"):
        UniqueId.from_env(environ={})
    with pytest.raises(NcclBootstrapError, match=r"no NCCL unique id at .*missing.hex after waiting 0.1 s: "
                                                 r"rank 0 writes it there"):
        UniqueId.from_file(tmp_path / "missing.hex", timeout=0.1)
    stale = UniqueId(RAW).to_file(tmp_path / "stale.hex")
    with pytest.raises(NcclBootstrapError, match="exists already: a stale NCCL id there would make the other "
                                                 "ranks wait forever"):
        UniqueId(RAW[::-1]).to_file(stale)
    UniqueId(RAW[::-1]).to_file(stale, exist_ok=True)
    assert UniqueId.from_file(stale).raw == RAW[::-1]


def test_rank_and_world_size_come_from_the_environment_and_are_checked():
    assert nccl_bootstrap.rank_from_env({"NBX_NCCL_RANK": "1", "NBX_NCCL_WORLD_SIZE": "2"}) == (1, 2)
    with pytest.raises(NcclBootstrapError, match=r"\$NBX_NCCL_RANK is not set"):
        nccl_bootstrap.rank_from_env({"NBX_NCCL_WORLD_SIZE": "2"})
    with pytest.raises(NcclBootstrapError, match=r"\$NBX_NCCL_WORLD_SIZE is 'two', not an integer"):
        nccl_bootstrap.rank_from_env({"NBX_NCCL_RANK": "0", "NBX_NCCL_WORLD_SIZE": "two"})
    with pytest.raises(NcclBootstrapError, match="rank 2 of world size 2: a rank is 0 <= rank < world size"):
        nccl_bootstrap.rank_from_env({"NBX_NCCL_RANK": "2", "NBX_NCCL_WORLD_SIZE": "2"})


def test_a_rank_without_an_id_route_is_refused_by_name():
    with pytest.raises(NcclBootstrapError, match=r"neither \$NBX_NCCL_UNIQUE_ID nor \$NBX_NCCL_ID_FILE is set"):
        nccl_bootstrap.shared_id(1, environ={})


# ---- dtypes and reductions ------------------------------------------------------------------------
NEW, OLD = (2, 27, 3), (2, 9, 9)


@pytest.mark.parametrize("name, code", [("int8", 0), ("uint8", 1), ("int32", 2), ("uint32", 3), ("int64", 4),
                                        ("uint64", 5), ("float16", 6), ("float32", 7), ("float64", 8),
                                        ("bfloat16", 9), ("float8_e4m3fn", 10), ("float8_e5m2", 11)])
def test_each_dtype_nccl_knows_maps_to_its_ncclDataType(name, code):
    for op in (None, "sum", "max"):
        assert nccl_types.wire(name, 10, NEW, op) == nccl_types.Wire(code, nccl_types.NCCL_TYPES[name][1], 10)


def test_every_dtype_of_the_table_moves_and_those_nccl_lacks_move_as_bytes():
    for name in nbx.dtypes.TABLE:
        w = nccl_types.wire(name, 10, OLD)
        if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "int16", "uint16", "complex64",
                    "complex128"):
            assert (w.name, w.count) == ("ncclUint8", 10 * nbx.dtypes.TABLE[name].itemsize), name
        else:
            assert w.count == 10 and w.name == nccl_types.NCCL_TYPES[name][1]


def test_complex_sums_and_averages_go_as_their_real_components_and_bool_max_min_as_uint8():
    assert nccl_types.wire("complex64", 10, NEW, "sum") == nccl_types.Wire(7, "ncclFloat32", 20)
    assert nccl_types.wire("complex128", 3, NEW, "avg") == nccl_types.Wire(8, "ncclFloat64", 6)
    assert nccl_types.wire("bool", 4, NEW, "max") == nccl_types.Wire(1, "ncclUint8", 4)


def test_reductions_nccl_cannot_do_are_refused_by_name():
    with pytest.raises(NcclDTypeError, match="NCCL has no type for int16, so it cannot sum-reduce it"):
        nccl_types.wire("int16", 4, NEW, "sum")
    with pytest.raises(NcclDTypeError, match="'max' of complex values is not componentwise"):
        nccl_types.wire("complex64", 4, NEW, "max")
    with pytest.raises(NcclDTypeError, match="NCCL reduces bool only by max and min"):
        nccl_types.wire("bool", 4, NEW, "sum")
    with pytest.raises(DTypeError):   # an NcclDTypeError is also nbx's DTypeError
        nccl_types.wire("uint16", 4, NEW, "min")


def test_float8_and_bfloat16_reductions_on_an_older_nccl_are_refused_naming_the_version():
    with pytest.raises(NcclDTypeError, match=r"a sum reduction of float8_e4m3fn needs ncclFloat8e4m3, which "
                                             r"arrived in NCCL 2.24; this is NCCL 2.21.5"):
        nccl_types.wire("float8_e4m3fn", 4, (2, 21, 5), "sum")
    with pytest.raises(NcclDTypeError, match="bfloat16 needs ncclBfloat16, which arrived in NCCL 2.10"):
        nccl_types.wire("bfloat16", 4, OLD, "max")
    assert nccl_types.wire("float8_e5m2", 4, (2, 21, 5)).name == "ncclUint8"   # still moves, as bytes


def test_reduction_names_are_checked_and_avg_needs_nccl_2_10():
    assert [nccl_types.reduce_op(op, NEW) for op in ("sum", "prod", "max", "min", "avg")] == [0, 1, 2, 3, 4]
    with pytest.raises(ArgumentError, match="unknown reduction 'mean'; NCCL reductions: sum, prod, max, min, avg"):
        nccl_types.reduce_op("mean", NEW)
    with pytest.raises(NcclDTypeError, match=r"the reduction 'avg' \(ncclAvg\) needs NCCL >= 2.10; this is "
                                             r"NCCL 2.9.9"):
        nccl_types.reduce_op("avg", OLD)
    assert nccl_types.reducible("float32", "avg", NEW) and not nccl_types.reducible("float32", "avg", OLD)

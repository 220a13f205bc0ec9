"""On a real GPU, in a process where torch is allowed (tools/gpu_run.sh runs this file apart from
the torch-blocked suite): DLPack round trips with torch without copies, streams handed over."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch", reason="needs torch: run in the torch process of tools/gpu_run.sh")

import nbx.core as nbx  # noqa: E402
from nbx.devices import nvidia  # noqa: E402
from nbx.devices.nvidia import runtime  # noqa: E402


@pytest.fixture(autouse=True)
def torch_sees_the_gpu():
    if not torch.cuda.is_available():
        pytest.fail("torch does not see the GPU in the torch process")


def test_torch_sees_nbx_memory_without_a_copy():
    t = nbx.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), "cuda")
    tt = torch.from_dlpack(t)
    assert tt.data_ptr() == t.data_ptr() and tt.device == torch.device("cuda", 0)
    assert tt.tolist() == t.tolist()
    tt[2, 3] = -1
    assert t.numpy()[2, 3] == -1


def test_torch_sees_strided_nbx_views_without_a_copy():
    t = nbx.from_numpy(np.arange(48, dtype=np.int32).reshape(6, 8), "cuda")
    view = t[1:5, ::2]
    tt = torch.from_dlpack(view)
    assert tt.data_ptr() == view.data_ptr() and tt.stride() == view.strides
    assert tt.tolist() == view.tolist()


def test_nbx_sees_torch_memory_without_a_copy():
    tt = torch.arange(30, device="cuda", dtype=torch.float16).reshape(5, 6).t()
    t = nbx.from_dlpack(tt)
    assert t.data_ptr() == tt.data_ptr() and t.device == nbx.as_device("cuda:0")
    assert t.strides == tt.stride() and t.dtype is nbx.float16
    assert t.numpy().tolist() == tt.cpu().tolist()


@pytest.mark.parametrize("name", ["bool", "bfloat16", "float8_e4m3fn", "float8_e5m2", "uint8", "int64", "complex64"])
def test_table_dtypes_round_trip_through_torch_bit_exact(name):
    dt = nbx.dtypes.TABLE[name]
    raw = np.random.default_rng(2).integers(0, 256, 256 * dt.itemsize, dtype=np.uint8)
    if dt.kind == "bool":
        raw %= 2
    t = nbx.from_numpy(raw.view(dt.host), "cuda")
    try:
        tt = torch.from_dlpack(t)
    except (RuntimeError, TypeError, BufferError) as exc:
        if name.startswith("float8"):  # torch's own DLPack support for float8 came late
            pytest.skip(f"torch {torch.__version__} refuses {name} over DLPack: {exc}")
        raise
    assert str(tt.dtype) == f"torch.{name}"
    back = nbx.from_dlpack(tt)
    assert back.data_ptr() == t.data_ptr() and back.dtype is dt
    assert back.numpy().tobytes() == raw.tobytes()


def test_torch_on_its_own_stream_waits_for_work_on_nbx_stream():
    t = nbx.zeros(1 << 28, dtype="int32", device="cuda")
    s = nvidia.Stream()
    torch_stream = torch.cuda.Stream()
    with s:
        for value in range(1, 11):  # ~10 passes of 1 GiB queued on nbx's stream
            runtime.memset_async(t.data_ptr(), value, t.nbytes, s.handle)
        with torch.cuda.stream(torch_stream):
            tt = torch.from_dlpack(t)
            count = (tt == 0x0A0A0A0A).sum()
    torch_stream.synchronize()
    assert int(count) == t.size


def test_nbx_waits_for_work_torch_queued_on_its_current_stream():
    torch_stream = torch.cuda.Stream()
    with torch.cuda.stream(torch_stream):
        tt = torch.zeros(1 << 28, dtype=torch.int32, device="cuda")
        for _ in range(10):
            tt.add_(1)
        t = nbx.from_dlpack(tt)  # nbx asks torch to make its (default) stream wait
    assert (t.numpy()[:: 1 << 16] == 10).all()

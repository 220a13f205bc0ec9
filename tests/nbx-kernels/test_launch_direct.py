"""launch.run's direct path: the key it reuses a compiled kernel by is what Triton specialises on,
so a launch that Triton would compile apart never runs another launch's kernel."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import launch

rng = np.random.default_rng(11)


def test_ints_are_keyed_by_width_and_by_being_one_or_a_multiple_of_sixteen():
    keys = {n: launch._direct([n])[1] for n in (1, 2, 3, 16, 32, 2 ** 31, -5)}
    assert keys[2] == keys[3] and keys[16] == keys[32]
    assert len({keys[1], keys[2], keys[16], keys[2 ** 31]}) == 4
    assert launch._direct([np.int64(1)])[1] == keys[1]  # numpy ints specialise as Python's do
    assert launch._direct([np.int64(7)]) == ([7], keys[3])


def test_scalars_of_other_kinds_are_keyed_by_type_and_unknown_kinds_are_left_to_the_jit():
    assert launch._direct([None, True, 1.5])[1] == (type(None), bool, float)
    assert launch._direct([object()]) is None


def test_a_tensor_is_keyed_by_dtype_and_sixteen_byte_alignment_and_passed_as_its_address(device):
    base = nbx.asarray(np.zeros(8, np.float32)).to(device)
    direct, key = launch._direct([base, base[1:], base[4:]])
    assert direct == [base.data_ptr(), base.data_ptr() + 4, base.data_ptr() + 16]
    assert key[0] == key[2] != key[1]
    _, half = launch._direct([nbx.asarray(np.zeros(8, np.float16)).to(device)])
    assert half != key[:1]


@pytest.mark.gpu
def test_on_a_gpu_each_family_reuses_its_compiled_kernels_and_stays_correct():
    device = nbx.as_device("cuda")
    host = rng.standard_normal((64, 1000)).astype(np.float32)
    x = nbx.asarray(host).to(device)
    reference = np.exp(host - host.max(1, keepdims=True))
    reference /= reference.sum(1, keepdims=True)
    first = nbx.softmax(x, dim=-1).numpy()
    count = launch.compiled_count()
    for _ in range(3):
        again = nbx.softmax(x, dim=-1).numpy()
        np.testing.assert_array_equal(again, first)
    assert launch.compiled_count() == count
    np.testing.assert_allclose(first, reference, rtol=1e-5, atol=1e-7)
    shifted = nbx.asarray(host.ravel()).to(device)[1:1 + 63 * 1000].reshape(63, 1000)  # 4 bytes off
    np.testing.assert_allclose(nbx.softmax(shifted, dim=-1).numpy(), reference_of(host.ravel()[1:63001]),
                               rtol=1e-5, atol=1e-7)
    assert launch.compiled_count() >= count + 1
    total = nbx.sum(x, dim=1).numpy()
    np.testing.assert_allclose(nbx.sum(x, dim=1).numpy(), total, rtol=0, atol=0)
    np.testing.assert_allclose(total, host.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def reference_of(flat):
    rows = flat.reshape(63, 1000).astype(np.float64)
    e = np.exp(rows - rows.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


class _Launcher:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


class _FakeKernel:
    """A JIT function's surface launch.run uses: kernel[grid](*args, **meta) and params."""

    def __init__(self, n_args: int):
        self.jit_calls = 0
        self.launcher = _Launcher()
        self.params = [type("P", (), {"name": f"a{i}", "default": None}) for i in range(n_args)]
        self.params.append(type("P", (), {"name": "BLOCK", "default": None}))

    def __getitem__(self, grid):
        def compile_and_launch(*args, **meta):
            self.jit_calls += 1
            return type("Compiled", (), {"run": self.launcher, "function": 7, "packed_metadata": "pm"})()
        return compile_and_launch


class _Backend:
    def device_count(self):
        return 1

    def device_guard(self, device):
        import contextlib
        return contextlib.nullcontext()


def test_a_call_site_repeat_launches_its_compiled_kernel_by_its_pointers_alignment_alone(monkeypatch):
    from nbx.core.device import Device
    monkeypatch.setattr(launch, "get_backend", lambda kind: _Backend())
    monkeypatch.setattr(launch, "_stream_of", lambda index: 99)
    launch.forget_compiled()
    base = nbx.asarray(np.zeros(64, np.float32))
    x, shifted = base[:16], base[1:17]
    kernel = _FakeKernel(3)
    site = launch.CallSite(kernel, (4,), Device("cuda", 0), {"BLOCK": 16}, pointers=(0,))
    site.run([x, 5, 2.5])
    assert kernel.jit_calls == 1 and not kernel.launcher.calls
    site.run([x, 5, 3.5])   # another scalar value: the same compiled kernel, called directly
    assert kernel.jit_calls == 1
    assert kernel.launcher.calls == [(4, 1, 1, 99, 7, "pm", None, None, None, x.data_ptr(), 5, 3.5, 16)]
    site.run([shifted, 5, 3.5])   # 4 bytes off 16-byte alignment: Triton compiles it apart
    assert kernel.jit_calls == 2
    site.run([shifted, 5, 3.5])
    assert kernel.jit_calls == 2 and kernel.launcher.calls[-1][9] == shifted.data_ptr()
    numpy_site = launch.CallSite(kernel, (4,), Device("cuda", 0), {"BLOCK": 16}, pointers=(0,))
    for _ in range(2):   # a numpy scalar goes through launch.run each time, which passes it as an int
        numpy_site.run([x, np.int64(5), 3.5])
        assert type(kernel.launcher.calls[-1][10]) is int
    assert kernel.jit_calls == 2 and not numpy_site._compiled


def test_a_site_passes_its_tensors_then_its_fixed_arguments_then_each_calls_tail(monkeypatch):
    from nbx.core.device import Device
    monkeypatch.setattr(launch, "get_backend", lambda kind: _Backend())
    monkeypatch.setattr(launch, "_stream_of", lambda index: 99)
    launch.forget_compiled()
    x, y = nbx.asarray(np.zeros(16, np.float32)), nbx.asarray(np.zeros(16, np.float32))
    kernel = _FakeKernel(5)
    site = launch.site(kernel, (2,), Device("cuda", 0), 2, (64, 3), BLOCK=32)
    assert site.pointers == (0, 1)
    site.launch((x, y), 2 ** 40)        # the first call compiles
    site.launch((y, x), 2 ** 40 + 1)    # a repeat: the compiled kernel, with this call's tensors and tail
    assert kernel.jit_calls == 1
    assert kernel.launcher.calls == [(2, 1, 1, 99, 7, "pm", None, None, None, y.data_ptr(), x.data_ptr(), 64, 3,
                                      2 ** 40 + 1, 32)]


def test_the_cuda_host_path_runs_end_to_end_on_the_simulated_cuda_of_tools_host_sim():
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0",
               PYTHONPATH=os.pathsep.join(str(p) for p in sorted((root / "packages").glob("*/src"))))
    done = subprocess.run([sys.executable, str(root / "tools" / "bench" / "host_sim.py"), "--calls", "20"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    times = {line.rsplit(None, 1)[0]: float(line.rsplit(None, 1)[1]) for line in lines[1:-1]}
    assert set(times) == {"empty((4096,))", "a + b", "a * 2.0", "exp(a)", "softmax", "rms_norm", "sum"}
    assert all(0 < t < 10_000 for t in times.values()), times
    kept = int(lines[-1].split(": ")[1].split()[0])
    assert 6 <= kept <= 12, lines[-1]   # one kernel per op's launch, whatever the number of calls

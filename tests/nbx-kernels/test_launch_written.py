"""A signature's written repeat (plans._write_repeat, composed by nbx.core.spec) launches what the
prepared run launches, call for call: the same compiled launcher found by the same key, with the same
arguments, each call's own tensors and scalars; where it cannot launch that way (no compiled launcher
yet, a launch hook, another device current) the prepared run's own path launches. Triton's C launch is
called directly only where its CudaLauncher has the form plans reads, and launches go to the
backend's current stream. Over the simulated CUDA of tests/nbx-devices: a stand-in kernel records what
it is launched with (no GPU, no Triton compile)."""
import gc
import importlib.util
import inspect
from pathlib import Path

import pytest
import triton

from nbx.core.device import as_device
from nbx.core.dtypes import TABLE
from nbx.core.spec import Arg, OpSpec, Slots, params
from nbx.core.storage import Storage
from nbx.core.tensor import Tensor
from nbx.kernels import compiled_launch, plans


def _simulated_cuda():
    path = Path(__file__).resolve().parents[1] / "nbx-devices" / "test_nvidia_simulated.py"
    module_spec = importlib.util.spec_from_file_location("_nbx_simulated_cuda_for_written_repeats", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


class _Param:
    def __init__(self, num, name, free=False, default=None):
        self.num, self.name, self.do_not_specialize, self.default = num, name, free, default


class _Compiled:
    """What kernel[grid](...) gives: a launcher recording its arguments and the device current then."""
    function, packed_metadata = 7, "packed"

    def __init__(self, log, which: int):
        self.log, self.which = log, which

    def run(self, *args):
        from nbx.devices.nvidia import runtime
        self.log.append((self.which, runtime.get_device(), args))


class _Kernel:
    """A JIT function's stand-in (one do_not_specialize int, one constexpr after the positional ones)."""
    __name__ = "stand_in_kernel"

    def __init__(self, n_args):
        self.params = [_Param(i, f"p{i}", free=(i == 3)) for i in range(n_args)] + [_Param(n_args, "BLOCK", default=64)]
        self.jitted, self.launched = [], []

    def __getitem__(self, grid):
        def jit(*args, **meta):
            self.jitted.append((grid, args, meta))
            return _Compiled(self.launched, len(self.jitted))
        return jit


# the kernel's parameters: an output, a tensor read twice (a fused kernel's absent operand points at a
# present one), the call's int (do_not_specialize), float, flag and optional tensor, a fixed int, a view
TEMPLATE = ("fixed", plans.Slot("out"), plans.Slot("x"), plans.Slot("n"), plans.Slot("eps"), plans.Slot("flag"),
            plans.Slot("bias"), plans.Slot("x"), 3.5, plans.Slot("m"), plans.Slot("y", offset=1))


def _check(call, facts):
    facts.device, facts.out_dtype = call.x.device, call.x.dtype


SPEC = OpSpec("written_repeat_stand_in", params("x", "n", "eps", flag=True, bias=None, y=None), _check)
SLOTS = {"x": Arg("x"), "out": None, "n": Arg("n"), "eps": Arg("eps"), "flag": Arg("flag"), "bias": Arg("bias"),
         "m": 16, "y": Arg("y")}


@pytest.fixture
def cuda(monkeypatch):
    _simulated_cuda()._install(monkeypatch, 1)
    yield as_device("cuda:0")
    gc.collect()  # the simulated blocks and streams freed while the fake is still installed


def _tensor(device, address, dtype="float16"):
    return Tensor._of(Storage(device, 1 << 20, address), TABLE[dtype], (8,), (1,), 0)


def _plan(device, kernel):
    out = plans.output("out", (8,), TABLE["float16"])
    return plans.LaunchPlan(device, (plans.Launch(kernel, (5, 2), TEMPLATE, {"BLOCK": 64}),), outputs=(out,))


def _written(device, kernel, args, kwargs):
    """The written repeat of SPEC's signature of (args, kwargs) over a fresh plan, and that plan's run."""
    run = plans.prepared(_plan(device, kernel))
    call = SPEC.bind(*args, **kwargs)
    fields = SPEC._fields(len(args), kwargs)
    repeat = SPEC._slots_repeat(fields, Slots(run, SLOTS, "out"), call)
    assert repeat.__code__.co_filename == "<nbx written repeat of written_repeat_stand_in>"
    return repeat, run


def _named(log, out):
    """The launches logged, the output's address named (each call has its own output)."""
    return [(which, device, tuple("out" if v == out.data_ptr() else v for v in args)) for which, device, args in log]


def _calls(device):
    """Repeats of one signature (a tensor in y, none in bias): other addresses and alignments, other
    floats; ints and flags are in the signature (a new value is another signature, not a repeat)."""
    at = 1 << 16
    y = _tensor(device, at + 4096, "float32")
    return [((_tensor(device, at + shift), 7, eps), {"y": y}) for shift, eps in
            ((0, 1e-5), (0, 0.5), (2, 0.5), (8, 2.0), (6, 1e-5), (0, 1e-5))]


def test_a_written_repeat_launches_what_the_prepared_run_launches_call_for_call(cuda):
    written_kernel, plain_kernel = _Kernel(len(TEMPLATE)), _Kernel(len(TEMPLATE))
    calls = _calls(cuda)
    repeat, _ = _written(cuda, written_kernel, *calls[0])
    _, run = _written(cuda, plain_kernel, *calls[0])
    taken, run_from = [], repeat.__globals__["run_from0"]
    repeat.__globals__["run_from0"] = lambda values: taken.append(1) or run_from(values)
    written, plain = [], []
    for args, kwargs in calls:
        before = len(written_kernel.launched), len(plain_kernel.launched)
        out = repeat(*args, *kwargs.values())
        want = run({"x": args[0], "out": None, "n": args[1], "eps": args[2], "flag": True, "bias": None, "m": 16,
                    "y": kwargs["y"]})["out"]
        written.append(_named(written_kernel.launched[before[0]:], out))
        plain.append(_named(plain_kernel.launched[before[1]:], want))
        assert (out.dtype, out.shape, out._strides) == (want.dtype, want.shape, want._strides)
    assert written == plain
    assert len(written_kernel.jitted) == len(plain_kernel.jitted) == 2   # each key's first call, through the JIT
    assert sum(map(len, written)) == len(calls) - 2 and all("out" in launch[2] for launches in written
                                                             for launch in launches)
    assert len(taken) == 2   # the two first calls (the JIT's) alone went through the prepared run


def test_a_written_repeat_without_a_compiled_launcher_or_under_a_hook_goes_to_the_prepared_run(cuda, monkeypatch):
    kernel = _Kernel(len(TEMPLATE))
    (args, kwargs), *_ = _calls(cuda)
    repeat, _ = _written(cuda, kernel, args, kwargs)
    taken = []
    run_from = repeat.__globals__["run_from0"]
    repeat.__globals__["run_from0"] = lambda values: taken.append(sorted(values)) or run_from(values)
    repeat(*args, *kwargs.values())   # written before any compile: the JIT, through the prepared run
    assert len(kernel.jitted) == 1 and taken == [sorted(SLOTS)]
    repeat(*args, *kwargs.values())
    assert len(kernel.launched) == 1 and len(taken) == 1   # compiled now: launched by the repeat itself
    hook = triton.knobs.runtime.launch_enter_hook
    seen = lambda *a: None   # noqa: E731
    hook.add(seen)
    try:
        repeat(*args, *kwargs.values())
    finally:
        hook.remove(seen)
    assert len(kernel.jitted) == 2 and len(taken) == 2   # a hook wants to see the launch: Triton's own path


def test_on_two_devices_a_written_repeat_launches_under_its_devices_guard(monkeypatch):
    from nbx.devices.nvidia import runtime
    _simulated_cuda()._install(monkeypatch, 2)
    second = as_device("cuda:1")
    kernel = _Kernel(len(TEMPLATE))
    (args, kwargs), *_ = _calls(second)
    repeat, _ = _written(second, kernel, args, kwargs)
    repeat(*args, *kwargs.values())   # the first call: the JIT
    runtime.set_device(0)
    repeat(*args, *kwargs.values())   # cuda:0 current: the prepared run's path, under cuda:1's guard
    assert runtime.get_device() == 0
    runtime.set_device(1)
    repeat(*args, *kwargs.values())
    assert [device for _, device, _ in kernel.launched] == [1, 1]
    gc.collect()


def test_launches_go_to_the_backends_current_stream(cuda):
    from nbx.devices.nvidia.streams import Stream, use_stream
    kernel = _Kernel(len(TEMPLATE))
    (args, kwargs), *_ = _calls(cuda)
    repeat, _ = _written(cuda, kernel, args, kwargs)
    repeat(*args, *kwargs.values())
    stream = Stream(0)
    with use_stream(stream):
        repeat(*args, *kwargs.values())
    repeat(*args, *kwargs.values())
    assert [launch[2][3] for launch in kernel.launched] == [stream.handle, 0] and stream.handle != 0
    del stream   # destroyed on the simulated runtime


def test_the_c_launch_is_called_directly_only_for_the_launcher_form_it_reads():
    """Triton 3.6's CudaLauncher.__call__ only allocates the scratch a kernel declares, then calls its C
    launch with the grid, stream and function, the kernel's flags, the scratch and the rest as given:
    compiled_launch.Compiled calls that launch so where no scratch is declared. Another form (later Tritons pass
    more) is called through __call__."""
    from triton.backends.nvidia.driver import CudaLauncher
    launcher = object.__new__(CudaLauncher)
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    if compiled_launch.direct_form(CudaLauncher):
        source = inspect.getsource(CudaLauncher.__call__)
        assert ("self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,"
                in source and "global_scratch, profile_scratch, *args)" in source)
        reads = ("self.launch", "self.num_ctas", "self.global_scratch", "self.profile_scratch")
        assert source.count("self.") == sum(source.count(r) for r in reads)   # nothing else of its own
        assert compiled_launch.calls_its_c_launch_alone(launcher)
        launcher.global_scratch_size = 128
        assert not compiled_launch.calls_its_c_launch_alone(launcher)
    else:
        assert not compiled_launch.calls_its_c_launch_alone(launcher)

"""A runner's repeats launch through the function it writes for its slots' kinds (plans._bound_launch):
the same compiled launcher, found by the same key, with the same arguments as run's own loop, for
every kind of slot; a slot of another kind goes back to the loop for good. Over the simulated CUDA of
tests/nbx-devices (no GPU, no Triton compile): a stand-in kernel records what it is launched with."""
import importlib.util
from pathlib import Path

import pytest

from nbx.core.device import as_device
from nbx.core.dtypes import TABLE
from nbx.core.storage import Storage
from nbx.core.tensor import Tensor
from nbx.kernels import compiled_launch, plans


def _simulated_cuda():
    path = Path(__file__).resolve().parents[1] / "nbx-devices" / "test_nvidia_simulated.py"
    spec = importlib.util.spec_from_file_location("_nbx_simulated_cuda_for_bound_launches", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Param:
    def __init__(self, num, name, free=False, default=None):
        self.num, self.name, self.do_not_specialize, self.default = num, name, free, default


class _Compiled:
    """What kernel[grid](...) gives: a launcher that records its arguments."""
    function, packed_metadata = 7, "packed"

    def __init__(self, log, which: int):
        self.log, self.which = log, which

    def run(self, *args):
        self.log.append((self.which, args))   # which compiled kernel ran: the key that found it


class _Kernel:
    """A JIT function's stand-in: its parameters (one do_not_specialize, one constexpr after the
    positional ones) and what its JIT path and its compiled launchers were called with."""
    __name__ = "stand_in_kernel"

    def __init__(self, n_args):
        self.params = [_Param(i, f"p{i}", free=(i == 3)) for i in range(n_args)] + [_Param(n_args, "BLOCK", default=64)]
        self.jitted, self.launched = [], []

    def __getitem__(self, grid):
        def jit(*args, **meta):
            self.jitted.append((grid, args, meta))
            return _Compiled(self.launched, len(self.jitted))
        return jit


@pytest.fixture
def cuda(monkeypatch):
    _simulated_cuda()._install(monkeypatch, 1)
    monkeypatch.setattr(compiled_launch, "_stream_of", lambda index: 0)
    return as_device("cuda:0")


def _tensor(device, address, dtype="float16"):
    return Tensor._of(Storage(device, 1 << 20, address), TABLE[dtype], (8,), (1,), 0)


TEMPLATE = ("fixed", plans.Slot("x"), 12, plans.Slot("n"), plans.Slot("eps"), plans.Slot("flag"),
            plans.Slot("bias"), 3.5, plans.Slot("m"), plans.Slot("y", offset=1))


def _calls(device):
    """Repeats of several kinds and values: alignments, int classes (1, a multiple of 16, int64),
    the do_not_specialize int, another float and flag; the last one a tensor where None was."""
    at = 1 << 16
    base = dict(x=_tensor(device, at), n=7, eps=1e-5, flag=True, bias=None, m=16, y=_tensor(device, at + 4096, "float32"))
    changes = [{}, dict(n=2 ** 40, eps=0.5), dict(n=2 ** 41), dict(x=_tensor(device, at + 2)),
               dict(x=_tensor(device, at + 6)), dict(x=_tensor(device, at + 8)), dict(m=8), dict(m=24), dict(m=48), dict(m=1, flag=False), dict(m=1, flag=False), dict(m=33), dict(m=35),
               dict(n=-3), dict(n=-5, eps=2.0), {}]
    return [dict(base, **change) for change in changes for _ in range(2)] + [dict(base, bias=_tensor(device, at + 8192))]


def _plain(jitted):
    """The JIT's arguments with its tensors as (address, dtype): comparable without an nbx op."""
    return [[(a.data_ptr(), a.dtype) if isinstance(a, Tensor) else a for a in args] for _, args, _ in jitted]


def _run(device, bound: bool):
    kernel = _Kernel(len(TEMPLATE))
    runner = plans._Runner(plans.Launch(kernel, (5, 2), TEMPLATE, {"BLOCK": 64}), device)
    if not bound:
        runner.bound = False  # run's loop alone
    kinds, hits = [], []
    for values in _calls(device):
        runner.run(values)
        kinds.append(runner.bound)
        if callable(runner.bound) and not hits:  # count what the bound launch itself launched
            hits.append(0)
            written = runner.bound

            def counted(values, written=written):
                launched = written(values)
                hits[0] += launched
                return launched
            runner.bound = counted
    return kernel, runner, kinds, hits


def test_a_runners_bound_launch_passes_the_arguments_and_keys_of_its_loop_for_every_kind_of_slot(cuda):
    kernel, runner, kinds, hits = _run(cuda, bound=True)
    loop_kernel, loop_runner, _, _ = _run(cuda, bound=False)
    assert kinds[0] is None and callable(kinds[1])   # written at the first repeat, not at the first call
    assert hits == [len(kernel.launched) - 1]   # every repeat but the one that wrote it launched through it
    assert kernel.launched == loop_kernel.launched and len(kernel.launched) >= 12
    assert _plain(kernel.jitted) == _plain(loop_kernel.jitted)   # the first calls of each key, through the JIT
    assert runner.compiled.keys() == loop_runner.compiled.keys()
    first = kernel.launched[0][1]
    assert first[:9] == (5, 2, 1, 0, 7, "packed", None, None, None) and first[-1] == 64  # grid, stream, constexpr
    assert first[9] == "fixed" and first[11] == 12 and first[16] == 3.5   # the template's fixed values in place


def test_a_slot_of_another_kind_sends_a_runner_back_to_its_loop_for_good(cuda):
    kernel, runner, kinds, _ = _run(cuda, bound=True)
    assert callable(kinds[-2]) and kinds[-1] is False   # bias, None until the last call, was a tensor then
    launched = len(kernel.launched) + len(kernel.jitted)
    runner.run(_calls(cuda)[1])
    assert runner.bound is False and len(kernel.launched) + len(kernel.jitted) == launched + 1


def test_on_two_devices_a_bound_launch_runs_only_while_its_device_is_current(monkeypatch):
    from nbx.devices.nvidia import runtime
    _simulated_cuda()._install(monkeypatch, 2)
    monkeypatch.setattr(compiled_launch, "_stream_of", lambda index: 0)
    second = as_device("cuda:1")
    kernel = _Kernel(len(TEMPLATE))
    runner = plans._Runner(plans.Launch(kernel, (5, 2), TEMPLATE, {"BLOCK": 64}), second)
    values = _calls(second)[0]
    runner.run(values)
    runner.run(values)   # the first repeat writes the bound launch
    hits, written = [], runner.bound

    def counted(values):
        hits.append(written(values))
        return hits[-1]
    runner.bound = counted
    runtime.set_device(0)
    runner.run(values)   # cuda:0 current: the loop launches, under cuda:1's guard
    assert runtime.get_device() == 0
    runtime.set_device(1)
    runner.run(values)
    assert hits == [False, True] and len(kernel.launched) == 3


def test_a_launch_of_fixed_arguments_alone_repeats_through_its_bound_launch(cuda):
    kernel = _Kernel(2)
    runner = plans._Runner(plans.Launch(kernel, (3,), (4, 2.5), {"BLOCK": 64}), cuda)
    for _ in range(3):
        runner.run({})
    assert callable(runner.bound) and len(kernel.jitted) == 1
    assert kernel.launched == [(1, (3, 1, 1, 0, 7, "packed", None, None, None, 4, 2.5, 64))] * 2

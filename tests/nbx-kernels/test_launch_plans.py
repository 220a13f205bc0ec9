"""The one launch path (nbx.kernels.plans): a plan's repeats call the compiled launcher found by
what the kernel's own signature says Triton specialises on; one bounded cache, dropped when the
device files are read again or the autotune serving state is reset."""
import contextlib

import numpy as np

import nbx.core as nbx
from nbx.core import device_files
from nbx.core.device import Device
from nbx.kernels import compiled_launch, plans
from nbx.kernels.cost import price
from nbx.kernels.plans import Launch, LaunchPlan, Slot


class _Param:
    def __init__(self, num, name, do_not_specialize=False):
        self.num, self.name, self.do_not_specialize, self.default = num, name, do_not_specialize, None


class _Kernel:
    """A JIT function's surface the runtime uses: kernel[grid](*args, **meta) and params."""

    def __init__(self, names, do_not_specialize=()):
        self.jit_calls, self.launched = 0, []
        self.params = [_Param(i, n, n in do_not_specialize) for i, n in enumerate(names)]
        self.params.append(_Param(len(names), "BLOCK"))

    def __getitem__(self, grid):
        def compile_and_launch(*args, **meta):
            self.jit_calls += 1
            return type("Compiled", (), {"run": staticmethod(lambda *a: self.launched.append(a)), "function": 7,
                                         "packed_metadata": "pm"})()
        return compile_and_launch


class _Backend:
    def device_count(self):
        return 1

    def device_guard(self, device):
        return contextlib.nullcontext()


def _gpu_plan(monkeypatch, kernel, template):
    monkeypatch.setattr(plans, "get_backend", lambda kind: _Backend())
    monkeypatch.setattr(compiled_launch, "_stream_of", lambda index: 99)
    return LaunchPlan(Device("cuda", 0), (Launch(kernel, (4,), template, {"BLOCK": 16}),))


def test_a_repeat_calls_the_compiled_launcher_with_this_calls_tensors_and_scalars(monkeypatch):
    kernel = _Kernel(["x", "n", "scale"])
    p = _gpu_plan(monkeypatch, kernel, (Slot("x"), 5, Slot("scale")))
    base = nbx.asarray(np.zeros(64, np.float32))
    x, shifted = base[:16], base[1:17]
    plans.execute(p, {"x": x, "scale": 2.5})
    assert kernel.jit_calls == 1 and not kernel.launched
    plans.execute(p, {"x": x, "scale": 3.5})   # another scalar value: the same compiled kernel, called directly
    assert kernel.jit_calls == 1
    assert kernel.launched == [(4, 1, 1, 99, 7, "pm", None, None, None, x.data_ptr(), 5, 3.5, 16)]
    plans.execute(p, {"x": shifted, "scale": 3.5})   # 4 bytes off 16-byte alignment: Triton compiles it apart
    assert kernel.jit_calls == 2
    plans.execute(p, {"x": shifted, "scale": np.float64(3.5)})   # numpy scalars are passed as Python's
    assert kernel.jit_calls == 2 and kernel.launched[-1][9] == shifted.data_ptr()
    assert type(kernel.launched[-1][11]) is float


def test_a_tensor_of_another_dtype_at_the_same_alignment_compiles_apart(monkeypatch):
    """Triton types a pointer by its element type: a repeat whose tensor has another dtype (a
    plan shared by bfloat16 @ float16 and float16 @ float32, both float32 products) must not run
    the kernel compiled for the first dtype, which would read the bits as that dtype."""
    kernel = _Kernel(["x"])
    p = _gpu_plan(monkeypatch, kernel, (Slot("x"),))
    halves = nbx.asarray(np.zeros(64, np.float16))
    plans.execute(p, {"x": halves})
    plans.execute(p, {"x": halves.astype("bfloat16")})
    assert kernel.jit_calls == 2 and not kernel.launched
    plans.execute(p, {"x": halves})
    assert kernel.jit_calls == 2 and len(kernel.launched) == 1


def test_an_int_slot_is_specialised_as_the_kernels_signature_says(monkeypatch):
    """n is specialised (1, a multiple of 16, any other int32: three compilations); bits is listed
    in do_not_specialize, so only its width makes a new one."""
    kernel = _Kernel(["n", "bits"], do_not_specialize=["bits"])
    p = _gpu_plan(monkeypatch, kernel, (Slot("n"), Slot("bits")))
    for n in (1, 16, 3, 1, 5, 32):
        plans.execute(p, {"n": n, "bits": 7})
    assert kernel.jit_calls == 3
    for bits in (8, 2 ** 20, -3):
        plans.execute(p, {"n": 3, "bits": bits})
    assert kernel.jit_calls == 3
    plans.execute(p, {"n": 3, "bits": 2 ** 40})   # an int64 is passed as another type
    assert kernel.jit_calls == 4


def test_the_runtime_allocates_outputs_and_workspace_and_makes_the_copies(device):
    seen = {}

    class Recorder:
        params = []

        def __getitem__(self, grid):
            return lambda *args, **meta: seen.update(args=args)
    x = nbx.asarray(np.arange(12, dtype=np.float32), device=device).reshape(3, 4).permute(1, 0)
    p = LaunchPlan(device, (Launch(Recorder(), (1,), (Slot("x"), Slot("out"), Slot("part", part=1)), {}),),
                   (plans.output("out", (4, 3), nbx.float32),), (plans.workspace("part", (2, 5), nbx.int64),), ("x",))
    values = plans.execute(p, {"x": x})
    assert values["x"].is_contiguous() and values["out"].shape == (4, 3) and seen["args"][2].shape == (5,)
    assert [b.name for b in p.buffers()] == ["out", "part"] and p.buffers()[1].nbytes == 80


def test_plans_are_kept_per_signature_and_dropped_when_the_device_files_are_read_again():
    plans.reset()
    built = []

    def build():
        built.append(1)
        return LaunchPlan(nbx.as_device("cpu"), ())
    first = plans.cached("op", ("sig",), build)
    assert plans.cached("op", ("sig",), build) is first and len(built) == 1
    plans.cached("op", ("other",), build)
    assert plans.cached_count("op") == 2 and len(built) == 2
    device_files.forget()
    assert plans.cached("op", ("sig",), build) is not first and plans.cached_count("op") == 1
    from nbx.autotune import serving
    again = plans.cached("op", ("sig",), build)
    serving.reset()
    assert plans.cached("op", ("sig",), build) is not again and len(built) == 4
    plans.reset()
    assert plans.cached_count() == 0


def test_the_plan_cache_is_bounded(monkeypatch):
    plans.reset()
    monkeypatch.setattr(plans, "MAX_PLANS", 3)
    for n in range(8):
        plans.cached("op", (n,), lambda: LaunchPlan(nbx.as_device("cpu"), ()))
    assert plans.cached_count() == 3
    plans.reset()


def test_a_softmax_plans_buffers_are_its_declared_cost(device, device_file_settings):
    few_long = nbx.asarray(np.ones((2, 70000), np.float32), device=device)   # split over programs
    p = plans_of_softmax(few_long)
    cost = price("softmax", few_long, -1)
    assert [b.name for b in p.buffers()] == ["out", "partials"] == [b.name for b in cost.buffers]
    assert [b.nbytes for b in p.buffers()] == [b.nbytes for b in cost.buffers]
    assert cost.launches == len(p.launches) == 2


def plans_of_softmax(x):
    from nbx.kernels.softmax import launch_plan
    return launch_plan(x, 1)

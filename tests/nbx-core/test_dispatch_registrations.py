"""Dispatch: a registration names its provider; two providers of one op on one device type are
refused by name unless a priority says which serves, and then the same one serves whatever order
they registered in; implementations registered for TRITON serve only the backends that declare
they run Triton kernels."""
import pytest

from nbx.core import dispatch
from nbx.core.cpu import HostMemoryBackend
from nbx.core.device import Device, register_backend
from nbx.core.errors import DuplicateRegistrationError


def _backend(name: str, triton: bool = False) -> Device:
    backend = HostMemoryBackend(name)
    if triton:
        backend.runs_triton_kernels = True
    register_backend(backend)
    return Device(name)


def _fn(tag):
    def fn():
        return tag
    return fn


def test_a_second_provider_without_a_priority_is_refused_by_name_with_both_providers():
    device = _backend("dispatch_twice")
    dispatch.register("dispatch_op_a", "dispatch_twice", provider="first.plugin")(_fn(1))
    with pytest.raises(DuplicateRegistrationError, match="first.plugin.*second.plugin|second.plugin.*first.plugin"):
        dispatch.register("dispatch_op_a", "dispatch_twice", provider="second.plugin")(_fn(2))
    with pytest.raises(DuplicateRegistrationError, match="both at priority 3"):
        dispatch.register("dispatch_op_b", "dispatch_twice", provider="one", priority=3)(_fn(1))
        dispatch.register("dispatch_op_b", "dispatch_twice", provider="other", priority=3)(_fn(2))
    assert dispatch.implementation("dispatch_op_a", device)() == 1


@pytest.mark.parametrize("fallback_first", [True, False])
def test_the_higher_priority_serves_whichever_registers_first(fallback_first):
    name = f"dispatch_order_{fallback_first}"
    device = _backend(name, triton=True)
    fallback = lambda: dispatch.register("dispatch_copy", name, provider="backend", priority=-1)(_fn("backend"))
    kernels = lambda: dispatch.register("dispatch_copy", dispatch.TRITON, provider="kernels")(_fn("kernels"))
    for step in ((fallback, kernels) if fallback_first else (kernels, fallback)):
        step()
    assert dispatch.implementation("dispatch_copy", device)() == "kernels"
    assert dispatch.provider("dispatch_copy", name) == "kernels"


def test_triton_registrations_serve_only_backends_that_run_triton_kernels():
    dispatch.register("dispatch_triton_only", dispatch.TRITON, provider="kernels")(_fn("triton"))
    assert dispatch.implementation("dispatch_triton_only", _backend("dispatch_gpu_like", triton=True))() == "triton"
    assert dispatch.has_implementation("dispatch_triton_only", "dispatch_gpu_like")
    assert "dispatch_triton_only" in dispatch.registered_ops("dispatch_gpu_like")
    assert not dispatch.has_implementation("dispatch_triton_only", "dispatch_plain_host")
    _backend("dispatch_plain_host")
    assert not dispatch.has_implementation("dispatch_triton_only", "dispatch_plain_host")


class _TwoDevices(HostMemoryBackend):
    """A numbered backend of two devices, the second current."""
    indexed = True

    def device_count(self):
        return 2

    def current_device(self):
        return 1


def test_synchronize_without_a_device_waits_for_the_current_device_of_each_numbered_backend():
    from nbx.core import synchronize
    from nbx.core.errors import DeviceError

    waited = []

    class Numbered(_TwoDevices):
        def synchronize(self, device):
            waited.append(device)

    class Driverless(Numbered):
        def device_count(self):
            raise DeviceError("no driver here")

    register_backend(Numbered("sync_numbered"))
    register_backend(Driverless("sync_driverless"))
    synchronize()
    assert Device("sync_numbered", 1) in waited and all(d.type != "sync_driverless" for d in waited)


def test_a_backends_own_implementation_is_served_where_asked_for_and_the_triton_one_otherwise():
    """backend_implementation: what the backend registered itself (cuda's fill_, a memset), which the autotune
    screen's NaN fill takes so that it compiles no kernel; an op the backend left to Triton kernels is
    served as implementation serves it."""
    device = _backend("dispatch_own", triton=True)
    dispatch.register("dispatch_op_own", "dispatch_own", provider="the.backend", priority=-1)(_fn("own"))
    dispatch.register("dispatch_op_own", dispatch.TRITON, provider="the.kernels")(_fn("kernel"))
    dispatch.register("dispatch_op_kernel_only", dispatch.TRITON, provider="the.kernels")(_fn("kernel"))
    assert dispatch.implementation("dispatch_op_own", device)() == "kernel"
    assert dispatch.backend_implementation("dispatch_op_own", device)() == "own"
    assert dispatch.backend_implementation("dispatch_op_kernel_only", device)() == "kernel"


def test_a_checked_device_is_remembered_only_under_a_plain_int_ordinal():
    """as_device's memo of checked devices: Device("x", 1) after Device("x", True) or Device("x", np.int64(1))
    (equal keys) is itself, not the other (a device printed as 'x:True', or a numpy ordinal every
    allocation would check again)."""
    import numpy as np

    from nbx.core.device import as_device

    for name, odd in (("memo_bool", True), ("memo_numpy", np.int64(1))):
        register_backend(_TwoDevices(name))
        as_device(Device(name, odd))   # checked first, under an ordinal equal to 1
        found = as_device(Device(name, 1))
        assert type(found.index) is int and str(found) == f"{name}:1"

"""On a real GPU: what nbx reads about the device matches what the hardware reports elsewhere
(nvidia-smi, Triton's own driver helper), and the device-level refusals are named."""
from __future__ import annotations

import shutil
import subprocess

import nbx.core as nbx
import pytest
from nbx.core.errors import DeviceError, OutOfMemoryError
from nbx.devices import nvidia
from nbx.devices.nvidia import driver_api, runtime

pytestmark = pytest.mark.gpu

SMI_FIELDS = ["name", "memory.total", "memory.reserved", "pci.bus_id", "compute_cap", "clocks.max.sm",
              "clocks.max.mem"]


def nvidia_smi(index: int) -> dict[str, str]:
    if shutil.which("nvidia-smi") is None:
        pytest.fail("nvidia-smi is not on PATH on this GPU machine")
    done = subprocess.run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}",
                           "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60, check=True)
    return dict(zip(SMI_FIELDS, (v.strip() for v in done.stdout.strip().split(",")), strict=True))


def test_name_capability_memory_clocks_and_bus_match_nvidia_smi():
    smi = nvidia_smi(0)
    p = nvidia.device_properties(0)
    assert p.name == smi["name"]
    assert f"{p.compute_capability[0]}.{p.compute_capability[1]}" == smi["compute_cap"]
    # nvidia-smi counts memory the driver reserves for itself; CUDA's total leaves it out
    reserved = float(smi["memory.reserved"])
    assert abs(p.total_memory / 2**20 - (float(smi["memory.total"]) - reserved)) <= 2, (p.total_memory, smi)
    assert p.pci_bus_id == smi["pci.bus_id"]
    assert abs(p.clock_khz / 1000 - float(smi["clocks.max.sm"])) <= 1
    assert abs(p.memory_clock_khz / 1000 - float(smi["clocks.max.mem"])) <= 0.01 * float(smi["clocks.max.mem"])


def test_sm_count_shared_memory_registers_and_warp_size_match_tritons_reading():
    from nbx.devices.nvidia import triton_driver
    triton_props = triton_driver.install().utils.get_device_properties(0)
    p = nvidia.device_properties(0)
    assert p.sm_count == triton_props["multiprocessor_count"]
    assert p.shared_memory_per_block_optin == triton_props["max_shared_mem"]
    assert p.registers_per_block == triton_props["max_num_regs"]
    assert p.warp_size == triton_props["warpSize"] == 32
    assert p.memory_bus_width_bits == triton_props["mem_bus_width"]


def test_the_hopper_limits_are_self_consistent():
    p = nvidia.device_properties(0)
    assert p.shared_memory_per_block == 48 * 1024 < p.shared_memory_per_block_optin <= p.shared_memory_per_sm
    assert p.l2_cache_bytes > 0 and p.max_threads_per_block == 1024
    least, greatest = p.stream_priorities
    assert greatest < least == 0


def test_free_and_total_memory_are_what_the_driver_reports():
    free, total = runtime.memory_info(0)
    assert total == nvidia.device_properties(0).total_memory and 0 < free <= total


def test_vmm_granularity_is_a_power_of_two_and_recommended_is_a_multiple_of_minimum():
    minimum = driver_api.allocation_granularity(0)
    recommended = driver_api.allocation_granularity(0, recommended=True)
    assert minimum > 0 and minimum & (minimum - 1) == 0
    assert recommended % minimum == 0


def test_a_bad_ordinal_is_a_device_error_naming_the_count():
    count = runtime.device_count()
    with pytest.raises(DeviceError, match=rf"cuda:{count} does not exist: {count} cuda device\(s\) found"):
        nbx.zeros(2, device=f"cuda:{count}")
    with pytest.raises(DeviceError, match=rf"cuda:{count + 3} does not exist"):
        runtime.set_device(count + 3)


def test_device_guard_restores_the_previous_device_even_after_an_error():
    before = runtime.get_device()
    with pytest.raises(ZeroDivisionError):
        with nvidia.device_guard(0):
            raise ZeroDivisionError
    assert runtime.get_device() == before


def test_out_of_memory_is_a_named_error_carrying_the_requested_bytes_and_the_device_recovers():
    huge = 1 << 50  # a pebibyte: no GPU has it
    expected = r"cuda:0 is out of memory: requested 1024.00 TiB \(1125899906842624 bytes"
    with pytest.raises(OutOfMemoryError, match=expected) as info:
        nbx.empty((huge,), dtype="uint8", device="cuda")
    err = info.value
    assert err.requested == huge and err.total == nvidia.device_properties(0).total_memory
    assert err.free is not None and err.live is not None and err.cached is not None  # the pool's own figures
    assert nbx.ones(4, device="cuda").numpy().tolist() == [1, 1, 1, 1]


def test_freed_tensors_give_their_memory_back_to_the_pool_and_to_the_device_at_empty_cache():
    import gc

    from nbx.memory.allocator import get_allocator
    free_before, _ = runtime.memory_info(0)
    t = nbx.empty((1 << 30,), dtype="uint8", device="cuda")
    free_during, _ = runtime.memory_info(0)
    del t
    gc.collect()
    get_allocator("cuda").empty_cache(nbx.as_device("cuda:0"))  # the caching pool keeps freed blocks parked
    free_after, _ = runtime.memory_info(0)
    assert free_before - free_during >= 1 << 30
    assert free_after >= free_before - (64 << 20)


def test_nbx_info_line_names_the_device_its_capability_memory_and_runtime_library():
    from nbx.core.device import get_backend
    summary = get_backend("cuda").device_summary(0)
    p = nvidia.device_properties(0)
    assert p.name in summary and f"compute capability {p.compute_capability[0]}.{p.compute_capability[1]}" in summary
    assert "libcudart" in summary and "GiB" in summary

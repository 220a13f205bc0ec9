"""Programmatic dependent launch (nbx.kernels.dependent_launch): which launches are made dependent.
The kernels' waits are checked in their sm_90 PTX (test_kernels_lower_for_hopper.py) and their results
on the H200 (tests/gpu/test_dependent_launch_gpu.py)."""
import pytest

from nbx.core import device_files
from nbx.core.device import as_device
from nbx.kernels import dependent_launch
from nbx.kernels.gather.kernel import take_rows_kernel
from nbx.kernels.sort.radix import radix_histogram_kernel


@pytest.fixture
def facts_of(monkeypatch):
    """Serve the device file of a target (an sm_ string) as the facts in force for any device."""
    def serve(target: str):
        facts = device_files.for_arch(target)
        monkeypatch.setattr(device_files, "in_force", lambda device=None: facts)
        return as_device("interp")
    return serve


def test_a_kernel_with_a_pdl_parameter_is_launched_dependent_where_the_device_file_allows_it(facts_of):
    device = facts_of("sm_90")
    assert dependent_launch.launch_meta(take_rows_kernel, device, {"ROWS": 1}) == {
        "ROWS": 1, "PDL": True, "launch_pdl": True}


@pytest.mark.parametrize("target", ["sm_80", "sm_70"])
def test_older_gpus_launch_plainly(facts_of, target):
    device = facts_of(target)
    meta = {"ROWS": 1}
    assert dependent_launch.launch_meta(take_rows_kernel, device, meta) is meta


def test_the_interpreter_launches_plainly():
    meta = {"ROWS": 1}
    assert dependent_launch.launch_meta(take_rows_kernel, as_device("interp"), meta) is meta


def test_a_kernel_without_the_parameter_or_a_plan_that_sets_it_is_left_as_planned(facts_of):
    device = facts_of("sm_90")
    meta = {"BITS": 8}
    assert dependent_launch.launch_meta(radix_histogram_kernel, device, meta) is meta
    planned = {"ROWS": 1, "PDL": False}
    assert dependent_launch.launch_meta(take_rows_kernel, device, planned) is planned

"""Every device file of the repository validates, states what its vendor's kernels read, and is consistent."""
from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from nbx.core import device_files, device_schema, dtypes

ROOT = Path(__file__).resolve().parents[2]
DEVICES = ROOT / "devices"
FILES = sorted(DEVICES.glob("*/*.yml"))


@pytest.fixture(autouse=True)
def fresh_catalogue():
    device_files.forget()
    yield
    device_files.forget()


def test_the_repository_has_the_vendor_files_the_kernels_need():
    names = {f"{p.parent.name}/{p.stem}" for p in FILES}
    assert {"nvidia/volta", "nvidia/ampere", "nvidia/hopper", "amd/cdna", "amd/cdna2", "amd/cdna3",
            "apple/apple_silicon"} <= names
    chips = {n.split("/")[1] for n in names if n.startswith("apple/apple_m")}
    for generation in "12345":
        assert {f"apple_m{generation}", f"apple_m{generation}_pro", f"apple_m{generation}_max"} <= chips


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_file_in_devices_validates_against_the_schema(path):
    facts = device_schema.validate_vendor_file(device_schema.load_yaml(path), path, path.parent.name)
    assert facts, f"{path} states no fact"
    for fact in facts.values():
        assert fact.kind in ("source", "measured", "derived", "chosen") and fact.text


def test_the_loader_reads_every_file_of_devices_and_nothing_else():
    loaded = sorted(f.path for f in device_files.vendor_files())
    assert loaded == sorted(p.resolve() for p in FILES)


GPU_VENDORS = ("nvidia", "amd", "apple")  # devices/triton holds the interpreter device, no hardware


def all_targets():
    return [(f, prefix) for f in device_files.vendor_files() for prefix in f.targets if f.vendor in GPU_VENDORS]


def test_every_target_states_every_fact_its_vendor_requires():
    for vendor_file, prefix in all_targets():
        facts = device_files.for_arch(prefix)
        missing = [k for k in device_schema.required_keys(vendor_file.vendor) if k not in facts]
        assert not missing, f"{prefix} ({vendor_file.path}) lacks {missing}"


def rule(dtype_name: str) -> float:
    """The screen tolerance rule written in every file: 2 eps(d) + sqrt(65536) eps(acc), up to 2 digits."""
    d = dtypes.TABLE[dtype_name]
    if d.kind in ("bool", "int", "uint"):
        return 0.0
    component = {"complex64": "float32", "complex128": "float64"}.get(dtype_name, dtype_name)
    eps = float(ml_dtypes.finfo(dtypes.TABLE[component].host).eps)
    acc = float(np.finfo(np.float64 if component == "float64" else np.float32).eps)
    raw = 2 * eps + math.sqrt(65536) * acc
    scale = 10 ** (math.floor(math.log10(raw)) - 1)
    return math.ceil(raw / scale - 1e-9) * scale


def test_every_screen_tolerance_follows_the_rule_its_comment_states():
    for _, prefix in all_targets():
        table = device_files.for_arch(prefix).value("autotune.screen_tolerance")
        for name, value in table.items():
            assert math.isclose(value, rule(name), rel_tol=1e-9, abs_tol=0.0), (prefix, name, value, rule(name))
            if dtypes.TABLE[name].kind in ("bool", "int", "uint"):
                assert value == 0


def test_default_tiles_fit_the_limits_the_same_file_states():
    for _, prefix in all_targets():
        facts = device_files.for_arch(prefix)
        warp, max_threads = facts.value("compute.warp_size"), facts.value("compute.max_threads_per_block")
        for family in ("elementwise", "reduction", "softmax", "norm", "matmul"):
            threads = facts.value(f"tiles.{family}.num_warps") * warp
            assert threads <= max_threads, (prefix, family, threads)
        for family in ("elementwise", "reduction"):
            assert facts.value(f"tiles.{family}.block") % (facts.value(f"tiles.{family}.num_warps") * warp) == 0
        mm = facts.value("tiles.matmul")
        stage_bytes = (mm["block_m"] * mm["block_k"] + mm["block_k"] * mm["block_n"]) * 2  # 16-bit operands
        assert mm["num_stages"] * stage_bytes <= facts.value("memory.max_shared_memory_per_block"), prefix
        assert mm["num_stages"] <= facts.value("pipelining.max_num_stages"), prefix


def test_shared_memory_figures_are_ordered_as_the_hardware_is():
    for _, prefix in all_targets():
        facts = device_files.for_arch(prefix)
        per_block = facts.value("memory.max_shared_memory_per_block")
        if "memory.default_shared_memory_per_block" in facts:
            assert facts.value("memory.default_shared_memory_per_block") <= per_block
        if "memory.shared_memory_per_multiprocessor" in facts:
            assert per_block <= facts.value("memory.shared_memory_per_multiprocessor")


def test_warp_sizes_are_the_vendors():
    expected = {"nvidia": 32, "amd": 64, "apple": 32}
    for vendor_file, prefix in all_targets():
        assert device_files.for_arch(prefix).value("compute.warp_size") == expected[vendor_file.vendor]


def test_hopper_states_its_measured_vmm_granularity_and_leaves_the_unmeasured_chunk_absent():
    hopper = device_files.for_arch("sm_90")
    assert "memory.vmm.chunk_bytes" not in hopper
    assert hopper.value("memory.vmm.granularity_bytes") == 2 << 20
    assert hopper.provenance("memory.vmm.granularity_bytes").startswith("measured: NVIDIA H200, 2026-11-29")


def test_metal_dispatch_limits_are_stated_for_every_apple_chip_and_no_other_vendor():
    for vendor_file, prefix in all_targets():
        facts = device_files.for_arch(prefix)
        stated = "dispatch.max_command_buffers_in_flight" in facts
        assert stated == (vendor_file.vendor == "apple"), prefix

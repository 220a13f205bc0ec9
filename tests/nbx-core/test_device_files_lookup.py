"""Which file serves a target, how facts merge, and every refusal of the loader, by its message."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from nbx.core import device_files
from nbx.core.device import _BACKENDS, Device
from nbx.core.errors import FactConflictError, FileFormatError, MissingFactError, NoDeviceFileError, UnknownTargetError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_catalogue():
    device_files.forget()
    for path in device_files.application_files():
        device_files.remove_application_file(path)
    yield
    for path in device_files.application_files():
        device_files.remove_application_file(path)
    device_files.forget()


def fact(value, kind="chosen", text="for the test"):
    return {"value": value, kind: text}


def write(folder: Path, name: str, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def vendor_file(name, targets, facts, family=None, vendor="nvidia"):
    data = {"schema": 1, "vendor": vendor, "name": name, "architecture": name.title(), "targets": targets,
            "facts": facts}
    if family:
        data["family"] = family
    return data


def app_file(name, targets, facts):
    return {"schema": 1, "application": name, "targets": targets, "facts": facts}


@pytest.fixture
def tmp_catalogue(tmp_path, monkeypatch):
    """A catalogue of nvidia files under tmp_path/nvidia, in place of the repository's."""
    folder = tmp_path / "nvidia"
    monkeypatch.setattr(device_files, "search_dirs", lambda: [("nvidia", folder)])
    return folder


# ---- matching -----------------------------------------------------------------------------------

def test_the_longest_matching_prefix_wins_so_a_chip_file_serves_before_its_family():
    assert device_files.for_arch("apple-m4-pro").name == "apple/apple_m4_pro"
    assert device_files.for_arch("apple-m4").name == "apple/apple_m4"
    assert device_files.for_arch("apple-m9-max").name == "apple/apple_silicon"  # a chip without a file: the family


def test_a_variant_s_facts_lie_over_its_family_s():
    chip = device_files.for_arch("apple-m4-pro")
    assert chip.value("chip.gpu_cores_max") == 20                       # the chip file's own fact
    assert chip.value("memory.max_shared_memory_per_block") == 32768    # the family's
    assert [p.name for p in chip.files] == ["apple_silicon.yml", "apple_m4_pro.yml"]
    ga10x = device_files.for_arch("sm_86")
    assert ga10x.value("memory.max_shared_memory_per_block") == 101376   # overrides ampere's 166912
    assert device_files.for_arch("sm_80").value("memory.max_shared_memory_per_block") == 166912
    assert ga10x.value("compute.warp_size") == 32


def test_an_amd_target_with_feature_flags_matches_its_architecture_prefix():
    facts = device_files.for_arch("gfx942:sramecc+:xnack-")
    assert facts.name == "amd/cdna3" and facts.value("compute.warp_size") == 64
    assert device_files.for_arch("gfx90a:sramecc+:xnack+").name == "amd/cdna2"


def test_an_unknown_target_is_refused_naming_it_and_the_prefixes_claimed():
    with pytest.raises(UnknownTargetError, match=r"no device file claims target 'sm_75'.*nvidia/hopper: sm_90"):
        device_files.for_arch("sm_75")
    with pytest.raises(UnknownTargetError, match=r"a target is a non-empty string"):
        device_files.for_arch("")
    with pytest.raises(MissingFactError):  # UnknownTargetError is a MissingFactError
        device_files.for_arch("gfx1100")


# ---- lookups ------------------------------------------------------------------------------------

def test_a_fact_comes_with_its_value_its_provenance_and_its_file():
    hopper = device_files.for_arch("sm_90")
    got = hopper.get("memory.max_shared_memory_per_block")
    assert got.value == hopper.value("memory.max_shared_memory_per_block") == 232448
    assert hopper.provenance("memory.max_shared_memory_per_block").startswith(
        "measured: NVIDIA H200, 2026-11-29, tools/measure_nvidia_facts.py")
    assert got.file.name == "hopper.yml"


def test_a_dotted_key_reaches_inside_a_record_and_a_dtype_map():
    hopper = device_files.for_arch("sm_90")
    assert hopper.value("tiles.matmul.block_m") == hopper.value("tiles.matmul")["block_m"]
    assert hopper.provenance("tiles.matmul.block_m") == hopper.provenance("tiles.matmul")
    assert hopper.value("autotune.screen_tolerance.int64") == 0
    with pytest.raises(MissingFactError, match=r"'tiles\.matmul\.block_z' is not stated for target 'sm_90': "
                                               r"'tiles\.matmul' \(.*hopper\.yml\) has no 'block_z'"):
        hopper.value("tiles.matmul.block_z")


def test_a_missing_fact_is_refused_naming_the_key_and_every_file_consulted():
    with pytest.raises(MissingFactError, match=r"'memory\.vmm\.chunk_bytes' is not stated for target 'sm_90'; "
                                               r"files consulted: \S*hopper\.yml"):
        device_files.for_arch("sm_90").value("memory.vmm.chunk_bytes")
    with pytest.raises(MissingFactError, match=r"'chip\.memory_bandwidth_bytes_per_s' is not stated for target "
                                               r"'apple-m1'; files consulted: \S*apple_silicon\.yml, \S*apple_m1\.yml"):
        device_files.for_arch("apple-m1").value("chip.memory_bandwidth_bytes_per_s")


def test_asking_for_a_group_names_the_facts_inside_it():
    with pytest.raises(MissingFactError,
                       match=r"'pipelining' is a group, ask for one of \['pipelining\.max_num_stages'\]"):
        device_files.for_arch("sm_90").value("pipelining")


def test_a_lookup_takes_no_default():
    with pytest.raises(TypeError):
        device_files.for_arch("sm_90").get("memory.vmm.chunk_bytes", 2097152)


def test_bucket_rounds_up_within_the_first_row_that_holds_the_size():
    ladder = device_files.for_arch("sm_90").value("autotune.buckets.dims")
    assert [device_files.bucket(ladder, n) for n in (0, 1, 64, 65, 1000, 8193, 10**7)] == \
        [0, 1, 64, 80, 1024, 8704, 20 * 524288]
    elements = device_files.for_arch("sm_90").value("autotune.buckets.elements")
    assert [device_files.bucket(elements, n) for n in (1, 65536, 65537, 2**30)] == [65536, 65536, 1048576, 2**36]


# ---- application files --------------------------------------------------------------------------

def test_an_application_file_adds_its_keys_beside_the_vendor_s(tmp_path):
    path = write(tmp_path, "engine", app_file("engine", ["sm_9"], {"engine": {"decode_batch": fact(8)},
                                                                  "memory": {"vmm": {"chunk_bytes": fact(
                                                                      2097152, "measured",
                                                                      "H200, 2026-11-29, tools/m.py")}}}))
    device_files.add_application_file(path)
    hopper = device_files.for_arch("sm_90")
    assert hopper.value("engine.decode_batch") == 8
    assert hopper.value("memory.vmm.chunk_bytes") == 2097152
    assert hopper.value("compute.warp_size") == 32
    assert hopper.files[-1] == path.resolve()
    assert "engine.decode_batch" not in device_files.for_arch("sm_80")  # its targets do not claim sm_80


def test_a_key_stated_by_both_the_vendor_and_an_application_is_refused_by_name(tmp_path):
    path = write(tmp_path, "engine", app_file("engine", ["sm_90"], {"compute": {"warp_size": fact(64)}}))
    device_files.add_application_file(path)
    with pytest.raises(FactConflictError, match=r"'compute\.warp_size' of application file \S*engine\.yml collides "
                                                r"with 'compute\.warp_size' stated by \S*hopper\.yml"):
        device_files.for_arch("sm_90")


def test_a_key_stated_by_two_application_files_is_refused_by_name(tmp_path):
    first = write(tmp_path, "first", app_file("first", ["sm_90"], {"engine": {"decode_batch": fact(8)}}))
    second = write(tmp_path, "second", app_file("second", ["sm_"], {"engine": {"decode_batch": fact(16)}}))
    device_files.add_application_file(first)
    device_files.add_application_file(second)
    with pytest.raises(FactConflictError, match=r"'engine\.decode_batch' of application file \S*second\.yml collides "
                                                r"with 'engine\.decode_batch' stated by \S*first\.yml"):
        device_files.for_arch("sm_90")


def test_an_application_key_that_nests_under_another_s_fact_is_refused(tmp_path):
    first = write(tmp_path, "first", app_file("first", ["sm_90"], {"engine": {"paging": fact(16)}}))
    second = write(tmp_path, "second", app_file("second", ["sm_90"], {"engine": {"paging": {"size": fact(4)}}}))
    device_files.add_application_file(first)
    device_files.add_application_file(second)
    with pytest.raises(FactConflictError, match=r"'engine\.paging\.size' .* collides with 'engine\.paging'"):
        device_files.for_arch("sm_90")


def test_a_broken_application_file_is_refused_when_added_and_removing_an_unknown_one_is_refused(tmp_path):
    path = write(tmp_path, "engine", app_file("engine", ["sm_90"], {"engine": {"decode_batch": 8}}))
    with pytest.raises(FileFormatError, match=r"engine\.yml: engine\.decode_batch: a bare value"):
        device_files.add_application_file(path)
    assert device_files.application_files() == []
    with pytest.raises(FileFormatError, match=r"is not an added application file"):
        device_files.remove_application_file(path)


# ---- the catalogue itself -----------------------------------------------------------------------

def test_forget_reads_the_files_again(tmp_catalogue):
    write(tmp_catalogue, "hopper", vendor_file("hopper", ["sm_90"], {"compute": {"warp_size": fact(32)}}))
    assert device_files.for_arch("sm_90").value("compute.warp_size") == 32
    write(tmp_catalogue, "hopper", vendor_file("hopper", ["sm_90"], {"compute": {"warp_size": fact(16)}}))
    assert device_files.for_arch("sm_90").value("compute.warp_size") == 32   # cached
    device_files.forget()
    assert device_files.for_arch("sm_90").value("compute.warp_size") == 16


def test_two_files_claiming_one_prefix_are_refused_naming_both(tmp_catalogue):
    write(tmp_catalogue, "a", vendor_file("a", ["sm_90"], {}))
    write(tmp_catalogue, "b", vendor_file("b", ["sm_90"], {}))
    with pytest.raises(FileFormatError, match=r"prefix 'sm_90' is claimed by both \S*a\.yml and \S*b\.yml"):
        device_files.for_arch("sm_90")


def test_a_variant_naming_a_missing_or_variant_family_is_refused(tmp_catalogue):
    write(tmp_catalogue, "ga10x", vendor_file("ga10x", ["sm_86"], {}, family="ampere"))
    with pytest.raises(FileFormatError, match=r"ga10x\.yml: family: names 'ampere', but nvidia has no ampere\.yml"):
        device_files.vendor_files()
    write(tmp_catalogue, "ampere", vendor_file("ampere", ["sm_80"], {}, family="volta"))
    write(tmp_catalogue, "volta", vendor_file("volta", ["sm_70"], {}))
    device_files.forget()
    with pytest.raises(FileFormatError, match=r"ga10x\.yml: family: 'ampere' is itself a variant"):
        device_files.vendor_files()


def test_vendor_files_are_found_in_each_vendor_package_s_data_folder_first(tmp_path, monkeypatch):
    package = tmp_path / "site" / "nbx" / "devices" / "testvendor"
    (package / "data" / "devices").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    write(package / "data" / "devices", "chip", vendor_file("chip", ["tv-1"], {"compute": {"warp_size": fact(16)}},
                                                            vendor="testvendor"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    try:
        found = dict(device_files.search_dirs())
        assert found["testvendor"] == package / "data" / "devices"
        assert device_files.for_arch("tv-1").value("compute.warp_size") == 16
    finally:
        sys.modules.pop("nbx.devices.testvendor", None)


def test_in_a_source_checkout_the_repository_devices_folder_is_the_fallback(monkeypatch):
    assert device_files.repo_devices_dir() == ROOT / "devices"
    monkeypatch.setattr(device_files, "_package_data", lambda vendor: None)
    found = dict(device_files.search_dirs())
    assert found["nvidia"] == ROOT / "devices" / "nvidia" and found["apple"] == ROOT / "devices" / "apple"
    assert device_files.for_arch("sm_90").path == ROOT / "devices" / "nvidia" / "hopper.yml"


# ---- the device in force ------------------------------------------------------------------------

class FakeGpuBackend:
    """A backend that reports a target, as a GPU backend does (HasTarget)."""

    name = "fakegpu"
    indexed = True
    host_accessible = False

    def __init__(self, targets):
        self.targets = targets

    def device_count(self): return len(self.targets)
    def current_device(self): return 1 if len(self.targets) > 1 else 0
    def allocate(self, nbytes, device): raise NotImplementedError
    def upload(self, storage, byte_offset, data): raise NotImplementedError
    def download(self, storage, byte_offset, nbytes): raise NotImplementedError
    def copy(self, dst, dst_offset, src, src_offset, nbytes): raise NotImplementedError
    def synchronize(self, device): return None
    def target(self, dev: Device) -> str: return self.targets[dev.index]


def test_in_force_asks_the_backend_for_the_target_of_its_current_device(monkeypatch):
    monkeypatch.setitem(_BACKENDS, "fakegpu", FakeGpuBackend(["sm_80", "sm_90"]))
    assert isinstance(_BACKENDS["fakegpu"], device_files.HasTarget)
    assert device_files.in_force().name == "nvidia/hopper"            # current device is fakegpu:1
    assert device_files.in_force("fakegpu:0").name == "nvidia/ampere"
    assert device_files.in_force(Device("fakegpu", 1)).target == "sm_90"


def test_the_cpu_has_no_device_file_and_says_so(monkeypatch):
    with pytest.raises(NoDeviceFileError, match=r"device 'cpu' has no device file: the 'cpu' backend runs no GPU "
                                                r"kernels and reports no target"):
        device_files.in_force("cpu")


def test_with_no_gpu_device_nothing_is_in_force_and_the_refusal_says_why(monkeypatch):
    monkeypatch.setitem(_BACKENDS, "fakegpu", FakeGpuBackend([]))
    with pytest.raises(NoDeviceFileError, match=r"no GPU backend has a device, so no device file is in force \(the "
                                                r"CPU backend has none.*fakegpu: no device"):
        device_files.in_force()

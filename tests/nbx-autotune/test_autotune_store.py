"""Certificate files: the schema, the refusals by name, merged, locked and atomic writes, device classes."""
from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from nbx.autotune import device_class, keys, store, sweep
from nbx.autotune.store import CertificateStore
from nbx.core.errors import CertificateError, DeviceClassError


@pytest.fixture
def proven(fakes, hopper):
    """(tunable, {key text: Entry}) of the fake kernel, proven at two keys."""
    clock = fakes.Clock()
    tunable = fakes.make_tunable(clock)
    entries = {}
    for n in (1000, 100_000):
        key = keys.form(tunable.name, tunable.key, hopper, n=n, dtype="float32")
        entries[str(key)] = sweep.prove(tunable, key, hopper, None, fakes.FakeTimer(clock), warmup=0, repeats=1)
    return tunable, entries


def written(tmp_path, fakes, tunable, entries, identity=None):
    identity = identity or fakes.IDENTITY
    path = store.path_in(tmp_path / "tree" / identity.vendor, identity, tunable.name)
    store.write(path, store.header(tunable, identity), entries, tunable)
    return path


def test_a_certificate_lies_at_vendor_class_compiler_kernel_and_reads_back(tmp_path, fakes, proven):
    tunable, entries = proven
    path = written(tmp_path, fakes, tunable, entries)
    assert path.relative_to(tmp_path / "tree").parts == ("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda",
                                                         "fake_scale.json")
    cert = store.read(path, tunable)
    assert cert.parameters == ("block", "num_warps") and cert.key_fields == ("n", "dtype")
    assert sorted(cert.entries) == ["n=1048576,dtype=f32", "n=65536,dtype=f32"]
    assert cert.entries["n=65536,dtype=f32"].setting == {"block": 128, "num_warps": 1}
    doc = json.loads(path.read_text())
    assert doc["entries"]["n=65536,dtype=f32"]["proof"]["excluded"][0]["deviation"] == "inf"


def refusal_of(path, tunable, mutate):
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(CertificateError) as caught:
        store.read(path, tunable)
    return store.reason_of(caught.value)


def test_a_file_failing_its_schema_is_refused_by_name(tmp_path, fakes, proven):
    tunable, entries = proven
    path = written(tmp_path, fakes, tunable, entries)
    original = path.read_text()
    assert refusal_of(path, tunable, lambda d: d.pop("compiler")) == (
        "missing field(s) ['compiler'], unknown field(s) []; a certificate has ['schema', 'kind', 'kernel', "
        "'vendor', 'device_class', 'compiler', 'parameters', 'key_fields', 'entries']")
    path.write_text(original)
    assert refusal_of(path, tunable, lambda d: d.update(schema=2)) == (
        "schema 2 kind 'nbx-autotune-certificate'; this nbx reads schema 1, kind 'nbx-autotune-certificate'")
    path.write_text(original)
    assert refusal_of(path, tunable, lambda d: d["entries"]["n=65536,dtype=f32"]["proof"].pop("witness")) == (
        "entries['n=65536,dtype=f32'].proof: missing field(s) ['witness'], unknown field(s) []")
    path.write_text(original)
    assert refusal_of(path, tunable, lambda d: d["entries"]["n=65536,dtype=f32"]["proof"].update(deviation=1.0)) == (
        "entries['n=65536,dtype=f32']: its proof shows deviation 1.0 above tolerance 3.1e-05; a setting that "
        "fails the screen is never served")
    path.write_text("{not json")
    with pytest.raises(CertificateError, match=r"fake_scale.json: cannot be read as JSON"):
        store.read(path, tunable)


def test_a_file_naming_parameters_its_kernel_lacks_is_refused_by_name(tmp_path, fakes, proven):
    tunable, entries = proven
    path = written(tmp_path, fakes, tunable, entries)

    def rename(doc):
        doc["parameters"] = ["BLOCK_HW", "num_warps"]
        for entry in doc["entries"].values():
            entry["setting"]["BLOCK_HW"] = entry["setting"].pop("block")

    assert refusal_of(path, tunable, rename) == (
        "names parameter(s) ['BLOCK_HW'] that kernel 'fake_scale' does not have; lacks parameter(s) ['block'] of "
        "kernel 'fake_scale' (its parameters: ['block', 'num_warps'])")


def test_a_file_from_another_compiler_is_refused_whether_in_its_folder_or_beside_it(tmp_path, fakes, proven):
    tunable, entries = proven
    path = written(tmp_path, fakes, tunable, entries)
    assert refusal_of(path, tunable, lambda d: d.update(compiler="triton-3.5.0-cuda")) == (
        "compiler says 'triton-3.5.0-cuda' but the file lies where 'triton-3.6.0-cuda' is expected "
        "(<device class>/<compiler>/<kernel>.json)")
    older = device_class.Identity("nvidia", "nvidia-h200-140gb", "triton-3.5.0-cuda")
    path.unlink()
    old_path = written(tmp_path, fakes, tunable, entries, identity=older)
    certificates = CertificateStore(trees=[tmp_path / "tree"], packaged=False)
    assert certificates.entries(fakes.IDENTITY, tunable) == {}
    assert [str(r) for r in certificates.refusals] == [
        f"{old_path}: made under compiler 'triton-3.5.0-cuda'; this process compiles with 'triton-3.6.0-cuda', "
        f"and a setting is served only under the compiler that proved it: certify it again"]


def test_a_refused_file_is_not_served_and_is_listed_once(tmp_path, fakes, proven):
    tunable, entries = proven
    path = written(tmp_path, fakes, tunable, entries)
    doc = json.loads(path.read_text())
    doc["key_fields"] = ["n"]
    path.write_text(json.dumps(doc))
    certificates = CertificateStore(trees=[tmp_path / "tree"], packaged=False)
    assert certificates.entries(fakes.IDENTITY, tunable) == {}
    certificates._cache.clear()
    certificates.entries(fakes.IDENTITY, tunable)
    assert [r.reason for r in certificates.refusals] == [
        "key_fields ['n'] are not kernel 'fake_scale''s ['n', 'dtype']"]


def test_writes_merge_with_the_file_on_disk_and_a_new_proof_replaces_the_old(tmp_path, fakes, proven):
    tunable, entries = proven
    (first, a), (second, b) = sorted(entries.items())
    path = written(tmp_path, fakes, tunable, {first: a})
    written(tmp_path, fakes, tunable, {second: b})
    assert sorted(store.read(path, tunable).entries) == sorted(entries)
    faster = store.Entry({"block": 64, "num_warps": 2}, dict(a.proof, best_ms=0.01))
    written(tmp_path, fakes, tunable, {first: faster})
    merged = store.read(path, tunable).entries
    assert merged[first].setting == {"block": 64, "num_warps": 2} and merged[second].setting == b.setting


def test_a_write_into_a_file_of_another_parameter_space_is_refused_and_leaves_it(tmp_path, fakes, proven):
    tunable, entries = proven
    path = written(tmp_path, fakes, tunable, entries)
    before = path.read_text()
    other = fakes.make_tunable(fakes.Clock(), params={"block": (64,), "num_warps": (1,), "num_stages": (2,)})
    with pytest.raises(CertificateError, match=r"names parameter\(s\) \[\] that|lacks parameter"):
        store.write(path, store.header(other, fakes.IDENTITY), {}, other)
    head = dict(store.header(tunable, fakes.IDENTITY), key_fields=["n"])
    with pytest.raises(CertificateError, match=r"on disk its key_fields is \('n', 'dtype'\), the entries written have "
                                               r"\['n'\]; not merged"):
        store.write(path, head, {}, None)
    assert path.read_text() == before


def test_a_write_that_fails_before_the_rename_leaves_the_old_file_and_no_temporary(tmp_path, fakes, proven,
                                                                                 monkeypatch):
    tunable, entries = proven
    (first, a), (second, b) = sorted(entries.items())
    path = written(tmp_path, fakes, tunable, {first: a})
    before = path.read_text()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(store.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        written(tmp_path, fakes, tunable, {second: b})
    assert path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake_scale.json"]


def _write_many(args):
    tree, worker, entry_json = args
    identity = device_class.Identity("nvidia", "nvidia-h200-140gb", "triton-3.6.0-cuda")
    head = {"schema": 1, "kind": store.KIND, "kernel": "fake_scale", "vendor": "nvidia",
            "device_class": identity.device_class, "compiler": identity.compiler,
            "parameters": ["block", "num_warps"], "key_fields": ["n", "dtype"]}
    entry = store.Entry(**json.loads(entry_json))
    path = store.path_in(os.path.join(tree, "nvidia"), identity, "fake_scale")
    for i in range(12):
        store.write(path, head, {f"n={worker * 100 + i},dtype=f32": entry})


def test_concurrent_writers_in_two_processes_lose_no_entry(tmp_path, proven):
    _, entries = proven
    entry = next(iter(entries.values()))
    blob = json.dumps({"setting": entry.setting, "proof": entry.proof})
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_write_many, [(str(tmp_path), w, blob) for w in (1, 2)])
    path = tmp_path / "nvidia" / "nvidia-h200-140gb" / "triton-3.6.0-cuda" / "fake_scale.json"
    assert len(store.read(path).entries) == 24
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake_scale.json"]  # no lock file or temporary left


def test_an_added_tree_is_consulted_before_the_packaged_certificates(tmp_path, fakes, proven, monkeypatch):
    tunable, entries = proven
    written(tmp_path, fakes, tunable, entries)
    monkeypatch.setenv("NBX_AUTOTUNE_CERTIFICATES", str(tmp_path / "tree"))
    certificates = CertificateStore()
    assert certificates.folders("nvidia")[0] == tmp_path / "tree" / "nvidia"
    assert sorted(certificates.entries(fakes.IDENTITY, tunable)) == sorted(entries)


def test_check_folder_reports_each_file_with_its_refusal(tmp_path, fakes, proven, monkeypatch):
    tunable, entries = proven
    from nbx.autotune import candidates
    monkeypatch.setattr(candidates, "_registry", {tunable.name: tunable})
    written(tmp_path, fakes, tunable, entries)
    stray = tmp_path / "tree" / "nvidia" / "nvidia-h200-140gb" / "triton-3.6.0-cuda" / "gone.json"
    stray.write_text("{}")
    results = store.check_folder(tmp_path / "tree" / "nvidia", "nvidia")
    assert [(p.name, r, n) for p, r, n in results] == [
        ("fake_scale.json", None, 2),
        ("gone.json", "kernel 'gone' is declared by no installed kernel (nbx.kernels), so its parameters cannot be "
                      "checked; it would never be served", 0)]


@pytest.mark.parametrize("vendor, name, memory, expected", [
    ("nvidia", "NVIDIA H200", 143771 << 20, "nvidia-h200-140gb"),       # bare metal
    ("nvidia", "NVIDIA H200", 150109880320, "nvidia-h200-140gb"),      # the GPU machine's VM (measured)
    ("nvidia", "NVIDIA H100 80GB HBM3", 81559 << 20, "nvidia-h100-hbm3-80gb"),
    ("nvidia", "NVIDIA H100 PCIe", 81559 << 20, "nvidia-h100-pcie-80gb"),
    ("nvidia", "Tesla V100-SXM2-32GB", 32510 << 20, "nvidia-tesla-v100-sxm2-32gb"),
    ("nvidia", "NVIDIA A100-SXM4-40GB", 40960 << 20, "nvidia-a100-sxm4-40gb"),
    ("amd", "AMD Instinct MI300X", 196592 << 20, "amd-instinct-mi300x-192gb"),
    ("apple", "Apple M4 Pro", 48 << 30, "apple-m4-pro-48gb"),
])
def test_the_device_class_is_the_normalized_name_and_the_nearest_whole_gib_of_the_memory(vendor, name, memory,
                                                                                         expected):
    assert device_class.normalize(vendor, name, memory) == expected
    assert device_class.vendor_of_class(expected) == vendor


def test_a_device_without_name_or_memory_and_a_malformed_class_or_compiler_are_refused():
    with pytest.raises(DeviceClassError, match=r"a nvidia device with no name cannot be classed"):
        device_class.normalize("nvidia", " ", 1 << 30)
    with pytest.raises(DeviceClassError, match=r"device 'NVIDIA H200' reports 0 bytes of memory"):
        device_class.normalize("nvidia", "NVIDIA H200", 0)
    with pytest.raises(DeviceClassError, match=r"'H200' is not a device class"):
        device_class.check_class("H200")
    with pytest.raises(DeviceClassError, match=r"'triton-cuda' is not a compiler name"):
        device_class.check_compiler("triton-cuda")
    assert device_class.check_compiler("triton-3.6.0-cuda") == "triton-3.6.0-cuda"

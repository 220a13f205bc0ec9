"""The schema of device fact files refuses, by file and key, whatever a file may not say."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from nbx.core import device_schema
from nbx.core.errors import FileFormatError

TOLERANCE = {name: 0 for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")}
TOLERANCE.update(float16=2.0e-3, bfloat16=1.6e-2, float32=3.1e-5, float64=5.8e-14, float8_e4m3fn=0.26,
                 float8_e5m2=0.51, complex64=3.1e-5, complex128=5.8e-14)


def minimal(**facts) -> dict:
    return {"schema": 1, "vendor": "nvidia", "name": "hopper", "architecture": "Hopper", "targets": ["sm_90"],
            "facts": facts}


def check(tmp_path: Path, data: dict, name: str = "hopper", vendor: str = "nvidia"):
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(data))
    return device_schema.validate_vendor_file(device_schema.load_yaml(path), path, vendor)


def fact(value, kind="source", text="a public document"):
    return {"value": value, kind: text}


def test_a_valid_file_comes_back_flattened_with_each_fact_s_provenance(tmp_path):
    facts = check(tmp_path, minimal(compute={"warp_size": fact(32)},
                                    memory={"max_shared_memory_per_block": fact(232448, "measured",
                                                                                "H200, 2026-11-29, tools/x.py")}))
    assert facts["compute.warp_size"].value == 32
    assert facts["compute.warp_size"].provenance == "source: a public document"
    assert facts["memory.max_shared_memory_per_block"].kind == "measured"
    assert facts["memory.max_shared_memory_per_block"].file == tmp_path / "hopper.yml"


def test_an_unknown_fact_is_refused_naming_the_file_and_the_key(tmp_path):
    with pytest.raises(FileFormatError, match=r"hopper\.yml: memory\.max_shared_memroy_per_block: is not a fact"):
        check(tmp_path, minimal(memory={"max_shared_memroy_per_block": fact(1)}))


def test_an_unknown_group_is_refused(tmp_path):
    with pytest.raises(FileFormatError, match=r"memroy: is not a group of the schema"):
        check(tmp_path, minimal(memroy={"x": {"y": 1, "z": 2}}))


def test_a_bare_value_without_provenance_is_refused(tmp_path):
    with pytest.raises(FileFormatError, match=r"compute\.warp_size: a bare value"):
        check(tmp_path, minimal(compute={"warp_size": 32}))


def test_a_fact_with_no_provenance_or_two_is_refused(tmp_path):
    with pytest.raises(FileFormatError, match=r"compute\.warp_size: needs exactly one provenance .* found none"):
        check(tmp_path, minimal(compute={"warp_size": {"value": 32}}))
    with pytest.raises(FileFormatError, match=r"needs exactly one provenance .*\['source', 'chosen'\]"):
        check(tmp_path, minimal(compute={"warp_size": {"value": 32, "source": "a", "chosen": "b"}}))


def test_an_unknown_key_beside_a_value_is_refused(tmp_path):
    with pytest.raises(FileFormatError, match=r"compute\.warp_size: unknown key\(s\) \['note'\]"):
        check(tmp_path, minimal(compute={"warp_size": {"value": 32, "source": "a", "note": "b"}}))


def test_a_measured_fact_names_device_date_and_tool(tmp_path):
    with pytest.raises(FileFormatError, match=r'measured is "<device>, <YYYY-MM-DD>, <tool>"'):
        check(tmp_path, minimal(compute={"warp_size": fact(32, "measured", "on the H200 yesterday")}))


def test_a_null_value_is_refused_because_unknown_facts_are_left_out(tmp_path):
    with pytest.raises(FileFormatError, match=r"a value of null; a fact that is not known is left out"):
        check(tmp_path, minimal(compute={"warp_size": fact(None)}))


@pytest.mark.parametrize("value, message", [
    ("32", r"must be an integer, got '32'"),
    (True, r"must be an integer, got True"),
    (0, r"0 is below its minimum 1"),
])
def test_an_integer_fact_must_be_an_integer_in_range(tmp_path, value, message):
    with pytest.raises(FileFormatError, match=r"compute\.warp_size: " + message):
        check(tmp_path, minimal(compute={"warp_size": fact(value)}))


def test_a_fraction_above_one_is_refused(tmp_path):
    with pytest.raises(FileFormatError, match=r"memory\.pool_parked_fraction: 1\.5 is above its maximum 1"):
        check(tmp_path, minimal(memory={"pool_parked_fraction": fact(1.5, "chosen", "why")}))


def test_a_record_must_have_exactly_its_fields(tmp_path):
    with pytest.raises(FileFormatError, match=r"tiles\.matmul: missing field\(s\) \['group_m', 'num_stages'\]"):
        check(tmp_path, minimal(tiles={"matmul": fact({"block_m": 64, "block_n": 64, "block_k": 32, "num_warps": 4},
                                                      "chosen", "why")}))
    with pytest.raises(FileFormatError, match=r"tiles\.elementwise: unknown field\(s\) \['blok'\]"):
        check(tmp_path, minimal(tiles={"elementwise": fact({"blok": 64, "num_warps": 4}, "chosen", "why")}))
    with pytest.raises(FileFormatError, match=r"tiles\.elementwise\.num_warps: must be an integer"):
        check(tmp_path, minimal(tiles={"elementwise": fact({"block": 64, "num_warps": 4.5}, "chosen", "why")}))


def test_a_matrix_unit_shape_may_leave_out_n_step_only(tmp_path):
    shape = {"instruction": "mma.sync", "m": 16, "n": 8, "k": 16, "inputs": ["float16"], "accumulate": ["float32"]}
    facts = check(tmp_path, minimal(matrix_unit={"shapes": fact([shape])}))
    assert facts["matrix_unit.shapes"].value[0]["k"] == 16
    del shape["accumulate"]
    with pytest.raises(FileFormatError, match=r"matrix_unit\.shapes\[0\]: missing field\(s\) \['accumulate'\]"):
        check(tmp_path, minimal(matrix_unit={"shapes": fact([shape])}))


def test_an_integer_tolerance_that_is_not_exactly_zero_is_refused(tmp_path):
    tolerance = dict(TOLERANCE, int32=1e-6)
    with pytest.raises(FileFormatError, match=r"autotune\.screen_tolerance\.int32: is 1e-06; a int result is compared "
                                              r"exactly, so its tolerance is 0"):
        check(tmp_path, minimal(autotune={"screen_tolerance": fact(tolerance, "derived", "rule")}))
    tolerance = dict(TOLERANCE, bool=0.5)
    with pytest.raises(FileFormatError, match=r"screen_tolerance\.bool: is 0\.5"):
        check(tmp_path, minimal(autotune={"screen_tolerance": fact(tolerance, "derived", "rule")}))


def test_a_tolerance_map_names_every_dtype_and_only_dtypes(tmp_path):
    tolerance = {k: v for k, v in TOLERANCE.items() if k != "float8_e5m2"}
    with pytest.raises(FileFormatError, match=r"states no value for \['float8_e5m2'\]"):
        check(tmp_path, minimal(autotune={"screen_tolerance": fact(tolerance, "derived", "rule")}))
    with pytest.raises(FileFormatError, match=r"\['float4'\] are not dtypes of nbx's table"):
        check(tmp_path, minimal(autotune={"screen_tolerance": fact(dict(TOLERANCE, float4=0.5), "derived", "r")}))


@pytest.mark.parametrize("ladder, message", [
    ([{"up_to": 64, "step": 1}], r"\[0\]: the last row is unbounded"),
    ([{"up_to": None, "step": 1}, {"up_to": None, "step": 2}], r"\[0\]: only the last row is unbounded"),
    ([{"up_to": 100, "step": 16}, {"up_to": None, "step": 16}], r"\[0\]: up_to 100 is not a multiple of step 16"),
    ([{"up_to": 64, "step": 1}, {"up_to": 32, "step": 1}, {"up_to": None, "step": 64}],
     r"\[1\]: up_to must be an integer above 64"),
    ([{"up_to": 64, "step": 0}, {"up_to": None, "step": 64}], r"\[0\]: step must be a positive integer"),
    ([{"up_to": 64}], r"\[0\]: a ladder row is \{up_to: int \| null, step: int\}"),
])
def test_a_bucket_ladder_is_increasing_aligned_and_ends_unbounded(tmp_path, ladder, message):
    with pytest.raises(FileFormatError, match=r"autotune\.buckets\.dims" + message):
        check(tmp_path, minimal(autotune={"buckets": {"dims": fact(ladder, "chosen", "why")}}))


def test_the_identity_keys_must_agree_with_the_file_and_its_folder(tmp_path):
    with pytest.raises(FileFormatError, match=r"vendor: says 'nvidia' but the file is in the 'amd' folder"):
        check(tmp_path, minimal(), vendor="amd")
    with pytest.raises(FileFormatError, match=r"name: says 'hopper'; a file's name is its stem, 'ampere'"):
        check(tmp_path, minimal(), name="ampere")
    with pytest.raises(FileFormatError, match=r"schema: is 2; this nbx reads schema 1"):
        check(tmp_path, dict(minimal(), schema=2))
    with pytest.raises(FileFormatError, match=r"colour: unknown top-level key"):
        check(tmp_path, dict(minimal(), colour="green"))
    with pytest.raises(FileFormatError, match=r"architecture: missing top-level key"):
        check(tmp_path, {k: v for k, v in minimal().items() if k != "architecture"})


@pytest.mark.parametrize("targets, message", [
    ([], r"targets: a non-empty list"),
    (["SM_90"], r"'SM_90' is not a target prefix"),
    (["sm_90", "sm_90"], r"a prefix is listed twice"),
])
def test_targets_are_distinct_lowercase_prefixes(tmp_path, targets, message):
    with pytest.raises(FileFormatError, match=message):
        check(tmp_path, dict(minimal(), targets=targets))


def test_malformed_yaml_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "hopper.yml"
    path.write_text("facts: [unclosed\n")
    with pytest.raises(FileFormatError, match=r"hopper\.yml: not valid YAML"):
        device_schema.load_yaml(path)


def test_facts_come_back_frozen_so_no_caller_edits_a_cached_value(tmp_path):
    facts = check(tmp_path, minimal(tiles={"elementwise": fact({"block": 1024, "num_warps": 4}, "chosen", "why")},
                                    autotune={"buckets": {"dims": fact([{"up_to": None, "step": 1}], "chosen", "w")}}))
    with pytest.raises(TypeError):
        facts["tiles.elementwise"].value["block"] = 1
    assert isinstance(facts["autotune.buckets.dims"].value, tuple)


def test_an_application_file_may_add_its_own_keys_but_must_follow_the_schema_s(tmp_path):
    data = {"schema": 1, "application": "engine", "targets": ["sm_90"],
            "facts": {"engine": {"decode_batch": fact(8, "chosen", "why")},
                      "memory": {"vmm": {"chunk_bytes": fact(2097152, "measured", "H200, 2026-11-29, tools/m.py")}}}}
    path = tmp_path / "engine.yml"
    path.write_text(yaml.safe_dump(data))
    facts = device_schema.validate_application_file(device_schema.load_yaml(path), path)
    assert sorted(facts) == ["engine.decode_batch", "memory.vmm.chunk_bytes"]
    bad = copy.deepcopy(data)
    bad["facts"]["memory"]["vmm"]["chunk_bytes"]["value"] = -1
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(FileFormatError, match=r"memory\.vmm\.chunk_bytes: -1 is below its minimum 1"):
        device_schema.validate_application_file(device_schema.load_yaml(path), path)
    inside = {"schema": 1, "application": "engine", "targets": ["sm_90"],
              "facts": {"tiles": {"matmul": {"block_m": fact(64, "chosen", "why")}}}}
    path.write_text(yaml.safe_dump(inside))
    with pytest.raises(FileFormatError, match=r"engine\.yml: tiles\.matmul: is a fact of the schema, stated whole"):
        device_schema.validate_application_file(device_schema.load_yaml(path), path)


def test_every_required_key_of_the_schema_is_a_fact_of_the_schema():
    for vendor in ("nvidia", "amd", "apple"):  # the interpreter's vendor, triton, requires nothing
        required = device_schema.required_keys(vendor)
        assert required and set(required) <= set(device_schema.schema_keys())
    assert "dispatch.max_command_buffers_in_flight" in device_schema.required_keys("apple")
    assert "dispatch.max_command_buffers_in_flight" not in device_schema.required_keys("nvidia")

"""Launch keys: classed on the device file's ladders, spelled from the dtype table, refused when malformed."""
from __future__ import annotations

import pytest
from nbx.autotune import keys
from nbx.core import device_files
from nbx.core.errors import LaunchKeyError

SPEC = {"n": "elements", "rows": "dims", "head": "exact", "dtype": "dtype", "dense": "flag", "op": "label"}


def form(facts, **overrides):
    inputs = dict(n=1000, rows=1000, head=128, dtype="float16", dense=True, op="add")
    inputs.update(overrides)
    return keys.form("k", SPEC, facts, **inputs)


def test_a_key_classes_sizes_on_the_device_files_ladders_and_spells_dtypes_by_the_table(hopper):
    key = form(hopper)
    assert str(key) == "n=65536,rows=1024,head=128,dtype=f16,dense=1,op=add"
    assert key.observed == {"n": 1000, "rows": 1000}
    assert str(form(hopper, dtype="bfloat16", dense=False)) == "n=65536,rows=1024,head=128,dtype=bf16,dense=0,op=add"


@pytest.mark.parametrize("n, cls", [(0, 0), (1, 65536), (65536, 65536), (65537, 1048576), (1 << 24, 1 << 24),
                                    ((1 << 24) + 1, 68719476736), (1 << 30, 68719476736)])
def test_element_counts_fall_in_the_four_classes_of_hoppers_ladder(hopper, n, cls):
    assert form(hopper, n=n).values()["n"] == cls


@pytest.mark.parametrize("rows, cls", [(1, 1), (63, 63), (64, 64), (65, 80), (257, 288), (1000, 1024),
                                       (8193, 8704), (10000, 10240), (3_000_000, 3_145_728)])
def test_dimensions_are_exact_to_64_then_stepped_as_the_dims_ladder_says(hopper, rows, cls):
    assert form(hopper, rows=rows).values()["rows"] == cls


@pytest.mark.parametrize("size, coarse, dims", [(1, 2, 1), (63, 64, 63), (65, 96, 80), (1000, 1024, 1024),
                                                (1920, 2048, 1920), (8193, 8704, 8704)])
def test_coarse_dims_take_hoppers_doubled_steps_and_the_dims_ladder_where_a_file_states_none(hopper, size,
                                                                                             coarse, dims):
    ampere = device_files.for_arch("sm_80")
    assert keys.LADDERS["coarse_dims"] not in ampere   # only hopper.yml measured its bucket losses
    spec = {"rows": "coarse_dims"}
    assert keys.form("k", spec, hopper, rows=size).values()["rows"] == coarse
    assert keys.form("k", spec, ampere, rows=size).values()["rows"] == keys.form(
        "k", {"rows": "dims"}, ampere, rows=size).values()["rows"] == dims


def test_launches_of_one_class_share_a_key_and_the_observed_sizes_are_not_part_of_it(hopper):
    a, b, c = form(hopper, n=10), form(hopper, n=60000), form(hopper, n=70000)
    assert a == b and hash(a) == hash(b) and a.observed != b.observed
    assert a != c
    assert form(hopper) != keys.form("other", SPEC, hopper, n=1000, rows=1000, head=128, dtype="float16",
                                     dense=True, op="add")


@pytest.mark.parametrize("overrides, message", [
    ({"n": 10.0}, r"key field 'n' is a size, an integer >= 0; got 10.0"),
    ({"n": -1}, r"key field 'n' is a size, an integer >= 0; got -1"),
    ({"rows": True}, r"key field 'rows' is a size, an integer >= 0; got True"),
    ({"head": "128"}, r"key field 'head' is a size"),
    ({"dtype": "float4"}, r"key field 'dtype' is a dtype; .*float4"),
    ({"dense": 1}, r"key field 'dense' is a flag, True or False; got 1"),
    ({"op": "a,b"}, r"key field 'op' is a label"),
])
def test_a_malformed_input_is_refused_by_field(hopper, overrides, message):
    with pytest.raises(LaunchKeyError, match=message):
        form(hopper, **overrides)


def test_a_missing_or_unexpected_input_is_refused_never_left_out_of_the_key(hopper):
    with pytest.raises(LaunchKeyError, match=r"kernel 'k': key fields .*; missing \['op'\], unexpected \[\]"):
        keys.form("k", SPEC, hopper, n=1, rows=1, head=1, dtype="float32", dense=True)
    with pytest.raises(LaunchKeyError, match=r"missing \[\], unexpected \['extra'\]"):
        form(hopper, extra=3)


def test_a_ladder_the_device_file_does_not_state_refuses_the_key_by_name():
    interp = device_files.for_arch("interp")  # the interpreter's file states no ladders
    with pytest.raises(LaunchKeyError, match=r"key field 'n' is classed on 'autotune.buckets.elements', which the "
                                             r"device file does not state"):
        keys.form("k", {"n": "elements"}, interp, n=5)


def test_a_key_declaration_with_an_unknown_kind_or_no_field_is_refused():
    with pytest.raises(LaunchKeyError, match=r"key field 'n' has kind 'size'; kinds are"):
        keys.check_spec("k", {"n": "size"})
    with pytest.raises(LaunchKeyError, match=r"its key declares no field"):
        keys.check_spec("k", {})
    with pytest.raises(LaunchKeyError, match=r"key field 'N' is not a lowercase identifier"):
        keys.check_spec("k", {"N": "dims"})


def test_a_written_key_parses_back_to_the_same_key(hopper):
    key = form(hopper)
    again = keys.parse("k", SPEC, str(key), hopper, observed={"n": 1000})
    assert again == key and again.observed == {"n": 1000}


def test_a_written_key_classed_on_another_ladder_or_with_other_fields_is_refused(hopper):
    with pytest.raises(LaunchKeyError, match=r"field 'rows': 1000 is not a class of 'autotune.buckets.dims' in "
                                             r"nvidia/hopper; the key was formed on another ladder"):
        keys.parse("k", SPEC, "n=65536,rows=1000,head=128,dtype=f16,dense=1,op=add", hopper)
    with pytest.raises(LaunchKeyError, match=r"does not have the kernel's fields"):
        keys.parse("k", SPEC, "rows=1024,n=65536,head=128,dtype=f16,dense=1,op=add", hopper)
    with pytest.raises(LaunchKeyError, match=r"'f17' is no dtype's key spelling"):
        keys.parse("k", SPEC, "n=65536,rows=1024,head=128,dtype=f17,dense=1,op=add", hopper)
    with pytest.raises(LaunchKeyError, match=r"records n=70000, which is not in its class 65536"):
        keys.parse("k", SPEC, str(form(hopper)), hopper, observed={"n": 70000})


def test_the_representative_launch_is_the_classes_top_or_the_observed_size_in_the_unbounded_row(hopper):
    rep = keys.representative(form(hopper), SPEC, hopper)
    assert rep["n"] == 65536 and rep["rows"] == 1024 and rep["head"] == 128 and rep["dtype"].name == "float16"
    big = form(hopper, n=(1 << 24) + 5)
    assert keys.representative(big, SPEC, hopper)["n"] == (1 << 24) + 5
    unrecorded = keys.parse("k", SPEC, str(big), hopper)
    with pytest.raises(LaunchKeyError, match=r"n=68719476736 lies in the unbounded last row of "
                                             r"'autotune.buckets.elements'.*no observed size was recorded"):
        keys.representative(unrecorded, SPEC, hopper)

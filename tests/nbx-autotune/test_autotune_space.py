"""Ladder classes, the distance between keys, a kernel's key space and its coverage (nbx autotune coverage --space)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from nbx.autotune import keys, space
from nbx.autotune.candidates import Tunable
from nbx.core import device_files
from nbx.core.errors import MissingFactError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "certificates/nvidia/nvidia-h200-140gb/triton-3.6.0-cuda"


def test_every_class_of_a_ladder_has_an_index_in_order_and_its_smallest_member_forms_it(hopper):
    for ladder_key in ("autotune.buckets.dims", "autotune.buckets.elements"):
        ladder = hopper.value(ladder_key)
        found = space.classes(ladder, 1 << 22)
        assert [space.class_index(ladder, c) for c in found] == list(range(1, len(found) + 1))
        for c in found:
            low = space.smallest_in_class(ladder, c)
            assert device_files.bucket(ladder, low) == c and device_files.bucket(ladder, low - 1) != c
    dims = hopper.value("autotune.buckets.dims")
    assert space.classes(dims, 70) == list(range(1, 65)) + [80]
    assert space.smallest_in_class(dims, 4096) == 3969
    assert space.classes(hopper.value("autotune.buckets.elements"), 1 << 28) == [
        65536, 1048576, 8388608, 16777216, 68719476736]


def test_keys_are_as_far_apart_as_the_octaves_between_their_classes_and_other_dtypes_are_no_neighbours(hopper):
    spec = {"width": "exact", "elements": "elements", "dtype": "dtype", "strided": "flag"}

    def key(width, elements, dtype="float32", strided=False):
        return keys.form("rows", spec, hopper, width=width, elements=elements, dtype=dtype, strided=strided)

    a = key(1024, 3000)                                        # elements class 65536
    assert space.distance(spec, a, key(4096, 500_000)) == (2 + 4, 6)      # 2 octaves of width, 4 of elements
    assert space.distance(spec, key(4096, 500_000), a) == (6, -6)
    assert space.distance(spec, a, key(1024, 3000, "bfloat16")) is None
    assert space.distance(spec, a, key(1024, 3000, strided=True)) is None
    assert space.octaves(0, 8) == math.inf and space.octaves(0, 0) == 0


def test_the_smallest_launch_of_a_key_lies_in_its_classes(hopper):
    spec = {"m": "dims", "n": "dims", "dtype": "dtype"}
    key = keys.form("mm", spec, hopper, m=4000, n=33, dtype="bfloat16")
    small = keys.smallest(key, spec, hopper)   # 3969 is the class's smallest size; 3984 its smallest multiple of 16
    assert (small["m"], small["n"], small["dtype"].name) == (3984, 33, "bfloat16")
    assert keys.form("mm", spec, hopper, **small) == key
    assert keys.smallest(keys.form("mm", spec, hopper, m=70, n=7, dtype="float32"), spec, hopper)["m"] == 80


def test_the_smallest_launch_takes_the_observed_launchs_specializations_so_the_screen_compiles_its_variant(hopper):
    """Triton compiles an integer argument equal to 1, or a multiple of 16, into a variant of its own:
    a screen on sizes of the launch's own kinds builds the kernel that launch then loads."""
    spec = {"m": "dims", "n": "dims", "dtype": "dtype"}
    key = keys.form("mm", spec, hopper, m=4001, n=1, dtype="bfloat16")
    small = keys.smallest(key, spec, hopper, like=key.observed)
    assert (small["m"], small["n"]) == (3969, 1)   # 4001 is no multiple of 16: neither is 3969
    assert keys.form("mm", spec, hopper, **small) == key
    assert keys.smallest(key, spec, hopper)["m"] == 3984   # unobserved: a multiple of 16
    for m in (3969, 3970, 3984, 4000, 4001):
        got = keys.smallest(key, spec, hopper, like={"m": m, "n": 1})["m"]
        assert keys.specialization(got) == keys.specialization(m) and keys.form(
            "mm", spec, hopper, m=got, n=1, dtype="bfloat16") == key


ROWS = Tunable("rows_fake", params={"num_warps": (4, 8)},
               key={"width": "exact", "elements": "elements", "dtype": "dtype", "strided": "flag"})


def test_a_row_kernels_key_space_holds_every_width_class_dtype_and_flag_that_can_hold_a_row(hopper):
    found = space.key_space(ROWS, hopper)
    stated = hopper.value("autotune.key_space")
    widths = stated["exact_up_to"].bit_length()                 # 1, 2, 4 ... 2**18
    pairs = widths * 5 - 2                                       # 2**17 and 2**18 hold no row in 64 Ki elements
    assert found.size() == pairs * len(stated["dtypes"]) * 2
    listed = dict(found.keys())
    assert "width=262144,elements=65536,dtype=f32,strided=0" not in listed
    assert listed["width=1024,elements=68719476736,dtype=bf16,strided=1"] == {"elements": stated["elements_up_to"]}
    assert listed["width=1024,elements=65536,dtype=bf16,strided=1"] == {}


def test_a_key_space_takes_the_dtypes_a_family_keys_by(hopper):
    """The copies key the word they move (bfloat16 and float16 are u16): their space holds the words of
    the stated dtypes, once each, so the shipped u16 certificates lie inside it (they all lay outside,
    0 of 12720 keys certified, while a key_space of float dtypes was counted)."""
    from nbx.core import dtypes
    words = Tunable("copy_fake", params={"block": (1024,)}, key={"n": "elements", "dtype": "dtype"},
                    key_dtype=lambda dt: dtypes.TABLE[f"uint{8 * dt.itemsize}"])
    assert dict(space.key_space(words, hopper).values)["dtype"] == ("u32", "u16")   # float32, bfloat16, float16
    plain = Tunable("plain_fake", params={"block": (1024,)}, key={"n": "elements", "dtype": "dtype"})
    assert dict(space.key_space(plain, hopper).values)["dtype"] == ("f32", "bf16", "f16")


def test_a_matmul_key_space_is_counted_without_listing_its_millions_of_keys(hopper):
    mm = Tunable("mm_fake", params={"block_m": (64,)},
                 key={"m": "dims", "n": "dims", "k": "dims", "dtype": "dtype", "layout": "label"})
    classes = len(space.classes(hopper.value("autotune.buckets.dims"), hopper.value("autotune.key_space")["dims_up_to"]))
    assert space.key_space(mm, hopper).size() == classes ** 3 * 3 * 2
    unknown = Tunable("mm_fake", params={"block_m": (64,)}, key={"m": "dims", "order": "label"})
    with pytest.raises(MissingFactError, match=r"label field 'order' has no values in autotune.key_space.labels"):
        space.key_space(unknown, hopper)


def test_coverage_of_a_key_space_counts_the_certified_keys_inside_it(tmp_path, capsys):
    from nbx.core import cli
    doc = json.loads((SHIPPED / "elementwise.json").read_text())
    kept = ["n=65536,dtype=f32,strided=0", "n=68719476736,dtype=bf16,strided=0", "n=65536,dtype=i64,strided=0"]
    doc["entries"] = {k: doc["entries"][k] for k in kept}
    folder = tmp_path / "tree/nvidia/nvidia-h200-140gb/triton-3.6.0-cuda"
    folder.mkdir(parents=True)
    (folder / "elementwise.json").write_text(json.dumps(doc))
    assert cli.main(["autotune", "coverage", "--space", "--kernel", "elementwise", "--arch", "sm_90", "--device-class",
                     "nvidia-h200-140gb", "--compiler", "triton-3.6.0-cuda", "--certificates",
                     str(tmp_path / "tree")]) == 1
    lines = capsys.readouterr().out.splitlines()
    # f32 and bf16 (strided=0) have a certified neighbour: 2 x 5 element classes, 2 of them certified; f16 and
    # every strided=1 key have none (the i64 key is outside the space but serves no float key)
    assert lines[0].split() == (
        "elementwise 2 of 30 key(s) of its key space certified (6.67 %), 8 from a certified neighbour, 20 with "
        "none; 1 certified key(s) outside it").split()
    assert ("28 key(s) uncertified, of which 8 served from a certified neighbour (after a screen) and 20 by no "
            "certificate") in lines[-1]


def test_space_uncovered_writes_one_key_per_combination_no_certificate_shares_and_certified_they_leave_none_bare(
        tmp_path, capsys):
    from nbx.autotune import records
    from nbx.core import cli
    doc = json.loads((SHIPPED / "elementwise.json").read_text())
    kept = ["n=65536,dtype=f32,strided=0", "n=1048576,dtype=f32,strided=0", "n=16777216,dtype=f32,strided=0",
            "n=68719476736,dtype=bf16,strided=0"]
    doc["entries"] = {k: doc["entries"][k] for k in kept}
    folder = tmp_path / "tree/nvidia/nvidia-h200-140gb/triton-3.6.0-cuda"
    folder.mkdir(parents=True)
    (folder / "elementwise.json").write_text(json.dumps(doc))
    where = ["--arch", "sm_90", "--device-class", "nvidia-h200-140gb", "--compiler", "triton-3.6.0-cuda",
             "--certificates", str(tmp_path / "tree")]
    out = tmp_path / "uncovered.json"
    assert cli.main(["autotune", "space", "--kernel", "elementwise", "--uncovered", "--out", str(out), *where]) == 0
    picked = {r.key: r.observed for r in records.load(out)}
    # f32 strided=1 shares its dtype with three f32 keys: their median size (1 Mi); bf16 strided=1 takes bf16's
    # unbounded class with the size its certificate was timed at; f16 strided=0 shares strided=0 with all four
    # and f16 strided=1 nothing with any: the median of four (the upper one), 16 Mi
    assert picked == {"n=1048576,dtype=f32,strided=1": {"n": 1048576},
                      "n=68719476736,dtype=bf16,strided=1": {"n": 134217728},
                      "n=16777216,dtype=f16,strided=0": {"n": 16777216},
                      "n=16777216,dtype=f16,strided=1": {"n": 16777216}}
    for text in picked:   # certified as the certifier would: each key's own entry
        doc["entries"][text] = doc["entries"][kept[1]]
    (folder / "elementwise.json").write_text(json.dumps(doc))
    capsys.readouterr()
    cli.main(["autotune", "coverage", "--space", "--kernel", "elementwise", *where])
    assert ", 0 with none;" in capsys.readouterr().out.splitlines()[0]
    doc["entries"] = {}
    (folder / "elementwise.json").write_text(json.dumps(doc))
    assert cli.main(["autotune", "space", "--kernel", "elementwise", "--uncovered", "--out", str(out), *where]) != 0
    assert "has no certified key in its key space to take sizes from" in capsys.readouterr().err


def test_coverage_of_the_key_spaces_names_a_kernel_whose_space_the_device_file_cannot_state_and_counts_the_rest(
        tmp_path, capsys, monkeypatch):
    from nbx.autotune import Tunable, cli as autotune_cli
    from nbx.core import cli
    shipped = autotune_cli._load_kernels()
    unstated = Tunable("unstated", params={"block": (256,)}, key={"n": "elements", "style": "label"},
                       default_from="tiles.elementwise")   # a label whose values hopper.yml does not list
    monkeypatch.setattr(autotune_cli, "_load_kernels", lambda: {"elementwise": shipped["elementwise"],
                                                                "unstated": unstated})
    assert cli.main(["autotune", "coverage", "--space", "--kernel", "unstated", "--kernel", "elementwise", "--arch",
                     "sm_90", "--device-class", "nvidia-h200-140gb", "--compiler", "triton-3.6.0-cuda"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("elementwise ") and " of 30 key(s) of its key space certified" in lines[0]
    assert lines[1].startswith("unstated") and "label field 'style' has no values" in lines[1]
    assert lines[-1].endswith("; 1 kernel(s) with no key space (unstated)")


def test_every_declared_kernels_label_fields_have_values_in_hoppers_key_space(hopper):
    from nbx.autotune import cli as autotune_cli
    from nbx.autotune.space import key_space
    for name, tunable in sorted(autotune_cli._load_kernels().items()):
        assert key_space(tunable, hopper).size() > 0, name   # a MissingFactError names the kernel and field

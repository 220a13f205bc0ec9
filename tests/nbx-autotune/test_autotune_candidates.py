"""Candidate settings: declared per kernel, pruned by the device's facts before anything compiles."""
from __future__ import annotations

import pytest
from nbx.autotune import candidates
from nbx.autotune.candidates import Tunable, all_of, registers, shared_memory
from nbx.core.errors import ArgumentError, MissingFactError

KEY = {"n": "elements"}


def test_candidates_are_the_product_of_the_values_in_declared_order(hopper):
    t = Tunable("k", params={"block": (64, 128), "num_warps": (1, 2)}, key=KEY)
    kept, pruned = t.candidates(hopper)
    assert kept == [{"block": 64, "num_warps": 1}, {"block": 64, "num_warps": 2},
                    {"block": 128, "num_warps": 1}, {"block": 128, "num_warps": 2}]
    assert pruned == []


def test_warps_past_the_threads_a_block_may_have_and_stages_past_the_cap_are_pruned_with_the_fact(hopper):
    t = Tunable("k", params={"num_warps": (32, 64), "num_stages": (4, 5)}, key=KEY)
    kept, pruned = t.candidates(hopper)
    assert kept == [{"num_warps": 32, "num_stages": 4}]
    reasons = [why for _, why in pruned]
    assert "64 warps are 2048 threads, above compute.max_threads_per_block 1024" in reasons
    assert "5 stages, above pipelining.max_num_stages 4" in reasons


def test_shared_memory_and_register_helpers_prune_by_the_device_files_limits(hopper):
    smem = shared_memory(lambda s: s["block_k"] * 128 * 2 * s["num_stages"])
    regs = registers(lambda s: 64 * s["block_k"] // 32)
    t = Tunable("k", params={"block_k": (32, 256), "num_stages": (2, 4), "num_warps": (8, 16)}, key=KEY,
                constraint=all_of(smem, regs))
    kept, pruned = t.candidates(hopper)
    assert {"block_k": 32, "num_stages": 4, "num_warps": 16} in kept
    why = dict((tuple(s.items()), r) for s, r in pruned)
    assert why[(("block_k", 256), ("num_stages", 4), ("num_warps", 8))] == (
        "needs 262144 bytes of shared memory, above memory.max_shared_memory_per_block 232448")
    assert why[(("block_k", 256), ("num_stages", 2), ("num_warps", 8))] == (
        "needs 512 registers a thread, above compute.max_registers_per_thread 255")


def test_a_constraint_answering_false_prunes_and_one_answering_nonsense_is_refused(hopper):
    t = Tunable("k", params={"block": (64, 128)}, key=KEY, constraint=lambda s, f: s["block"] > 64)
    assert t.candidates(hopper)[1] == [({"block": 64}, "refused by the kernel's constraint")]
    bad = Tunable("k", params={"block": (64,)}, key=KEY, constraint=lambda s, f: 3)
    with pytest.raises(ArgumentError, match=r"the kernel's constraint answered 3; a constraint answers True, "
                                            r"False or a reason"):
        bad.candidates(hopper)


def test_a_per_key_fit_prunes_only_when_a_representative_launch_is_given(hopper):
    t = Tunable("k", params={"block": (64, 4096)}, key=KEY,
                fits=lambda s, rep, facts: s["block"] <= rep["n"] or f"block {s['block']} above the {rep['n']} elements")
    assert len(t.candidates(hopper)[0]) == 2
    kept, pruned = t.candidates(hopper, {"n": 1000})
    assert kept == [{"block": 64}] and pruned == [({"block": 4096}, "block 4096 above the 1000 elements")]


def test_the_device_files_tile_is_always_a_candidate(hopper):
    t = Tunable("k", params={"block": (256, 2048), "num_warps": (2, 8)}, key=KEY, default_from="tiles.elementwise")
    assert t.default(hopper) == {"block": 1024, "num_warps": 4}
    assert t.candidates(hopper)[0][0] == {"block": 1024, "num_warps": 4}


def test_a_default_tile_without_a_tuned_parameter_is_refused_by_name(hopper):
    t = Tunable("k", params={"block": (256,), "num_stages": (2,)}, key=KEY, default_from="tiles.elementwise")
    with pytest.raises(MissingFactError, match=r"'tiles.elementwise' states no \['num_stages'\] for kernel 'k'"):
        t.default(hopper)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "Bad-Name"}, r"a tunable kernel's name is a lowercase identifier"),
    ({"params": {}}, r"kernel 'k' declares no parameter to tune"),
    ({"params": {"block": (64, 64)}}, r"parameter 'block' needs a list of distinct int, bool or str values"),
    ({"params": {"block": (0.5,)}}, r"parameter 'block' needs a list of distinct"),
    ({"params": {"block": ()}}, r"parameter 'block' needs a list of distinct"),
])
def test_a_malformed_declaration_is_refused(kwargs, message):
    spec = {"name": "k", "params": {"block": (64,)}, "key": KEY}
    spec.update(kwargs)
    with pytest.raises(ArgumentError, match=message):
        Tunable(**spec)


def test_a_setting_naming_parameters_the_kernel_lacks_is_described_by_name():
    t = Tunable("depthwise", params={"BC": (8,), "TH": (4,), "TW": (4,)}, key=KEY)
    assert t.parameter_problems({"BC": 8, "TH": 4, "TW": 4}) is None
    assert t.parameter_problems({"BLOCK_HW": 64, "BLOCK_C": 8}) == (
        "names parameter(s) ['BLOCK_C', 'BLOCK_HW'] that kernel 'depthwise' does not have; lacks parameter(s) "
        "['BC', 'TH', 'TW'] of kernel 'depthwise' (its parameters: ['BC', 'TH', 'TW'])")


def test_a_kernel_declared_twice_differently_is_refused_and_an_undeclared_one_is_named(monkeypatch):
    monkeypatch.setattr(candidates, "_registry", {})
    first = candidates.declare(Tunable("twice", params={"block": (64,)}, key=KEY))
    assert candidates.lookup("twice") is first
    candidates.declare(Tunable("twice", params={"block": (64,)}, key=KEY))  # a module imported again
    with pytest.raises(ArgumentError, match=r"kernel 'twice' is declared twice with different parameters"):
        candidates.declare(Tunable("twice", params={"block": (128,)}, key=KEY))
    with pytest.raises(ArgumentError, match=r"no kernel named 'nope' declares tuned settings; declared: \['twice'\]"):
        candidates.lookup("nope")

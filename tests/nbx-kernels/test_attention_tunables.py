"""The attention family's tunables: declared over the device files' tiles, their candidates pruned
by shared memory, and their workloads (the wrappers' own paths) passing the screen on interp."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx import autotune
from nbx.autotune import keys, screen
from nbx.core import device_files
from nbx.kernels import launch

TUNABLES = ("attention", "attention_decode", "rope")


def test_each_attention_tunable_takes_its_default_from_every_device_file(interp):
    for name in TUNABLES:
        tunable = autotune.lookup(name)
        for facts in (device_files.for_arch("sm_90"), device_files.for_arch("sm_80"), launch.facts(interp)):
            assert set(tunable.default(facts)) == set(tunable.params)
        hopper = device_files.for_arch("sm_90")
        assert tunable.default(hopper) in tunable.candidates(hopper, None)[0]


def test_prefill_candidates_whose_tiles_pass_shared_memory_at_head_dim_256_are_pruned(interp):
    tunable = autotune.lookup("attention")
    rep = {"q_len": 4096, "k_len": 4096, "head_dim": 256, "v_dim": 256, "group": 4, "dtype": nbx.bfloat16,
           "causal": True, "tma": True}
    kept, pruned = tunable.candidates(device_files.for_arch("sm_90"), rep)
    assert kept and any("shared" in reason or "bytes" in reason for _, reason in pruned)
    assert all(s["block_m"] * 256 * 2 + s["num_stages"] * s["block_n"] * 512 * 2 <= 232448 for s in kept)


WORKLOADS = [
    ("attention", {"q_len": 20, "k_len": 20, "head_dim": 16, "v_dim": 16, "group": 2, "dtype": "bfloat16",
                   "causal": True, "tma": True}),
    ("attention_decode", {"k_len": 40, "rows": 4, "head_dim": 16, "dtype": "float32", "paged": False, "batch": 1}),
    ("attention_decode", {"k_len": 37, "rows": 2, "head_dim": 16, "dtype": "bfloat16", "paged": True, "batch": 5}),
    ("attention_decode", {"k_len": 33, "rows": 2, "head_dim": 16, "dtype": "bfloat16", "paged": False, "batch": 2}),
    ("rope", {"elements": 8 * 16 * 5, "head_dim": 16, "dtype": "bfloat16"}),
]


@pytest.mark.parametrize("name,rep", WORKLOADS, ids=[f"{w[0]}-{w[1]['dtype']}" for w in WORKLOADS])
def test_the_first_and_last_candidates_pass_the_screen_on_the_workload(interp, name, rep):
    tunable = autotune.lookup(name)
    rep = {**rep, "dtype": nbx.as_dtype(rep["dtype"])}
    kept, _ = tunable.candidates(device_files.for_arch("sm_90"), rep)
    chosen = kept[:1] + kept[-1:]
    result = screen.run(tunable.workload(rep, interp), chosen, launch.facts(interp))
    assert not result.excluded, [v.reason for v in result.excluded]
    assert len(result.passed) == len(chosen)


# Keys where the output averages over many keys: a correct kernel rounds P to the dot's dtype, and the
# screen's instance must be one whose output does not cancel below those roundings (the sinusoids it
# had did: every non-causal bf16 key failed on the H200 with the device file's tile). 200 keys: past two
# blocks of either tile, a multiple of neither, so the unchecked middle range and the checked tail both run.
LONG_NON_CAUSAL = [
    ("attention", {"q_len": 24, "k_len": 200, "head_dim": 32, "v_dim": 32, "group": 2, "dtype": "bfloat16",
                   "causal": False, "tma": True}),
    ("attention_decode", {"k_len": 200, "rows": 4, "head_dim": 32, "dtype": "bfloat16", "paged": True, "batch": 2}),
]


@pytest.mark.parametrize("name,rep", LONG_NON_CAUSAL, ids=[w[0] for w in LONG_NON_CAUSAL])
def test_the_interp_and_hopper_device_tiles_pass_a_non_causal_screen_over_keys_past_two_blocks(interp, name, rep):
    tunable = autotune.lookup(name)
    rep = {**rep, "dtype": nbx.as_dtype(rep["dtype"])}
    tiles = [tunable.default(launch.facts(interp)), tunable.default(device_files.for_arch("sm_90"))]
    result = screen.run(tunable.workload(rep, interp), tiles, launch.facts(interp))
    assert [v.passed for v in result.verdicts] == [True, True], [v.reason for v in result.verdicts]
    assert max(v.deviation for v in result.verdicts) < result.tolerance / 3


def _hopper_candidates(head_dim, tma=True):
    rep = {"q_len": 4096, "k_len": 4096, "head_dim": head_dim, "v_dim": head_dim, "group": 4, "dtype": nbx.bfloat16,
           "causal": True, "tma": tma}
    return autotune.lookup("attention").candidates(device_files.for_arch("sm_90"), rep)


def test_hopper_prefill_candidates_keep_no_tile_that_spills_and_cap_registers_only_where_two_programs_fit_an_sm():
    from nbx.kernels.attention.tuning import CAPPED_FLOATS, SPILL_FLOATS, live_floats, prefill_stage_bytes
    for head_dim in (64, 128, 256):
        kept, pruned = _hopper_candidates(head_dim)
        assert kept and all(live_floats(s, head_dim) <= SPILL_FLOATS for s in kept)
        for s in (s for s in kept if s["max_registers"]):   # more programs an SM than uncapped (255 a thread)
            assert s["loads"] == "tma" and live_floats(s, head_dim) <= CAPPED_FLOATS
            by_shared = 233472 // prefill_stage_bytes(s, head_dim, head_dim)
            threads = 32 * s["num_warps"]
            assert min(65536 // (128 * threads), by_shared) > min(65536 // (256 * threads), by_shared)
    kept, _ = _hopper_candidates(128)
    # the one capped tile at head dim 128: 128 x 64, 8 warps, 2 stages (ptxas: 127 registers, no spill)
    assert [(s["block_m"], s["block_n"], s["num_stages"]) for s in kept if s["max_registers"]] == [(128, 64, 2)]
    assert not any(s["block_m"] == 128 and s["num_warps"] == 4 for s in kept)   # 192 and 256 floats: spills
    assert not any(s["max_registers"] for s in _hopper_candidates(128, tma=False)[0])


def test_a_register_capped_descriptor_setting_passes_the_screen_on_interp(interp):
    """The cap reaches Triton as maxnreg (the interpreter ignores it): the launch must still be right."""
    tunable = autotune.lookup("attention")
    rep = {"q_len": 24, "k_len": 200, "head_dim": 32, "v_dim": 32, "group": 2, "dtype": nbx.bfloat16,
           "causal": True, "tma": True}
    capped = {**tunable.default(launch.facts(interp)), "max_registers": 128}
    result = screen.run(tunable.workload(rep, interp), [capped], launch.facts(interp))
    assert [v.passed for v in result.verdicts] == [True], [v.reason for v in result.verdicts]


@pytest.mark.parametrize("q_len,k_len,causal", [(24, 24, True), (10, 30, True), (30, 10, True), (24, 24, False)])
def test_the_prefill_screen_compares_windows_of_query_rows_each_against_the_oracle_of_its_own_queries(
        interp, q_len, k_len, causal):
    """The certifier's prefill workload leads with the query rows (its one batch would be every row),
    and a window's oracle attends only its own queries (and, causal, the keys they see): equal to the
    whole call's oracle at those rows, bottom-right causal rows included."""
    from nbx.core.dtypes import as_dtype
    from nbx.core.ops.attention import AttentionOptions
    from nbx.core.reference import oracle
    from nbx.kernels.attention.tuning import prefill_workload
    rep = {"group": 2, "dtype": as_dtype("float32"), "q_len": q_len, "k_len": k_len, "head_dim": 16, "v_dim": 16,
           "causal": causal}
    work = prefill_workload(rep, interp)
    assert work.out_shape == (q_len, 1, 4, 16)
    rng = np.random.default_rng
    q, k, v = (nbx.asarray(rng(seed).standard_normal((1, h, n, 16)).astype(np.float32))
               for seed, h, n in ((37, 4, q_len), (21, 2, k_len), (13, 2, k_len)))
    options = AttentionOptions(1.0 / 4.0, causal, "bottom_right")
    whole = np.asarray(oracle("scaled_dot_product_attention", q, k, v, None, None, options)).transpose(2, 0, 1, 3)
    for rows in (slice(0, 3), slice(q_len // 2, q_len // 2 + 4), slice(q_len - 2, q_len), slice(0, q_len)):
        np.testing.assert_allclose(work.reference_rows(rows), whole[rows], rtol=0, atol=1e-12)


def test_a_prefill_workload_takes_enough_heads_to_fill_the_h200_as_a_model_does(interp):
    """2 KV heads left a 1-4k key's programs under one wave of the H200's SMs, where the certifier
    chose a tile that lost on a model's 32 heads: the workload now fills 4 waves within 32 query heads."""
    from nbx.kernels.attention.tuning import PREFILL_WORKLOAD_WAVES, prefill_kv_heads
    hopper = device_files.for_arch("sm_90")
    sms = hopper.value("compute.multiprocessors")
    for q_len, group, heads in ((1024, 1, 32), (4096, 1, 17), (16384, 1, 5), (4096, 4, 5), (16384, 4, 2)):
        hk = prefill_kv_heads({"q_len": q_len, "group": group}, hopper)
        assert hk == heads
        if hk * group < 32:   # below the heads' cap the programs fill the waves
            assert hk * group * -(-q_len // 128) >= PREFILL_WORKLOAD_WAVES * sms
    assert prefill_kv_heads({"q_len": 64, "group": 1}, launch.facts(interp)) == 2   # no such fact: as before


def test_the_decode_key_holds_the_batch_to_a_power_of_two_and_its_workload_that_many_sequences(interp):
    """A batch-1 decode setting (one stage, short splits) served 8 sequences of 32k at 0.71x torch on
    the H200: the batch is in the key, and the workload runs that many sequences, each its own output
    (K and V times +-1: exact)."""
    tunable = autotune.lookup("attention_decode")
    key = keys.form("attention_decode", tunable.key, device_files.for_arch("sm_90"), k_len=32768, rows=4,
                    head_dim=128, dtype="bfloat16", paged=True, batch=5)
    assert str(key) == "k_len=32768,rows=4,head_dim=128,dtype=bf16,paged=1,batch=8"
    coarse = keys.form("attention_decode", tunable.key, device_files.for_arch("sm_90"), k_len=270, rows=4,
                       head_dim=128, dtype="bfloat16", paged=True, batch=1)
    assert str(coarse).startswith("k_len=320,")   # coarse_dims' step of 64 (dims': 288)
    rep = {"k_len": 20, "rows": 2, "head_dim": 16, "dtype": nbx.as_dtype("float32"), "paged": True, "batch": 5}
    work = tunable.workload(rep, interp)
    assert work.out_shape[0] == 5
    ref = [work.reference_rows(slice(b, b + 1)) for b in range(5)]
    assert np.abs(ref[1] - ref[0]).max() > 0.01            # K negated: other weights
    np.testing.assert_array_equal(ref[2], -ref[0])         # V negated
    np.testing.assert_array_equal(ref[3], -ref[1])
    assert np.abs(ref[4] - ref[0]).max() > 0.01            # the signs of the first, over fewer tokens
    assert np.isclose(np.abs(ref[1]).max(), np.abs(ref[0]).max(), rtol=0.5)   # every sequence of one size


def test_the_paged_decode_workload_places_each_sequences_blocks_out_of_order(interp, monkeypatch):
    """A cache's blocks lie out of order after allocations and frees (the bench's shuffled table
    took 0.2756 ms for 8 x 32k where in-order blocks took 0.2406): the workload's table is a seeded
    permutation within each sequence's range, so a kernel that ignored the table fails its screen."""
    from nbx.kernels import attention
    seen, launch_paged = {}, attention.launch_paged

    def spy(q, k, v, table, *args, **kwargs):
        seen["table"] = table.numpy()
        return launch_paged(q, k, v, table, *args, **kwargs)
    monkeypatch.setattr(attention, "launch_paged", spy)
    tunable = autotune.lookup("attention_decode")
    rep = {"k_len": 70, "rows": 2, "head_dim": 16, "dtype": nbx.as_dtype("float32"), "paged": True, "batch": 2}
    work = tunable.workload(rep, interp)
    work.launch(tunable.default(launch.facts(interp)))
    table = seen["table"]
    blocks = table.shape[1]
    assert blocks > 2
    assert sorted(table[0]) == list(range(blocks)) and sorted(table[1]) == list(range(blocks, 2 * blocks))
    assert list(table[0]) != list(range(blocks))

"""top-k by chunk candidates (sort/chunks.py, the `chunks` method of the select tunable) against
nbx's numpy reference (values and indices: ties to the lower index, NaN the largest value), on
interp with small chunks: several chunks a row, a last chunk shorter than k, merge rounds of
several lists and the last of fewer; the plan's shape at the H200's sizes; its candidates."""
import sys

import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import launch
from nbx.kernels.cost import price
from nbx.kernels.sort.chunks import chunk_candidates_kernel, merge_candidates_kernel, row_bound_kernel
from nbx.kernels.sort.topk import select_plan, select_rows

from test_sort_select import requested_bytes

rng = np.random.default_rng(17)


def rows_with_ties_and_nans(shape, dtype):
    if dtype.startswith("int"):
        a = rng.integers(-100, 100, shape).astype(dtype)
        a[1 % shape[0], -40:] = 120                      # ties at the top, across a chunk boundary
        return nbx.asarray(a)
    a = rng.integers(-6, 6, shape).astype(np.float32) + rng.choice([0.0, 0.5], shape).astype(np.float32)
    a[0, 3] = a[0, 170] = a[-1, -2] = np.nan           # NaNs in two chunks of a row, one in its last
    a[-1, 0], a[-1, 1] = -0.0, 0.0
    a[1 % shape[0], -40:] = 7.0                          # ties at the top, across a chunk boundary
    return nbx.asarray(a).to(dtype=getattr(nbx, dtype))


def chunks_setting(chunk: int, bound: str = "chunk") -> dict:
    return {"method": "chunks", "chunk": chunk, "bound": bound}


def check(c, device, k, largest, chunk, bound="chunk"):
    values, indices = select_rows(c.to(device), k, largest, setting=chunks_setting(chunk, bound))
    ref = nbx.topk(c, k, largest=largest)
    assert values.dtype is c.dtype and values.shape == ref.values.shape and indices.dtype is ref.indices.dtype
    np.testing.assert_array_equal(indices.numpy(), ref.indices.numpy())
    np.testing.assert_array_equal(values.numpy().astype(np.float64), ref.values.numpy().astype(np.float64))


@pytest.mark.parametrize("k, largest", [(2, True), (13, False), (32, True)])
def test_chunk_candidates_keep_the_references_values_and_indices_in_float32(device, k, largest):
    """300 keys in chunks of 64 (too few for a chunk's own bound: the row's): 5 chunks, the last
    of 44 (fewer than k = 32 real keys); merge rounds of 4 lists a program for k = 2 and 13
    (5 -> 2 -> 1: the last round's second program holds one list, padded), of 2 for k = 32
    (5 -> 3 -> 2 -> 1)."""
    check(rows_with_ties_and_nans((3, 300), "float32"), device, k, largest, 64)


@pytest.mark.parametrize("dtype, largest", [("bfloat16", True), ("float16", False), ("int8", True)])
def test_chunk_candidates_of_half_precision_and_integer_rows_keep_the_references_order(device, dtype, largest):
    check(rows_with_ties_and_nans((2, 300), dtype), device, 9, largest, 64)


@pytest.mark.parametrize("largest, bound", [(True, "chunk"), (False, "chunk"), (True, "row")])
def test_the_bound_compacts_few_survivors_and_ties_take_the_whole_chunk(device, largest, bound):
    """Chunks of 512 for k = 16 (16 groups, 128 words of scratch), the chunk's bound or the row's:
    iid keys leave ~50 words under the chunk's bound (compacted), a constant row all 512 (the
    whole chunk's top-k), small integers a tie class of ~85 (compacted, the ties in index order);
    a NaN in the constant row; one winner in each group of 32 of the first chunk, so the chunk's
    bound is itself the 16th winner."""
    a = rng.standard_normal((4, 1500)).astype(np.float32)
    a[1] = 1.0
    a[1, 700] = np.nan
    a[2] = rng.integers(-3, 3, 1500)
    a[3, 5:512:32] = (100.0 + rng.permutation(16)) * (1 if largest else -1)
    plan = select_plan((4, 1500), nbx.float32, 16, largest, device, chunks_setting(512, bound))
    cap = 128 if bound == "chunk" else 64   # the row's: an eighth of the chunk
    assert plan.launches[-2].meta["CAP"] == cap and [l.grid for l in plan.launches][-2:] == [(4, 3), (4, 1)]
    check(nbx.asarray(a), device, 16, largest, 512, bound)


@pytest.mark.parametrize("largest", [True, False])
def test_the_rows_bound_compacts_few_survivors_and_a_weak_group_takes_whole_chunks(device, largest):
    """k = 13 in chunks of 64: 16 groups of a row's columns mod 16, 8 words of scratch (fewer than
    K = 16: the sorted survivors are widened with last words). iid rows leave ~8 survivors a chunk
    (compacted, or the whole chunk past 8); a row whose group 15 holds only the worst values bounds
    nothing (every chunk's whole top-k); rows of 14 keys leave two of the 16 groups empty (no
    bound: all survive, the whole chunk); a row whose bound keeps 6 winners in one chunk."""
    a = rng.standard_normal((4, 420)).astype(np.float32)
    a[1, 15::16] = -1000.0 if largest else 1000.0
    a[2, 9] = np.nan
    # one top value a group, the six best in chunk 0: the bound keeps exactly these 16, 6 of them
    # (all winners) in chunk 0's 8 words
    tops = [0, 1, 2, 3, 4, 5, 70, 71, 72, 73, 74, 75, 140, 141, 142, 143]   # columns 0..15 mod 16
    a[3, tops] = (115.0 - np.arange(16)) * (1 if largest else -1)
    plan = select_plan((4, 420), nbx.float32, 13, largest, device, chunks_setting(64))
    assert plan.launches[1].kernel is row_bound_kernel and plan.launches[2].meta["CAP"] == 8
    check(nbx.asarray(a), device, 13, largest, 64)
    check(nbx.asarray(a[:, :14].copy()), device, 13, largest, 64)


def test_a_row_of_one_chunk_is_written_by_stage_1_itself(device):
    plan = select_plan((3, 300), nbx.float32, 7, True, device, chunks_setting(512))
    assert [l.grid for l in plan.launches] == [(3, 1)] and plan.launches[0].meta["FINAL"]
    check(rows_with_ties_and_nans((3, 300), "float32"), device, 7, True, 512)


def test_a_k_of_half_the_chunk_merges_pairs_of_lists_over_three_rounds(device):
    """k = chunk / 2, the largest the chunks serve: a merge program takes two lists (6 -> 3 -> 2 -> 1)."""
    plan = select_plan((2, 350), nbx.float32, 32, False, device, chunks_setting(64))
    assert [l.grid for l in plan.launches][-4:] == [(2, 6), (2, 3), (2, 2), (2, 1)]
    check(rows_with_ties_and_nans((2, 350), "float32"), device, 32, False, 64)


def test_the_chunks_plan_at_the_h200s_vocabulary_rows_and_where_the_radix_select_serves(device):
    """[64, 151936] in chunks of 4096: 38 lists of k a row; k = 50 merges them in one round (64
    runs of 64 words a program), k = 1024 in three (4 lists a program); k = 1 and k above
    chunk / 2 take the radix select; the workspace holds every list of stage 1 and of the first
    round, and stage 1's scratch where its bound applies."""
    shape, setting = (64, 151936), chunks_setting(4096)
    small = select_plan(shape, nbx.float32, 50, True, device, setting)
    assert [(l.kernel, l.grid) for l in small.launches] == [(chunk_candidates_kernel, (64, 38)),
                                                            (merge_candidates_kernel, (64, 1))]
    assert small.launches[1].meta["LOG_RUNS"] == 6 and small.launches[0].meta["CAP"] == 512
    assert {b.name: b.shape for b in small.workspace} == {"candidates": (64 * 38 * 50,), "scratch": (64 * 38 * 512,)}
    big = select_plan(shape, nbx.float32, 1024, True, device, setting)
    assert [(l.kernel, l.grid) for l in big.launches][1:] == [
        (row_bound_kernel, (64, 38)), (chunk_candidates_kernel, (64, 38)), (merge_candidates_kernel, (64, 10)),
        (merge_candidates_kernel, (64, 3)), (merge_candidates_kernel, (64, 1))]   # after the bound's zeroing
    assert {b.name: b.shape for b in big.workspace} == {"candidates": (64 * 38 * 1024,), "merged": (64 * 10 * 1024,),
                                                        "scratch": (64 * 38 * 512,), "bound": (64 * 1024,)}
    # 8 runs of 1024 would be the whole chunk: the row's 1024 groups bound it, ~200 survivors in 512
    assert big.launches[2].meta["ROW_BOUND"] and big.launches[2].meta["CAP"] == 512
    assert not small.launches[0].meta["ROW_BOUND"]
    by_row = select_plan(shape, nbx.float32, 50, True, device, {**setting, "bound": "row"})
    assert [l.kernel for l in by_row.launches][1:] == [row_bound_kernel, chunk_candidates_kernel,
                                                       merge_candidates_kernel]
    assert by_row.launches[2].meta["CAP"] == 256   # ~8 survivors a chunk of the row's ~300
    assert big.detail["candidate_words"] == 64 * (38 + 10 + 3) * 1024
    assert len(select_plan(shape, nbx.float32, 1, True, device, setting).launches) == 2
    assert len(select_plan(shape, nbx.float32, 2049, True, device, setting).launches) == 8


def test_served_chunks_run_topk_and_its_declared_cost_allocates_what_the_call_does(device, monkeypatch):
    """nbx.topk with the chunks served (the certifier's pick, here patched in): the reference's
    result, and the cost's buffers are those the call allocates."""
    served = {**launch.tiles("select", device), **chunks_setting(64)}
    # the module (nbx.kernels.sort's `topk` attribute is the op)
    monkeypatch.setattr(sys.modules["nbx.kernels.sort.topk"], "select_setting", lambda *_: served)
    # a row past the one-program sort of the device (333 on interp, 4096 + 77 on the H200), of a
    # length no other test's cached plan holds
    n = max(333, launch.tiles("sort", device)["max_block_n"] + 77)
    c = rows_with_ties_and_nans((2, n), "float32")
    d = c.to(device)
    asked = requested_bytes(device, monkeypatch)
    got = nbx.topk(d, 20, largest=False)
    cost = price("topk", d, 20, largest=False)
    assert sum(asked) == cost.allocated and len(asked) == len(cost.buffers)
    # the bound's zeroing and groups, stage 1, then merge rounds halving the lists (6 -> 3 -> 2 -> 1 at 333)
    lists = -(-n // 64)
    assert cost.launches == 3 + (lists - 1).bit_length() and "chunk candidates" in cost.notes[0]
    ref = nbx.topk(c, 20, largest=False)
    np.testing.assert_array_equal(got.indices.numpy(), ref.indices.numpy())
    np.testing.assert_array_equal(got.values.numpy(), ref.values.numpy())


def test_the_select_candidates_are_the_radix_settings_and_the_chunks_of_each_size_and_warps():
    """A method's unread parameters take the device file's values (no two candidates run one plan),
    a chunk of 8192 over 4 warps (64 words a thread) is refused; certificates made before the
    method existed read as the radix select."""
    from nbx.core import device_files
    from nbx.kernels.sort.topk import SELECT
    facts = device_files.for_arch("sm_90")
    kept, pruned = SELECT.candidates(facts)
    default = facts.value("tiles.select")
    assert default in kept and len(kept) == 18 + 10
    assert {(s["chunk"], s["bound"], s["num_warps"]) for s in kept if s["method"] == "chunks"} == {
        (c, b, w) for c in (2048, 4096, 8192) for b in ("chunk", "row") for w in (4, 8) if c // (32 * w) <= 32}
    assert all(s["block"] == default["block"] and s["programs"] == default["programs"]
               for s in kept if s["method"] == "chunks")
    assert {(s["chunk"], s["bound"]) for s in kept if s["method"] == "radix"} == {(default["chunk"], default["bound"])}
    assert SELECT.implied["method"] == "radix"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_chunk_candidates_of_vocabulary_rows_match_the_reference_on_the_gpu(dtype):
    """The H200's shapes under each chunk size and bound (8192 for float32 only: its compile is
    the longest): [64, 151936] (and one row), k = 50 and 1024."""
    device = nbx.as_device("cuda")
    logits = (nbx.randn(64, 151936, generator=nbx.Generator(seed=4)) * 3.0).to(dtype=getattr(nbx, dtype))
    on_gpu = logits.to(device)
    settings = [(2048, "chunk"), (4096, "chunk"), (4096, "row")] + ([(8192, "chunk")] if dtype == "float32" else [])
    for k in (50, 1024):
        refs = {largest: nbx.topk(logits, k, largest=largest) for largest in (True, False)}
        for chunk, bound in settings:
            for largest in (True, False):
                values, indices = select_rows(on_gpu, k, largest, setting=chunks_setting(chunk, bound))
                np.testing.assert_array_equal(indices.numpy(), refs[largest].indices.numpy())
                np.testing.assert_array_equal(values.numpy().astype(np.float64),
                                              refs[largest].values.numpy().astype(np.float64))
        one_row, expected = on_gpu[:1].contiguous(), refs[True].indices.numpy()[:1]
        for bound in ("chunk", "row"):
            got = select_rows(one_row, k, True, setting=chunks_setting(4096, bound))[1]
            np.testing.assert_array_equal(got.numpy(), expected)

"""top-k's radix select and the radix sort of rows longer than one program (sort/select.py,
sort/radix.py) against the numpy references, on interp in CI (small rows that still cross
programs and tiles) and on the GPU (marked gpu, vocabulary-sized rows)."""
import numpy as np
import pytest
import triton
import triton.language as tl

import nbx.core as nbx
from nbx.core.ops.sorting import take_sorted
from nbx.kernels import launch
from nbx.kernels.cost import price
from nbx.kernels.sort.radix import _look_back, radix_plan
from nbx.kernels.sort.topk import select_plan, split

rng = np.random.default_rng(31)


def same(got, expected):
    assert got.dtype is expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy().astype(np.float64), expected.numpy().astype(np.float64))


def with_ties_and_nans(shape, dtype):
    a = rng.integers(-9, 9, shape).astype(np.float32)  # many ties
    if dtype.startswith(("float", "bfloat")):
        a[0, 3] = a[-1, -2] = np.nan
        a[0, 5], a[0, 6] = -0.0, 0.0
    return nbx.asarray(a).to(dtype=getattr(nbx, dtype))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_the_radix_select_keeps_the_references_values_and_indices_ties_to_the_lower_index(device, dtype):
    limit = launch.tiles("sort", device)["max_block_n"]
    c = with_ties_and_nans((2, 5 * limit + 3), dtype)  # odd length, several programs a row
    d = c.to(device)
    cases = ((1, True), (1, False), (7, False), (limit, True)) if dtype == "float32" else ((5, True),)
    for k, largest in cases:
        got, ref = nbx.topk(d, k, largest=largest), nbx.topk(c, k, largest=largest)
        same(got.values, ref.values)
        same(got.indices, ref.indices)
    assert price("topk", d, 7).allocated > 0


def test_topk_beyond_one_programs_sort_takes_the_radix_sorts_first_k_and_k_may_be_the_whole_row(device):
    limit = launch.tiles("sort", device)["max_block_n"]
    c = with_ties_and_nans((1, 2 * limit + 1), "float32")
    d = c.to(device)
    for k in (c.shape[1],):
        got, ref = nbx.topk(d, k, largest=False), nbx.topk(c, k, largest=False)
        same(got.values, ref.values)
        same(got.indices, ref.indices)


@triton.jit
def look_back_probe(status_ptr, out_ptr, r, t, tiles, WINDOW: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, 256), _look_back(status_ptr, r, t, tiles, 256, WINDOW))


SORTED_DTYPES = ["float32", "float16", "bfloat16", "int32", "uint32", "int16", "uint16", "int8", "uint8", "bool"]


def keys_of(shape, dtype):
    """Full-range keys (every digit varies) mixed with many ties, NaNs and signed zeros for floats."""
    if dtype == "bool":
        return nbx.asarray(rng.integers(0, 2, shape).astype(bool))
    if dtype.startswith(("float", "bfloat")):
        a = (rng.standard_normal(shape) * 10.0 ** rng.integers(-30, 30, shape)).astype(np.float32)
        a[..., ::3] = rng.integers(-4, 4, a[..., ::3].shape)
        a[0, 3] = a[-1, -2] = a[-1, 7] = np.nan
        a[0, 5], a[0, 6] = -0.0, 0.0
        return nbx.asarray(a).to(dtype=getattr(nbx, dtype))
    info = np.iinfo(dtype)
    a = rng.integers(int(info.min), int(info.max), shape, endpoint=True, dtype=np.int64)
    a[..., ::3] = rng.integers(int(info.min), int(info.min) + 4, a[..., ::3].shape)
    return nbx.asarray(a.astype(dtype))


@pytest.mark.parametrize("dtype", SORTED_DTYPES)
def test_the_onesweep_sort_of_every_dtype_is_numpys_stable_sort_both_ways_across_several_tiles(device, dtype):
    tile = launch.tiles("radix", device)["block"]
    c = keys_of((2 if dtype == "float32" else 1, 2 * tile + 5), dtype)  # float32: a batch of rows, each its own look-back
    d = c.to(device)
    for descending in (False, True):
        ref_values, ref_indices = take_sorted(c, 1, descending)
        values, indices = take_sorted(d, 1, descending)
        same(indices, ref_indices)
        same(values, ref_values)


@pytest.mark.parametrize("bits, group, block", [(8, 2, 16), (8, 1, 16), (4, 1, 16), (4, 3, 16)])
def test_every_digit_width_and_group_of_tiles_gives_numpys_stable_order(device, bits, group, block):
    """8-bit digits ranked by one bitonic sort, 4-bit ones by packed cumsums; one tile a program or
    a group of them (counted at once, written tile by tile) whose last group is partly past the row."""
    from nbx.kernels.sort.radix import radix_sort
    c = keys_of((1, 4 * block + 5), "bfloat16")   # 5 tiles: 2 passes of 8-bit digits, 4 of 4-bit
    setting = {**launch.tiles("radix", device), "block": block, "digit_bits": bits, "group": group}
    values, indices = radix_sort(c.to(device), True, setting=setting)
    ref_values, ref_indices = take_sorted(c, 1, True)
    same(indices, ref_indices)
    same(values, ref_values)


@pytest.mark.parametrize("window", [1, 2, 4])
def test_a_look_back_walks_earlier_tiles_aggregates_until_an_inclusive_word_per_digit(device, window):
    """The GPU's case interp's order never makes: earlier tiles that published only their own
    counts (a step adds them and goes on back), an inclusive word for some digits only, tile 0's
    inclusive word ending the walk, windows that reach past tile 0."""
    tiles = 7
    status = np.zeros((2, tiles, 256), np.int32)
    own = rng.integers(0, 50, (tiles, 256)).astype(np.int32)
    status[1, :] = own + 1                            # aggregates ...
    status[1, 0] = -(own[0] + 1)                      # ... tile 0's inclusive
    status[1, 3, :128] = -(own[:4, :128].sum(0) + 1)  # tile 3 inclusive for the low digits only
    status[1, 6] = 0                                  # the tile looking back has not published
    got = nbx.zeros(256, dtype=nbx.int32).to(device)
    look_back_probe[(1,)](nbx.asarray(status.reshape(-1)).to(device), got, 1, 6, tiles, window)
    np.testing.assert_array_equal(got.numpy(), own[:6].sum(0))


def test_the_launch_counts_of_top_k_and_the_radix_sort_do_not_grow_with_the_row(device):
    setting = launch.tiles("select", device)
    for k, launches in ((1, 2), (50, 8)):
        counts = {len(select_plan((4, n), nbx.float32, k, True, device, setting).launches) for n in (10 ** 3, 10 ** 6)}
        assert counts == {launches}
    assert {len(radix_plan((2, n), nbx.float32, False, device).launches) for n in (10 ** 3, 10 ** 7)} == {10}  # zero, histogram, 8 passes of 4-bit digits
    per_row, chunk = split(1, 151936, 2048, 1056)  # a long row keeps many programs busy
    assert per_row > 64 and per_row * chunk >= 151936



def test_the_select_and_radix_sort_workloads_launch_the_served_path_and_match_their_oracle(device):
    from nbx.kernels.sort.radix import RADIX_SORT
    from nbx.kernels.sort.topk import SELECT
    for tunable, family, rep in ((SELECT, "select", {"width": 128, "k": 64, "elements": 256, "dtype": nbx.float32}),
                                 (RADIX_SORT, "radix", {"width": 128, "elements": 128, "dtype": nbx.float32})):
        workload = tunable.workload(rep, device)
        workload.launch(dict(launch.tiles(family, device)))
        np.testing.assert_array_equal(np.asarray(workload.output_rows(slice(None)), np.float64),
                                      np.asarray(workload.reference_rows(slice(None)), np.float64))

@pytest.mark.gpu
def test_vocabulary_rows_and_a_large_sort_match_the_reference_on_the_gpu():
    device = nbx.as_device("cuda")
    logits = nbx.randn(64, 151936, generator=nbx.Generator(seed=2))
    for k in (1, 50, 1024, 5000):
        for largest in (True, False):
            got, ref = nbx.topk(logits.to(device), k, largest=largest), nbx.topk(logits, k, largest=largest)
            same(got.values, ref.values)
            same(got.indices, ref.indices)
    on_gpu = logits.to(device)
    for descending in (False, True):  # the benchmark's sort-rows shape, a tile's look-back within each row
        for got, ref in zip(take_sorted(on_gpu, 1, descending), take_sorted(logits, 1, descending)):
            same(got, ref)
    keys = nbx.asarray(rng.integers(0, 1 << 20, 1 << 22).astype(np.float32))  # ties in a long row
    same(nbx.argsort(keys.to(device)), nbx.argsort(keys))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_the_benchmarks_sort_of_two_to_the_24_keys_matches_numpys_stable_sort_on_the_gpu(dtype):
    """4096 tiles a pass walking back over each other: the look-back's concurrency, at the bench's size."""
    device = nbx.as_device("cuda")
    keys = (nbx.randn(1 << 24, generator=nbx.Generator(seed=3)) * 100.0).to(dtype=getattr(nbx, dtype))
    for descending in (False, True):
        for got, ref in zip(take_sorted(keys.to(device), 0, descending), take_sorted(keys, 0, descending)):
            same(got, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [4, 8])
def test_groups_of_four_tiles_sort_two_to_the_22_keys_stably_on_the_gpu(bits):
    """The grouped scatter (a group's keys counted at once, its tiles written one after another)
    under the GPU's concurrency, in both digit widths, with ties in a long row."""
    from nbx.kernels.sort.radix import radix_sort
    device = nbx.as_device("cuda")
    keys = nbx.asarray(rng.integers(-(1 << 20), 1 << 20, (1, 1 << 22)).astype(np.float32))
    setting = {"block": 2048, "num_warps": 8, "digit_bits": bits, "group": 4}
    for descending in (False, True):
        values, indices = radix_sort(keys.to(device), descending, setting=setting)
        ref_values, ref_indices = take_sorted(keys, 1, descending)
        same(indices, ref_indices)
        same(values, ref_values)


@pytest.mark.gpu
def test_the_sampling_step_draws_the_references_tokens_at_vocabulary_size_on_the_gpu():
    device = nbx.as_device("cuda")
    logits = (nbx.randn(64, 151936, generator=nbx.Generator(seed=5)) * 3.0).to(dtype=nbx.bfloat16)
    on_gpu = logits.to(device)
    for options in ({"temperature": 0.7, "top_p": 0.9}, {"top_k": 50, "top_p": 0.8}, {"min_p": 0.05},
                    {"temperature": 2.0, "top_p": 0.99, "top_k": 5000}):
        got = nbx.sample(on_gpu, generator=nbx.Generator(seed=9), **options)
        expected = nbx.sample(logits, generator=nbx.Generator(seed=9), **options)
        assert got.tolist() == expected.tolist(), options


def test_the_radix_sort_candidates_are_those_whose_compile_is_bounded_and_keep_the_device_default():
    """The certifier compiles every candidate: 32 or more keys a thread (255 registers, 105 s for
    64) and 8-bit tiles above 4096 keys (a bitonic ranking of 400+ barriers) are refused."""
    from nbx.core import device_files
    from nbx.kernels.sort.radix import RADIX_SORT, look_back_window
    facts = device_files.for_arch("sm_90")
    kept, pruned = RADIX_SORT.candidates(facts)
    assert len(kept) == 33 and facts.value("tiles.radix") in kept
    assert all(s["block"] // (32 * s["num_warps"]) <= 16 for s in kept)
    assert not any(s["digit_bits"] == 8 and s["block"] > 4096 for s in kept)
    assert {"block": 8192, "num_warps": 4, "digit_bits": 4, "group": 1} in [s for s, _ in pruned]
    assert not any(s["group"] > 1 and s["block"] * s["group"] > 16384 for s in kept)
    assert [look_back_window(4, 10 ** 4), look_back_window(8, 10 ** 4), look_back_window(4, 3)] == [32, 8, 4]


def requested_bytes(device, monkeypatch):
    """A list that grows by the bytes of each allocation on device's backend."""
    from nbx.core.device import get_backend
    backend, asked = get_backend(nbx.as_device(device).type), []
    allocate = backend.allocate
    monkeypatch.setattr(backend, "allocate", lambda nbytes, where: asked.append(nbytes) or allocate(nbytes, where))
    return asked


def test_topks_declared_cost_allocates_what_each_of_its_three_paths_allocates(device, monkeypatch):
    """One program a row, the radix select, and the radix sort's first k beyond max_block_n: the
    cost reads the plan that runs, so its buffers and launches are the call's (the third path's sum
    bounds its peak: the sort's workspace goes before its first k are copied)."""
    limit = launch.tiles("sort", device)["max_block_n"]
    asked = requested_bytes(device, monkeypatch)
    for n, k in ((limit, 3), (3 * limit + 5, 7), (2 * limit + 1, limit + 1)):
        d = with_ties_and_nans((2, n), "float32").to(device)
        asked.clear()
        nbx.topk(d, k)
        cost = price("topk", d, k)
        assert sum(asked) == cost.allocated and len(asked) == len(cost.buffers), (n, k)
    assert cost.launches == price("sort", d).launches + 2


def test_the_select_key_classes_k_to_a_power_of_two_so_that_each_method_wins_its_own_keys():
    """On the H200 the chunk candidates took 100 us for k = 50 of [64, 151936] float32 rows and the
    radix select 241 us for k = 1024 (the chunks 255): k is in the key, classed to a power of two."""
    from nbx.autotune import keys
    from nbx.core import device_files
    from nbx.kernels.sort.topk import SELECT
    hopper = device_files.for_arch("sm_90")

    def key(k):
        return str(keys.form(SELECT.name, SELECT.key_fields, hopper, width=262144, k=k, elements=64 * 151936,
                             dtype="float32"))
    assert key(50) == key(64) == "width=262144,k=64,elements=16777216,dtype=f32"
    assert key(600) == key(1024) == "width=262144,k=1024,elements=16777216,dtype=f32" != key(512)

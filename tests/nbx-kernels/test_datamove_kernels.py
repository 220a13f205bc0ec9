"""Data movement, indexing, sorting and sampling kernels against the numpy references (exact: they
move bits, or draw the same tokens), on interp in CI and on the GPU (marked gpu, larger shapes)."""
import numpy as np
import pytest
import triton
import triton.language as tl

import nbx.core as nbx
from nbx.core.errors import IndexingError
from nbx.kernels import launch
from nbx.kernels.cost import price
from nbx.kernels.sampling.kernel import exp_weight

rng = np.random.default_rng(23)


def both(array, device, dtype=None):
    host = nbx.asarray(array) if dtype is None else nbx.asarray(array).to(dtype=dtype)
    return host, host.to(device)


def same(got, expected):
    assert got.dtype is expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy().astype(np.float64) if got.dtype.kind == "float" else got.numpy(),
                                  expected.numpy().astype(np.float64) if expected.dtype.kind == "float" else expected.numpy())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "bool", "complex64", "float64"])
def test_take_embedding_and_take_along_axis_move_every_dtype_bit_for_bit(device, dtype):
    c, d = both(rng.standard_normal((3, 70, 5)) > 0 if dtype == "bool" else rng.standard_normal((3, 70, 5)), device, dtype)
    ids = rng.integers(-70, 70, (2, 3))
    same(nbx.take(d, nbx.asarray(ids).to(device), axis=1), nbx.take(c, nbx.asarray(ids), axis=1))
    same(nbx.embedding(nbx.asarray(ids % 70).to(device), d[0]), nbx.embedding(nbx.asarray(ids % 70), c[0]))
    along = rng.integers(-70, 70, (3, 9, 5))
    if dtype != "complex128":
        same(nbx.take_along_axis(d, nbx.asarray(along).to(device), axis=1),
             nbx.take_along_axis(c, nbx.asarray(along), axis=1))
    same(d[:, [4, -1]].to("cpu"), c[:, [4, -1]])  # one integer array of __getitem__ is a take there


@pytest.mark.parametrize("reduce", [None, "sum", "prod", "mean", "amax", "amin"])
def test_scatter_is_deterministic_and_matches_the_reference_for_every_reduction(device, reduce, check):
    x = rng.standard_normal((7, 5)).astype(np.float32)
    idx = rng.integers(-7, 7, (20, 5))
    src = rng.standard_normal((20, 5)).astype(np.float32)
    for include_self in (True, False):
        args = (nbx.asarray(x).to(device), 0, nbx.asarray(idx).to(device), nbx.asarray(src).to(device))
        first = nbx.scatter(*args, reduce=reduce, include_self=include_self)
        if include_self:
            np.testing.assert_array_equal(first.numpy(), nbx.scatter(*args, reduce=reduce).numpy())
        check(first, nbx.oracle("scatter", nbx.asarray(x), 0, nbx.asarray(idx), nbx.asarray(src), reduce and
                                {"sum": "sum", "prod": "prod", "mean": "mean", "amax": "amax", "amin": "amin"}[reduce],
                                include_self), device)
    same(nbx.index_add(nbx.zeros(4, 3).to(device), 0, nbx.asarray([1, 1, 3]).to(device), nbx.ones(3, 3).to(device)),
         nbx.index_add(nbx.zeros(4, 3), 0, nbx.asarray([1, 1, 3]), nbx.ones(3, 3)))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_of_every_mode_with_crops_matches_the_reference(device, mode):
    c, d = both(rng.standard_normal((3, 6, 5)), device, "bfloat16")
    same(nbx.pad(d, (2, -1, 3, 1), mode=mode), nbx.pad(c, (2, -1, 3, 1), mode=mode))


def test_concat_stack_flip_roll_repeat_tile_and_triangles_match_the_reference(device):
    c, d = both(rng.standard_normal((3, 6, 5)), device, "bfloat16")
    same(nbx.concat([d, d[:, :2]], axis=1), nbx.concat([c, c[:, :2]], axis=1))
    same(nbx.stack([d, d], axis=-1), nbx.stack([c, c], axis=-1))
    same(nbx.flip(d, axis=(0, 2)), nbx.flip(c, axis=(0, 2)))
    same(nbx.roll(d, (1, -2), axis=(0, 2)), nbx.roll(c, (1, -2), axis=(0, 2)))
    same(nbx.repeat(d, nbx.asarray([1, 0, 2]).to(device), axis=0), nbx.repeat(c, nbx.asarray([1, 0, 2]), axis=0))
    same(nbx.tile(d, (2, 1, 3)), nbx.tile(c, (2, 1, 3)))
    same(nbx.tril(d, k=1), nbx.tril(c, k=1))
    same(nbx.triu(d, k=-1), nbx.triu(c, k=-1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint8"])
def test_sort_and_argsort_are_stable_both_ways_with_nans_largest(device, dtype):
    a = rng.integers(0, 6, (3, 20)).astype(np.float32)
    if dtype.startswith(("float", "bfloat")):
        a[0, 3] = a[2, 15] = np.nan
    c, d = both(a, device, dtype)
    for axis in (0, 1) if dtype == "float32" else (1,):
        for descending in (False, True):
            same(nbx.argsort(d, axis=axis, descending=descending), nbx.argsort(c, axis=axis, descending=descending))
            same(nbx.sort(d, axis=axis, descending=descending), nbx.sort(c, axis=axis, descending=descending))


def test_the_sampling_kernel_draws_the_tokens_of_the_reference(device):
    block = launch.tiles("sampling", device)["block"]
    logits = (rng.standard_normal((2, 2 * block + 11)) * 3).astype(np.float32)
    c, d = both(logits, device, "bfloat16")
    for options in ({}, {"top_k": 9, "top_p": 0.9, "min_p": 0.02, "temperature": 0.7}, {"top_p": 0.6, "temperature": 3.0}):
        expected = nbx.sample(c, generator=nbx.Generator(seed=3), **options)
        got = nbx.sample(d, generator=nbx.Generator(seed=3), **options)
        assert got.device == device and got.tolist() == expected.tolist()
    assert nbx.sample(d, temperature=0).tolist() == nbx.argmax(c, dim=-1).tolist()


@triton.jit
def weights_kernel(d_ptr, w_ptr, n, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(w_ptr + cols, exp_weight(tl.load(d_ptr + cols, mask=cols < n, other=0.0)), mask=cols < n)


def test_the_sampling_weights_are_the_reference_integer_exp_bit_for_bit_and_close_to_exp(device):
    from nbx.core.ops.sampling import weight
    from nbx.kernels import plans
    d = np.concatenate([-np.geomspace(1e-30, 70, 3000), -rng.uniform(0, 30, 1000),
                        [0, -0.0, -64, -64.00001, -1e30, -np.inf, np.nan]]).astype(np.float32)
    expected = weight(d)
    exact = np.exp(d.astype(np.float64)) * 2.0 ** 40
    near = d >= -64  # truncating d to 2**-24 moves exp by < 6e-8 of itself
    assert np.all(np.abs(expected[near] - exact[near]) <= 1e-7 * exact[near] + 2) and not expected[~near].any()
    assert weight(np.float32(0)) == 2 ** 40  # the most likely token weighs exactly one
    got = nbx.empty(d.shape, nbx.int64, device)
    plan = plans.LaunchPlan(device, (plans.Launch(weights_kernel, (triton.cdiv(d.size, 1024),),
                                                  (plans.Slot("d"), plans.Slot("w"), d.size),
                                                  dict(BLOCK=1024, enable_fp_fusion=False)),))
    plans.execute(plan, {"d": nbx.asarray(d).to(device), "w": got})
    np.testing.assert_array_equal(got.numpy(), expected)


def test_a_take_along_axis_of_another_itemsize_with_the_same_shapes_gets_its_own_plan(device):
    from nbx.kernels import plans
    idx = nbx.asarray(rng.integers(0, 6, (2, 3))).to(device)
    before = plans.cached_count("take_along_axis")
    for dtype in ("float32", "bfloat16", "float64"):  # one compiled launcher would serve them all
        c, d = both(rng.standard_normal((2, 6)) + 17.0 * (dtype == "bfloat16"), device, dtype)
        same(nbx.take_along_axis(d, idx, axis=1), nbx.take_along_axis(c, idx.to("cpu"), axis=1))
    assert plans.cached_count("take_along_axis") - before == 3


@pytest.mark.gpu
def test_vocabulary_sized_embedding_topk_and_sampling_on_the_gpu():
    device = nbx.as_device("cuda")
    weight = nbx.randn(151936, 256, generator=nbx.Generator(seed=1)).to(dtype=nbx.bfloat16)
    ids = nbx.asarray(rng.integers(0, 151936, (8192,)))
    same(nbx.embedding(ids.to(device), weight.to(device)), nbx.embedding(ids, weight))
    logits = nbx.randn(64, 151936, generator=nbx.Generator(seed=2))
    for k in (1, 50, 1024):
        got, ref = nbx.topk(logits.to(device), k), nbx.topk(logits, k)
        same(got.values, ref.values)
        same(got.indices, ref.indices)
    on_gpu = logits.to(device).to(dtype=nbx.bfloat16)
    got = nbx.sample(on_gpu, top_p=0.9, generator=nbx.Generator(seed=4))
    expected = nbx.sample(on_gpu.to("cpu"), top_p=0.9, generator=nbx.Generator(seed=4))
    assert got.tolist() == expected.tolist()


def test_one_integer_array_of_getitem_and_setitem_runs_as_a_take_and_a_scatter_leaving_bad_writes_unchanged(device):
    from nbx.core import indexing
    a = rng.standard_normal((4, 6)).astype(np.float32)
    d = nbx.asarray(a).to(device)
    idx = nbx.asarray([5, -1, 0]).to(device)
    np.testing.assert_array_equal(d[1:3, idx].numpy(), a[1:3, [5, -1, 0]])
    d[:, nbx.asarray([1, 3]).to(device)] = 2.0
    expected = a.copy()
    expected[:, [1, 3]] = 2.0
    np.testing.assert_array_equal(d.numpy(), expected)
    with pytest.raises(IndexingError):
        d[nbx.asarray([0, 9]).to(device)] = 5.0
    np.testing.assert_array_equal(d.numpy(), expected)
    rows, cols = np.array([[0], [3]]), np.array([1, -1, 2])  # several arrays over the leading dims: one take
    taken = d[nbx.asarray(rows).to(device), nbx.asarray(cols).to(device)]
    np.testing.assert_array_equal(taken.numpy(), expected[rows, cols])


def test_data_dependent_ops_count_on_the_device_then_write_each_place_once(device):
    from nbx.core import indexing
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    m = a > 0.2
    c, d = both(a, device)
    cm, dm = both(m, device)
    same(nbx.argwhere(d), nbx.argwhere(c))
    for got, expected in zip(nbx.where(dm), nbx.where(cm)):
        same(got, expected)
    same(nbx.masked_select(d, dm), nbx.masked_select(c, cm))
    src = np.arange(60, dtype=np.float32)
    same(nbx.masked_scatter(d, dm, nbx.asarray(src).to(device)), nbx.masked_scatter(c, cm, nbx.asarray(src)))
    lead = nbx.asarray(m[:, :, 0]).to(device)
    np.testing.assert_array_equal(d[lead].numpy(), a[m[:, :, 0]])
    assert nbx.argwhere(nbx.zeros(2, 3).to(device)).shape == (0, 2)


def test_searchsorted_on_the_device_places_nans_last_and_refuses_an_unsorted_sequence(device):
    seq = np.sort(rng.standard_normal(9)).astype(np.float32)
    seq[-1] = np.nan
    v = rng.standard_normal((2, 4)).astype(np.float32)
    v[0, 0], v[1, 1] = np.nan, seq[3]
    for side in ("left", "right"):
        same(nbx.searchsorted(nbx.asarray(seq).to(device), nbx.asarray(v).to(device), side=side),
             nbx.asarray(np.searchsorted(seq, v, side)))
    rows = np.sort(rng.standard_normal((2, 5)), axis=1).astype(np.float32)
    same(nbx.searchsorted(nbx.asarray(rows).to(device), nbx.asarray(v).to(device), side="right"),
         nbx.searchsorted(nbx.asarray(rows), nbx.asarray(v), side="right"))
    with pytest.raises(nbx.ArgumentError, match="not sorted"):
        nbx.searchsorted(nbx.asarray(seq[::-1].copy()).to(device), nbx.asarray(v).to(device))


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_unique_on_the_device_keeps_each_nan_apart_and_inverts(device, dtype):
    a = rng.integers(0, 5, (3, 7)).astype(np.float32)
    if dtype == "float32":
        a[0, 0], a[1, 1], a[2, 2] = np.nan, np.nan, -0.0
    c, d = both(a, device, dtype)
    for got, expected in zip(nbx.unique_all(d), nbx.unique_all(c)):
        same(got, expected)


@pytest.mark.parametrize("method", ["linear", "lower", "nearest", "midpoint"])
def test_quantile_on_the_device_matches_the_float64_oracle_and_gives_nan_for_a_row_with_nan(device, method, check):
    a = rng.standard_normal((3, 11)).astype(np.float32)
    a[2, 3] = np.nan
    c, d = both(a, device)
    for q, keepdim in ((0.3, False), ([0.1, 0.5, 0.95], True)):
        got = nbx.quantile(d, q, dim=1, keepdim=keepdim, interpolation=method)
        check(got, nbx.oracle("quantile", c, np.asarray(q), 1, keepdim, method, None), device)


def test_index_put_with_integer_and_boolean_indices_accumulates_duplicates_and_refuses_bad_indices(device):
    a = rng.standard_normal((4, 3, 2)).astype(np.float32)
    mask = np.array([[True, False, True], [False, False, True], [True, True, True], [False] * 3])
    for idx, vals, acc in [((np.array([0, 0, -1]),), np.ones((3, 3, 2), np.float32), True),
                           ((np.array([1, 2]), np.array([0, -1])), np.float32(5), False),
                           ((mask,), np.arange(2, dtype=np.float32), True)]:
        expected = nbx.index_put(nbx.asarray(a), tuple(nbx.asarray(i) for i in idx), nbx.asarray(vals), accumulate=acc)
        got = nbx.index_put(nbx.asarray(a).to(device), tuple(nbx.asarray(i).to(device) for i in idx),
                            nbx.asarray(vals).to(device), accumulate=acc)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
    refused = nbx.index_put(nbx.asarray(a).to(device), (nbx.asarray([4]).to(device),),
                            nbx.asarray(np.float32(1)).to(device))
    with pytest.raises(IndexingError, match="scatter: .*dim of size 4"):  # at the next host read
        refused.numpy()


def test_inside_a_captured_step_a_bad_index_is_masked_and_raised_when_the_outputs_are_read(device):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    table = nbx.asarray(a).to(device)

    def lookup(ids):
        rows = nbx.embedding(ids, table)
        return rows, nbx.index_put(table, (ids,), rows, accumulate=True)

    def expected_put(ids):
        out = a.copy()
        np.add.at(out, ids, a[ids])
        return out

    good = np.array([1, 5, -1])
    step = nbx.graph.capture(lookup, nbx.asarray(good).to(device))
    rows, put = step.outputs
    np.testing.assert_array_equal(rows.numpy(), a[good])
    np.testing.assert_array_equal(put.numpy(), expected_put(good))
    step(nbx.asarray([1, 9, 2]).to(device))  # no read-back inside the step: the call does not raise
    with pytest.raises(IndexingError, match="dim of size 6.*inside captured steps.*scatter.*take"):
        rows.numpy()
    np.testing.assert_array_equal(rows.numpy()[[0, 2]], a[[1, 2]])  # read once: the flag is cleared
    np.testing.assert_array_equal(put.numpy(), expected_put(np.array([1, 2])))  # the bad update dropped
    step(nbx.asarray([-7, 0, 0]).to(device))
    with pytest.raises(IndexingError, match="captured step"):  # an explicit synchronization reads it too
        nbx.synchronize(device)
    outside = nbx.embedding(nbx.asarray([6]).to(device), table)  # outside a step alike: at the next read
    with pytest.raises(IndexingError, match="take: .*dim of size 6"):
        outside.numpy()
    np.testing.assert_array_equal(step(nbx.asarray(good).to(device))[0].numpy(), a[good])
    step.close()


def test_reads_under_postponed_leave_a_steps_bound_flag_for_the_next_check(device):
    from nbx.core import deferred_checks
    table = nbx.asarray(rng.standard_normal((6, 4)).astype(np.float32)).to(device)
    step = nbx.graph.capture(lambda ids: nbx.embedding(ids, table), nbx.asarray([1, 2]).to(device))
    rows = step(nbx.asarray([1, 9]).to(device))
    with deferred_checks.postponed():
        rows.numpy()   # a decode loop's read of its tokens: the flag stays armed
    with pytest.raises(IndexingError, match="captured step.*take"):
        deferred_checks.check(device)
    deferred_checks.check(device)   # read once: cleared
    step.close()

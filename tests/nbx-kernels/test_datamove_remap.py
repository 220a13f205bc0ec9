"""The remap copy (nbx.kernels.copies.remap): pad, flip, roll, concat and row copies, against numpy
bit for bit, and their launch counts (one a call, whatever the size: no per-row host loop)."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.tensor import empty
from nbx.kernels import plans
from nbx.kernels.copies.concat import plan_for as concat_plan
from nbx.kernels.copies import remap as rm
from nbx.kernels.copies import tuning
from nbx.kernels.copies.kernel import COPY, FLIP
from nbx.kernels.cost import price

rng = np.random.default_rng(29)


def values(shape, dtype):
    if dtype == "bool":
        return rng.standard_normal(shape) > 0
    if dtype == "complex128":
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return rng.standard_normal(shape) * 40


def both(shape, dtype, device):
    host = nbx.asarray(values(shape, dtype)).to(dtype=dtype)
    return host, host.to(device)


def same(got, expected):
    assert got.dtype is expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy().view(np.uint8), expected.numpy().view(np.uint8))


@pytest.mark.parametrize("dtype", ["bfloat16", "bool", "complex128", "float64"])  # words of 2, 1, 8 (x2), 8 bytes
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_of_every_mode_over_three_dims_with_crops_moves_the_bits_of_numpy(device, mode, dtype):
    c, d = both((3, 5, 7), dtype, device)
    amounts = (3, -2, 0, 4, 1, 2)
    value = {"constant": True if dtype == "bool" else 2}.get(mode)
    same(nbx.pad(d, amounts, mode=mode, value=value), nbx.pad(c, amounts, mode=mode, value=value))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular", "constant"])
def test_pad_of_a_mid_size_tensor_is_one_launch_whatever_its_rows(device, mode):
    x = empty((2048, 4096), nbx.bfloat16, nbx.as_device(device))   # planned, never launched
    out = empty((2048 + 2, 4096 + 6), x.dtype, x.device)
    plan = rm.plan_for(out, x, rm.MODES[mode], (1, 3))
    assert len(plan.launches) == 1 and plan.detail.dims[-1].out == 4096 + 6
    assert price("pad", x, ((1, 1), (3, 3)), mode).launches == 1
    small = nbx.asarray(values((12, 30), "float32")).to(dtype="float32")
    before = plans.cached_count("remap")
    got = nbx.pad(small.to(device), (3, 3, 2, 1), mode=mode)
    assert plans.cached_count("remap") - before == 1   # one plan of one launch served the call
    same(got, nbx.pad(small, (3, 3, 2, 1), mode=mode))


@pytest.mark.parametrize("mode, dtype", [("constant", "bool"), ("reflect", "bfloat16")])   # the maps are the row tile's
def test_a_pad_whose_rows_are_no_multiple_of_16_bytes_walks_the_flat_output_and_matches(device, mode, dtype):
    """Blocks of 16 straddle two rows of 39 (and 5 x 2 rows: the row decomposition of the outer dims)."""
    small = {"block": 16, "block_c": 16, "num_warps": 1}
    for shape, amounts in (((3, 2, 37), (1, 1, 0, 0, 2, 0)),):
        c, d = both(shape, dtype, device)
        value = {"constant": True if dtype == "bool" else 2}.get(mode, 0)
        widths = [(amounts[2 * k], amounts[2 * k + 1]) for k in range(len(shape))][::-1]
        out = empty(tuple(s + lo + hi for s, (lo, hi) in zip(shape, widths)), d.dtype, d.device)
        plan = rm.plan_for(out, d, rm.MODES[mode], tuple(lo for lo, _ in widths), setting=small)
        assert plan.launches[0].meta["FLAT_OUT"] and plan.launches[0].grid == (-(-out.size // 16),)
        rm.remap_copy(out, d, rm.MODES[mode], tuple(lo for lo, _ in widths), value, setting=small)
        same(out, nbx.pad(c, amounts, mode=mode, value=value if mode == "constant" else None))


def test_a_pad_of_five_dims_splits_its_first_dim_and_still_matches(device):
    c, d = both((2, 3, 2, 2, 3), "bool", device)
    amounts = (1, 1, 1, 0, 0, 1, 1, 0, 1, 1)
    same(nbx.pad(d, amounts, value=True), nbx.pad(c, amounts, value=True))
    same(nbx.pad(d, amounts, mode="replicate"), nbx.pad(c, amounts, mode="replicate"))


def test_flip_and_roll_of_reversed_and_sliced_views_match_numpy(device):
    c, d = both((4, 6, 9), "bfloat16", device)
    cv, dv = c[::-1, 1:, ::2], d[::-1, 1:, ::2]
    same(nbx.flip(dv, axis=(0, 2)), nbx.flip(cv, axis=(0, 2)))
    same(nbx.flip(dv), nbx.flip(cv))
    same(nbx.roll(dv, (1, -2, 7), axis=(0, 1, 2)), nbx.roll(cv, (1, -2, 7), axis=(0, 1, 2)))
    same(nbx.roll(dv, 5), nbx.roll(cv, 5))


@pytest.mark.parametrize("dtype", ["bool", "bfloat16", "int64"])   # 16, 8 and 2 words a 16-byte group
def test_a_flip_of_a_dense_last_dim_moves_16_byte_groups_and_matches_at_ragged_widths(device, dtype):
    for shape in ((3, 37), (2, 3, 64), (5, 1)):
        c, d = both(shape, dtype, device)
        plan = rm.plan_for(empty(d.shape, d.dtype, d.device), d, FLIP, (0,) * (d.ndim - 1) + (1,))
        assert plan.launches[0].meta["FLIP_VEC"] == (16 // d.dtype.itemsize if shape[-1] > 1 else 1)
        same(nbx.flip(d, axis=-1), nbx.flip(c, axis=-1))
        same(nbx.flip(d, axis=(0, -1)), nbx.flip(c, axis=(0, -1)))
    narrow = {"block": 256, "block_c": 16, "num_warps": 4}   # a tail column block: groups past the row's end
    c, d = both((4, 100), dtype, device)
    out = empty(d.shape, d.dtype, d.device)
    rm.remap_copy(out, d, FLIP, (0, 1), setting=narrow)
    same(out, nbx.flip(c, axis=1))


def test_concat_writes_each_part_with_one_launch_and_a_head_transpose_copies_rows(device):
    c, d = both((3, 4, 8), "float32", device)
    same(nbx.concat([d, d[:, :1], d[:, :0]], axis=1), nbx.concat([c, c[:, :1], c[:, :0]], axis=1))
    same(nbx.concat([d, d], axis=2), nbx.concat([c, c], axis=2))
    before = plans.cached_count("remap")
    same(d.permute(1, 0, 2).contiguous(), c.permute(1, 0, 2).contiguous())
    assert plans.cached_count("remap") - before == 1
    assert rm.rows_copy(empty((4, 3, 8), d.dtype, d.device), d.permute(1, 0, 2))
    assert not rm.rows_copy(empty((8, 4, 3), d.dtype, d.device), d.permute(2, 1, 0))  # elementwise's
    same(d.permute(2, 1, 0).contiguous(), c.permute(2, 1, 0).contiguous())


def launches_of(monkeypatch):
    """A list that grows by each launch plans.execute runs."""
    counted, execute = [], plans.execute
    monkeypatch.setattr(plans, "execute", lambda plan, values: counted.extend(plan.launches) or execute(plan, values))
    return counted


@pytest.mark.parametrize("dtype", ["bfloat16", "complex128"])
def test_a_kv_append_and_a_concat_of_six_dense_parts_take_a_launch_a_group_of_four(device, dtype, monkeypatch):
    c, d = both((3, 5, 8), dtype, device)
    counted = launches_of(monkeypatch)
    same(nbx.concat([d, d[:, :1]], axis=1), nbx.concat([c, c[:, :1]], axis=1))   # the cache and its new row
    assert len(counted) == 1 and counted[0].kernel.__name__ == "concat_kernel"
    parts, host = [d[:, :k] for k in (1, 2, 0, 3, 1, 5, 2)], [c[:, :k] for k in (1, 2, 0, 3, 1, 5, 2)]
    counted.clear()
    same(nbx.concat(parts, axis=1), nbx.concat(host, axis=1))
    assert len(counted) == 2 and price("concat", parts, 1).launches == 2   # 6 non-empty parts: 4 + 2
    plan = concat_plan(empty((3, 14, 8), d.dtype, d.device), parts, 1)
    assert plan.launches == tuple(counted) and len(plan.detail) == 2   # one cached plan, both groups' launches
    counted.clear()
    same(nbx.concat([d, d], axis=0), nbx.concat([c, c], axis=0))
    assert len(counted) == 1


def test_a_concat_with_a_part_that_is_no_run_of_rows_copies_each_part(device, monkeypatch):
    c, d = both((4, 6), "float32", device)
    counted = launches_of(monkeypatch)
    same(nbx.concat([d, d.T[:4]], axis=1), nbx.concat([c, c.T[:4]], axis=1))
    assert len(counted) == 2 and price("concat", [d, d.T[:4]], 1).launches == 2
    assert all(launch.kernel.__name__ == "remap_kernel" for launch in counted)


def test_a_transpose_reads_down_the_rows_with_its_own_tunable_and_matches(device):
    c, d = both((37, 70), "bfloat16", device)
    assert rm.rows_copy(empty((70, 37), d.dtype, d.device), d.T)
    plan = rm.plan_for(empty((70, 37), d.dtype, d.device), d.T, COPY, (0, 0))
    assert rm.transposed(plan.detail.dims) and plan.launches[0].meta["FLAT_ROWS"]
    odd = rm.plan_for(empty((70, 37), d.dtype, d.device), d.T, COPY, (0, 0), setting={"block": 16, "block_c": 16,
                                                                                      "num_warps": 1})
    assert not odd.launches[0].meta["FLAT_OUT"]   # odd rows, but a transpose keeps its square tile
    same(d.T.contiguous(), c.T.contiguous())
    same(d[:, 1::2].T.contiguous(), c[:, 1::2].T.contiguous())


def test_the_tile_fills_its_block_and_a_call_of_few_rows_widens_its_columns():
    setting = {"block": 2048, "block_c": 1024, "num_warps": 4}
    assert rm.tile(8192, 16384, setting) == (2, 1024)
    assert rm.tile(131072, 128, setting) == (16, 128)
    assert rm.tile(1, 1 << 20, setting) == (1, 2048)
    assert rm.tile(3, 5, setting) == (4, 8)


def test_adjacent_unmapped_dims_merge_and_size_one_dims_vanish():
    heads = [rm.Dim(4096, 4096, 0, 128, 32 * 128), rm.Dim(32, 32, 0, 4096 * 128, 128), rm.Dim(128, 128, 0, 1, 1)]
    assert rm.reduced(COPY, heads) == heads   # a head transpose: its source walks no two dims as one
    dense = [rm.Dim(8, 8, 0, 64, 64), rm.Dim(1, 1, 0, 5, 5), rm.Dim(64, 64, 0, 1, 1)]
    assert rm.reduced(COPY, dense) == [rm.Dim(512, 512, 0, 1, 1)]
    assert rm.reduced(FLIP, [rm.Dim(8, 8, 1, 64, 64), rm.Dim(64, 64, 0, 1, 1)]) == [
        rm.Dim(8, 8, 1, 64, 64), rm.Dim(64, 64, 0, 1, 1)]


@pytest.mark.parametrize("mapped, transposed", [(False, False), (True, False), (False, True)])
def test_the_datamove_workload_the_certifier_screens_matches_its_reference(device, mapped, transposed):
    word = nbx.uint16
    rep = {"n": 3 * 70, "inner": 70, "dtype": word, "mapped": mapped, "transposed": transposed}
    work = tuning.workload(rep, nbx.as_device(device))
    work.launch({"block": 256, "block_c": 64, "num_warps": 4})
    np.testing.assert_array_equal(work.output_rows(slice(None)), work.reference_rows(slice(None)))


@pytest.mark.gpu
def test_the_benchmark_and_model_shapes_move_their_bits_on_the_gpu():
    device = nbx.as_device("cuda")
    x = nbx.asarray(values((1024, 4100), "float32")).to(dtype=nbx.bfloat16)
    g = x.to(device)
    for mode in ("constant", "reflect", "replicate", "circular"):
        same(nbx.pad(g, (3, 3, 1, 2), mode=mode), nbx.pad(x, (3, 3, 1, 2), mode=mode))
    same(nbx.concat([g[:512], g[512:]], axis=1), nbx.concat([x[:512], x[512:]], axis=1))
    same(nbx.flip(g, axis=1), nbx.flip(x, axis=1))
    aligned = x[:, :4096].contiguous()   # rows of 16-byte groups: the flip's vector loads; a pad's odd rows
    same(nbx.flip(aligned.to(device), axis=(0, 1)), nbx.flip(aligned, axis=(0, 1)))
    same(nbx.pad(aligned.to(device), (1, 1, 1, 1)), nbx.pad(aligned, (1, 1, 1, 1)))
    same(nbx.roll(g, 7, axis=1), nbx.roll(x, 7, axis=1))
    same(g.T.contiguous(), x.T.contiguous())
    heads = nbx.asarray(values((32, 512, 128), "float32")).to(dtype=nbx.bfloat16)
    same(heads.to(device).permute(1, 0, 2).contiguous(), heads.permute(1, 0, 2).contiguous())
    cache, new = heads[:, :511], heads[:, 511:]
    count = plans.compiled_count()
    same(nbx.concat([cache.to(device), new.to(device)], axis=1), nbx.concat([cache, new], axis=1))
    same(nbx.concat([cache.to(device), new.to(device)], axis=1), nbx.concat([cache, new], axis=1))
    assert plans.compiled_count() == count + 1   # the append's one launch, its launcher kept in the plan cache


def test_a_wide_row_key_tries_row_tiles_of_512_or_more_and_a_transpose_keeps_its_square_tiles():
    """Each candidate of a 256 MiB key is a compile and two screens of its output: the certification's bound."""
    from nbx.core import device_files
    facts = device_files.for_arch("sm_90")
    wide = {"n": 1 << 27, "inner": 16384, "dtype": nbx.uint16, "mapped": True, "transposed": False}
    kept, _ = tuning.DATAMOVE.candidates(facts, wide)
    assert kept and min(s["block_c"] for s in kept) == tuning.WIDE_TILE and len(kept) == 26
    kept, _ = tuning.DATAMOVE_TRANSPOSE.candidates(facts, {**wide, "mapped": False, "transposed": True})
    assert min(s["block_c"] for s in kept) == 64
    heads, _ = tuning.DATAMOVE.candidates(facts, {**wide, "inner": 128})
    assert {s["block_c"] for s in heads} == {64, 128}

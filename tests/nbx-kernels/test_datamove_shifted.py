"""The remap copy's shifted 16-byte path (SHIFT_VEC, copies/kernel.shifted_words): pads, rolls and
copies whose source runs sit off the output's 16-byte groups, moved as aligned 16-byte chunks shifted
in registers, against numpy bit for bit at every word size, at odd shifts, from views (rows off 16
bytes, reversed rows, every other row) and at the edges (fill rows, a row's end inside a group, a
tail row block, a last group past the output's end). Tiles are small, so each launch holds both of
the kernel's branches: programs whose columns are one run and programs across a seam."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.tensor import empty
from nbx.kernels.copies import remap as rm
from nbx.kernels.copies.kernel import COPY, ROLL

rng = np.random.default_rng(31)
SIZES = {"bool": 1, "uint8": 1, "bfloat16": 2, "float32": 4, "int64": 8, "complex128": 16}
SMALL = {"block": 64, "block_c": 16, "num_warps": 1}   # 4 rows x 16 columns, or 64 flat positions


def host(shape, dtype):
    if dtype == "bool":
        return nbx.asarray(rng.standard_normal(shape) > 0)
    if dtype == "complex128":
        return nbx.asarray(rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
    return nbx.asarray(rng.standard_normal(shape) * 40).to(dtype=dtype)


def same(got, expected):
    assert got.dtype is expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy().view(np.uint8), expected.numpy().view(np.uint8))


def remapped(src, out_shape, mode, params, value=0, setting=SMALL):
    """remap_copy into a new output, and the SHIFT_VEC its plan chose."""
    out = empty(out_shape, src.dtype, src.device)
    vec = rm.plan_for(out, src, mode, params, setting=setting).launches[0].meta["SHIFT_VEC"]
    return rm.remap_copy(out, src, mode, params, value, setting=setting), vec


def shifted_for(dtype) -> int:
    size = SIZES[dtype]
    return 16 // size if size < 16 else 1   # complex128 rows are 16-byte words already: the element tile's vectors


def fill_of(dtype):
    return True if dtype == "bool" else 3


@pytest.mark.parametrize("dtype", list(SIZES))
def test_pads_of_every_mode_and_word_size_shift_into_the_flat_output_and_match_numpy(device, dtype):
    """Rows of 100 padded to 102 or 106 (no multiple of 16 bytes: the flat walk), 64-position blocks:
    fill rows, runs inside a row, blocks across a row's end, the last group past the output's end."""
    c = host((4, 100), dtype)
    d = c.to(device)
    for mode, amounts in (("constant", (1, 1, 1, 1)), ("reflect", (3, 3)), ("replicate", (2, 4, 1, 0)),
                          ("circular", (5, 1))):
        widths = [(0, 0), (amounts[0], amounts[1])] if len(amounts) == 2 else [(amounts[2], amounts[3]),
                                                                                 (amounts[0], amounts[1])]
        out_shape = tuple(s + lo + hi for s, (lo, hi) in zip(c.shape, widths))
        value = fill_of(dtype) if mode == "constant" else 0
        got, vec = remapped(d, out_shape, rm.MODES[mode], tuple(lo for lo, _ in widths), value)
        assert vec == shifted_for(dtype), (mode, vec)   # (8-byte words: rows of 16 bytes, the row tile)
        same(got, nbx.pad(c, amounts, mode=mode, value=fill_of(dtype) if mode == "constant" else None))


@pytest.mark.parametrize("dtype", list(SIZES))
def test_rolls_by_odd_shifts_of_every_word_size_shift_their_row_groups_and_match_numpy(device, dtype):
    """Rows of 48 (whole 16-byte groups at every word size): the column block holding the wrap is a
    seam, the others one run each; 5 rows in blocks of 4 leave a tail row block."""
    c = host((5, 48), dtype)
    d = c.to(device)
    for shift in (1, 7, 13, 16, 47):
        got, vec = remapped(d, c.shape, ROLL, (0, shift))
        assert vec == shifted_for(dtype)
        same(got, nbx.roll(c, shift, axis=1))


@pytest.mark.parametrize("dtype", ["bool", "bfloat16", "float32", "int64"])
def test_views_on_16_bytes_with_rows_off_16_bytes_reversed_or_every_other_take_the_shifted_path(device, dtype):
    """A copy, a roll and a pad of views whose first element is on 16 bytes but whose rows are not."""
    vec = 16 // SIZES[dtype]
    width = vec + (69 if vec == 2 else 70)   # rows off 16 bytes, every 8th row on them
    base_c = host((9, width), dtype)
    base_d = base_c.to(device)
    # outputs of rows of 48 (16-byte rows: the row tile) and of 67 or more (the flat walk)
    views = [(slice(0, 5), slice(vec, vec + 48)), (slice(8, None, -2), slice(vec, vec + 67)),
             (slice(None, None, -1), slice(0, width))]
    for index in views:
        c, d = base_c[index], base_d[index]
        assert d.data_ptr() % 16 == 0
        got, shifted = remapped(d, c.shape, COPY, (0, 0))
        assert shifted == vec, index
        same(got, c.contiguous())
        got, shifted = remapped(d, c.shape, ROLL, (1, 11))
        assert shifted == vec
        same(got, nbx.roll(c, (1, 11), axis=(0, 1)))
        widths = ((2, 1), (3, 5))
        got, _ = remapped(d, tuple(s + lo + hi for s, (lo, hi) in zip(c.shape, widths)), rm.MODES["constant"],
                          (2, 3), fill_of(dtype))
        same(got, nbx.pad(c, (3, 5, 2, 1), value=fill_of(dtype)))


def test_a_pad_of_three_dims_shifts_its_rows_and_writes_whole_fill_rows_and_planes(device):
    """Row dims of the pad's outer dims (ROW_DIMS 3): planes and rows of the fill, rows of 64 words
    padded to 72 (16-byte rows: the row tile) and to 69 (the flat walk)."""
    c = host((3, 4, 64), "bfloat16")
    d = c.to(device)
    for amounts in ((4, 4, 1, 2, 1, 0), (2, 3, 0, 1, 2, 2)):
        widths = [(amounts[4], amounts[5]), (amounts[2], amounts[3]), (amounts[0], amounts[1])]
        out_shape = tuple(s + lo + hi for s, (lo, hi) in zip(c.shape, widths))
        for mode in ("constant", "replicate"):
            got, vec = remapped(d, out_shape, rm.MODES[mode], tuple(lo for lo, _ in widths), 3)
            assert vec == 8
            same(got, nbx.pad(c, amounts, mode=mode, value=3 if mode == "constant" else None))


def test_sources_or_outputs_off_16_bytes_take_the_element_path_of_the_same_launch_and_match(device):
    """The plan is of layouts; the kernel checks the pointers (kernel.on_16_bytes) and moves a view
    starting off 16 bytes element by element."""
    c = host((4, 70), "bfloat16")
    d = c.to(device)
    got, vec = remapped(d[:, 3:], (4, 67), ROLL, (0, 5))
    assert vec == 8 and d[:, 3:].data_ptr() % 16 == 6
    same(got, nbx.roll(c[:, 3:], 5, axis=1))
    got, vec = remapped(d[:, 3:], (4 + 2, 67 + 2), rm.MODES["reflect"], (1, 1))
    assert vec == 8
    same(got, nbx.pad(c[:, 3:], (1, 1, 1, 1), mode="reflect"))
    wide = empty((4, 72), d.dtype, d.device)
    out = wide[:, 1:71]   # an output view starting 2 bytes in, rows of 144 bytes
    assert rm.plan_for(out, d, ROLL, (0, 5), setting=SMALL).launches[0].meta["SHIFT_VEC"] == 8
    rm.remap_copy(out, d, ROLL, (0, 5), setting=SMALL)
    same(out.contiguous(), nbx.roll(c, 5, axis=1))


def test_the_kernel_takes_the_shifted_path_on_16_bytes_and_the_element_path_off_them(device, monkeypatch):
    """Which path a launch ran, counted through the interpreter (it calls the kernel's helpers by name)."""
    if device.type != "interp":
        pytest.skip("counts the interpreter's calls of the kernel's helpers (compiled kernels inline them)")
    from nbx.kernels.copies import kernel
    calls = {"shifted_words": 0, "row_elements": 0}

    def counted(name):
        inner = getattr(kernel, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return inner(*args, **kwargs)
        return call
    for name in calls:
        monkeypatch.setattr(kernel, name, counted(name))
    c = host((4, 56), "float32")
    d = c.to(device)
    got, vec = remapped(d[:, :48], (4, 48), ROLL, (0, 3))   # 3 programs of 4 rows x 16 columns
    assert vec == 4 and calls == {"shifted_words": 3, "row_elements": 0}
    same(got, nbx.roll(c[:, :48], 3, axis=1))
    got, vec = remapped(d[:, 1:49], (4, 48), ROLL, (0, 3))   # 4 bytes off 16: the same plan, element by element
    assert vec == 4 and calls == {"shifted_words": 3, "row_elements": 3}
    same(got, nbx.roll(c[:, 1:49], 3, axis=1))

"""Casts give the reference's bits (ml_dtypes for bfloat16 and float8, numpy otherwise) on every
device: round to nearest even at every tie of every format, subnormals, overflow (infinity, or NaN
for float8_e4m3fn), NaN kept as NaN, float64 through float32 to the 8/16-bit ML formats as
ml_dtypes does, float -> integer truncation."""
import ml_dtypes
import numpy as np
import pytest

import nbx.core as nbx

rng = np.random.default_rng(8)
FLOATS = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
SMALL = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
         "float8_e5m2": ml_dtypes.float8_e5m2}


def _all_values(host) -> np.ndarray:
    width = np.dtype(host).itemsize
    return np.arange(2 ** (8 * width), dtype=f"u{width}").view(host)


def _ties_and_neighbours(limit_per_format: int) -> np.ndarray:
    """Every midpoint between neighbours of each small format (sampled for the 16-bit ones), the
    float32 values on either side of it, and the format's own values."""
    out = []
    for host in SMALL.values():
        with np.errstate(invalid="ignore"):
            values = _all_values(host).astype(np.float64)
        values = np.unique(values[np.isfinite(values)])
        mids = (values[1:] + values[:-1]) / 2
        if mids.size > limit_per_format:
            mids = rng.choice(mids, limit_per_format, replace=False)
        m32 = mids.astype(np.float32)
        out += [mids, np.nextafter(m32, np.float32(np.inf)), np.nextafter(m32, np.float32(-np.inf)),
                rng.choice(values, min(values.size, limit_per_format))]
    edges = [448, 464, 465, 480, 500, 57344, 61439, 61440, 65504, 65519, 65520, 3.3895e38, 3.3962e38,
             2.0 ** -149, 2.0 ** -133, 2.0 ** -10, 2.0 ** -17, 2.0 ** -25, 0.0, np.inf, np.nan]
    out.append(np.array(edges))
    values = np.concatenate([v.astype(np.float64) for v in out])
    return np.concatenate([values, -values])


def _assert_same_bits(got: np.ndarray, expected: np.ndarray):
    same = got.view(f"u{got.itemsize}") == expected.view(f"u{expected.itemsize}")
    same |= np.isnan(got.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    assert same.all(), [(got[i], expected[i]) for i in np.flatnonzero(~same)][:5]


@pytest.mark.parametrize("dst", FLOATS)
@pytest.mark.parametrize("src", ["float32", "float64"])
def test_float32_and_float64_round_to_every_float_format_like_the_reference(device, src, dst):
    limit = 20000 if device.type == "cuda" else 600
    values = _ties_and_neighbours(limit)
    if src == "float64":  # values between float32 neighbours: where two roundings differ from one
        values = np.concatenate([values, values * (1 + 2.0 ** -30), values * (1 - 2.0 ** -30)])
    else:
        random_bits = rng.integers(0, 2 ** 32, 50 * limit, dtype=np.uint64).astype(np.uint32)
        values = np.concatenate([values.astype(np.float32), random_bits.view(np.float32)])
    values = values.astype(src)
    out = nbx.asarray(values).to(device).to(dtype=dst)
    with np.errstate(all="ignore"):
        _assert_same_bits(out.numpy(), values.astype(nbx.as_dtype(dst).host))


@pytest.mark.parametrize("src", list(SMALL))
def test_every_value_of_the_small_formats_converts_to_every_float_format_like_the_reference(device, src):
    values = _all_values(SMALL[src])
    if values.size > 256 and device.type != "cuda":
        values = values[rng.choice(values.size, 4000, replace=False)]
    x = nbx.asarray(values).to(device)
    for dst in FLOATS:
        with np.errstate(all="ignore"):
            _assert_same_bits(x.to(dtype=dst).numpy(), values.astype(nbx.as_dtype(dst).host))


def test_float8_e4m3fn_overflows_to_nan_past_448_and_rounds_the_tie_at_464_down(device):
    values = np.array([448, 463.99, 464, 464.01, 500, np.inf, -500, -np.inf, np.nan], np.float32)
    got = nbx.asarray(values).to(device).to(dtype="float8_e4m3fn").numpy().view(np.uint8)
    assert got.tolist() == [0x7E, 0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0xFF, 0xFF, 0x7F]


@pytest.mark.parametrize("src", ["int32", "int64", "uint32", "uint64"])
def test_large_integers_round_to_nearest_even_in_every_float_format(device, src):
    info = np.iinfo(src)
    values = rng.integers(info.min // 2, info.max // 2, 3000, dtype=src, endpoint=True)
    values = np.concatenate([values, (values >> 20 << 20) | (1 << 19), np.array([info.min, info.max], src)])
    x = nbx.asarray(values).to(device)
    for dst in FLOATS:
        with np.errstate(all="ignore"):
            _assert_same_bits(x.to(dtype=dst).numpy(), values.astype(nbx.as_dtype(dst).host))


@pytest.mark.parametrize("src", ["float16", "bfloat16", "float32", "float64", "float8_e5m2"])
@pytest.mark.parametrize("dst", ["bool", "int8", "int32", "int64", "uint8", "uint16", "uint64"])
def test_floats_truncate_toward_zero_into_integers_and_bool_is_nonzero(device, src, dst):
    info = np.iinfo(dst) if dst != "bool" else None
    low = 0 if dst == "bool" or info.min == 0 else max(info.min, -40000)
    high = 2 if dst == "bool" else min(info.max, 40000)
    values = np.concatenate([rng.uniform(low, high, 300), [0.0, -0.0, 0.5, -0.5, 0.99, -0.99]])
    values = values[(values >= low) & (values <= high)].astype(nbx.as_dtype(src).host)
    if dst == "bool":
        values = np.concatenate([values, np.array([np.nan, -np.inf], np.float32).astype(values.dtype)])
    got = nbx.asarray(values).to(device).to(dtype=dst).numpy()
    np.testing.assert_array_equal(got, values.astype(nbx.as_dtype(dst).host))


def test_a_cast_into_a_strided_view_writes_only_that_view(device):
    base = nbx.zeros((6, 8), dtype="bfloat16", device=device)
    src = nbx.asarray(rng.uniform(-3, 3, (3, 5)), dtype="float32").to(device)
    base[::2, ::-3] = src.permute(1, 0)[::-1][:3]  # (3, 3): transposed and reversed
    expected = np.zeros((6, 8), ml_dtypes.bfloat16)
    expected[::2, ::-3] = src.numpy().T[::-1][:3].astype(ml_dtypes.bfloat16)
    _assert_same_bits(base.numpy(), expected)


def test_a_same_dtype_copy_keeps_every_bit_nan_payloads_included(device):
    bits = np.array([0x7FC0, 0xFFC1, 0x7F81, 0x0001, 0x8000, 0x3F80], np.uint16)
    x = nbx.asarray(bits.view(ml_dtypes.bfloat16)).to(device)
    strided = x[::-1]
    np.testing.assert_array_equal(strided.astype("bfloat16").numpy().view(np.uint16), bits[::-1])

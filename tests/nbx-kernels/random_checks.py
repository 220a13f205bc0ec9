"""Comparing a device's random draws with the host's (imported by the random kernel tests).

Bit for bit, except randn/normal on a GPU: its log, cos and sin are not numpy's, so its values are
held within NORMAL_ULPS float32 steps of the host's (one step of a narrower dtype).
"""
import numpy as np

NORMAL_ULPS = 8  # randn on a GPU, float32 ulps from the host's value: worst 5 measured over 16M draws
                 # (H200, Triton 3.6; 82.6% bit-equal), under the 8 allowed here


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bytes of each element; NaNs made canonical (a GPU does not keep NaN payloads)."""
    array = np.array(array, copy=True)
    if array.dtype.kind not in "biu":
        array[np.isnan(array.astype(np.float64))] = np.nan
    return array.reshape(-1).view(np.uint8).reshape(array.shape + (array.dtype.itemsize,))


def assert_same_bits(got, expected):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    differ = np.any(bits(got) != bits(expected), axis=-1)
    assert not differ.any(), (f"{int(differ.sum())} of {differ.size} elements differ, first at "
                              f"{np.argwhere(differ)[0].tolist()}: {got[differ][:3]} vs {expected[differ][:3]}")


def float32_ulps(got, expected) -> np.ndarray:
    """Distance in float32 steps between two arrays of values (both of one sign convention)."""
    def ordered(x):
        i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(got) - ordered(expected))


def assert_normals_agree(got, expected, device):
    """Bit for bit on interp; on a GPU within NORMAL_ULPS float32 steps (one step of a narrower dtype)."""
    got, expected = np.asarray(got), np.asarray(expected)
    if device.type == "interp" or got.size == 0:
        return assert_same_bits(got, expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    g32, e32 = got.astype(np.float32), expected.astype(np.float32)
    if got.dtype.itemsize < 4:  # both sides rounded a value a few float32 steps apart: one step apart
        step = np.abs(np.nextafter(expected, np.full_like(expected, np.inf)).astype(np.float32) - e32)
        assert np.all(np.abs(g32 - e32) <= step), "narrow-dtype normals more than one step apart"
    else:
        worst = int(float32_ulps(g32, e32).max())
        assert worst <= NORMAL_ULPS, f"normals differ by up to {worst} float32 ulps (bound {NORMAL_ULPS})"

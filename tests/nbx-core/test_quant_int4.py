"""Grouped int4 weights: packing, error bounds in float64, refusals, safetensors names and files."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core import host, quant
from nbx.core.errors import ArgumentError, DTypeError, FileFormatError, ShapeError
from nbx.core.quant import QuantizedTensor, pack_int4, unpack_int4


def _weight(shape, dtype="float32", seed=0, scale=1.0):
    w = nbx.randn(*shape, generator=nbx.Generator(seed)).numpy().astype(np.float64) * scale
    return nbx.asarray(w.astype(nbx.dtypes.as_dtype(dtype).host))


def _per_element_scale(qt):
    return np.repeat(qt.scales.numpy().astype(np.float64), qt.group_size, axis=-1)


def test_packing_puts_the_even_index_in_the_low_nibble():
    packed = pack_int4(np.array([[1, 2, 15, 0]]))
    assert packed.dtype == np.uint8 and packed.tolist() == [[0x21, 0x0F]]
    signed = pack_int4(np.array([-8, 7, -1, 0]), signed=True)
    assert signed.tolist() == [0x78, 0x0F]


@pytest.mark.parametrize("signed, low, high", [(False, 0, 15), (True, -8, 7)])
def test_unpack_inverts_pack_for_every_int4_value(signed, low, high):
    values = np.random.default_rng(0).integers(low, high + 1, size=(7, 64))
    values[0, :16] = np.arange(low, high + 1)
    back = unpack_int4(pack_int4(values, signed=signed), signed=signed)
    assert back.dtype == np.int8 and np.array_equal(back, values)


@pytest.mark.parametrize("scheme", ["asymmetric", "symmetric"])
@pytest.mark.parametrize("scale_dtype", ["float16", "bfloat16", "float32", "float64"])
def test_dequantized_weights_lie_within_half_a_scale_of_the_original(scheme, scale_dtype):
    w = _weight((48, 256), seed=1, scale=0.05)
    qt = QuantizedTensor.quantize(w, 32, scheme, scale_dtype=scale_dtype)
    err = np.abs(qt.dequantize("float64").numpy() - w.numpy().astype(np.float64))
    bound = _per_element_scale(qt) / 2
    assert np.all(err <= bound * (1 + 1e-12) + 1e-300)
    assert (err > 0.45 * bound).any()  # the bound is tight: rounding uses the whole half-step


def test_asymmetric_q_uses_the_full_range_and_the_group_minimum_is_exact_in_float32():
    w = _weight((4, 64), seed=2)
    qt = QuantizedTensor.quantize(w, 16, "asymmetric", scale_dtype="float32")
    q = unpack_int4(qt.qweight.numpy()).reshape(4, 4, 16)
    assert q.min(axis=-1).max() == 0 and q.max(axis=-1).min() == 15
    groups = w.numpy().reshape(4, 4, 16)
    assert np.array_equal(qt.zeros.numpy(), groups.min(axis=-1))


def test_symmetric_q_lies_in_minus_eight_to_seven_and_a_zero_group_dequantizes_to_zero():
    w = _weight((2, 64), seed=3).numpy()
    w[1, :32] = 0.0
    qt = QuantizedTensor.quantize(w, 32, "symmetric")
    q = unpack_int4(qt.qweight.numpy(), signed=True)
    assert q.min() >= -8 and q.max() <= 7 and qt.zeros is None
    assert np.all(qt.dequantize().numpy()[1, :32] == 0.0)


def test_a_constant_group_dequantizes_exactly_when_asymmetric():
    w = np.full((3, 32), 0.375, np.float32)
    qt = QuantizedTensor.quantize(w, 16, "asymmetric")
    assert np.all(qt.scales.numpy() == 0) and np.array_equal(qt.dequantize().numpy(), w)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_dequantize_to_a_chosen_dtype_is_the_float32_result_cast(dtype):
    qt = QuantizedTensor.quantize(_weight((8, 128), seed=4), 64)
    out = qt.dequantize(dtype)
    assert out.dtype == nbx.dtypes.as_dtype(dtype) and out.shape == (8, 128)
    if dtype != "float64":
        assert out.numpy().tobytes() == qt.dequantize("float32").numpy().astype(out.dtype.host).tobytes()


def test_large_weights_dequantize_over_several_cores_with_the_same_bits(monkeypatch):
    qt = QuantizedTensor.quantize(_weight((512, 1024), seed=5), 128, scale_dtype="float16")
    reference = qt.dequantize("float32").numpy().copy()
    calls = []
    real_map = host.parallel_map
    monkeypatch.setattr(quant, "row_chunks", lambda rows, row_bytes: [slice(a, min(a + 64, rows)) for a in range(0, rows, 64)])
    monkeypatch.setattr(quant, "parallel_map", lambda fn, items: calls.append(len(items)) or real_map(fn, items))
    assert qt.dequantize("float32").numpy().tobytes() == reference.tobytes()
    assert calls == [8]


def test_a_weight_with_leading_dims_and_a_one_dim_weight_round_trip():
    for shape in [(2, 3, 64), (64,)]:
        w = _weight(shape, seed=6)
        qt = QuantizedTensor.quantize(w, 16)
        err = np.abs(qt.dequantize("float64").numpy() - w.numpy().astype(np.float64))
        assert qt.shape == shape and np.all(err <= _per_element_scale(qt) / 2 * (1 + 1e-12))


def test_nbytes_counts_packed_data_scales_and_minima():
    qt = QuantizedTensor.quantize(_weight((16, 256), dtype="float16"), 64)
    assert qt.nbytes == 16 * 128 + 2 * (16 * 4 * 2)
    sym = QuantizedTensor.quantize(_weight((16, 256), dtype="float16"), 64, "symmetric")
    assert sym.nbytes == 16 * 128 + 16 * 4 * 2


def test_names_in_a_mapping_round_trip_the_quantized_tensor():
    for scheme in ("asymmetric", "symmetric"):
        qt = QuantizedTensor.quantize(_weight((8, 64), seed=7), 32, scheme, scale_dtype="bfloat16")
        names = qt.to_safetensors_dict("layer.0.up")
        assert sorted(names) == sorted(["layer.0.up.qweight", "layer.0.up.scales"]
                                       + (["layer.0.up.zeros"] if scheme == "asymmetric" else []))
        back = QuantizedTensor.from_safetensors(dict(names), "layer.0.up")
        assert (back.shape, back.group_size, back.scheme) == ((8, 64), 32, scheme)
        assert back.dequantize().numpy().tobytes() == qt.dequantize().numpy().tobytes()


def test_a_real_safetensors_file_round_trips_the_quantized_tensor(tmp_path):
    qt = QuantizedTensor.quantize(_weight((16, 128), seed=8), 32, scale_dtype="float16")
    path = tmp_path / "int4.safetensors"
    nbx.save_safetensors(qt.to_safetensors_dict("w"), path)
    back = QuantizedTensor.from_safetensors(nbx.load_safetensors(path), "w")
    assert back.scales.dtype == nbx.float16 and back.scheme == "asymmetric"
    assert back.dequantize("float64").numpy().tobytes() == qt.dequantize("float64").numpy().tobytes()


def test_to_moves_every_part_and_dequantize_answers_on_that_device():
    from nbx.core.cpu import HostMemoryBackend
    from nbx.core.device import register_backend
    register_backend(HostMemoryBackend("quanttest"))
    qt = QuantizedTensor.quantize(_weight((4, 64), seed=9), 32)
    moved = qt.to("quanttest")
    assert {str(t.device) for t in (moved.qweight, moved.scales, moved.zeros)} == {"quanttest"}
    out = moved.dequantize()
    assert str(out.device) == "quanttest" and out.numpy().tobytes() == qt.dequantize().numpy().tobytes()


def _parts(shape=(4, 64), group_size=32):
    qt = QuantizedTensor.quantize(_weight(shape, seed=10), group_size)
    return qt.qweight, qt.scales, qt.zeros


@pytest.mark.parametrize("call, error, message", [
    (lambda: QuantizedTensor.quantize(_weight((4, 96)), 64), ShapeError, "group size 64 does not divide the input dim 96"),
    (lambda: QuantizedTensor.quantize(_weight((4, 33)), 3), ShapeError, "the input dim 33 is odd"),
    (lambda: QuantizedTensor.quantize(_weight((4, 64)), 32, "nf4"), ArgumentError, "unknown quantization scheme 'nf4'"),
    (lambda: QuantizedTensor.quantize(_weight((4, 64)), 0), ArgumentError, "group_size is a positive integer"),
    (lambda: QuantizedTensor.quantize(np.zeros((4, 64), np.int32), 32), DTypeError, "takes a float weight, not int32"),
    (lambda: QuantizedTensor.quantize(_weight((4, 64)), 32, scale_dtype="float8_e4m3fn"), DTypeError, "int4 scales are one of"),
    (lambda: QuantizedTensor.quantize(np.full((2, 32), np.inf, np.float32), 16), ArgumentError, "needs a finite weight"),
    (lambda: QuantizedTensor.quantize(np.array([[-1e5, 1e5] * 8], np.float32), 16, scale_dtype="float16"),
     ArgumentError, "does not fit the scale dtype float16"),
    (lambda: QuantizedTensor.quantize(np.float32(1.0), 1), ShapeError, "at least one dim"),
    (lambda: pack_int4(np.zeros((2, 3), np.int8)), ShapeError, r"even last dim, got shape \(2, 3\)"),
    (lambda: pack_int4(np.array([0, 16])), ArgumentError, r"unsigned int4 values lie in \[0, 15\]"),
    (lambda: pack_int4(np.array([-9, 0]), signed=True), ArgumentError, r"signed int4 values lie in \[-8, 7\]"),
    (lambda: unpack_int4(np.zeros(4, np.int8)), DTypeError, "packed int4 data is uint8"),
    (lambda: QuantizedTensor(*_parts(), group_size=32, shape=(4, 64), scheme="q4_k"), ArgumentError, "unknown quantization scheme"),
    (lambda: QuantizedTensor(*_parts(), group_size=32, shape=(4, 66), scheme="asymmetric"), ShapeError, "group size 32 does not divide"),
    (lambda: QuantizedTensor(*_parts(), group_size=16, shape=(4, 64), scheme="asymmetric"), ShapeError, "scales of shape"),
    (lambda: QuantizedTensor(*_parts(), group_size=32, shape=(4, 128), scheme="asymmetric"), ShapeError, "qweight of shape"),
    (lambda: QuantizedTensor(*_parts(), group_size=32, shape=(4, 64), scheme="symmetric"), ArgumentError, "symmetric int4 weight has no zeros"),
    (lambda: QuantizedTensor(*_parts()[:2], None, group_size=32, shape=(4, 64), scheme="asymmetric"), ArgumentError, "needs zeros"),
    (lambda: QuantizedTensor(_parts()[0].to(dtype="int8"), *_parts()[1:], group_size=32, shape=(4, 64), scheme="asymmetric"),
     DTypeError, "qweight is a uint8 tensor"),
    (lambda: QuantizedTensor(_parts()[0], _parts()[1].to(dtype="float16"), _parts()[2], group_size=32, shape=(4, 64),
                             scheme="asymmetric"), DTypeError, "scales and zeros share one of"),
    (lambda: QuantizedTensor.from_safetensors({"w.qweight": _parts()[0]}, "w"), FileFormatError, "no tensor named 'w.scales'"),
    (lambda: QuantizedTensor.from_safetensors({"w.qweight": _parts()[0], "w.scales": nbx.ones(4, 3)}, "w"),
     ShapeError, "3 groups do not divide the input dim 64"),
    (lambda: QuantizedTensor.quantize(_weight((4, 64)), 32).dequantize("int32"), DTypeError, "dequantize to a float dtype, not int32"),
])
def test_bad_weights_and_layouts_are_refused_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call()

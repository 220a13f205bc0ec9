"""The conv tunable's representative launch (conv/tuning.py): it takes the code path of the launches
that form its key (a 1-D channels-first key: A_SHIFT; a 2-D one: A_TILE; an even-tap 1-D key: one phase
of a transposed convolution, A_SHIFT with a negative dilation into a strided output view), with channel
counts models have; its screen windows' oracle is the whole oracle at those rows; a 1-D key's smallest
launch is a valid screen; 1-D and 2-D keys are no neighbours; the small-image keys keep their split-K candidates."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import nbx.core as nbx
from nbx.autotune import keys, screen, space
from nbx.core import device_files
from nbx.core.dtypes import as_dtype
from nbx.core.reference import oracle
from nbx.kernels.conv import conv_plan, transpose_plan
import nbx.kernels.conv.tuning as conv_tuning
from nbx.kernels.conv.tuning import (CONV, PHASE_STRIDE, conv_key, conv_workload, geometry, phase_plan,
                                     representative, representative_args, representative_phase,
                                     transposed_rows)

ROOT = Path(__file__).resolve().parents[2]
HOPPER = device_files.for_arch("sm_90")


def _rep(m, n, k, channels_last, spatial, dtype="float32") -> dict:
    return {"m": m, "n": n, "k": k, "dtype": as_dtype(dtype), "channels_last": channels_last, "spatial": str(spatial)}


def _plan(rep, device):
    x, w, geo = representative(rep, device)
    return phase_plan(x, w, geo) if geo.is_phase else conv_plan(x, w, None, *representative_args(geo))


def _meta(rep, device):
    return dict(_plan(rep, device).launches[0].meta)


@pytest.mark.parametrize("k,taps", [(7 * 64, 7), (3 * 64, 3), (2 * 64, 2)])
def test_a_channels_first_1d_keys_representative_takes_the_a_shift_path(k, taps):
    interp = nbx.as_device("interp")
    meta = _meta(_rep(32, 8, k, False, 1), interp)
    assert meta["A_SHIFT"] and meta["TAPS_W"] == taps and not meta["A_TILE"]
    assert not _meta(_rep(32, 8, k, True, 1), interp)["A_SHIFT"]   # channels-last: channels at unit stride
    two_d = _meta(_rep(36, 8, 9 * 16, False, 2), interp)
    assert two_d["A_TILE"] and not two_d["A_SHIFT"]


@pytest.mark.parametrize("channels_last", [True, False], ids=["cl", "cf"])
def test_the_representatives_weight_has_its_channels_at_unit_stride_and_an_even_1d_one_is_a_phases_copy(
        channels_last):
    """As a model converts a weight at load; a 2-tap 1-D key's is conv_transpose1d's (C, N, 2 x stride)
    laid out as the phases' dense copy: (N, K, C), so the phase reads taps `stride` apart (no descriptor)."""
    interp = nbx.as_device("interp")
    _, w, geo = representative(_rep(16, 4, 2 * 64, channels_last, 1), interp)
    assert w.shape == (64, 4, 2 * PHASE_STRIDE) and w.strides == (1, 2 * PHASE_STRIDE * 64, 64)
    _, w, geo = representative(_rep(16, 4, 3 * 64, channels_last, 1), interp)
    assert w.strides == (192, 1, 64)
    _, w, geo = representative(_rep(16, 4, 9 * 16, channels_last, 2), interp)
    assert w.strides == (144, 1, 48, 16)


def test_hifigans_keys_take_its_own_taps_and_512_channels_on_the_h200s_ladder():
    conv1d = geometry(_rep(8192, 512, 3584, False, 1), HOPPER)
    assert (conv1d.sizes, conv1d.taps, conv1d.channels) == ((8192,), 7, 512)
    phases = geometry(_rep(8192, 256, 1024, False, 1), HOPPER)   # the x8 upsampler: 512 channels x 2 taps
    assert (phases.taps, phases.channels) == (2, 512)


def _two_d_records():
    for name in ("conv-bench", "conv-models"):
        doc = json.loads((ROOT / "certificates" / "keys" / f"nvidia-h200-140gb-{name}.json").read_text())
        for rec in doc["keys"]:
            if rec["kernel"] == "conv" and rec["key"].endswith("spatial=2"):
                yield rec


def test_a_2d_keys_representative_has_the_16_aligned_channels_of_the_model_launch_that_formed_it():
    """Every 2-D key the H200's keys files hold whose launch had a multiple of 16 channels (all but
    conv_in's 4) is certified on that channel count: its K inside the key's class."""
    checked = 0
    for rec in _two_d_records():
        key = keys.parse("conv", CONV.key, rec["key"], HOPPER, rec["observed"])
        geo = geometry(keys.representative(key, CONV.key, HOPPER), HOPPER)
        assert device_files.bucket(HOPPER.value("autotune.buckets.dims"), geo.channels * 9) == key.values()["k"]
        if rec["observed"]["k"] % (9 * 16) == 0:
            assert geo.channels % 16 == 0, rec["key"]
            checked += 1
    assert checked >= 20
    for k, channels in ((11776, 1280), (2944, 320), (5760, 640)):   # once 1308, 327, 640
        assert geometry(_rep(512, 1280, k, True, 2), HOPPER).channels == channels


@pytest.mark.parametrize("spatial,m,k,rows_of", [(1, 40, 3 * 8, 40), (2, 144, 9 * 4, 12), (3, 64, 27 * 2, 4)])
@pytest.mark.parametrize("channels_last", [True, False], ids=["cl", "cf"])
def test_each_screen_window_is_the_oracle_of_its_own_input_with_the_halo_equal_to_the_whole_oracle(
        spatial, m, k, rows_of, channels_last):
    """The workload leads with the output's first spatial dim (1-D: its positions), and a window's
    float64 oracle convolves only the input it reads: the whole oracle at those rows, borders included."""
    interp = nbx.as_device("interp")
    rep = _rep(m, 8, k, channels_last, spatial)
    work = conv_workload(rep, interp)
    x, w, geo = representative(rep, interp)
    assert work.out_shape == (rows_of, 1, 8, *geo.sizes[1:])
    whole = np.asarray(oracle(f"conv{spatial}d", x, w, None, 1, geo.taps // 2 if geo.taps % 2 else 0, 1, 1))
    whole = whole.transpose(2, 0, 1, *range(3, spatial + 2))
    last = rows_of - 1
    for rows in (slice(0, 3), slice(2, 4), slice(last, rows_of), slice(0, rows_of)):
        np.testing.assert_allclose(work.reference_rows(rows), whole[rows], rtol=0, atol=1e-12)


@pytest.mark.parametrize("channels_last", [True, False], ids=["cl", "cf"])
def test_an_even_tap_1d_keys_representative_is_one_phase_of_a_transposed_convolution_of_the_keys_gemm(
        channels_last):
    """HiFi-GAN's x8 upsampler's form (kernel 2 x stride, padding stride / 2): one launch of its
    transposed plan, the key's M x N x K, a channels-first one through A_SHIFT with the phases' negative
    dilation, storing every stride-th position of the output."""
    interp = nbx.as_device("interp")
    rep = _rep(16, 4, 2 * 64, channels_last, 1)
    (one,) = _plan(rep, interp).launches
    batch, c_g, o_g, count, taps = (one.args[i] for i in (5, 6, 10, 13, 16))
    assert (batch * count, o_g, c_g * taps) == (16, 4, 128)
    size, phase = representative_phase(geometry(rep, device_files.for_arch("interp")))
    assert size == 16 * PHASE_STRIDE and one.args[3].offset == phase.o0 * (4 if channels_last else 1)
    work = conv_workload(rep, interp)
    position = work.out.strides[0]
    assert work.out_shape == (16, 1, 4) and position == PHASE_STRIDE * (4 if channels_last else 1)
    if not channels_last:
        assert one.meta["A_SHIFT"] and one.meta["DIL_W"] == -1 and one.meta["PAD_W"] == -1 and one.meta["TAPS_W"] == 2
    split = {"block_m": 128, "block_n": 128, "block_k": 64, "num_stages": 4, "split_k": 2}
    assert "phases run unsplit" in conv_tuning._split_fits(split, rep, HOPPER)   # what the phase launch would time


@pytest.mark.parametrize("channels_last", [True, False], ids=["cl", "cf"])
def test_each_phase_window_is_the_transposed_oracle_of_its_own_inputs_equal_to_the_whole_oracle_there(
        channels_last):
    interp = nbx.as_device("interp")
    rep = _rep(24, 4, 2 * 64, channels_last, 1)
    work = conv_workload(rep, interp)
    x, w, geo = representative(rep, interp)
    _, phase = representative_phase(geo)
    whole = np.asarray(oracle("conv_transpose1d", x, w, None, *representative_args(geo)))
    whole = whole[:, :, phase.o0::PHASE_STRIDE].transpose(2, 0, 1)
    assert whole.shape == work.out_shape
    for rows in (slice(0, 3), slice(5, 17), slice(23, 24), slice(0, 24)):
        np.testing.assert_allclose(work.reference_rows(rows), whole[rows], rtol=0, atol=1e-12)


def _whole_transposed_workload(rep, device):
    """The whole conv_transpose1d the phase representative is one launch of (all its phases, as a
    vocoder runs it), positions leading, its oracle windowed as the phase's."""
    from nbx.autotune import TensorWorkload
    from nbx.kernels import plans
    from nbx.kernels import launch
    from nbx.kernels.conv import storage_layout
    x, w, geo = representative(rep, device)
    args = representative_args(geo)
    shape, _, logical = storage_layout(1, rep["n"], (representative_phase(geo)[0],), rep["channels_last"])
    storage = launch.output(shape, rep["dtype"], device)
    out = storage.permute(*logical).permute(2, 0, 1)
    x64, w64 = x.numpy().astype(np.float64), nbx.asarray(w.numpy().astype(np.float64))

    def reference(rows):
        start, stop, _ = rows.indices(out.shape[0])
        return transposed_rows(x64, w64, args[0][0], args[1][0], start, stop - start, 1)

    def run(setting):
        plans.execute(transpose_plan(x, w, None, *args, setting=setting), {"x": x, "w": w, "bias": x, "out": storage})
    return TensorWorkload(out, run, reference)


@pytest.mark.parametrize("where", ["interp", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_phase_representative_screens_each_setting_as_its_whole_transposed_convolution_computes(where):
    """cuda: HiFi-GAN's phase key m=65536,n=256,k=1024, the setting whose x8 upsampler at L = 65536 was
    0.11 off torch on the H200 (128 x 256 x 64, 8 warps, 4 stages; its 2-tap conv1d representative
    passed) and the 8192 key's (128 x 128): the phase's screen passes a setting exactly where the whole
    transposed convolution's (all 8 phases into one output) does. interp: a small key, its tile."""
    from nbx.kernels import launch
    device = nbx.as_device(where)
    facts = launch.facts(device)
    if where == "cuda":
        rep = _rep(65536, 256, 1024, False, 1, "bfloat16")
        tile = dict(block_m=128, block_k=64, group_m=8, num_warps=8, num_stages=4, split_k=1)
        settings = [{**tile, "block_n": 256}, {**tile, "block_n": 128}]
    else:
        rep, settings = _rep(8, 4, 2 * 64, False, 1), [CONV.default(facts)]
    phase = screen.run(conv_workload(rep, device), settings, facts).verdicts
    whole = screen.run(_whole_transposed_workload(rep, device), settings, facts).verdicts
    for setting, one, every in zip(settings, phase, whole, strict=True):
        print(f"{setting}: phase {one.passed} ({one.deviation}), whole {every.passed} ({every.deviation})")
        assert one.passed == every.passed, (one.reason, every.reason)
    assert where == "cuda" or all(v.passed for v in phase)


@pytest.mark.parametrize("k", [2 * 64, 3 * 64], ids=["phase", "conv1d"])
def test_a_1d_keys_smallest_launch_is_a_valid_screen_that_takes_the_a_shift_path(k):
    """keys.smallest of a small 1-D key on the H200's ladder (m 48; K class 128: 2 taps x 64 channels,
    a transposed convolution's phase; 192: a 3-tap conv1d), launched on interp with its device file's
    tile: the screen passes against the oracle."""
    key = keys.form("conv", CONV.key_fields, HOPPER, **conv_key(48, 16, k, "float32", False, 1))
    small = keys.smallest(key, CONV.key, HOPPER, like=key.observed)
    interp = nbx.as_device("interp")
    facts = device_files.for_arch("interp")
    meta = _meta(small, interp)
    assert meta["A_SHIFT"] and meta["DIL_W"] == (-1 if k == 128 else 1)
    verdict = screen.run(conv_workload(small, interp), [CONV.default(facts)], facts).verdicts[0]
    assert verdict.passed, verdict.reason


def test_a_1d_key_and_a_2d_key_are_no_neighbours():
    one, two = (keys.form("conv", CONV.key_fields, HOPPER, **conv_key(8192, 512, 3584, "bfloat16", False, s))
                for s in (1, 2))
    assert str(one).endswith("spatial=1") and space.distance(CONV.key, one, two) is None


@pytest.mark.parametrize("m,n,k,split", [(512, 1280, 11520, 8), (2048, 640, 5760, 4), (8192, 320, 2880, 2)])
def test_the_small_image_keys_keep_split_k_candidates_under_their_representative(m, n, k, split):
    """SD's 16^2 x 1280, 32^2 x 640 and 64^2 x 320 at batch 2 (40, 80 and 192 tiles of 128 x 128 on
    132 SMs): split_k at the least split that fills two waves, 4 and 8 warps."""
    key = keys.form("conv", CONV.key_fields, HOPPER, **conv_key(m, n, k, "bfloat16", True, 2))
    kept = CONV.candidates(HOPPER, keys.representative(key, CONV.key, HOPPER))[0]
    splits = [s for s in kept if s["split_k"] > 1]
    assert len(kept) <= 20 and {(s["split_k"], s["num_warps"]) for s in splits} == {(split, 4), (split, 8)}

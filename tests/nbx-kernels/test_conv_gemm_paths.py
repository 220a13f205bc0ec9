"""The implicit GEMM's channels-first A tiles (A_SHIFT: two aligned loads and a static shift a
width tap; A_TILE: pointers formed once, a scalar added a step) and its split K (conv/split.py)
against the float64 oracle. Split K: split_k 2 and
4 over odd K (channel steps that do not divide among the splits, a split left without steps), bias,
activation and residual in the split epilogue, groups, both layouts, conv1d/2d/3d; the partials
declared as the plan's workspace; the same bits run to run; and the tunable's split candidates
(where they are kept, and certificates made before split_k read as split_k 1)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels.conv import conv_plan, launch_conv

RNG = np.random.default_rng(21)
ROOT = Path(__file__).resolve().parents[2]


def _put(a, device, channels_last=False):
    a = np.asarray(a, dtype=np.float32)
    if not channels_last:
        return nbx.asarray(a, device=device)
    t = nbx.asarray(np.ascontiguousarray(a.transpose(0, *range(2, a.ndim), 1)), device=device)
    return t.permute(0, a.ndim - 1, *range(1, a.ndim - 1))


def _setting(split_k: int) -> dict:
    """interp's tile (block_k 16) with the split asked for."""
    return dict(block_m=16, block_n=16, block_k=16, group_m=4, num_warps=4, num_stages=1, split_k=split_k)


CASES = {  # x shape, weight shape, stride, padding (a pair a dim), dilation, groups, channels-last, split_k
    "conv2d_grouped_cl": ((2, 6, 3, 5), (8, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2, True, 4),  # 9 steps
    "conv2d_grouped_cf": ((2, 6, 3, 5), (8, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2, False, 2),
    "conv1d_cf_odd_k": ((2, 20, 9), (5, 20, 3), (2,), ((2, 1),), (2,), 1, False, 4),   # 3 taps x 2 steps: 6
    "conv3d_cl": ((1, 4, 3, 4, 3), (3, 4, 2, 3, 2), (1, 1, 1), ((1, 1), (0, 1), (1, 0)), (1, 1, 1), 1, True, 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_split_k_convolution_with_bias_activation_and_residual_matches_the_oracle(device, check, name):
    """split_k 4 of 9 steps: three of three and a split left with none (its partials zero)."""
    xs, ws, stride, pads, dilation, groups, cl, split_k = CASES[name]
    x = _put(RNG.standard_normal(xs), device, cl)
    w = _put(RNG.standard_normal(ws) / np.sqrt(np.prod(ws[1:])), device)
    b = _put(RNG.standard_normal(ws[0]), device)
    plan = conv_plan(x, w, b, stride, pads, dilation, groups, _setting(split_k))
    outs = plan.outputs[0].shape
    spatial = outs[1:-1] if cl else outs[2:]
    # channels-last: over a channels-first output too, whose epilogue reads it as (N, C, merged positions)
    residual = _put(RNG.standard_normal((xs[0], ws[0], *spatial)), device, True)
    out = launch_conv(x, w, b, stride, pads, dilation, groups, setting=_setting(split_k), activation="gelu",
                      residual=residual)
    expected = nbx.oracle(f"conv{len(xs) - 2}d", x, w, b, stride, pads, dilation, groups, activation="gelu",
                          residual=residual)
    check(out, expected, device)
    split = conv_plan(x, w, b, stride, pads, dilation, groups, _setting(split_k), "gelu",
                      residual)
    assert len(split.launches) == 2 and split.detail.tile["split_k"] == split_k


def test_split_k_partials_are_the_plans_workspace_and_give_the_same_bits_every_run(device):
    x = _put(RNG.standard_normal((1, 6, 3, 5)), device, True)
    w, b = _put(RNG.standard_normal((8, 3, 3, 3)), device), _put(RNG.standard_normal(8), device)
    args = (x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 2)
    plan = conv_plan(*args, _setting(4))
    names = [(buf.name, buf.nbytes) for buf in plan.buffers()]
    assert names == [("out", 3 * 5 * 8 * 4), ("part", 4 * 3 * 5 * 8 * 4)]   # (1, split, rows, channels)
    unsplit = conv_plan(*args, _setting(1))
    assert plan.detail.bytes_moved == unsplit.detail.bytes_moved + 2 * 4 * 3 * 5 * 8 * 4
    first = launch_conv(*args, setting=_setting(4)).numpy()
    np.testing.assert_array_equal(launch_conv(*args, setting=_setting(4)).numpy(), first)


def test_a_residual_the_split_epilogue_cannot_read_runs_the_tile_unsplit(device, check):
    x = _put(RNG.standard_normal((1, 4, 3, 5)), device)
    w = _put(RNG.standard_normal((3, 4, 3, 3)), device)
    wide = _put(RNG.standard_normal((1, 3, 3, 6)), device)
    residual = wide[:, :, :, :5]   # rows 6 apart, 5 long: its positions merge into no one stride
    args = (x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    plan = conv_plan(*args, _setting(2), None, residual)
    assert len(plan.launches) == 1 and plan.detail.tile["split_k"] == 1 and not plan.workspace
    out = launch_conv(*args, setting=_setting(2), residual=residual)
    check(out, nbx.oracle("conv2d", x, w, None, 1, 1, residual=residual), device)


def _kept(m, n, k, channels_last, spatial=2):
    from nbx.autotune import keys
    from nbx.core import device_files
    from nbx.kernels.conv.tuning import CONV, conv_key
    facts = device_files.for_arch("sm_90")
    key = keys.form("conv", CONV.key_fields, facts, **conv_key(m, n, k, "bfloat16", channels_last, spatial))
    return CONV.candidates(facts, keys.representative(key, CONV.key, facts))


def test_split_k_is_a_candidate_only_for_keys_of_fewer_tiles_than_two_waves_of_the_h200():
    few = [s for s in _kept(512, 1280, 11520, True)[0] if s["split_k"] > 1]   # 40 tiles of 128 x 128
    assert {(s["block_m"], s["block_n"], s["block_k"], s["split_k"]) for s in few} == {(128, 128, 64, 8)}
    assert {s["num_warps"] for s in few} == {4, 8}
    assert [s["split_k"] for s in _kept(8192, 512, 3584, False, 1)[0] if s["split_k"] > 1] == [2, 2]   # 256 tiles
    assert all(s["split_k"] == 1 for s in _kept(65536, 512, 3584, False, 1)[0])
    from nbx.core import device_files
    from nbx.kernels.conv import tuning
    split = {**few[0], "num_stages": 4}
    assert "compute.multiprocessors" in tuning._split_fits(split, {"m": 512, "n": 1280, "k": 11520, "spatial": "2"},
                                                           device_files.for_arch("interp"))


def test_a_conv_certificate_made_before_split_k_is_served_unsplit():
    from nbx.autotune import store
    from nbx.kernels.conv.tuning import CONV
    path = next((ROOT / "certificates" / "nvidia").glob("*/*/conv.json"))
    doc = json.loads(path.read_text())
    doc["parameters"] = [p for p in doc["parameters"] if p != "split_k"]
    for entry in doc["entries"].values():
        entry["setting"].pop("split_k", None)
    cert = store.validate(doc, path, CONV)
    assert "split_k" in cert.parameters and cert.entries
    assert all(entry.setting["split_k"] == 1 for entry in cert.entries.values())


@pytest.mark.parametrize("length,path", [(16, "A_SHIFT"), (13, "A_TILE")])
def test_a_channels_first_conv1d_reads_aligned_shifted_tiles_or_pointers_made_once_and_matches_the_oracle(
        device, check, length, path):
    """HiFi-GAN's layout (N, C, L), torch's default, k 7 with dilation 3 and 'same' padding: shifts
    of -9..9 positions (two 8-groups away), two samples (a 16-row tile across their border), 20
    channels (a partial channel step), bfloat16. 16 positions a row: whole groups of 8, the aligned
    loads and static shifts (A_SHIFT; split K too); 13: the pointer tile (A_TILE)."""
    host = nbx.as_dtype("bfloat16").host
    x = nbx.asarray(RNG.standard_normal((2, 20, length)).astype(host), device=device)
    w = nbx.asarray((RNG.standard_normal((6, 20, 7)) / 12).astype(host), device=device)
    b = nbx.asarray(RNG.standard_normal(6).astype(host), device=device)
    check(nbx.conv1d(x, w, b, 1, "same", 3), nbx.oracle("conv1d", x, w, b, 1, "same", 3), device)
    meta = dict(conv_plan(x, w, b, (1,), ((9, 9),), (3,), 1).launches[0].meta)
    assert meta[path] and not meta[{"A_SHIFT": "A_TILE", "A_TILE": "A_SHIFT"}[path]]
    if path == "A_SHIFT":
        split = launch_conv(x, w, b, (1,), ((9, 9),), (3,), 1, setting=_setting(2), activation="relu")
        check(split, nbx.oracle("conv1d", x, w, b, 1, "same", 3, activation="relu"), device)


def test_a_strided_channels_first_conv2d_takes_the_pointer_tile_and_a_channels_last_one_neither(device, check):
    x = _put(RNG.standard_normal((1, 3, 6, 5)), device)
    w = _put(RNG.standard_normal((4, 3, 2, 3)), device)
    check(nbx.conv2d(x, w, None, (2, 1), ((1, 0), (2, 1))), nbx.oracle("conv2d", x, w, None, (2, 1),
                                                                       ((1, 0), (2, 1))), device)
    meta = dict(conv_plan(x, w, None, (2, 1), ((1, 0), (2, 1)), (1, 1), 1).launches[0].meta)
    assert meta["A_TILE"] and not meta["A_SHIFT"]   # taps along the height too: the flat loop's order
    cl = _put(RNG.standard_normal((1, 3, 6, 5)), device, True)
    meta = dict(conv_plan(cl, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1).launches[0].meta)
    assert not meta["A_TILE"] and not meta["A_SHIFT"]


@pytest.mark.gpu
@pytest.mark.parametrize("split_k", [1, 8])
def test_sd_unets_16x16_x_1280_conv_split_8_ways_matches_the_oracle_with_the_same_bits_every_run(check, split_k):
    """The key split K is for (40 tiles of 128 x 128 on the H200's 132 SMs), bfloat16 channels-last,
    the tile the candidates split, with bias, SiLU and a residual."""
    device = nbx.as_device("cuda")
    host = nbx.as_dtype("bfloat16").host

    def put(a):
        t = nbx.asarray(np.ascontiguousarray(a.transpose(0, 2, 3, 1)).astype(host), device=device)
        return t.permute(0, 3, 1, 2)
    x = put(RNG.standard_normal((2, 1280, 16, 16)))
    w = put(RNG.standard_normal((1280, 1280, 3, 3)) / np.sqrt(9 * 1280))
    b = nbx.asarray(RNG.standard_normal(1280).astype(host), device=device)
    r = put(RNG.standard_normal((2, 1280, 16, 16)))
    setting = dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4, split_k=split_k)
    args = (x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    out = launch_conv(*args, setting=setting, activation="silu", residual=r)
    check(out, nbx.oracle("conv2d", x, w, b, 1, 1, activation="silu", residual=r), device)
    again = launch_conv(*args, setting=setting, activation="silu", residual=r)
    np.testing.assert_array_equal(again.numpy(), out.numpy())


def test_a_split_tile_into_a_strided_view_runs_unsplit_and_stores_only_the_view(device, check):
    """into= a row band of a larger output (tiled_conv_chain's bands) under a split_k setting: the split
    epilogue stores a dense output, so the launch runs unsplit into the view's strides."""
    from nbx.kernels import launch
    rng = np.random.default_rng(3)
    x = nbx.asarray(rng.standard_normal((1, 6, 4, 5)).astype(np.float32)).to(device)
    w = nbx.asarray(rng.standard_normal((8, 6, 3, 3)).astype(np.float32) / 7).to(device)
    whole = nbx.zeros(1, 8, 12, 5).to(device)
    band = whole[:, :, 3:7]
    setting = {**launch.tiles("conv", nbx.as_device(device)), "split_k": 2}
    launch_conv(x, w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, setting=setting, into=band)
    check(band, nbx.oracle("conv2d", x, w, None, 1, 1, 1, 1), device)
    rest = np.concatenate([whole.numpy()[:, :, :3], whole.numpy()[:, :, 7:]], axis=2)
    assert not rest.any()

"""Kernel tests run on every device that runs nbx's Triton kernels here: `interp` (Triton's
interpreter, in CI) and `cuda` (marked gpu: the GPU machine). Both compare with the float64 oracle
at the tolerance the device file states for the output dtype."""
from __future__ import annotations

import os

import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.reference import deviation


def _interp_reason():
    from nbx.core.device import backends, plugin_errors
    if "interp" in backends():
        return None
    return plugin_errors().get("interp", "the interp device is not registered")


@pytest.fixture(params=["interp", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "interp":
        reason = _interp_reason()
        if reason and os.environ.get("TRITON_INTERPRET") == "1":
            # the interpreter is on, so a missing interp device is a broken plugin, never a skip
            pytest.fail(f"the interp device failed to register: {reason}")
        if reason:
            pytest.skip(f"interp unavailable (a GPU run: TRITON_INTERPRET is not 1): {reason}")
    return nbx.as_device(request.param)


def tolerance(dtype, device) -> float:
    from nbx.kernels import launch
    return launch.screen_tolerance(nbx.as_dtype(dtype), device)


def assert_matches_oracle(out, expected, device):
    """out (an nbx tensor) against the float64 expected values, at the device file's tolerance."""
    got = out.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    tol = tolerance(out.dtype, device)
    if out.dtype.kind in ("bool", "int", "uint"):
        np.testing.assert_array_equal(got, expected.astype(got.dtype))
        return
    dev = deviation(got, expected)
    assert dev <= tol, f"deviation {dev:.3g} from the float64 oracle exceeds {out.dtype.name}'s tolerance {tol:.3g}"


@pytest.fixture
def check():
    """check(out, expected, device): out agrees with the float64 oracle at the device's tolerance."""
    return assert_matches_oracle


@pytest.fixture
def device_file_settings(monkeypatch):
    """Every tuned family served the device file's tile (tiles.<family>) instead of its certified
    setting: tests whose shapes are chosen from that tile to take a given path (one pass, looped,
    split) use it, since a certified tile may take another path for the same shape."""
    from nbx.kernels import launch, norm, plans
    from nbx.kernels.reduction import tuning as reduction_tuning
    from nbx.kernels.softmax import tuning as row_tuning

    def from_file(tunable, device, *args, **kwargs):
        return tunable.default(launch.facts(device))

    plans.reset()
    monkeypatch.setattr(row_tuning, "row_setting", from_file)
    monkeypatch.setattr(norm, "row_setting", from_file)
    monkeypatch.setattr(reduction_tuning, "setting",
                        lambda device, view, dtype: from_file(reduction_tuning.REDUCTION, device))
    yield
    plans.reset()


@pytest.fixture
def device_tile_screen():
    """device_tile_screen(tunable, device, **inputs): (Verdict, tolerance) of the device file's tile
    on the screen a key no certified neighbour serves takes (neighbours.default_checked's: the
    workload at the key's smallest launch, against the float64 oracle)."""
    from nbx.autotune import keys, neighbours, screen
    from nbx.kernels import launch

    def screened(tunable, device, **inputs):
        facts = launch.facts(device)
        key = keys.form(tunable.name, tunable.key_fields, facts, **inputs)
        screener = neighbours.Screener(tunable, key, facts, device)   # nothing kept: screened here
        verdict = screener.verdict(tunable.default(facts))
        return verdict, screen.tolerance(facts, screener.work.out_dtype)
    return screened

"""The device fixture of the model tests: cpu, interp (Triton's interpreter) and cuda (marked gpu)."""
from __future__ import annotations

import os

import pytest

import nbx.core as nbx


@pytest.fixture(params=["cpu", "interp", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "interp":
        from nbx.core.device import backends, plugin_errors
        if "interp" not in backends():
            reason = plugin_errors().get("interp", "the interp device is not registered")
            if os.environ.get("TRITON_INTERPRET") == "1":
                pytest.fail(f"the interp device failed to register: {reason}")
            pytest.skip(f"interp unavailable (a GPU run: TRITON_INTERPRET is not 1): {reason}")
    return nbx.as_device(request.param)

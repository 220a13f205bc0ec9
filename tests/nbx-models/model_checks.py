"""Model tests run on the CPU, on `interp` (Triton's interpreter: tiny configs) and on the GPU
(marked gpu, bfloat16). Outputs are compared with float64 references at the device file's
tolerance for the model's dtype; the CPU, whose references compute half types in float32 as the
kernels do, is held to the interp device file's figures. Every op a model calls has its kernel on
interp and cuda: a missing one fails the case."""
from __future__ import annotations

import numpy as np

import nbx.core as nbx
from nbx.core.reference import deviation

INTERP_TARGET = "interp"   # devices/triton/interp.yml


def model_dtype(device) -> nbx.DType:
    return nbx.bfloat16 if device.type == "cuda" else nbx.float32


def tolerance(dtype, device) -> float:
    from nbx.core import device_files
    from nbx.kernels import launch
    if device.type == "cpu":   # the interp file's figures, read by target (a GPU run registers no interp device)
        return device_files.for_arch(INTERP_TARGET).value("autotune.screen_tolerance")[nbx.as_dtype(dtype).name]
    return launch.screen_tolerance(nbx.as_dtype(dtype), device)


def assert_close(got, expected, dtype, device, what="output"):
    dev = deviation(np.asarray(got), np.asarray(expected))
    tol = tolerance(dtype, device)
    assert dev <= tol, f"{what}: deviation {dev:.3g} from the float64 reference exceeds {dtype.name}'s {tol:.3g}"


def assert_greedy_matches(tokens, reference_logits, prompt_len, dtype, device):
    """Each generated token is the reference's argmax after the tokens before it, except at a
    near-tie (the reference's top two within the dtype's tolerance of its largest logit)."""
    tol = tolerance(dtype, device) * np.max(np.abs(reference_logits))
    for step, token in enumerate(tokens):
        row = reference_logits[prompt_len - 1 + step]
        best = int(np.argmax(row))
        if token != best:
            assert row[best] - row[token] <= 2 * tol, (
                f"step {step}: generated {token}, the reference's argmax is {best} by {row[best] - row[token]:.3g}")

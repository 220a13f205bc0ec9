"""Issue 18's odd size 4097 (M, N or K; K not a multiple of the tile) through the fused kernel
(linear with its epilogue) and the tiled one (matmul), and einsum's contractions of three operands,
diagonals and size-1 broadcasts on the kernel devices, against the float64 oracle at the device
file's tolerance. On interp the launches are given wide tiles (few programs, few K steps: the
interpreter's time is per step); on the GPU the served settings take the same shapes."""
from __future__ import annotations

import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import launch
from nbx.kernels.matmul import epilogue, launch_matmul

rng = np.random.default_rng(4097)
WIDE = {"kernel": "tiles", "block_m": 16, "block_n": 32, "block_k": 512, "split_k": 1, "group_m": 1, "num_warps": 4,
        "num_stages": 1, "programs": 1, "warp_specialize": 0}
# one wide tile per shape: the dim of 4097 spans a few tiles and ends in a partial one
LINEAR_CASES = {"k": ((2, 7, 4097), {}), "n": ((1, 4097, 33), {"block_n": 1024, "block_k": 64}),
                "m": ((4097, 3, 5), {"block_m": 1024, "block_n": 16, "block_k": 16})}
MATMUL_CASES = {"k": ((3, 5, 4097), {"block_m": 16, "block_n": 16, "block_k": 512}),
                "m": ((4097, 3, 5), {"block_m": 1024, "block_n": 16, "block_k": 16})}


def on(device, shape, dtype="float32"):
    return nbx.asarray(rng.standard_normal(shape).astype(nbx.as_dtype(dtype).host), device=device)


def _setting(device, extra):
    """interp: the wide tile; the GPU: None, the served setting of the key."""
    return {**WIDE, **extra} if device.type == "interp" else None


@pytest.mark.parametrize("dim", sorted(LINEAR_CASES))
def test_linear_with_a_bias_activation_and_residual_at_a_dim_of_4097_matches_the_unfused_oracle(device, check, dim):
    (m, n, k), extra = LINEAR_CASES[dim]
    x, w, b, r = on(device, (m, k), "bfloat16"), on(device, (n, k), "bfloat16"), on(device, (n,)), \
        on(device, (m, n), "bfloat16")
    out = epilogue.launch_linear(x, w, b, "silu", r, 0.5, 2.0, dtype=nbx.bfloat16, setting=_setting(device, extra))
    assert out.shape == (m, n) and out.dtype is nbx.bfloat16
    check(out, nbx.oracle("linear", x, w, b, "silu", r, 0.5, 2.0), device)


@pytest.mark.parametrize("dim", sorted(MATMUL_CASES))
def test_the_tiled_matmul_at_a_dim_of_4097_matches_the_oracle(device, check, dim):
    (m, n, k), extra = MATMUL_CASES[dim]
    x1, x2 = on(device, (m, k), "float16"), on(device, (k, n), "float16")
    if device.type != "interp":
        check(nbx.matmul(x1, x2), nbx.oracle("matmul", x1, x2), device)
        return
    out = launch.output((m, n), x1.dtype, device)
    launch_matmul(x1, x2, out=out, setting={**{k_: WIDE[k_] for k_ in ("group_m", "num_warps", "num_stages")},
                                            **extra})
    check(out, nbx.oracle("matmul", x1, x2), device)


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("bii->bi", [(2, 3, 3)]), ("iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 8), (2, 2, 5, 8)]), ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
])
def test_einsum_of_three_operands_diagonals_and_size_one_broadcasts_matches_the_oracle(device, check, subscripts,
                                                                                        shapes):
    operands = [on(device, s) for s in shapes]
    check(nbx.einsum(subscripts, operands), nbx.oracle("einsum", subscripts, *operands), device)

"""Each kernel's declared cost (nbx.kernels.price) allocates exactly what the caching pool measures.

The pool counts the bytes every allocation asked for (before its rounding); the peak of that count
over one call, less what was live before it, is the call's allocation: outputs, workspace and
scratch together. price() must declare the same number without launching anything.
"""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.device import get_backend
from nbx.core import random as nbx_random
from nbx.kernels.cost import price
from nbx.memory.allocator import get_allocator

pytestmark = pytest.mark.gpu

rng = np.random.default_rng(11)


def cuda(shape, dtype="float32"):
    return nbx.asarray(rng.standard_normal(shape).astype(np.float32), dtype=dtype).to("cuda")


def measured(call):
    """Bytes requested from the pool at the peak of call(), beyond what was live before it."""
    from nbx.devices import nvidia
    device = nbx.as_device("cuda:0")
    get_backend("cuda").start()   # the allocator is registered when the backend starts (a worker's first test may be this)
    pool = get_allocator("cuda")
    nvidia.synchronize(0)
    before = pool.pool_stats(device).requested
    pool.reset_peak(device)
    result = call()
    nvidia.synchronize(0)
    return pool.pool_stats(device).requested_peak - before, result


def cases():
    x, row, w, b = cuda((512, 4096)), cuda((4096,)), cuda((4096,)), cuda((4096,))
    half = cuda((512, 4096), "bfloat16")
    long_rows = cuda((4, 262144))  # few long rows: the split (partials) paths
    transposed = cuda((4096, 512)).T
    return [
        ("add, broadcast", "add", (x, row), {}),
        ("exp of bf16", "exp", (half,), {}),
        ("cast to bf16", "astype", (x, nbx.bfloat16), {}),
        ("sum of rows", "sum", (x,), {"dim": 1}),
        ("sum of few long rows", "sum", (long_rows,), {"dim": 1}),
        ("sum of a transposed view", "sum", (transposed,), {"dim": 0}),
        ("full sum", "sum", (x,), {}),
        ("argmax of long rows", "argmax", (long_rows,), {"dim": 1}),
        ("softmax", "softmax", (x,), {"dim": -1}),
        ("softmax of few long rows", "softmax", (long_rows,), {"dim": -1}),
        ("layer norm", "layer_norm", (x, (4096,), w, b), {}),
        ("fused add + RMS norm", "add_rms_norm", (x, x, w), {}),
        ("top-k of short rows (one program a row)", "topk", (cuda((64, 1000)), 50), {}),
        ("top-k of vocabulary rows (the radix select)", "topk", (cuda((64, 151936)), 50), {}),
        *moe_cases(),
    ]


def moe_cases():
    """A prefill and a band MoE layer (32 experts, top-4, 512 -> 256 -> 512), from its tables and from
    its logits (moe_routed_experts: the routing's tables are the plan's workspace)."""
    found = []
    for tokens in (512, 2):
        ids = nbx.asarray((np.arange(tokens * 4) * 7 % 32).reshape(tokens, 4).astype(np.int32)).to("cuda")
        layer = (cuda((tokens, 512), "bfloat16"), cuda((tokens, 4)), ids, cuda((32, 256, 512), "bfloat16"),
                 cuda((32, 256, 512), "bfloat16"), cuda((32, 512, 256), "bfloat16"))
        found.append((f"moe experts, {tokens} tokens", "moe_experts", layer, {}))
        found.append((f"moe routed experts, {tokens} tokens", "moe_routed_experts",
                      (layer[0], cuda((tokens, 32)), *layer[3:], 4), {}))
    return found


FRONT_ENDS = {"astype": lambda x, dtype: nbx.astype(x, dtype)}


@pytest.mark.parametrize("index", range(18))
def test_the_declared_allocation_equals_the_pools_measured_peak(index):
    label, op, args, kwargs = cases()[index]
    front_end = FRONT_ENDS.get(op) or getattr(nbx, op)
    declared = price(op, *args, **kwargs)
    peak, _ = measured(lambda: front_end(*args, **kwargs))
    assert declared.allocated == peak, f"{label}: declared {declared.allocated} bytes, the pool saw {peak}"


@pytest.mark.parametrize("op", ["rand", "randn"])
def test_random_draws_declare_what_they_allocate(op):
    declared = price(f"random.{op}", 1024, 4096)
    peak, _ = measured(lambda: getattr(nbx_random, op)(1024, 4096, device="cuda"))
    assert declared.allocated == peak


def descriptor_cases():
    """Launches whose programs make tensor descriptors (their global scratch asked of nbx's allocator at each
    launch): a certified tma linear, a dense tma prefill, a channels-last conv reading its weight through one.
    (label, op, the priced arguments, the call)."""
    x, w = cuda((2048, 4096), "bfloat16"), cuda((14336, 4096), "bfloat16")
    q, k, v = (cuda((1, 32, 1024, 128), "bfloat16") for _ in range(3))
    image = cuda((2, 64, 64, 256), "bfloat16").permute(0, 3, 1, 2)
    weight = cuda((256, 3, 3, 256), "bfloat16").permute(0, 3, 1, 2)
    return [("linear through the tma kernel", "linear", (x, w), lambda: nbx.linear(x, w)),
            ("prefill through descriptors", "scaled_dot_product_attention", (q, k, v),
             lambda: nbx.scaled_dot_product_attention(q, k, v)),
            # conv's cost is priced from its implementation's arguments (stride, pads a dim, dilation, groups)
            ("channels-last conv2d, weight through a descriptor", "conv2d",
             (image, weight, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1), lambda: nbx.conv2d(image, weight, None, 1, 1))]


@pytest.mark.parametrize("index", range(3))
def test_descriptor_kernels_declare_the_scratch_the_pool_measures(index):
    label, op, priced, call = descriptor_cases()[index]
    declared = price(op, *priced)
    assert "descriptor_scratch" in [b.name for b in declared.buffers], f"{label}: no descriptors served"
    call()   # a neighbour's screen (its own buffers) is the first call's only
    peak, _ = measured(call)
    assert declared.allocated == peak, f"{label}: declared {declared.allocated} bytes, the pool saw {peak}"

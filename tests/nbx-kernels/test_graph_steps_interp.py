"""nbx.graph over nbx's Triton kernels on `interp` (eager: the interpreter captures nothing): replays
byte-equal to eager runs of the same function, shape buckets of lengths read by the kernels from a
device tensor, and a step's memory priced by the kernels' declarations and planned by the slab
planner. The same tests run on the H200 as tests/gpu/test_graph_steps.py, where steps are graphs."""
from __future__ import annotations

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core import device_files
from nbx.core.graph import Length, length_bucket

HIDDEN = 64


def on(device, array, dtype=None):
    t = nbx.from_numpy(np.ascontiguousarray(array)).to(device)
    return t if dtype is None else nbx.astype(t, dtype)


def decode_chain(x, r, w):
    return nbx.silu(nbx.rms_norm(x + r, (HIDDEN,), w)) * x


def chain_inputs(device, seed):
    rng = np.random.default_rng(seed)
    return [on(device, rng.standard_normal(shape).astype(np.float32), "bfloat16")
            for shape in ((1, HIDDEN), (1, HIDDEN), (HIDDEN,))]


def test_the_decode_chain_step_is_byte_equal_to_eager_calls_and_to_the_oracle(device, check):
    x, r, w = chain_inputs(device, 0)
    step = nbx.graph.capture(decode_chain, x, r, w)
    for seed in (1, 2):
        x_new, r_new, _ = chain_inputs(device, seed)
        out = step(x_new, r_new, w)
        assert out.numpy().tobytes() == decode_chain(x_new, r_new, w).numpy().tobytes()
    f64 = [t.numpy().astype(np.float64) for t in (x_new, r_new, w)]
    h = f64[0] + f64[1]
    eps = float(nbx.finfo(nbx.bfloat16).eps)  # rms_norm's eps=None: the machine epsilon of x's dtype
    n = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps) * f64[2]
    check(out, n / (1 + np.exp(-n)) * f64[0], device)
    step.close()


def masked_prefix_sum(cache, length):
    """sum of cache[:n] over its rows, n the true length: the kernels read n from length.tensor."""
    return nbx.sum(nbx.where(length.mask()[:, None], cache[:length.bucket], 0.0), dim=0)


def test_lengths_of_one_bucket_share_a_capture_and_the_kernels_mask_past_the_true_length(device, check):
    cache = on(device, np.random.default_rng(3).standard_normal((160, 8)).astype(np.float32))
    step = nbx.graph.capture(masked_prefix_sum, cache, length=3, max_length=160)
    ladder = device_files.in_force(device).value("graphs.length_buckets")
    expected_buckets = []
    for n in (3, 16, 17, 65, 130, 160):
        bucket = length_bucket(n, device, 160)
        assert bucket == min(device_files.bucket(ladder, n), 160)
        if bucket not in expected_buckets:
            expected_buckets.append(bucket)
        out = step(cache, length=n)
        eager = Length(bucket, device)
        eager.set(n)
        assert out.numpy().tobytes() == masked_prefix_sum(cache, eager).numpy().tobytes()
        check(out, cache.numpy()[:n].astype(np.float64).sum(0), device)
    assert [key[1] for key in step.keys] == expected_buckets[-8:] and step.captures_made == len(expected_buckets)
    step.close()


def test_a_steps_memory_is_its_kernels_declared_buffers_planned_by_lifetime(device):
    from nbx.kernels import plans
    x, r, w = chain_inputs(device, 4)
    plans.reset()  # the step's plans are built while it is recorded: building one allocates nothing
    step = nbx.graph.capture(decode_chain, x, r, w)
    memory = step.memory
    assert memory.calls == ("add", "rms_norm", "silu", "multiply") and memory.unpriced == ()
    assert memory.declared.launches == 4
    assert memory.declared.allocated == memory.requested == 4 * HIDDEN * 2  # four bf16 rows, as declared
    # x + r dies once rms_norm has read it, and so on: two rows live at a time, each in 512 bytes
    assert memory.live_peak == 2 * 512 and memory.plan.extent == 2 * 512
    if step.captured:
        assert memory.reserved >= memory.live_peak
    step.close()


@pytest.mark.parametrize("n", [1, 64, 65])
def test_the_interp_ladder_puts_lengths_in_buckets_of_16_then_64(n):
    assert length_bucket(n, nbx.as_device("interp")) == {1: 16, 64: 64, 65: 128}[n]


def test_a_generation_appends_to_its_cache_and_replays_one_capture_per_bucket(device, check):
    """A toy decode loop: each step writes its token's row at position length - 1 of a preallocated
    cache (a masked write: the position is read from the device tensor, not from Python) and returns
    the mean of the rows so far. The whole generation replays one capture per bucket."""
    capacity, width = 18, 4  # two buckets on interp (16, then 18: the capacity)
    cache = on(device, np.zeros((capacity, width), np.float32))

    def decode(token, length):
        rows = cache[:length.bucket]
        here = nbx.equal(length.positions, length.tensor - 1)[:, None]
        rows[...] = nbx.where(here, token, rows)
        total = nbx.sum(nbx.where(length.mask()[:, None], rows, 0.0), dim=0)
        return total / nbx.astype(length.tensor, "float32")

    tokens = np.random.default_rng(5).standard_normal((capacity, width)).astype(np.float32)
    step = nbx.graph.capture(decode, on(device, tokens[:1]), length=1, max_length=capacity)
    cache[...] = on(device, np.zeros((capacity, width), np.float32))  # the capture's own run wrote row 0
    for n in range(1, capacity + 1):
        out = step(on(device, tokens[n - 1:n]), length=n)
        check(out, tokens[:n].astype(np.float64).mean(0), device)
    assert cache.numpy().tobytes() == tokens.tobytes()
    assert step.captures_made == len({length_bucket(n, device, capacity) for n in range(1, capacity + 1)})

"""nbx.graph on cpu, which captures nothing: a step runs its function eagerly on its static inputs and
copies the results into the outputs of its first run, so the code written for a GPU's graphs runs
here with the same results, the same keys and the same overwriting."""
from __future__ import annotations

import gc
import weakref

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.errors import ArgumentError, DataDependentShapeError, GraphCaptureError


def rand(*shape, seed=0, dtype=np.float32):
    return nbx.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def decode_chain(x, r, w):
    return nbx.silu(nbx.rms_norm(x + r, (x.shape[-1],), w)) * x


def test_every_call_on_cpu_is_byte_equal_to_calling_the_function_on_the_same_inputs():
    x, r, w = rand(1, 32), rand(1, 32, seed=1), rand(32, seed=2)
    step = nbx.graph.capture(decode_chain, x, r, w)
    assert not step.captured and "eager" in repr(step)
    assert step.outputs.numpy().tobytes() == decode_chain(x, r, w).numpy().tobytes()
    for seed in range(3, 6):
        x_new, r_new = rand(1, 32, seed=seed), rand(1, 32, seed=seed + 10)
        out = step(x_new, r_new, w)
        assert out.numpy().tobytes() == decode_chain(x_new, r_new, w).numpy().tobytes()


def test_the_outputs_are_the_same_tensors_overwritten_by_every_call():
    x, r, w = rand(1, 32), rand(1, 32, seed=1), rand(32, seed=2)
    step = nbx.graph.capture(lambda x, r, w: (x + r, {"gated": decode_chain(x, r, w)}.get("gated")), x, r, w)
    first_sum, first_chain = step.outputs
    kept = first_sum.numpy().copy()
    again = step(rand(1, 32, seed=7), r, w)
    assert again[0] is first_sum and again[1] is first_chain
    assert first_sum.numpy().tobytes() != kept.tobytes()  # overwritten: copy an output to keep it


def test_inputs_written_into_the_static_tensors_are_read_by_replay():
    x = rand(4, 8)
    step = nbx.graph.capture(lambda x: nbx.exp(x), x)
    assert step.inputs == (x,)
    x[...] = rand(4, 8, seed=3)
    assert step.replay().numpy().tobytes() == nbx.exp(rand(4, 8, seed=3)).numpy().tobytes()


def test_a_new_shape_or_dtype_is_a_new_key_and_at_most_max_captures_keys_are_kept():
    step = nbx.graph.capture(lambda x: x * 2, rand(2, 3), max_captures=2)
    step(rand(4, 3))
    step(rand(2, 3))  # the first key again: now the most recent
    assert step.captures_made == 2
    out = step(rand(2, 3, dtype=np.float64))  # a third key: the least recently used, (4, 3), is closed
    assert out.dtype == nbx.float64 and step.captures_made == 3
    assert step.keys == [((((2, 3), "float32"),), None), ((((2, 3), "float64"),), None)]
    step(rand(4, 3))
    assert step.captures_made == 4
    assert step.reserved == 0   # eager keys hold no private pool


def test_an_output_whose_shape_depends_on_the_data_is_refused_by_name():
    step = nbx.graph.capture(nbx.argwhere, nbx.asarray(np.array([1.0, 0.0, 2.0], np.float32)))
    with pytest.raises(DataDependentShapeError, match=r"changed from int64\[2, 1\] at capture to int64\[3, 1\]"):
        step(nbx.asarray(np.array([1.0, 3.0, -2.0], np.float32)))
    assert issubclass(DataDependentShapeError, GraphCaptureError)


def test_a_host_read_in_the_steps_own_code_is_refused_on_cpu_as_where_steps_are_graphs():
    x = rand(3)
    reads = {"numpy()": lambda x: nbx.asarray(x.numpy() + 1), "item()": lambda x: x * x[0].item(),
             "print": lambda x: print(x) or x, "bool()": lambda x: x if bool(x[0] > 0) else -x}
    for name, fn in reads.items():
        with pytest.raises(GraphCaptureError, match=r"numpy\(\) of a cpu tensor inside a captured step: where steps "
                                                    r"are graphs it is a host synchronization") as info:
            nbx.graph.capture(fn, x)
        assert info.value.operation == "numpy()", name
    assert nbx.graph.capture(lambda x: nbx.sum(x * x), x)(x).numpy() > 0  # ops read host memory inside: allowed


def test_on_cpu_every_length_is_its_own_bucket_and_the_mask_marks_the_positions_before_it():
    cache = rand(16, 4)

    def prefix_sum(cache, length):
        return nbx.sum(nbx.where(length.mask()[:, None], cache[:length.bucket], 0.0), dim=0)

    step = nbx.graph.capture(prefix_sum, cache, length=3)
    assert step.length.bucket == 3 and step.length.tensor.numpy().tolist() == [3]
    for n in (3, 7, 16):
        assert step(cache, length=n).numpy().tobytes() == nbx.sum(cache[:n], dim=0).numpy().tobytes()
    assert step.captures_made == 3


def test_calls_the_step_cannot_serve_are_refused_by_name():
    x = rand(2, 2)
    step = nbx.graph.capture(lambda x: x + 1, x)
    with pytest.raises(ArgumentError, match="captured with 1 inputs, called with 2"):
        step(x, x)
    with pytest.raises(ArgumentError, match="inputs are tensors"):
        nbx.graph.capture(lambda x: x, 3.0)
    with pytest.raises(ArgumentError, match="one without, without"):
        step(x, length=4)
    with pytest.raises(ArgumentError, match="a positive int"):
        nbx.graph.capture(lambda x, n: x, x, length=0)
    with pytest.raises(ArgumentError, match="max_captures is a count"):
        nbx.graph.capture(lambda x: x, x, max_captures=0)
    with pytest.raises(ArgumentError, match="warmup is a count >= 1"):
        nbx.graph.capture(lambda x: x, x, warmup=0)
    with pytest.raises(ArgumentError, match="replay\\(length=\\) of a step captured without length="):
        step.replay(length=3)
    with pytest.raises(ArgumentError, match="bounds the buckets of a step captured with length="):
        nbx.graph.capture(lambda x: x, x, max_length=4)
    bounded = nbx.graph.capture(lambda x, n: x + 0, x, length=2, max_length=4)
    with pytest.raises(ArgumentError, match="one without, without"):
        bounded(*bounded.inputs)
    with pytest.raises(ArgumentError, match="length 5 is beyond the step's max_length 4"):
        bounded(x, length=5)
    with pytest.raises(ArgumentError, match="returns a tensor, or a tuple"):
        nbx.graph.capture(lambda x: 3, x)
    with pytest.raises(ArgumentError, match="no input and no device"):
        nbx.graph.capture(lambda: nbx.zeros(2))
    assert nbx.graph.capture(lambda: nbx.zeros(2), device="cpu")().numpy().tolist() == [0, 0]
    step.close()
    with pytest.raises(ArgumentError, match="call of a closed step"):
        step(x)


def test_closing_a_step_lets_its_static_inputs_and_outputs_go():
    step = nbx.graph.capture(lambda x: x * 3, rand(2, 3))
    step(rand(5, 3))  # a second key: static inputs the step made
    statics = weakref.ref(step.inputs[0].storage)
    step.close()
    del step
    gc.collect()
    assert statics() is None


def test_attention_over_a_bucket_masked_by_the_length_equals_attention_over_the_true_length():
    """The decode attention of a bucketed step: keys and values sliced to the bucket, the positions
    past the true length masked by length.mask() (read from the device tensor, not from Python)."""
    q, k, v = rand(1, 2, 1, 8), rand(1, 2, 16, 8, seed=1), rand(1, 2, 16, 8, seed=2)
    length = nbx.graph.Length(16, q.device)
    for n in (1, 5, 16):
        length.set(n)
        masked = nbx.scaled_dot_product_attention(q, k[:, :, :length.bucket], v[:, :, :length.bucket],
                                                  attn_mask=length.mask())
        exact = nbx.scaled_dot_product_attention(q, k[:, :, :n], v[:, :, :n])
        np.testing.assert_allclose(masked.numpy(), exact.numpy(), rtol=1e-6, atol=1e-6)

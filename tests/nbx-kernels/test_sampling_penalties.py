"""The decoding step's penalties (repetition, frequency, presence) on the kernels' devices: the same
logits as the CPU's reference (sample() applies them, then draws as without them: the draw's
agreement across devices is test_sampling_split's)."""
import numpy as np

import nbx.core as nbx

rng = np.random.default_rng(23)


def test_penalised_logits_are_the_cpus_on_the_device_and_steer_greedy_decoding(device, check):
    logits = (rng.standard_normal((3, 67)) * 3).astype(np.float32)
    previous = np.array([[4, 4, 9, -1], [0, 66, -1, -1], [-1, -1, -1, -1]])  # repeats, the last id, padding
    x, prev = nbx.asarray(logits), nbx.asarray(previous)
    expected = nbx.apply_penalties(x, prev, 1.3, 0.5, 0.25).numpy().astype(np.float64)
    check(nbx.apply_penalties(x.to(device), prev.to(device), 1.3, 0.5, 0.25), expected, device)
    greedy = nbx.sample(x.to(device), temperature=0, previous=prev.to(device), repetition_penalty=1.3,
                        frequency_penalty=0.5, presence_penalty=0.25)
    np.testing.assert_array_equal(greedy.numpy(), expected.argmax(axis=1))

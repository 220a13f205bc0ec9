"""The plans runtime's direct path: the key it reuses a compiled kernel by is what Triton specialises
on, so a launch that Triton would compile apart never runs another launch's kernel
(tests/nbx-kernels/test_launch_plans.py checks the key itself)."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.kernels import plans

rng = np.random.default_rng(11)


def test_ints_are_keyed_by_width_and_by_being_one_or_a_multiple_of_sixteen():
    keys = {n: plans.int_class(n) for n in (1, 2, 3, 16, 32, 2 ** 31, -5)}
    assert keys[2] == keys[3] and keys[16] == keys[32]
    assert len({keys[1], keys[2], keys[16], keys[2 ** 31]}) == 4
    assert plans.int_class(2 ** 31, free=True) == 1 and plans.int_class(-5, free=True) == 0
    assert plans.int_class(2 ** 63, free=True) == 2   # int32, int64, uint64: all a do_not_specialize int keeps


@pytest.mark.gpu
def test_on_a_gpu_each_family_reuses_its_compiled_kernels_and_stays_correct():
    device = nbx.as_device("cuda")
    host = rng.standard_normal((64, 1000)).astype(np.float32)
    x = nbx.asarray(host).to(device)
    reference = np.exp(host - host.max(1, keepdims=True))
    reference /= reference.sum(1, keepdims=True)
    first = nbx.softmax(x, dim=-1).numpy()
    count = plans.compiled_count()
    for _ in range(3):
        again = nbx.softmax(x, dim=-1).numpy()
        np.testing.assert_array_equal(again, first)
    assert plans.compiled_count() == count
    np.testing.assert_allclose(first, reference, rtol=1e-5, atol=1e-7)
    shifted = nbx.asarray(host.ravel()).to(device)[1:1 + 63 * 1000].reshape(63, 1000)  # 4 bytes off
    np.testing.assert_allclose(nbx.softmax(shifted, dim=-1).numpy(), reference_of(host.ravel()[1:63001]),
                               rtol=1e-5, atol=1e-7)
    assert plans.compiled_count() >= count + 1
    total = nbx.sum(x, dim=1).numpy()
    np.testing.assert_allclose(nbx.sum(x, dim=1).numpy(), total, rtol=0, atol=0)
    np.testing.assert_allclose(total, host.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def reference_of(flat):
    rows = flat.reshape(63, 1000).astype(np.float64)
    e = np.exp(rows - rows.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.fixture(scope="module")
def host_sim_output():
    """tools/bench/host_sim.py's table and its host work a repeat (--count), run once for this module."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0",
               PYTHONPATH=os.pathsep.join(str(p) for p in sorted((root / "packages").glob("*/src"))))
    done = subprocess.run([sys.executable, str(root / "tools" / "bench" / "host_sim.py"), "--calls", "20", "--count",
                           "--tiled-chain"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


CHAIN = "chain silu(rms_norm(x + r, w)) * x"
TILED, BAND = "tiled_conv_chain 2 x k3 (1,128,256^2) bands of 32", "conv2d k3 (1,128,34,256) bf16 cl (a band)"
OPS = {"empty((4096,))", "a + b", "a * 2.0", "exp(a)", "softmax", "rms_norm", "sum", "x @ W.T", "embedding (1 id)",
       CHAIN, TILED, BAND}


def test_the_cuda_host_path_runs_end_to_end_on_the_simulated_cuda_of_tools_host_sim(host_sim_output):
    lines = [line for line in host_sim_output if not line.startswith("#")]
    times = {line.rsplit(None, 1)[0]: float(line.rsplit(None, 1)[1]) for line in lines[1:]}
    assert set(times) == OPS
    assert all(0 < t < 10_000 for t in times.values()), times
    kept_line = next(line for line in host_sim_output if line.startswith("# compiled kernels"))
    kept = int(kept_line.split(": ")[1].split()[0])
    # one kernel per op's launch (the chain's four; the tiled chain's: its layers' band geometries, its
    # first band's copy, its set-up's casts), whatever the number of calls
    assert 20 <= kept <= 26, kept_line


# Python calls a repeat of each op may make on the cuda path (host_sim --count: nbx's own, Triton's
# launcher object not counted): the front-end's lookup, the pool's allocation and free, the launch.
# Counted, not timed, so that a slower host path fails here on any machine however loaded. Before the
# pool's and the bound launch's fast paths (2026-12-01): empty 45, a + b 43, softmax 41, x @ W.T 79,
# embedding 75; after: 27, 27, 27, 41, 57. bench_conv's tiled_chain at 256^2 (16 band convolutions): 4487
# before each layer's convolution was checked once a call and bands stored into the output (issue 21); 1066 after.
# After the pool's one-frame allocation and free, the backend's kept route and empty()'s checked device
# (seventh session): empty 14, a + b 18, softmax 18, x @ W.T 32, embedding 49, the chain 112.
# After the second round (a repeat's generated function, no Call where the prepared path takes slots;
# the held block before a free left neighbour): empty 14, a + b 18, softmax 18, rms_norm 18, x @ W.T 33,
# embedding 49, the chain 112, the tiled chain 996, a band 108 (bytecodes a repeat: docs/performance.md).
# After the pool's runs and held blocks of same-size frees (third round): the chain 70, the tiled chain 939.
# Since the ninth session host_sim runs the stream lookup as on the GPU host and counts nbx's calls alone (not
# Triton's launcher object's, which it times): main then counted empty 14, a + b 19, softmax 19, x @ W.T 34,
# embedding 50, the chain 74, the tiled chain 953, a band 109. After a signature's repeat written with its
# plan's work (no values dict; nbx.kernels.plans._write_repeat), the spec's call as the operator itself, the
# pool's hand-out inline and the backend's launch stream: 10, 8, 8, 25, 44, 31, 882, 103.
CALL_BUDGET = {"empty((4096,))": 10, "a + b": 8, "a * 2.0": 8, "exp(a)": 9, "softmax": 8, "rms_norm": 8,
               "sum": 8, "x @ W.T": 25, "embedding (1 id)": 44, CHAIN: 31, TILED: 885, BAND: 104}


def test_a_repeat_of_each_op_on_the_cuda_path_stays_within_its_budget_of_python_calls(host_sim_output):
    counted = {line[2:].rsplit(None, 2)[0].strip(): float(line.rsplit(None, 2)[1])
               for line in host_sim_output[host_sim_output.index(next(l for l in host_sim_output
                                                                      if l.startswith("# op: host work"))) + 1:]}
    assert set(counted) == OPS == set(CALL_BUDGET)
    over = {op: (calls, CALL_BUDGET[op]) for op, calls in counted.items() if calls > CALL_BUDGET[op]}
    assert not over, f"more Python calls a repeat than the budget (calls, budget): {over}"

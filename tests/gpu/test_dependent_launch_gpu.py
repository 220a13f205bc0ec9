"""On the H200: kernels launched dependent (programmatic dependent launch, nbx.kernels.dependent_launch)
read what their predecessors wrote, eager and replayed in a CUDA graph: the results are byte-equal
to the same kernels launched plainly, and a long chain of dependent launches into buffers the pool
hands on keeps every step's result."""
from __future__ import annotations

import nbx.core as nbx
import numpy as np
import pytest
from nbx.core.device import as_device
from nbx.kernels import dependent_launch, plans

pytestmark = pytest.mark.gpu
triton = pytest.importorskip("triton", reason="the launches are Triton kernels (triton is on the GPU machine)")

HIDDEN = 4096


def upload(array, dtype="bfloat16"):
    return nbx.astype(nbx.from_numpy(np.ascontiguousarray(array)).to("cuda"), dtype)


def layer(x, r, w, wg, wu, wd):
    """A decode layer's MLP half: the norm's residual add, the gated product, the down product with residual."""
    h, res = nbx.rms_norm(x + r, (HIDDEN,), w, 1e-6), x + r
    gated = nbx.silu(h @ wg.mT) * (h @ wu.mT)
    return gated @ wd.mT + res


@pytest.fixture
def operands():
    rng = np.random.default_rng(0)
    x, r = upload(rng.standard_normal((1, HIDDEN))), upload(rng.standard_normal((1, HIDDEN)))
    w = upload(1 + 0.1 * rng.standard_normal(HIDDEN))
    wg, wu = (upload(rng.standard_normal((1024, HIDDEN)) / 64) for _ in range(2))
    wd = upload(rng.standard_normal((HIDDEN, 1024)) / 32)
    return x, r, w, wg, wu, wd


def plain_and_dependent(monkeypatch, run):
    """run() with every launch plain, then with dependent launches (plans rebuilt for each)."""
    monkeypatch.setattr(dependent_launch, "allowed", lambda device: False)
    plans.reset()
    plain = run()
    monkeypatch.undo()
    plans.reset()
    return plain, run()


def test_this_gpu_launches_dependent():
    assert dependent_launch.allowed(as_device("cuda"))


def test_dependent_launches_give_the_plain_launches_bytes_eager_and_captured(monkeypatch, operands):
    def run():
        eager = layer(*operands).numpy().tobytes()
        step = nbx.graph.capture(layer, *operands)
        replayed = step(*operands).numpy().tobytes()
        step.close()
        return eager, replayed

    (plain_eager, plain_replayed), (eager, replayed) = plain_and_dependent(monkeypatch, run)
    assert eager == plain_eager and replayed == plain_replayed == plain_eager


def test_a_long_chain_of_dependent_launches_keeps_every_steps_result():
    """Each add reads the buffer its predecessor wrote a moment before; the pool hands the buffer two steps
    back to the next output, so a kernel that wrote before its wait would overwrite a predecessor's input."""
    x = upload(np.zeros(1 << 22, np.float32), "float32")
    for _ in range(300):
        x = x + 1.0
    assert float(x.numpy().min()) == float(x.numpy().max()) == 300.0

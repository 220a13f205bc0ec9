"""On a real GPU: a fresh process where `import torch` raises allocates, copies, launches a Triton
kernel through nbx's driver, and exchanges with CuPy; torch never enters sys.modules."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import sys

class BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"import of {name!r} blocked", name=name)
        return None

sys.meta_path.insert(0, BlockTorch())
try:
    import torch  # noqa: F401
    raise SystemExit("the blocker did not block torch")
except ModuleNotFoundError:
    pass

import numpy as np
import nbx.core as nbx
from nbx.devices.nvidia import selftest, triton_driver

x = nbx.from_numpy(np.arange(4096, dtype=np.float32), "cuda")
y = nbx.ones(4096, device="cuda")
out = selftest.add(x, y)
assert out.numpy().tolist() == [float(i + 1) for i in range(4096)], "wrong sum"
assert type(triton_driver.installed()).__name__ == "NbxCudaDriver"
report = selftest.run_selftest(0)
assert report["ok"], report
try:
    import cupy
except ImportError:
    cupy = None
if cupy is not None:
    assert int(cupy.from_dlpack(out).sum()) == sum(range(1, 4097))
assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
print("TORCH-FREE OK", report["triton"])
'''


def test_a_torch_blocked_process_computes_with_triton_through_nbx():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in sorted(ROOT.glob("packages/*/src"))]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TORCH-FREE OK" in done.stdout

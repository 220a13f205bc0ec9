"""Makes `import torch` raise: the GPU suites prove nbx runs without torch (which is installed on
the GPU machine as the benchmarks' peer). Put this folder on PYTHONPATH and load it as a pytest
plugin (`-p nbx_block_torch`), so that xdist's workers install it too, or import it first."""
import sys


class BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"import of {name!r} blocked: the nbx GPU suite runs without torch", name=name)
        return None


for _name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
    del sys.modules[_name]
sys.meta_path.insert(0, BlockTorch())

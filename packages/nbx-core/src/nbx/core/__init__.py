"""nbx.core: a torch-free tensor with its dtype table, views, promotion and op front-ends.

    import nbx.core as nbx
    x = nbx.asarray([[1.0, 2.0], [3.0, 4.0]])
    y = nbx.softmax(x, dim=-1)
"""
from . import cpu as _cpu  # registers the CPU backend  # noqa: F401
from . import dtypes
from .device import Device, as_device
from .dtypes import (DType, as_dtype, bfloat16, complex64, complex128, finfo, float8_e4m3fn,
                     float8_e5m2, float16, float32, float64, iinfo, int8, int16, int32, int64,
                     uint8, uint16, uint32, uint64)
from .dtypes import bool_ as bool  # noqa: A001  (the Array API spells it nbx.bool)
from .errors import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403
from .promotion import promote_types, result_type
from .quant import QuantizedTensor
from .quant_float8 import Float8BlockWeight
from .random import Generator, manual_seed, rand, randint, randn
from .reference import oracle
from .safetensors import load_safetensors, save_safetensors
from .tensor import Tensor, from_numpy
from .dlpack import from_dlpack
from . import graph  # nbx.graph.capture: steps captured once and replayed
from .deferred_checks import synchronize  # waits for a device; raises a bounds check left pending there
from . import operators as _operators  # installs Python operators on Tensor  # noqa: F401
from .version import __version__
from importlib import import_module as _import_module
linalg = _import_module(".linalg", __name__)
fft = _import_module(".fft", __name__)  # nbx.fft, as torch.fft  # nbx.linalg (by path: the star import above binds ops.linalg)

__all__ = [n for n in dir() if not n.startswith("_")]

"""nbx.models: reference models written only with nbx ops, read from Hugging Face checkpoints.

    import nbx.models
    model = nbx.models.load("path/to/checkpoint", device="cuda", dtype="bfloat16")
    logits = model.logits([1, 2, 3])                       # decoders: float32 [3, vocab]
    new = model.generate([1, 2, 3], max_new_tokens=16)     # greedy at temperature 0
    vec = model.embed([101, 7592, 102])                    # encoders: as sentence-transformers

The family comes from config.json's `architectures` (KNOWN_ARCHITECTURES); the same model code
runs on every device nbx has (cpu, interp, cuda): its speed is the installed plugins'.
"""
from __future__ import annotations

from pathlib import Path

from nbx.core.errors import ArgumentError, NotSupportedError

from . import decoder, mla
from .checkpoint import Weights
from .config import read_config
from .errors import (CheckpointError, CollectiveFailedError, CommunicatorNotFoundError, RankTimeoutError,
                     TensorParallelError, UnknownArchitectureError)
from .families import KNOWN_ARCHITECTURES, build, check_known
from .version import __version__
from .writer import write_checkpoint


def load(path, device=None, dtype=None, *, tensor_parallel: int = 1, rank: int | None = None, communicator=None,
         timeout: float | None = None):
    """The model in the checkpoint folder path, its weights on device (default cpu), floating weights
    converted to dtype when given (else kept as stored).

    tensor_parallel=N (N > 1, or a communicator given): this process's rank of a decoder split N ways
    (tensor_parallel.py), reading only its shard; communicator: the ranks' (default: the device
    plugin's), rank: checked against it, device: its device; timeout: seconds without progress after
    which the watchdog ends the rank with RankTimeoutError."""
    folder = Path(path)
    config = read_config(folder)
    name = check_known(config)
    if tensor_parallel == 1 and communicator is None:
        return build(config, Weights.open(folder, device=device, dtype=dtype), folder)
    if not isinstance(tensor_parallel, int) or tensor_parallel < 1:
        raise ArgumentError(f"tensor_parallel is a number of ranks >= 1, got {tensor_parallel!r}")
    if name == mla.ARCHITECTURE:
        raise NotSupportedError(f"tensor-parallel loading splits the Llama-style and MoE decoders; {name}'s MLA "
                                "attention is not split")
    if name not in decoder.FAMILIES:
        raise NotSupportedError(f"tensor-parallel loading splits decoders; {name} is not one")
    from .tensor_parallel import load_tensor_parallel
    return load_tensor_parallel(folder, config, decoder.FAMILIES[name], device, dtype, tensor_parallel, rank,
                                communicator, timeout)


__all__ = ["load", "write_checkpoint", "KNOWN_ARCHITECTURES", "UnknownArchitectureError", "CheckpointError",
           "TensorParallelError", "CommunicatorNotFoundError", "CollectiveFailedError", "RankTimeoutError",
           "__version__"]

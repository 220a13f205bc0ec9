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

from .checkpoint import Weights
from .config import read_config
from .errors import CheckpointError, UnknownArchitectureError
from .families import KNOWN_ARCHITECTURES, build, check_known
from .version import __version__
from .writer import write_checkpoint


def load(path, device=None, dtype=None):
    """The model in the checkpoint folder path, its weights on device (default cpu), floating weights
    converted to dtype when given (else kept as stored)."""
    folder = Path(path)
    config = read_config(folder)
    check_known(config)
    return build(config, Weights.open(folder, device=device, dtype=dtype), folder)


__all__ = ["load", "write_checkpoint", "KNOWN_ARCHITECTURES", "UnknownArchitectureError", "CheckpointError",
           "__version__"]

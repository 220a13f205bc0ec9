"""Weights of a Hugging Face checkpoint folder: model.safetensors, or shards listed by
model.safetensors.index.json, opened lazily (a tensor is read, converted and moved when asked for).

    weights = Weights.open(folder, device="cuda", dtype=nbx.bfloat16)
    w = weights.get("model.layers.0.self_attn.q_proj.weight", (1024, 512))

dtype converts floating tensors at load on the host's cores (nbx.load_safetensors does it);
integer tensors (position ids, quantized words) keep their dtype. A projection stored as nbx's
grouped int4 weight (`<prefix>.qweight`, `.scales`, `.zeros`: nbx.core.quant's layout) instead of
`<prefix>.weight` loads as a QuantizedTensor, its scales kept as stored.
"""
from __future__ import annotations

from pathlib import Path

import nbx.core as nbx

from .config import read_json
from .errors import CheckpointError

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def shard_files(folder: Path) -> dict[str, Path]:
    """The file holding each tensor: the index's weight_map (every shard it lists checked to exist),
    else every tensor of model.safetensors."""
    if (folder / INDEX).is_file():
        index = read_json(folder / INDEX)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{folder / INDEX} has no weight_map")
        for shard in sorted(set(weight_map.values())):
            if not (folder / shard).is_file():
                raise CheckpointError(f"{folder / INDEX} lists the shard {shard}, which is not in {folder}")
        return {name: folder / shard for name, shard in weight_map.items()}
    if (folder / SINGLE).is_file():
        return dict.fromkeys(nbx.load_safetensors(folder / SINGLE), folder / SINGLE)   # header only
    raise CheckpointError(f"{folder} holds neither {SINGLE} nor {INDEX}")


class Weights:
    def __init__(self, files: dict[str, object], folder: Path, device, dtype):
        self._files = files        # tensor name -> the opened SafetensorsFile holding it
        self.folder = folder
        self.device = nbx.as_device(device)
        self.dtype = dtype

    @classmethod
    def open(cls, folder, device=None, dtype=None) -> "Weights":
        folder = Path(folder)
        dtype = None if dtype is None else nbx.as_dtype(dtype)
        opened = {}
        files = {}
        for name, path in shard_files(folder).items():
            if path not in opened:
                opened[path] = nbx.load_safetensors(path, device=device, dtype=dtype)
            if name not in opened[path]:
                raise CheckpointError(f"{folder / INDEX} places {name} in {path.name}, which does not hold it")
            files[name] = opened[path]
        return cls(files, folder, device, dtype)

    def names(self) -> list[str]:
        return list(self._files)

    def __contains__(self, name: str) -> bool:
        return name in self._files

    def _quantized(self, name: str) -> nbx.QuantizedTensor | None:
        prefix = name.removesuffix(".weight")
        if not name.endswith(".weight") or prefix + ".qweight" not in self._files:
            return None
        parts = {n: self._files[n][n] for n in (prefix + ".qweight", prefix + ".scales", prefix + ".zeros")
                 if n in self._files}
        if self.dtype is not None:  # scales keep their stored dtype: converting them would move the grid
            parts = {n: nbx.load_safetensors(self._files[n].path, device=self.device)[n] for n in parts}
        return nbx.QuantizedTensor.from_safetensors(parts, prefix)

    def get(self, name: str, shape=None):
        """The tensor called name (on the device, in the dtype asked), checked against shape; a
        QuantizedTensor where the checkpoint stores that weight as int4."""
        quantized = None if name in self._files else self._quantized(name)
        if quantized is not None:
            if shape is not None and tuple(quantized.shape) != tuple(shape):
                raise CheckpointError(f"{name} (int4) has shape {quantized.shape}; the config implies {tuple(shape)}")
            return quantized
        if name not in self._files:
            raise CheckpointError(f"the checkpoint in {self.folder} has no tensor {name}")
        tensor = self._files[name][name]
        if shape is not None and tuple(tensor.shape) != tuple(shape):
            raise CheckpointError(f"{name} has shape {tuple(tensor.shape)}; the config implies {tuple(shape)}")
        return tensor

    def optional(self, name: str, shape=None) -> nbx.Tensor | None:
        return self.get(name, shape) if name in self._files else None

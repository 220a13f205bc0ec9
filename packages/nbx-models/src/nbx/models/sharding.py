"""One tensor-parallel rank's share of a decoder checkpoint, read straight from its safetensors files.

    plan = ShardPlan.of(config, rank=1, world_size=4)
    weights = ShardedWeights.open(folder, plan, device="cuda:1", dtype=nbx.bfloat16)
    weights.get("model.layers.0.self_attn.o_proj.weight", (4096, 4096))   # columns 1024..2047 only

The split (Megatron's): q heads in equal blocks; KV heads in equal blocks when they divide among
the ranks, else each KV head replicated on the ranks whose q heads read it (GQA with fewer KV heads
than ranks); gate/up by rows and down by columns of the intermediate size (column- and
row-parallel in Megatron's words: W is [out, in]); o_proj by the columns of the rank's heads; the
embedding and lm_head by vocabulary rows. Norms, q/k norms and the biases added after a reduction
(o_proj's, down's) are whole on every rank.

Only the rank's bytes are read: a row block is one pread, a column block one pread per row (the
file is never mapped, so no read-ahead pulls in the rest). `bytes_read` counts them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import nbx.core as nbx
from nbx.core.host import parallel_convert
from nbx.core.safetensors_format import LENGTH_BYTES, parse_header, read_header_length

from .checkpoint import shard_files
from .decoder import Shapes
from .errors import CheckpointError


def _block(size: int, rank: int, world_size: int, what: str) -> slice:
    """Rank's equal block of size (ShapeError naming what when it does not divide)."""
    if size % world_size:
        raise nbx.ShapeError(f"{size} {what} do not split evenly among {world_size} tensor-parallel ranks "
                             f"({size} % {world_size} = {size % world_size})")
    n = size // world_size
    return slice(rank * n, (rank + 1) * n)


@dataclass(frozen=True)
class ShardPlan:
    """Which rows or columns of each checkpoint tensor rank holds (slices of the full tensor)."""
    rank: int
    world_size: int
    full: Shapes
    q_heads: slice        # of the q heads
    kv_heads: slice       # of the KV heads (replicated ones: the one head this rank's q heads read)
    intermediate: slice
    vocab: slice

    @classmethod
    def of(cls, config: dict, rank: int, world_size: int) -> "ShardPlan":
        s = Shapes.of(config)
        if not 0 <= rank < world_size:
            raise nbx.ArgumentError(f"rank {rank} is not one of {world_size} tensor-parallel ranks")
        q = _block(s.heads, rank, world_size, "attention heads")
        if s.kv_heads % world_size == 0:
            kv = _block(s.kv_heads, rank, world_size, "KV heads")
        elif world_size % s.kv_heads == 0:      # each KV head on world_size / kv_heads ranks
            head = rank // (world_size // s.kv_heads)
            kv = slice(head, head + 1)
        else:
            raise nbx.ShapeError(f"{s.kv_heads} KV heads neither split among {world_size} ranks nor replicate "
                                 f"evenly on them ({world_size} % {s.kv_heads} != 0)")
        return cls(rank, world_size, s, q, kv, _block(s.intermediate, rank, world_size, "intermediate features"),
                   _block(s.vocab, rank, world_size, "vocabulary rows"))

    def local_shapes(self) -> Shapes:
        """The sizes the rank's decoder runs with (vocab stays whole: token ids are checked against it)."""
        n = lambda sl: sl.stop - sl.start  # noqa: E731
        return replace(self.full, heads=n(self.q_heads), kv_heads=n(self.kv_heads),
                       intermediate=n(self.intermediate))

    def slices(self, name: str) -> tuple[slice | None, slice | None]:
        """(rows, columns) of tensor name this rank reads; None: all of that dim."""
        d = self.full.head_dim
        heads = lambda sl: slice(sl.start * d, sl.stop * d)  # noqa: E731
        suffix = name.rsplit(".", 2)[-2:]
        part = suffix[0]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            return self.vocab, None
        if part == "q_proj":
            return heads(self.q_heads), None
        if part in ("k_proj", "v_proj"):
            return heads(self.kv_heads), None
        if part in ("gate_proj", "up_proj"):
            return self.intermediate, None
        if suffix == ["o_proj", "weight"]:
            return None, heads(self.q_heads)
        if suffix == ["down_proj", "weight"]:
            return None, self.intermediate
        return None, None   # norms, q/k norms, the biases added after a reduction: whole


class _RankWeights:
    """Weights' interface (get, optional, names, device, dtype) over one rank's tensors; a subclass
    fills self._names (name -> what it needs to make the tensor) and get."""
    _names: dict

    def names(self) -> list[str]:
        return list(self._names)

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def optional(self, name: str, shape=None) -> nbx.Tensor | None:
        return self.get(name, shape) if name in self._names else None


class ShardedWeights(_RankWeights):
    """One rank's shards, read from a checkpoint's files."""

    def __init__(self, folder: Path, plan: ShardPlan, device, dtype):
        self.folder, self.plan = Path(folder), plan
        self.device = nbx.as_device(device)
        self.dtype = None if dtype is None else nbx.as_dtype(dtype)
        self.bytes_read = 0
        self._fds: dict[Path, int] = {}
        self._names = {}   # name -> (path, data_start, TensorEntry)
        headers = {}
        for name, path in shard_files(self.folder).items():
            header = headers.get(path) or headers.setdefault(path, self._header(path))
            if name not in header.entries:
                raise CheckpointError(f"{self.folder} places {name} in {path.name}, which does not hold it")
            self._names[name] = (path, header.data_start, header.entries[name])

    @classmethod
    def open(cls, folder, plan: ShardPlan, device=None, dtype=None) -> "ShardedWeights":
        return cls(folder, plan, device, dtype)

    def _fd(self, path: Path) -> int:
        if path not in self._fds:
            self._fds[path] = os.open(path, os.O_RDONLY)
        return self._fds[path]

    def _header(self, path: Path):
        fd = self._fd(path)
        size = os.fstat(fd).st_size
        prefix = self._pread(fd, LENGTH_BYTES, 0)
        length = read_header_length(prefix, size, path, lambda: self._pread(fd, 1, LENGTH_BYTES))
        return parse_header(self._pread(fd, length, LENGTH_BYTES), size, path)

    def _pread(self, fd: int, nbytes: int, offset: int) -> bytes:
        data = os.pread(fd, nbytes, offset)
        if len(data) != nbytes:
            raise CheckpointError(f"{self.folder}: read {len(data)} of {nbytes} bytes at {offset}: truncated?")
        self.bytes_read += nbytes
        return data

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def get(self, name: str, shape=None) -> nbx.Tensor:
        """This rank's shard of tensor name, whose full shape is checked against shape."""
        if name not in self._names:
            if name.endswith(".weight") and name.removesuffix(".weight") + ".qweight" in self._names:
                raise nbx.NotSupportedError(f"{name} is stored as int4: tensor-parallel loading splits dense "
                                            "weights only")
            raise CheckpointError(f"the checkpoint in {self.folder} has no tensor {name}")
        path, start, entry = self._names[name]
        if shape is not None and tuple(entry.shape) != tuple(shape):
            raise CheckpointError(f"{name} has shape {tuple(entry.shape)}; the config implies {tuple(shape)}")
        rows, cols = self.plan.slices(name)
        host = self._read(self._fd(path), start + entry.begin, entry, rows, cols)
        if self.dtype is not None and entry.dtype.is_floating and entry.dtype is not self.dtype:
            host = parallel_convert(host, self.dtype.host)
        return nbx.from_numpy(host, self.device, copy=True)

    def _read(self, fd: int, offset: int, entry, rows: slice | None, cols: slice | None) -> np.ndarray:
        """The block [rows, cols] of a tensor stored row-major at offset (rows/cols: of dims 0 and 1)."""
        shape = tuple(entry.shape)
        item = entry.dtype.host.itemsize
        rows = rows or slice(0, shape[0] if shape else 1)
        row_bytes = entry.nbytes // shape[0] if shape and shape[0] else entry.nbytes
        if cols is None:
            raw = self._pread(fd, (rows.stop - rows.start) * row_bytes, offset + rows.start * row_bytes)
            out_shape = (rows.stop - rows.start, *shape[1:]) if shape else ()
            return np.frombuffer(raw, entry.dtype.host).reshape(out_shape).copy()
        width = (cols.stop - cols.start) * item
        out = bytearray(width * (rows.stop - rows.start))
        for i, r in enumerate(range(rows.start, rows.stop)):
            out[i * width:(i + 1) * width] = self._pread(fd, width, offset + r * row_bytes + cols.start * item)
        return np.frombuffer(out, entry.dtype.host).reshape(rows.stop - rows.start, cols.stop - cols.start)


class SeededWeights(_RankWeights):
    """Weights' interface over seeded weights drawn on the device, no checkpoint (shapes too large
    to write, as a 70B one). Each tensor draws its own Philox stream (the seed and its index), whole,
    and a rank keeps its plan's block: any split of the same seed holds the same model."""

    def __init__(self, config: dict, seed: int, device=None, dtype="bfloat16", plan: ShardPlan | None = None):
        from .families import parameter_shapes
        self.plan, self.seed = plan, int(seed)
        self.device = nbx.as_device(device)
        self.dtype = nbx.as_dtype(dtype)
        self._names = {name: i for i, name in enumerate(parameter_shapes(config))}

    def get(self, name: str, shape=None) -> nbx.Tensor:
        from .writer import draw
        if name not in self._names:
            raise CheckpointError(f"the seeded model has no tensor {name}")
        values = draw(name, tuple(shape), nbx.Generator(seed=self.seed * 1_000_003 + self._names[name]), self.device)
        rows, cols = (None, None) if self.plan is None else self.plan.slices(name)
        if rows is not None:
            values = values[rows]
        if cols is not None:
            values = values[:, cols]
        return values.to(dtype=self.dtype).contiguous()

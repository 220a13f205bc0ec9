"""Host-to-device upload rates: a checkpoint's load through the pinned staging buffers against the
driver's own pageable copy, and the bounds around them (GPU, torch-free).

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/upload_rate.py \\
        [--gib 4] [--tensor-mib 128] [--layers 4]

Writes a safetensors file of --gib GiB of --tensor-mib MiB bfloat16 tensors (left in the page cache:
a warm load, what issue 16's warm first `generate` reads), then times, best of 3, in GB/s of file bytes:
  host copy     the mapped file copied into a pinned buffer by the host's cores (staging's first half)
  pinned H2D    cudaMemcpyAsync from a pinned buffer (the copy engine's rate: staging's second half)
  driver        load_safetensors(device="cuda"), every tensor, the driver staging pageable memory
  staged        the same through nbx.devices.nvidia.staging, from CHUNK_BYTES / 4 up (what
                memory.staged_upload_from_bytes would state)
each load's tensors checked against the file (a few, downloaded). Then `nbx.models.load` of a
Llama-3-8B-shaped decoder cut to --layers layers (embedding and head whole), both ways, and the
load's top host functions (cProfile, cumulative) of the staged one.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import nbx.core as nbx
from nbx.devices.nvidia import runtime, staging
from nbx.devices.nvidia.streams import current_stream

sys.path.insert(0, str(Path(__file__).resolve().parent))


def best(fn, repeats=3) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def write_file(path: Path, gib: float, tensor_mib: int) -> int:
    rng = np.random.default_rng(0)
    count = max(1, int(gib * 1024 // tensor_mib))
    block = rng.integers(0, 1 << 16, tensor_mib << 19, dtype=np.uint16)   # tensor_mib MiB of bf16 bits
    tensors = {f"w{i}": nbx.from_numpy((block + i).view(nbx.bfloat16.host)) for i in range(count)}
    nbx.save_safetensors(tensors, path)
    return os.path.getsize(path)


def load_all(path: Path, keep: list | None = None):
    f = nbx.load_safetensors(path, device="cuda")
    out = [f[name] for name in f]
    nbx.synchronize()
    if keep is not None:
        keep.extend(out)


class staged_from:
    """Uploads of cuda:0 staged from nbytes up (None: the driver's own pageable copy for every size),
    in place of the device file's memory.staged_upload_from_bytes, for the block's duration."""

    def __init__(self, nbytes):
        self.nbytes = nbytes

    def __enter__(self):
        self.saved = staging.staged_from(0)
        staging.FROM_BYTES[0] = self.nbytes

    def __exit__(self, *exc):
        staging.FROM_BYTES[0] = self.saved


WAYS = (("driver", None), ("staged", staging.CHUNK_BYTES // 4))


def checked(path: Path, tensors: list) -> None:
    f = nbx.load_safetensors(path)
    for i in (0, len(tensors) // 2, len(tensors) - 1):
        name = list(f)[i]
        if not np.array_equal(tensors[i].numpy().view(np.uint16), f[name].numpy().view(np.uint16)):
            raise SystemExit(f"upload_rate: {name} differs from the file after the upload")


def rates(path: Path, size: int) -> None:
    src = np.memmap(path, np.uint8, mode="r")[:min(size, 1 << 30)]   # the mapped file, as a load reads it
    pinned = runtime.pinned_empty(src.size)
    device = nbx.empty((src.size,), nbx.uint8, "cuda")
    host_s = best(lambda: staging.host_copy(pinned, src))
    stream = current_stream(0)

    def h2d():
        runtime.memcpy_async(device._storage.data_ptr(), pinned.ctypes.data, src.size, runtime.HOST_TO_DEVICE,
                             stream.handle)
        stream.synchronize()
    h2d_s = best(h2d)
    print(f"host copy (mapped file -> pinned, {staging.host.compute_cores()} cores): {src.size / host_s / 1e9:.2f} GB/s")
    print(f"pinned H2D: {src.size / h2d_s / 1e9:.2f} GB/s")
    for label, threshold in WAYS:
        kept: list = []
        with staged_from(threshold):
            seconds = best(lambda: load_all(path))
            load_all(path, kept)
        checked(path, kept)
        print(f"{label:7s} load_safetensors(device='cuda'): {size / 1e9:.2f} GB in {seconds:.3f} s = "
              f"{size / seconds / 1e9:.2f} GB/s (checked)")


def model_load(layers: int) -> None:
    from model_shapes import config_of
    from nbx import models
    cfg = {**config_of("8b"), "num_hidden_layers": layers}
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        folder = models.write_checkpoint(Path(tmp) / "m", cfg, seed=0, dtype="bfloat16", shards=2, device="cuda")
        size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        print(f"Llama-3-8B shape, {layers} layers: {size / 1e9:.2f} GB written in {time.perf_counter() - began:.1f} s")
        for label, threshold in WAYS:
            def once():
                model = models.load(folder, device="cuda")
                nbx.synchronize()
                del model
            with staged_from(threshold):
                seconds = best(once, 2)
            print(f"{label:7s} models.load: {seconds:.3f} s = {size / seconds / 1e9:.2f} GB/s")
        profile = cProfile.Profile()
        with staged_from(WAYS[1][1]):
            profile.enable()
            model = models.load(folder, device="cuda")
            nbx.synchronize()
            profile.disable()
        del model
        pstats.Stats(profile).sort_stats("cumulative").print_stats(22)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--tensor-mib", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4, help="layers of the 8B-shaped model (0: none)")
    args = parser.parse_args()
    print(f"# cuda:0; "
          f"staging: {staging.BUFFERS} x {staging.CHUNK_BYTES >> 20} MiB, staged from {WAYS[1][1] >> 20} MiB; "
          f"the device file's {staging.FACT}: {staging.staged_from(0)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "upload.safetensors"
        size = write_file(path, args.gib, args.tensor_mib)
        rates(path, size)
    if args.layers:
        model_load(args.layers)


if __name__ == "__main__":
    main()

"""Pack the part of Triton's on-disk cache that a later process loads, newest kernels first, under a size bound.

    python3 tools/triton_cache_pack.py --cache /tmp/tc --out $OUT/tc.tgz [--max-mib 15]
    tar xzf tc.tgz -C /tmp/tc          # on the next machine, before anything compiles

A GPU call of this project starts on a fresh machine, so every call compiled its kernels again
(certifier shards, tests, benchmarks: minutes of the session's 30). A cache hit needs only a kernel's
group file (`__grp__<name>.json`, which lists the group's files by absolute path: unpack into the
same TRITON_CACHE_DIR), its metadata `<name>.json` and its binary (`.cubin`); the intermediate forms
(`.ttir`, `.ttgir`, `.llir`, `.ptx`, `.source`) are left out, and the packed group file lists only
what is packed (Triton's FileCacheManager.get_group refuses a group whose listed file is missing). The compiled launchers (`*.so`) go
too. Groups are taken newest first until the compressed archive would pass --max-mib (a file back
from the GPU machine is at most 16 MiB); the count packed and left is printed.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import tarfile
from pathlib import Path

KEPT_SUFFIXES = (".json", ".cubin", ".so")


def groups(cache: Path) -> list[tuple[float, Path, bytes | None, list[Path]]]:
    """(modification time, group file, its text listing only the kept files, the kept files) of each
    compiled kernel in the cache, newest first; a launcher is a group of its one file (no text)."""
    found = []
    for grp in cache.glob("*/__grp__*.json"):
        try:
            data = json.loads(grp.read_text())
        except (OSError, ValueError):
            continue
        kept = {name: path for name, path in (data.get("child_paths") or {}).items()
                if Path(path).suffix in KEPT_SUFFIXES and Path(path).exists()}
        if not any(Path(p).suffix == ".cubin" for p in kept.values()):
            continue   # nothing a load could use
        text = json.dumps({**data, "child_paths": kept}).encode()   # Triton refuses a group missing a listed file
        found.append((grp.stat().st_mtime, grp, text, [Path(p) for p in kept.values()]))
    for so in cache.glob("*/*.so"):   # the launchers, compiled for this Python and driver API
        found.append((so.stat().st_mtime, so, None, []))
    return sorted(found, key=lambda g: -g[0])


def pack(cache: Path, out: Path, max_bytes: int) -> tuple[int, int]:
    """Write out (a gzipped tar of paths relative to cache) with the newest groups that fit; (packed, left).
    The size of an archive is known only once it is closed (gzip holds back what it has not yet flushed),
    so an archive over the bound is made again with one group fewer until it fits."""
    data, packed, left = _archive(cache, max_bytes)
    while len(data) > max_bytes and packed:
        data, packed, left = _archive(cache, max_bytes, most=packed - 1)
    if len(data) > max_bytes:
        raise SystemExit(f"triton_cache_pack: an empty archive came to {len(data)} bytes, over {max_bytes}")
    out.write_bytes(data)
    return packed, left


def _archive(cache: Path, max_bytes: int, most: int | None = None) -> tuple[bytes, int, int]:
    buffer = io.BytesIO()
    packed = left = 0
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for _, head, text, files in groups(cache):
            if packed == most or buffer.tell() + sum(f.stat().st_size for f in [head, *files]) // 2 > max_bytes:
                # (cubins compress about 2x)
                left += 1
                continue
            if text is None:
                tar.add(head, arcname=str(head.relative_to(cache)))
            else:
                info = tarfile.TarInfo(str(head.relative_to(cache)))
                info.size, info.mtime = len(text), int(head.stat().st_mtime)
                tar.addfile(info, io.BytesIO(text))
            for f in files:
                tar.add(f, arcname=str(f.relative_to(cache)))
            packed += 1
    return buffer.getvalue(), packed, left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=os.environ.get("TRITON_CACHE_DIR", str(Path.home() / ".triton/cache")))
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-mib", type=float, default=15.0)
    args = parser.parse_args()
    packed, left = pack(Path(args.cache).resolve(), Path(args.out), int(args.max_mib * (1 << 20)))
    print(f"triton_cache_pack: {packed} kernel group(s) and launchers packed into {args.out} "
          f"({os.path.getsize(args.out) >> 10} KiB), {left} left out by the size bound")


if __name__ == "__main__":
    main()

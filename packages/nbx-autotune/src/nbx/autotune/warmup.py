"""Compiling ahead: run each launch of a census (or a keys file) once, so Triton's caches hold its kernels.

    nbx warmup --model ckpt/ --batch 1,8 --prompt 512 --new-tokens 1 --jobs 8
    nbx warmup --keys keys.json --jobs 8

Each launch is served its setting as a run would serve it (certified, or a neighbour's, screened)
and launched once at its own shapes, which compiles the kernels it takes, with the specializations
a run of those shapes takes (Triton specializes integer arguments divisible by 16 and equal to 1),
into Triton's on-disk cache (`triton.knobs.cache.dir`: $TRITON_CACHE_DIR, else ~/.triton/cache).
A later process loads them from there instead of compiling. With --jobs N the launches are split
over N processes at once (compiling is CPU-bound and each process compiles alone).

log_compiles() prints a line for every kernel Triton compiles (or loads from its disk cache) in
this process, and says when a kernel is compiled again for another specialization: a recompile a
run did not expect is a specialization to look at (a size that should not be a constexpr).
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter

from nbx.core.errors import ArgumentError

from . import keys
from .screen import keeping_inputs

EPS = 1e-6


def run_launch(launch, device) -> None:
    """Run one census launch (census.Launch) through nbx's ops on device, on zero-filled operands."""
    import nbx.core as nbx
    shapes, dtype, op = launch.shapes, launch.dtype, launch.op
    if op in ("embedding", "rope"):   # integer ids or positions [tokens], copied from the host (no fill launch)
        import numpy as np
        tokens, dim = shapes[0][0], shapes[0][-1]
        ids = nbx.asarray(np.zeros(tokens, dtype=np.int64), device=device)
        if op == "embedding":
            nbx.embedding(ids, nbx.zeros(2, dim, dtype=dtype, device=device))
        else:               # the key's launch (the cache write's rotation is the same kernel, writing through slots)
            table = nbx.zeros(1, dim, dtype="float32", device=device)
            nbx.rotary_embedding(nbx.zeros(*shapes[0], dtype=dtype, device=device), table, table, ids)
        return
    if op in ("paged_attention", "concat", "cast") or (op == "add" and len(shapes) == 1):
        _run_decoder_step(launch, device)
        return
    operands = [nbx.zeros(*s, dtype=dtype, device=device) for s in shapes]
    if op == "zeros":
        pass   # the launch is the zero fill itself (a KV cache's blocks, the deferred bounds flag)
    elif op == "matmul":
        nbx.matmul(operands[0], operands[1].mT)
    elif op == "gated_linear":
        nbx.gated_linear(operands[0], operands[1], operands[1], activation="silu")
    elif op == "argmax":
        nbx.argmax(operands[0], dim=-1)
    elif op in ("add", "multiply"):
        getattr(nbx, op)(operands[0], operands[1])
    elif op in ("silu", "gelu", "tanh"):
        getattr(nbx, op)(operands[0])
    elif op == "softmax":
        nbx.softmax(operands[0], dim=-1)
    elif op == "sum":
        nbx.sum(operands[0], dim=-1)
    elif op in ("rms_norm", "layer_norm"):
        n = shapes[0][-1]
        weight = nbx.ones(n, dtype=dtype, device=device)
        if op == "rms_norm":
            nbx.rms_norm(operands[0], (n,), weight, EPS)
        else:
            nbx.layer_norm(operands[0], (n,), weight, nbx.zeros(n, dtype=dtype, device=device), EPS)
    else:
        raise ArgumentError(f"nbx warmup: the census op {op!r} has no launch here")


def _run_decoder_step(launch, device) -> None:
    """A decoder's launches beyond its layers' products and norms, on operands copied from the host (no
    fill launch of their own): paged_attention of (batch, queries, heads, dim) queries a sequence over a
    context of (batch, keys, kv_heads, dim) in the device file's cache blocks, with the bounds a step
    passes; a concat of parts along their first dim; a step's positions + 1 and its int32 cast."""
    import numpy as np

    import nbx.core as nbx
    from nbx.core import device_files
    shapes, dtype, op = launch.shapes, launch.dtype, launch.op

    def host(shape, dt=dtype):
        return nbx.asarray(np.zeros(shape, dtype=nbx.as_dtype(dt).host), device=device)
    if op == "concat":
        nbx.concat([host(s) for s in shapes], axis=0)
    elif op == "add":
        host(shapes[0]) + 1
    elif op == "cast":
        host(shapes[0], "int64").to(dtype=dtype)
    else:
        (batch, queries, heads, dim), (_, context, kv_heads, _) = shapes
        from nbx.memory.kv_cache import block_tokens_of
        block = block_tokens_of(device)
        width = -(-context // block)
        cache = (batch * width, block, kv_heads, dim)
        table = nbx.asarray(np.arange(batch * width, dtype=np.int32).reshape(batch, width), device=device)
        lens = nbx.asarray(np.full(batch, context, dtype=np.int32), device=device)
        cu = nbx.asarray(np.arange(0, batch * queries + 1, queries, dtype=np.int32), device=device)
        nbx.paged_attention(host((batch * queries, heads, dim)), host(cache), host(cache), table, lens, cu,
                            is_causal=True, max_seq_len=context, max_q_len=queries)


def run_record(record, tunables: dict, facts, device) -> None:
    """Launch a keys file's key once: its kernel's workload at the largest sizes recorded (else its classes'
    tops), with the setting a run serves it. The recorded sizes form the key again with the same observed
    sizes, so a neighbour's screen here keeps its verdict under the text the recorded run looks up."""
    from . import serving
    tunable = tunables.get(record.kernel)
    if tunable is None or tunable.workload is None:
        raise ArgumentError(f"nbx warmup: no installed kernel declares {record.kernel!r} with a workload")
    key = keys.parse(record.kernel, tunable.key, record.key, facts, record.observed)
    instance = dict(keys.representative(key, tunable.key, facts), **record.observed)
    setting = serving.setting(tunable, device, **instance)
    tunable.workload(instance, device).launch(dict(setting))


@keeping_inputs()   # keys of one layer in a row draw its host inputs once
def warm(items, run, shard: int = 0, shards: int = 1, progress=sys.stderr) -> int:
    """Run run(item) for this shard's items (index modulo shards); the number run."""
    mine = list(items)[shard::shards]
    began = time.monotonic()
    for done, item in enumerate(mine, 1):
        run(item)
        if progress is not None:
            print(f"nbx warmup: shard {shard}: {done}/{len(mine)} ({time.monotonic() - began:.1f} s)",
                  file=progress, flush=True)
    return len(mine)


def run_shards(command: list[str], jobs: int, flag: str = "--shard", env: dict | None = None) -> list[int]:
    """Run `command <flag> i` for i < jobs at once (each its own process, in env: else this one's) and wait;
    their exit codes."""
    procs = [subprocess.Popen(command + [flag, str(i)], env=env) for i in range(jobs)]
    return [p.wait() for p in procs]


# ---- the compile log -------------------------------------------------------------------------------

class CompileLog:
    """Counts Triton's compiles (and loads from its disk cache) per kernel function in this process, keeps
    each one's specialization, and prints each one unless quiet (the autotune report then lists them).

    A compilation listener (triton.knobs.compilation.listener, called by triton.compile with the source it
    compiled), not the JIT's post-compile hook: Triton 3.6 serializes a compile's constants to JSON before
    it calls that hook, which fails on a kernel given a function as a constexpr (nbx's elementwise kernels)."""

    def __init__(self, file=None, quiet: bool = False):
        self.file, self.quiet = file, quiet
        self.counts: Counter = Counter()
        self.specializations: dict = {}    # kernel -> [(argument, its specialization) per parameter, ...]
        self.screened = 0                   # compiles made while a neighbour's screen ran
        self._lock = threading.Lock()

    def __call__(self, *, src, metadata, cache_hit=False, **_):
        fn = getattr(src, "fn", None)
        name = f"{getattr(fn, 'module', '?')}.{getattr(src, 'name', '?')}"
        spec = specialization_of(src, metadata)
        from .serving import screening
        with self._lock:
            self.counts[name] += 1
            nth = self.counts[name]
            self.specializations.setdefault(name, []).append(spec)
            self.screened += screening()
        if not self.quiet:
            again = f" (specialization {nth} of this kernel in this process)" if nth > 1 else ""
            loaded = " (from Triton's cache)" if cache_hit else ""
            text = ", ".join(f"{arg}: {kind}" for arg, kind in spec)
            print(f"[nbx compile] {name}({text}){loaded}{again}", file=self.file or sys.stderr, flush=True)
        return None

    def report_lines(self) -> list[str]:
        """The report's compile lines: how many, how many a screen made, and each kernel compiled more than
        once with the arguments its specializations differ in (a recompile a run did not expect names the
        argument to look at)."""
        with self._lock:
            total, kernels, screened = sum(self.counts.values()), len(self.counts), self.screened
            found = {k: list(v) for k, v in self.specializations.items() if len(v) > 1}
        out = [f"[autotune] compiles: {total} specialization(s) of {kernels} kernel(s) compiled or loaded from "
               f"Triton's cache in this process, {screened} of them by neighbour screens"]
        for name, specs in sorted(found.items()):
            differ = [f"{arg}: {' | '.join(sorted({dict(s).get(arg, '-') for s in specs}))}"
                      for arg in dict.fromkeys(a for s in specs for a, _ in s)
                      if len({dict(s).get(arg) for s in specs}) > 1]
            out.append(f"[autotune] recompiled {name}: {len(specs)} specializations, differing in "
                       f"{'; '.join(differ) or 'nothing they report'}")
        return out


def specialization_of(src, metadata: dict) -> tuple:
    """(parameter, how Triton specialized it) for each parameter of a compiled source: its type, `=value`
    for a constexpr, `/16` where Triton assumed it divisible by 16 (the source's signature, constants and
    attrs), then the warps and stages."""
    params = getattr(getattr(src, "fn", None), "params", None)
    signature = getattr(src, "signature", None) or {}
    constants, attrs = getattr(src, "constants", None) or {}, getattr(src, "attrs", None) or {}
    out = []
    for i, p in enumerate(params or ()):
        kind = str(signature.get(p.name, "?"))
        if (i,) in constants:
            kind += f"={getattr(constants[(i,)], '__name__', constants[(i,)])}"
        if any(a and a[0] == "tt.divisibility" for a in attrs.get((i,), ())):
            kind += "/16"
        out.append((p.name, kind))
    return tuple(out) + tuple((o, str(metadata[o])) for o in ("num_warps", "num_stages") if o in (metadata or {}))


_installed: CompileLog | None = None


def log_compiles(on: bool = True, file=None, quiet: bool = False) -> CompileLog | None:
    """Log every kernel Triton compiles (or loads from its disk cache) in this process (Triton's compilation
    listener): printed as it compiles, or only counted for the autotune report (quiet: what
    NBX_AUTOTUNE_REPORT=1 installs); off again with False."""
    global _installed
    import triton
    knobs = triton.knobs.compilation
    if on:
        if _installed is None or not quiet or knobs.listener is not _installed:
            _installed = CompileLog(file, quiet)
        knobs.listener = _installed
    elif _installed is not None and knobs.listener is _installed:
        knobs.listener = None
        _installed = None
    return _installed


def installed_log() -> CompileLog | None:
    """The compile log of this process, if one is installed."""
    return _installed


def cache_dir() -> str:
    """Where Triton keeps compiled kernels on disk (what `nbx warmup` fills and a fleet can ship)."""
    import triton
    return str(triton.knobs.cache.dir)

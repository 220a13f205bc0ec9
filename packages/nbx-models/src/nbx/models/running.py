"""What `nbx generate`, `nbx embed` and `nbx demo` share: the device to run on, a timed
generation that prints text as it comes, the figures line, and the cosine table."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import nbx.core as nbx


def best_device() -> nbx.Device:
    """The first GPU when a backend has one, else the CPU (a plugin that cannot count its devices,
    for example without a driver, has none). A GPU backend is one that runs nbx's Triton kernels;
    interp runs them on host memory and is never picked by default."""
    from nbx.core.device import backends
    for name, backend in backends().items():
        if name in ("cpu", "interp") or not getattr(backend, "runs_triton_kernels", False):
            continue
        try:
            if backend.device_count() > 0:
                return nbx.as_device(f"{name}:0")
        except Exception:  # a plugin without its driver counts as no device here; `nbx info` says why
            continue
    return nbx.as_device("cpu")


def device_label(device: nbx.Device) -> str:
    from nbx.core.device import get_backend
    backend = get_backend(device.type)
    describe = getattr(backend, "device_name", None)
    if device.type == "cpu" or describe is None:
        return str(device)
    return f"{device} ({describe(device.index or 0)})"


@dataclass
class Generated:
    tokens: list[int]
    prompt_tokens: int
    prefill_s: float      # prompt forward + the first token's pick (read back to the host)
    decode_s: float       # every later token
    decode_path: str = "eager"   # or "graph": each step replayed a captured graph

    def line(self) -> str:
        decoded = len(self.tokens) - 1
        prefill = f"prefill {self.prompt_tokens} tokens at {self.prompt_tokens / self.prefill_s:,.1f} tokens/s"
        if decoded <= 0:
            return prefill + "; decode: no token after the first"
        per = self.decode_s / decoded
        return (f"{prefill}; decode {decoded} tokens at {1 / per:,.1f} tokens/s ({per * 1e3:.2f} ms/token, "
                f"{self.decode_path} steps)")


def generate_printing(model, tokenizer, ids: list[int], max_new_tokens: int, temperature: float, top_k=None,
                      top_p=None, seed=None, out=None) -> Generated:
    """model.generate with the text printed as it is generated (the decoded text's new part each token)."""
    out = out or sys.stdout
    new: list[int] = []
    shown = [""]
    times = []

    def on_token(token: int) -> None:
        times.append(time.perf_counter())
        new.append(token)
        text = tokenizer.decode(new)
        if text.startswith(shown[0]):
            out.write(text[len(shown[0]):])
            out.flush()
            shown[0] = text

    start = time.perf_counter()
    model.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                   on_token=on_token)
    out.write("\n")
    first = times[0] if times else time.perf_counter()
    return Generated(new, len(ids), first - start, (times[-1] if times else first) - first,
                     getattr(model, "last_decode", "eager"))


def peak_memory_line(device: nbx.Device) -> str:
    if device.type == "cpu":
        return "peak device memory: none (the cpu runs in host memory)"
    try:
        from nbx.memory.allocator import get_allocator
        stats = get_allocator(device.type).stats(device)
    except Exception as exc:  # no nbx-memory, or an allocator that keeps no figures
        return f"peak device memory: unknown ({type(exc).__name__}: {exc})"
    return f"peak device memory: {stats.peak_live_bytes / 2**20:,.1f} MiB live at peak"


def autotune_line() -> str:
    from nbx.core import services
    report_line = services.provided("autotune_report")  # nbx.autotune lends it (nbx-models never imports it)
    if report_line is None:
        return "[autotune] not installed: the cpu runs numpy references, nothing to tune"
    return report_line()


def print_figures(generated: Generated, device: nbx.Device, out=None) -> None:
    """One line of the run's figures (prefill and decode tokens/s, the peak device memory), then the
    autotune report line."""
    out = out or sys.stdout
    print(f"{generated.line()}; {peak_memory_line(device)}", file=out)
    print(autotune_line(), file=out)


def cosine_table(labels: list[str], vectors: list[nbx.Tensor], out=None) -> list[list[float]]:
    """Print and return the cosine similarity of every pair of vectors."""
    import numpy as np
    out = out or sys.stdout
    rows = np.stack([v.to(dtype=nbx.float32).numpy().astype(np.float64) for v in vectors])
    rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    table = rows @ rows.T
    width = max(len(s) for s in labels)
    print(" " * (width + 6) + "  ".join(f"[{i}]".rjust(6) for i in range(len(labels))), file=out)
    for i, label in enumerate(labels):
        print(f"[{i}] {label.ljust(width)}  " + "  ".join(f"{table[i, j]:6.3f}" for j in range(len(labels))), file=out)
    return table.tolist()

"""The `nbx` command.

    nbx --version   the version of nbx-core (every distribution moves in lock-step)
    nbx info        what is installed: distributions and versions, backends and their devices,
                    plugin load errors, the device file in force, certificate coverage
    nbx demo-cpu    a short computation on the CPU, checked against the float64 oracle

Vendor plugins and distributions add subcommands: a module registered under the entry-point group
`nbx.devices` (or found in the `nbx.devices` namespace), or the `nbx.<name>.cli` module of a
distribution that has one (nbx.autotune.cli: `nbx autotune`), may define
`add_cli_commands(subparsers)`, which receives the argparse sub-parsers object. Each parser it
adds sets its handler with `parser.set_defaults(func=handler)`; the handler takes the parsed
arguments and returns an exit status (None means 0). A plugin whose hook fails is reported on
stderr; the other commands still work.
"""
from __future__ import annotations

import argparse
import sys

from .cli_info import plugin_modules, print_info


def _demo_cpu(args: argparse.Namespace) -> int:
    """One attention head on the CPU: softmax(q k^T / sqrt(d)) v, compared with the float64 oracle."""
    import time

    import numpy as np

    from . import asarray, matmul, oracle, softmax

    rng = np.random.default_rng(args.seed)
    tokens, dim = args.tokens, args.dim
    q, k, v = (asarray(rng.standard_normal((tokens, dim), dtype=np.float32)) for _ in range(3))
    start = time.perf_counter()
    scores = matmul(q, k.mT) * (1.0 / dim ** 0.5)
    out = matmul(softmax(scores, dim=-1), v)
    seconds = time.perf_counter() - start
    expected = oracle("matmul", asarray(oracle("softmax", asarray(oracle("matmul", q, k.mT) / dim ** 0.5), dim=-1)), v)
    error = float(np.max(np.abs(out.numpy() - expected)))
    print(f"attention head on {out.device}: q, k, v {tokens}x{dim} {q.dtype} -> out {tuple(out.shape)} {out.dtype}")
    print(f"out[0, :4] = {out.numpy()[0, :4]}")
    print(f"max |out - float64 oracle| = {error:.2e}; {seconds * 1e3:.2f} ms")
    if not error < 1e-4:
        print("error above 1e-4: the CPU path disagrees with its oracle", file=sys.stderr)
        return 1
    return 0


def _distribution_cli_modules() -> list[tuple[str, object]]:
    """(name, module) of nbx.<name>.cli for each nbx distribution beside core with a cli.py (nbx.autotune)."""
    import importlib
    from pathlib import Path

    import nbx
    names = sorted({p.name for base in nbx.__path__ for p in Path(base).iterdir()
                    if p.name not in ("core", "devices") and (p / "cli.py").is_file()})
    found = []
    for name in names:
        try:
            found.append((name, importlib.import_module(f"nbx.{name}.cli")))
        except Exception as exc:  # reported like a plugin's failing hook; the other commands still work
            print(f"nbx: nbx.{name}.cli failed to import: {type(exc).__name__}: {exc}", file=sys.stderr)
    return found


def build_parser() -> argparse.ArgumentParser:
    from .version import __version__
    parser = argparse.ArgumentParser(prog="nbx", description="nbx: a torch-free tensor library for inference.")
    parser.add_argument("--version", action="version", version=f"nbx {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser("info", help="installed distributions, backends, devices, device files, certificates")
    info.set_defaults(func=lambda args: print_info())
    demo = sub.add_parser("demo-cpu", help="a short attention computation on the CPU, checked against its oracle")
    demo.add_argument("--tokens", type=int, default=64)
    demo.add_argument("--dim", type=int, default=32)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo_cpu)
    for name, module in plugin_modules() + _distribution_cli_modules():
        hook = getattr(module, "add_cli_commands", None)
        if callable(hook):
            try:
                hook(sub)
            except Exception as exc:  # a broken plugin must not take the other commands down
                print(f"nbx: plugin {name}: add_cli_commands failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    status = args.func(args)
    return 0 if status is None else int(status)


if __name__ == "__main__":
    sys.exit(main())

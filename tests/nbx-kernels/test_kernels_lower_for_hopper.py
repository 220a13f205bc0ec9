"""Kernels whose Python front-end the interpreter accepts but Triton's compiler refused on the
H200 are lowered here to TTIR for sm_90, as the compiler's first stage does there: no GPU needed.

Triton turns a plain assignment of a constexpr expression into a tensor (so `ns = 1 << p` inside a
static_range made a reshape's shape a tensor), which `TRITON_INTERPRET=1` never sees. The suite
runs under the interpreter, so the lowering runs in a child process without it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton.backends.nvidia.compiler")

_LOWER = r'''
import json, sys
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource
from triton._C.libtriton import ir
import importlib

target = GPUTarget("cuda", 90, 32)
backend = CUDABackend(target)
failures = []
for module, name, signature, constexprs in json.loads(sys.argv[1]):
    kernel = getattr(importlib.import_module(module), name)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    options = backend.parse_options({})
    source = ASTSource(kernel, {**signature, **{c: "constexpr" for c in constexprs}}, constexprs=constexprs)
    try:
        source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(), context)
    except Exception as exc:
        failures.append(f"{name} {constexprs}: {type(exc).__name__}: {str(exc).splitlines()[-1] if str(exc) else ''}")
print(json.dumps(failures))
'''

_TILE_ARGS = {"src": "*fp32", "dst": "*fp32", "rows": "i32", "src_len": "i32", "src_row": "i64", "dst_row": "i64",
              "scale": "fp32"}
FFT_TILE = ("nbx.kernels.fft.tile", "fft_tile_kernel", {"src": "*fp32", "dst": "*fp32", "window": "*fp32",
                                                       **{k: v for k, v in _TILE_ARGS.items() if k not in ("src", "dst")}})
IRFFT_TILE = ("nbx.kernels.fft.tile", "irfft_tile_kernel", _TILE_ARGS)
FFT_COLUMN = ("nbx.kernels.fft.tile", "fft_column_kernel", {"src": "*fp32", "dst": "*fp32", "src_len": "i32",
                                                             "src_row": "i64"})


def lowering_failures(cases) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _LOWER, json.dumps(cases)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tile_meta(n: int, real: bool) -> dict:
    from nbx.kernels.fft import _tile_dim, tile_factors
    n1, n2 = tile_factors(n, real)
    k2 = n2 // 2 if real else n2
    return {"N1": n1, "N2": n2, "P1": _tile_dim(n1), "P2": _tile_dim(n2), "K2": k2, "PK2": _tile_dim(k2)}


def test_the_fft_row_tiles_lower_for_sm90_at_every_load_mode_width_and_precision():
    cases = [(*FFT_TILE, {**_tile_meta(n, half), "SIGN": sign, "LOAD": load, "HALF": half, "ROWS": rows,
                          "PRECISION": precision, "GA": 1 if half else 16, "GB": 1 if half else 16,
                          "WINDOWED": half and rows == 8})
             for n, load, half in ((16, 0, False), (2048, 0, False), (1000, 2, False), (1024, 1, True), (400, 1, True))
             for sign in (-1, 1) for rows in (1, 8) for precision in ("ieee", "tf32x3")]
    cases += [(*IRFFT_TILE, {**_tile_meta(n, True), "ROWS": 8, "PRECISION": precision})
              for n in (16, 400, 2048) for precision in ("ieee", "tf32x3")]
    cases += [(*FFT_COLUMN, {"M": m, "R": r, "RP": max(16, r), "BLOCK_M": block, "SIGN": sign, "LOAD": load,
                             "PRECISION": precision})
              for m, r, block in ((512, 16, 16), (2048, 32, 64)) for load in (0, 1, 4) for sign in (-1, 1)
              for precision in ("ieee", "tf32x3")]
    assert lowering_failures(cases) == []

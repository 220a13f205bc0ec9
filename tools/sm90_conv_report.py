"""Compile the implicit-GEMM convolution for sm_90 without a GPU and say what the H200 would run, for
bench_conv's cases laid out as the benchmark passes them: registers, spills, shared memory, wgmma
(HGMMA), cp.async and TMA copies, and the SASS instructions of the K loop a step.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/sm90_conv_report.py [--all] [--case NAME]

Without --all each case compiles the device file's tile (tiles.conv of hopper.yml); with it, every
candidate the `conv` tunable keeps at the case's key. The arguments are those conv/__init__.py's
_gemm_launch passes (the same strides, the same constexprs: WIDE, EVEN_C, ONE_TAP, B_DESC), so Triton
specializes them as on the GPU; its compiler, ptxas and cuobjdump do the work, nothing launches.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from math import prod

os.environ.pop("TRITON_INTERPRET", None)   # the real compiler, not the interpreter's front-end

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from triton.backends.nvidia.compiler import get_ptxas  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
PTXAS = get_ptxas(90).path                                    # the ptxas Triton compiles with
CUOBJDUMP = os.path.join(os.path.dirname(PTXAS), "cuobjdump")


class _Pointer:   # what Triton reads of a pointer argument: an aligned data_ptr() and str(dtype)
    def __init__(self, dtype: str):
        self.dtype = dtype

    def data_ptr(self) -> int:
        return 1 << 20


def _dense(shape, order) -> tuple:
    """Strides of shape stored in the dim order `order` (last fastest)."""
    strides, step = [0] * len(shape), 1
    for d in reversed(order):
        strides[d], step = step, step * shape[d]
    return tuple(strides)


# name: (batch, channels, length or side, out channels, taps a dim, padding, 2-D, channels-last input)
CASES = {"sd unet 64^2 320 k3": (2, 320, 64, 320, 3, 1, True, True),
         "sd unet 16^2 1280 k3": (2, 1280, 16, 1280, 3, 1, True, True),
         "vae 1024^2 128 k3": (1, 128, 1024, 128, 3, 1, True, True),
         "hifigan conv1d 512 k7 L=8192": (1, 512, 8192, 512, 7, 3, False, False),
         "hifigan up x8 phase L=8192": (1, 512, 8192, 256, 2, 0, False, False)}


def launch_args(case, tile: dict):
    """conv_gemm_kernel's arguments and constexprs for a case under tile (as _gemm_launch forms them)."""
    from nbx.kernels.conv import a_shift, a_tile
    batch, c, side, o, k, pad, two_d, cl = case
    sizes = (1, side, side) if two_d else (1, 1, side)
    kernel = (1, k, k) if two_d else (1, 1, k)
    outs = tuple(s + 2 * p - t + 1 for s, p, t in zip(sizes, (0, pad if two_d else 0, pad), kernel))
    x_shape = (batch, c, *sizes)
    xs = _dense(x_shape, (0, 2, 3, 4, 1) if cl else (0, 1, 2, 3, 4))
    w_shape = (o, c, *kernel)
    ws = _dense(w_shape, (0, 2, 3, 4, 1))   # channels-last weights, as bench_conv passes them
    ws = (o * ws[0], *ws)
    out_shape = (batch, o, *outs)
    os_ = _dense(out_shape, (0, 2, 3, 4, 1) if cl else (0, 1, 2, 3, 4))
    split = tile.get("split_k", 1)
    pointers = [_Pointer("bfloat16")] * 3 + [_Pointer("float32" if split > 1 else "bfloat16"), _Pointer("bfloat16")]
    args = pointers + [batch, c, *sizes, o, *outs, *kernel, 1, 1, 1, 0, 0 if not two_d else pad, pad,
                                          1, 1, 1, *xs, *ws, *os_, 0, 0, 0, 0, 0, 0]
    dense_w = ws[2] == 1 and ws[1] == prod(kernel) * c
    meta = dict(HAS_BIAS=False, ACTIVATION=None, HAS_RES=False, DOT=tl.bfloat16, IEEE=False,
                BLOCK_M=tile["block_m"], BLOCK_N=tile["block_n"], BLOCK_K=tile["block_k"], GROUP_M=tile["group_m"],
                UP_D=1, UP_H=1, UP_W=1, WIDE=False, EVEN_C=c % tile["block_k"] == 0, ONE_TAP=prod(kernel) == 1,
                B_DESC=dense_w and c % tile["block_k"] == 0, SPLIT_K=split, num_warps=tile["num_warps"],
                num_stages=tile["num_stages"])
    shift = a_shift(xs, kernel, (1, 1, 1), outs, False, tile)
    meta.update(A_TILE=not shift and a_tile(xs, kernel, False, tile), A_SHIFT=shift)
    if shift:   # as _gemm_launch: two A tiles a stage
        from nbx.core import device_files
        from nbx.kernels.matmul.tuning import stages_that_fit
        meta.update(TAPS_W=kernel[2], PAD_W=pad, DIL_W=1,
                    num_stages=stages_that_fit(tile, 4, 2, device_files.for_arch("sm_90")))
    return args, meta


def compiled(args, meta):
    from nbx.kernels.conv.kernel import conv_gemm_kernel
    backend = make_backend(TARGET)
    bound, spec, options = create_function_from_signature(conv_gemm_kernel.signature, conv_gemm_kernel.params,
                                                          backend)(*args, **meta)
    options, signature, constexprs, attrs = conv_gemm_kernel._pack_args(backend, meta, bound, spec, options)
    return triton.compile(ASTSource(conv_gemm_kernel, signature, constexprs, attrs), target=TARGET,
                          options=options.__dict__)


def _loop_sass(cubin: bytes) -> tuple[int, Counter]:
    """The instructions of the loop around the first HGMMA: its backward branch's span."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([CUOBJDUMP, "-sass", f.name], capture_output=True,
                              text=True).stdout
    lines = [line for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]
    address = [int(re.match(r"\s+/\*([0-9a-f]+)\*/", line).group(1), 16) for line in lines]
    first = next(i for i, line in enumerate(lines) if "HGMMA" in line)
    for i in range(first, len(lines)):
        found = re.search(r"BRA\s+0x([0-9a-f]+)", lines[i])
        if found and int(found.group(1), 16) <= address[first]:
            body = lines[address.index(int(found.group(1), 16)):i + 1]
            ops = [re.sub(r"^\s*/\*[0-9a-f]+\*/\s*(@!?U?P\w+\s+)?", "", line).split()[0].split(".")[0]
                   for line in body]
            return len(body), Counter(ops)
    return 0, Counter()


def report(name: str, tile: dict) -> str:
    try:
        kernel = compiled(*launch_args(CASES[name], tile))
    except Exception as exc:   # a candidate Triton refuses: its last line
        return f"  {tile}: {type(exc).__name__}: {str(exc).splitlines()[-1] if str(exc) else ''}"
    ptx = kernel.asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        ptxas = subprocess.run([PTXAS, "-v", "--gpu-name", "sm_90a", f.name, "-o", os.devnull],
                               capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", ptxas)
    spills = re.search(r"(\d+) bytes spill stores", ptxas)
    steps, ops = _loop_sass(kernel.asm["cubin"])
    shape = "x".join(str(tile[k]) for k in ("block_m", "block_n", "block_k"))
    return (f"  {shape} w{tile['num_warps']} s{tile['num_stages']} split {tile.get('split_k', 1)}: {regs.group(1) if regs else '?'} registers, "
            f"{spills.group(1) if spills else '?'} B spilled, {kernel.metadata.shared} B shared; "
            f"wgmma {len(re.findall(r'wgmma.mma_async', ptx))}, cp.async {len(re.findall(r'cp.async.c[ag]', ptx))}, "
            f"TMA {len(re.findall(r'cp.async.bulk.tensor', ptx))}; K loop {steps} SASS a step "
            f"({ops['HGMMA']} HGMMA, {ops['LDG']} LDG)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every candidate the conv tunable keeps at the case's key")
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="only these cases")
    args = parser.parse_args(argv)
    from nbx.autotune import keys
    from nbx.core import device_files
    from nbx.kernels.conv.tuning import CONV, conv_key
    facts = device_files.for_arch("sm_90")
    default = CONV.default(facts)
    for name in args.case or CASES:
        batch, c, side, o, k, pad, two_d, cl = CASES[name]
        taps = k * k if two_d else k
        m = batch * (side * side if two_d else side)
        key = keys.form("conv", CONV.key_fields, facts, **conv_key(m, o, c * taps, "bfloat16", cl, 2 if two_d else 1))
        tiles = CONV.candidates(facts, keys.representative(key, CONV.key, facts))[0] if args.all else [default]
        print(f"{name} ({key}, {len(tiles)} setting(s))", flush=True)
        for tile in tiles:
            print(report(name, tile), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

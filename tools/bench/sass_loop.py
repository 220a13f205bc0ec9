"""The main loop of the int4 linear kernel as ptxas makes it for sm_90, counted on the CPU (no GPU):
its instructions per weight nibble, its registers and its commonest opcodes, at one launch setting.

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/bench/sass_loop.py \
        [--m 1] [--n 14336] [--k 4096] [--form gemv|tiles|prescaled] [--block-n 32] [--block-k 512] [--warps 2] \
        [--stages 3] [--split-k 1] [--gated]

Run it with triton 3.6.0 installed, the H200's (Triton 3.9's bundled ptxas refuses the PTX 9.4 it writes).

Why: at decode rows the int4 GEMV issues ~3.5 instructions a nibble (one FFMA, ~1.5 of unpacking,
the rest scales and addresses), which on 132 SMs x 128 lanes at 1.98 GHz takes about as long as its
bytes take at the HBM rate: the kernel is issue-bound as much as memory-bound (docs/performance.md,
"twelfth session"). A change to its unpacking or its form should lower this count before it is timed.
The launch is specialized as Triton's JIT specializes it (tests/nbx-kernels/sm90_jit.py: 16-byte
aligned pointers, sizes divisible by 16 marked), so the loads vectorize as they do on the H200.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "nbx-kernels"))
from sm90_jit import Pointer, jit_stages  # noqa: E402  the lowering tests' compile, one recipe

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
_ADDRESS = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*)")
_BRANCH = re.compile(r"BRA (0x[0-9a-f]+)")


def instructions(sass: str) -> list[tuple[int, str]]:
    """(address, instruction) of each SASS line, the predicate dropped."""
    out = []
    for line in sass.splitlines():
        found = _ADDRESS.match(line)
        if found:
            text = re.sub(r"^@!?U?P\w+\s+", "", found.group(2).split(";")[0].strip())
            out.append((int(found.group(1), 16), text))
    return out


def main_loop(code: list[tuple[int, str]]) -> list[str]:
    """The body of the longest backward branch's loop (the K loop: the others are short waits)."""
    loops = [(int(m.group(1), 16), at) for at, text in code for m in [_BRANCH.search(text)]
             if m and int(m.group(1), 16) < at]
    if not loops:
        raise SystemExit("no loop in the SASS (a single K step?)")
    start, end = max(loops, key=lambda span: span[1] - span[0])
    return [text for at, text in code if start <= at <= end]


def compile_sass(args) -> tuple[str, str]:
    """(ptxas's report, the SASS) of int4_linear_kernel at args' launch."""
    from nbx.kernels.matmul.quantized import int4_linear_kernel
    bf16 = lambda: Pointer("torch.bfloat16")  # noqa: E731
    block_m = args.m if args.form == "gemv" else max(16, args.m)
    prescaled = args.form == "prescaled"
    launch = [bf16(), Pointer("torch.uint8"), bf16(), bf16(), Pointer("torch.uint8"), bf16(), bf16(), bf16(),
              Pointer("torch.float32"), bf16(), bf16(), args.m, args.n, args.k, args.k, 1, args.k // 2,
              args.k // args.group, 0, 0, 0, 0, 0, 0]
    meta = dict(DOT=tl.bfloat16, PRECISION=None, GROUP=args.group, SIGNED=False, ASYMMETRIC=True,
                FOLD=block_m <= 32 and not prescaled, PRESCALED=prescaled, WIDE=False, BLOCK_M=block_m,
                BLOCK_N=args.block_n, BLOCK_K=args.block_k,
                GROUP_M=8, SPLIT_K=args.split_k, HAS_BIAS=False, ACTIVATION=None, HAS_RES=False,
                GEMV=args.form == "gemv", STAGES=args.stages, GATED=args.gated, PDL=True,
                num_warps=args.warps, num_stages=args.stages)
    ptx, _ = jit_stages(int4_linear_kernel, launch, meta, "ptx")
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "k.ptx").write_text(ptx)
        arch = re.search(r"^\.target (sm_\w+)", ptx, re.M).group(1)   # the PTX's own target (sm_90a where it needs wgmma)
        done = subprocess.run([str(BIN / "ptxas"), f"-arch={arch}", "-v", "k.ptx", "-o", "k.cubin"], cwd=folder,
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"ptxas failed: {done.stderr[-2000:]}")
        report = done.stderr
        sass = subprocess.run([str(BIN / "cuobjdump"), "-sass", "k.cubin"], cwd=folder, capture_output=True,
                              text=True, check=True).stdout
    return report, sass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--n", type=int, default=14336)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--group", type=int, default=128)
    parser.add_argument("--form", choices=("gemv", "tiles", "prescaled"), default="gemv")
    parser.add_argument("--block-n", type=int, default=32)
    parser.add_argument("--block-k", type=int, default=512)
    parser.add_argument("--warps", type=int, default=2)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--split-k", type=int, default=1)
    parser.add_argument("--gated", action="store_true", help="the gated pair (two weights a K step)")
    args = parser.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)
    report, sass = compile_sass(args)
    registers = re.search(r"Used (\d+) registers", report)
    body = main_loop(instructions(sass))
    # a K step's nibbles a thread: the tile's weight elements (both weights when gated) over the threads
    nibbles = args.block_n * args.block_k * (2 if args.gated else 1) / (32 * args.warps)
    ops = collections.Counter(text.split()[0] for text in body)
    print(f"int4 {args.form} m={args.m} n={args.n} k={args.k}{' gated' if args.gated else ''}: block_n "
          f"{args.block_n}, block_k {args.block_k}, {args.warps} warps, {args.stages} stages, split_k {args.split_k}; "
          f"Triton {triton.__version__}")
    print(f"registers {registers.group(1) if registers else '?'}; main loop {len(body)} instructions a K step, "
          f"{nibbles:.0f} nibbles a thread: {len(body) / nibbles:.2f} instructions a nibble")
    print("  " + ", ".join(f"{op} {count}" for op, count in ops.most_common(14)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

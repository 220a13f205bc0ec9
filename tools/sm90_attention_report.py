"""Compile the flash prefill kernel for sm_90 without a GPU and say what the H200 would run: registers,
spills to local memory (the stack, and the STL stores in the SASS), shared memory, whether both products are wgmma and whether the loop was warp-
specialized (setmaxnreg), for each candidate the tunable keeps at a 4k key of these head dims (--all: the whole PREFILL_PARAMS grid).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/sm90_attention_report.py [--head-dim 128]
        [--group 1] [--causal] [--tma] [--only block_m=128,block_n=64,...]

Triton's compiler and its bundled ptxas (and cuobjdump for the resource counts) do the work; nothing
launches. A candidate that fails to compile is printed with the compiler's last line.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)   # the real compiler, not the interpreter's front-end

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

_POINTERS = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "lse_ptr": "*fp32",
             "mask_ptr": "*bf16", "slope_ptr": "*fp32", "cu_q_ptr": "*i32", "kv_len_ptr": "*i32", "table_ptr": "*i32"}
_FLOATS = ("scale", "softcap")


def prefill_flags(head_dim: int, group: int, causal: bool, tma: bool, setting: dict) -> dict:
    """The constexprs nbx.kernels.attention._build gives a dense bf16 SDPA launch (no options)."""
    from nbx.kernels.attention.tuning import pow2_at_least
    return dict(GROUP=group, HEAD_DIM=head_dim, V_DIM=head_dim, BLOCK_M=setting["block_m"],
                BLOCK_N=setting["block_n"], BLOCK_D=pow2_at_least(head_dim), BLOCK_DV=pow2_at_least(head_dim),
                VARLEN_Q=False, KV_MODE=0, BOTTOM_RIGHT=causal, HAS_LEFT=False, HAS_RIGHT=causal, SOFTCAP=False,
                ALIBI=False, MASK_KIND=0, WRITE_LSE=False, SPLIT=False, DOT=tl.bfloat16, IEEE=False, WIDE=False,
                TMA=tma and setting["loads"] == "tma", FOLD=True,
                **{k: setting[k] for k in setting if k not in ("block_m", "block_n", "loads", "num_warps",
                                                                 "num_stages", "max_registers")})


def compile_report(kernel, flags: dict, num_warps: int, num_stages: int, maxnreg: int | None = None) -> dict:
    signature = {name: _POINTERS.get(name, "fp32" if name in _FLOATS else "i32") for name in kernel.arg_names
                 if name not in flags}
    signature.update({name: "constexpr" for name in flags})
    # what Triton's launcher specializes at a bench shape: every pointer 16-byte aligned, every length and
    # stride a multiple of 16 (the lowering is blind to vector widths without these hints)
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
             if signature[name] != "constexpr" and signature[name] not in ("fp32",)}
    src = ASTSource(kernel, signature, constexprs=flags, attrs=attrs)
    done = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps,
                                                                                num_stages=num_stages, maxnreg=maxnreg))
    ptx = done.asm["ptx"]
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(done.asm["cubin"])
        f.flush()
        usage = subprocess.run([_tool("cuobjdump"), "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([_tool("cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)   # spilled registers live on the stack (local memory)
    return {"regs": int(regs.group(1)) if regs else None, "stack": int(stack.group(1)) if stack else None,
            "spill_stores": len(re.findall(r"\bSTL", sass)),
            "shared": done.metadata.shared, "wgmma": ptx.count("wgmma.mma_async"),
            "tma": ptx.count("cp.async.bulk.tensor"), "setmaxnreg": "setmaxnreg" in ptx}


SM_REGISTERS, SM_SHARED, SM_WARPS = 65536, 233472, 64   # an sm_90 SM (CUDA occupancy tables)


def resident(report: dict, num_warps: int) -> int:
    """Programs one SM holds at once: registers (8 a thread at a time), shared memory, warps."""
    regs = -(-max(report["regs"] or 1, 1) // 8) * 8 * 32 * num_warps
    return min(SM_REGISTERS // regs, SM_SHARED // max(report["shared"], 1), SM_WARPS // num_warps)


def _tool(name: str) -> str:
    from triton.backends.nvidia import compiler
    path = os.path.join(os.path.dirname(compiler.__file__), "bin", name)
    return path if os.path.exists(path) else name


def main(argv=None) -> int:
    from nbx.kernels.attention import tuning
    from nbx.kernels.attention.flash import prefill_kernel
    p = argparse.ArgumentParser()
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--group", type=int, default=1)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--tma", action="store_true")
    p.add_argument("--only", default=None, help="one setting: name=value,... (the rest swept)")
    p.add_argument("--all", action="store_true", help="every setting of the grid, not only the key's candidates")
    args = p.parse_args(argv)
    only = dict(kv.split("=") for kv in args.only.split(",")) if args.only else {}
    import itertools
    names = list(tuning.PREFILL_PARAMS)
    bad = 0
    from nbx import autotune
    from nbx.core import device_files
    facts = device_files.for_arch("sm_90")
    rep = {"q_len": 4096, "k_len": 4096, "head_dim": args.head_dim, "v_dim": args.head_dim, "group": args.group,
           "dtype": "bfloat16", "causal": args.causal, "tma": args.tma}
    kept = autotune.lookup("attention").candidates(facts, rep)[0] if not args.all else None
    for values in itertools.product(*(tuning.PREFILL_PARAMS[n] for n in names)):
        setting = dict(zip(names, values))
        if kept is not None and setting not in kept:
            continue
        if any(str(setting[k]) != v for k, v in only.items()) or (setting["loads"] == "tma") != args.tma:
            continue
        flags = prefill_flags(args.head_dim, args.group, args.causal, args.tma, setting)
        label = " ".join(f"{k}={v}" for k, v in setting.items())
        try:
            r = compile_report(prefill_kernel, flags, setting["num_warps"], setting["num_stages"],
                               setting["max_registers"] or None)
        except Exception as exc:  # a compile refusal: the certifier's compile step would fail the same way
            bad += 1
            print(f"{label}: FAILED {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:160]}")
            continue
        print(f"{label}: regs {r['regs']} stack {r['stack']} spill stores {r['spill_stores']} shared {r['shared']} wgmma {r['wgmma']} "
              f"tma {r['tma']} ws {r['setmaxnreg']} programs/SM {resident(r, setting['num_warps'])}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

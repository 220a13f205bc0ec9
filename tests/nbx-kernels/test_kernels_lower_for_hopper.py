"""Kernels whose Python front-end the interpreter accepts but Triton's compiler refused on the
H200 are lowered here to TTIR for sm_90, as the compiler's first stage does there: no GPU needed
(a case's fifth item can ask for TTGIR too: the layout passes, still no ptxas).

Triton turns a plain assignment of a constexpr expression into a tensor (so `ns = 1 << p` inside a
static_range made a reshape's shape a tensor), which `TRITON_INTERPRET=1` never sees. The suite
runs under the interpreter, so the lowering runs in a child process without it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.nvidia.compiler")

_LOWER = r'''
import inspect, json, re, sys
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.compiler import ASTSource
from triton._C.libtriton import ir
import importlib

target = GPUTarget("cuda", 90, 32)
backend = CUDABackend(target)
failures = []
import triton.language as tl
for module, name, signature, constexprs, *more in json.loads(sys.argv[1]):
    # a fifth item: launch options (num_warps), and "through": "ttgir" to run the layout passes too
    extra = dict(more[0]) if more else {}
    through = extra.pop("through", "ttir")
    # "dependent": True, the PTX must wait (griddepcontrol.wait) before its first global memory access;
    # False, it must hold no griddepcontrol at all (a plain launch's kernel)
    dependent = extra.pop("dependent", None)
    # "divisible": the integer and pointer arguments the JIT would mark as multiples of 16 (a launch's lengths)
    divisible = extra.pop("divisible", ())
    kernel = getattr(importlib.import_module(module), name)
    # a constexpr spelled "tl.<name>" is Triton's dtype of that name
    constexprs = {k: getattr(tl, v[3:]) if isinstance(v, str) and v.startswith("tl.") else v
                  for k, v in constexprs.items()}
    # a constexpr the case leaves out takes its default, as the JIT gives it (PDL: a plain launch)
    constexprs = {p.name: p.default for p in kernel.params if p.is_constexpr and p.name not in constexprs
                  and p.default is not inspect.Parameter.empty} | constexprs
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    options = backend.parse_options(extra)
    attrs = {(i,): [["tt.divisibility", 16]] for i, arg in enumerate(kernel.arg_names) if arg in divisible}
    source = ASTSource(kernel, {**signature, **{c: "constexpr" for c in constexprs}}, constexprs=constexprs,
                       attrs=attrs)
    try:
        module_ir = source.make_ir(target, options, backend.get_codegen_implementation(options),
                                   backend.get_module_map(), context)
        if through == "ttgir" or dependent is not None:
            stages, metadata = {}, {}
            backend.add_stages(stages, options, source.language)
            module_ir = stages["ttgir"](stages["ttir"](module_ir, metadata), metadata)
        if dependent is not None:
            ptx = stages["ptx"](stages["llir"](module_ir, metadata), metadata)
            memory = re.search(r"\b(ld|st)\.global|\bcp\.async|\batom\.|\bred\.|\bprefetch", ptx)
            wait = ptx.find("griddepcontrol.wait")
            if dependent and not (0 <= wait and (memory is None or wait < memory.start())):
                failures.append(f"{name} {constexprs}: touches memory before griddepcontrol.wait ({wait}, "
                                f"{memory and memory.group(0)} at {memory and memory.start()})")
            if not dependent and "griddepcontrol" in ptx:
                failures.append(f"{name} {constexprs}: griddepcontrol in a plain launch's kernel")
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
                          "WINDOWED": half and rows == 4, "STEPS": 4 if rows == 4 else 1})
             for n, load, half in ((16, 0, False), (2048, 0, False), (1000, 2, False), (1024, 1, True), (400, 1, True))
             for sign in (-1, 1) for rows in (1, 4) for precision in ("ieee", "tf32x3")]
    cases += [(*IRFFT_TILE, {**_tile_meta(n, True), "ROWS": rows, "PRECISION": precision,
                                 "STEPS": 4 if rows == 4 else 1})
              for n in (16, 400, 2048) for rows in (1, 4) for precision in ("ieee", "tf32x3")]
    cases += [(*FFT_COLUMN, {"M": m, "R": r, "RP": max(16, r), "BLOCK_M": block, "SIGN": sign, "LOAD": load,
                             "PRECISION": precision})
              for m, r, block in ((512, 16, 16), (2048, 32, 128)) for load in (0, 1, 4) for sign in (-1, 1)
              for precision in ("ieee", "tf32x3")]
    assert lowering_failures(cases) == []


def test_the_split_softmax_write_lowers_through_the_layout_passes_at_a_64_row_tile_with_lengths_of_16s():
    """Triton 3.6's OptimizeThreadLocality pass failed on the partials' reduced loop result used three times
    (64 rows x 128 columns, 8 warps, every length a multiple of 16): the certifier's compile shards failed on it."""
    pointers = {"x_ptr": "*bf16", "out_ptr": "*bf16", "mask_ptr": "*bf16", "part_ptr": "*fp32"}
    from nbx.kernels.softmax.kernel import chunk_write_kernel
    ints = [a for a in chunk_write_kernel.arg_names if a.islower() and a not in pointers and a != "scale_bits"]
    signature = {**pointers, **dict.fromkeys(ints, "i32"), "scale_bits": "i64"}
    cases = [("nbx.kernels.softmax.kernel", "chunk_write_kernel", signature,
              {"LOG": log, "SCALED": False, "MASK_KIND": 0, "COMPUTE": "tl.float32", "BLOCK_ROWS": rows,
               "BLOCK_N": 128, "PART_BLOCK": 32, "WIDE": False},
              {"num_warps": warps, "through": "ttgir", "divisible": [*pointers, *ints]})
             for rows in (1, 64) for warps in (8, 32) for log in (False, True)]
    assert lowering_failures(cases) == []


def test_the_onesweep_sort_and_the_candidate_select_lower_for_sm90():
    """Their loops carry values the interpreter never types (a reused `_` across a loop was one)."""
    radix, select = "nbx.kernels.sort.radix", "nbx.kernels.sort.select"
    scatter = {"v_ptr": "*fp32", "i_ptr": "*i32", "v_out": "*fp32", "i_out": "*i64", "state_ptr": "*i32", "n": "i32",
               "groups": "i32", "digit_at": "i32", "pass_at": "i32"}
    rows = {"x_ptr": "*fp32", "hist_ptr": "*i32"}
    candidates = {**rows, "cand_ptr": "*i32", "taken_ptr": "*i32"}
    cases = [(radix, "radix_histogram_kernel", {"v_ptr": "*fp32", "state_ptr": "*i32", "n": "i32", "chunk": "i32"},
              {"DESCENDING": False, "BITS": bits, "BLOCK": 2048}) for bits in (4, 8)]
    cases += [(radix, "radix_scatter_kernel", scatter,
               {"DESCENDING": True, "BITS": bits, "BLOCK": 2048, "GROUP": group, "WINDOW": 8})
              for bits in (4, 8) for group in (1, 4)]
    common = {"LARGEST": True, "BLOCK": 2048}
    cases += [(select, "select_histogram_kernel", {**rows, "n": "i32", "chunk": "i32"}, common),
              (select, "select_filter_kernel", {**rows, "words_ptr": "*u64", "cand_ptr": "*i32", "taken_ptr": "*i32",
                                                "n": "i32", "k": "i32", "chunk": "i32"}, common),
              (select, "candidate_histogram_kernel", {**candidates, "n": "i32", "k": "i32", "chunk": "i32"},
               {**common, "PASS": 2}),
              (select, "select_counts_kernel", {**candidates, "counts_ptr": "*i32", "n": "i32", "k": "i32",
                                                "chunk": "i32"}, common),
              (select, "select_compact_kernel", {**candidates, "counts_ptr": "*i32", "words_ptr": "*u64", "n": "i32",
                                                 "k": "i32", "chunk": "i32"}, {**common, "PROGRAMS": 16})]
    assert lowering_failures(cases) == []


def test_the_chunk_candidates_of_top_k_lower_for_sm90_through_the_layout_passes():
    """tl.topk's hypercube of 64-bit words at the chunks and k the H200 runs (k = 50 and 1024 of
    [64, 151936] rows), the bound's compaction (CAP) and none, the bf16 load, both final forms
    (values written) and not."""
    chunks = "nbx.kernels.sort.chunks"
    outs = {"vals_ptr": "*fp32", "idx_ptr": "*i64", "n": "i32", "k": "i32"}
    first = {"x_ptr": "*fp32", "out_ptr": "*u64", "vals_ptr": "*fp32", "idx_ptr": "*i64", "scratch_ptr": "*u64",
             "bound_ptr": "*u64", "n": "i32", "k": "i32"}
    cases = [(chunks, "chunk_candidates_kernel", {**first, "x_ptr": x},
              {"LARGEST": largest, "FINAL": final, "CHUNK": chunk, "K": big, "CAP": cap, "ROW_BOUND": row},
              {"num_warps": 8, "through": "ttgir"})
             for x, largest, final, chunk, big, cap, row in (("*fp32", True, False, 4096, 64, 512, False),
                                                             ("*bf16", False, True, 2048, 64, 512, False),
                                                             ("*bf16", False, True, 2048, 1024, 256, True),
                                                             ("*fp32", True, False, 4096, 1024, 512, True),
                                                             ("*fp32", True, False, 8192, 1024, 1024, True),
                                                             ("*fp32", True, False, 4096, 1024, 0, False))]
    cases += [(chunks, "row_bound_kernel", {"x_ptr": x, "bound_ptr": "*u64", "n": "i32"},
               {"LARGEST": largest, "CHUNK": chunk, "K": big}, {"num_warps": 8, "through": "ttgir"})
              for x, largest, chunk, big in (("*fp32", True, 4096, 1024), ("*bf16", False, 8192, 512))]
    cases += [(chunks, "merge_candidates_kernel", {"x_ptr": "*fp32", "in_ptr": "*u64", "out_ptr": "*u64", **outs,
                                                   "lists": "i32", "group": "i32"},
               {"FINAL": final, "LOG_RUNS": runs, "LOG_K": big}, {"num_warps": 8, "through": "ttgir"})
              for final, runs, big in ((True, 6, 6), (False, 2, 10), (True, 2, 10), (True, 1, 4))]
    assert lowering_failures(cases) == []


def _typed(names: str, kind: str) -> dict:
    return {name: kind for name in names.split()}


_ROW_STRIDES = "xs0 xs1 xs2 xsn rs0 rs1 rs2 rsn os0 os1 os2 osn"
NORM_ROWS = ("nbx.kernels.norm.kernel", "norm_rows_kernel", {
    **_typed("x_ptr res_ptr out_ptr new_res_ptr w_ptr b_ptr", "*bf16"),
    **_typed(f"rows n b1 b2 {_ROW_STRIDES} groups group_channels positions xso oso", "i32"), "eps_bits": "i64"})
NORM_STATS = ("nbx.kernels.norm.kernel", "norm_chunk_stats_kernel", {
    **_typed("x_ptr res_ptr new_res_ptr", "*bf16"), "part_ptr": "*fp32",
    **_typed(f"rows n chunks b1 b2 {_ROW_STRIDES} xso oso", "i32")})
NORM_WRITE = ("nbx.kernels.norm.kernel", "norm_chunk_write_kernel", {
    **_typed("x_ptr new_res_ptr out_ptr w_ptr b_ptr", "*bf16"), "part_ptr": "*fp32",
    **_typed("rows n chunks b1 b2 xs0 xs1 xs2 xsn os0 os1 os2 osn groups group_channels positions xso oso",
             "i32"), "eps_bits": "i64"})
CONV_GEMM = ("nbx.kernels.conv.kernel", "conv_gemm_kernel", {
    **_typed("x w bias out res", "*bf16"),
    **_typed("BATCH C_G D H W O_G OD OH OW KD KH KW sd sh sw pd ph pw dd dh dw xs_n xs_c xs_d xs_h xs_w ws_g ws_o "
             "ws_c ws_d ws_h ws_w os_n os_c os_d os_h os_w rs_n rs_c rs_d rs_h rs_w split_stride", "i32")})
GRID_SAMPLE = ("nbx.kernels.resample.kernel", "grid_sample_kernel", {
    **_typed("x grid out", "*bf16"),
    **_typed("N C H W OH OW xs_n xs_c xs_h xs_w gs_n gs_h gs_w gs_k os_n os_c os_h os_w", "i32")})


def test_the_image_kernels_lower_for_sm90():
    """Group norm's kernels channels-last (TWO_D) with SiLU, grid_sample in every mode and padding,
    the implicit GEMM with its fused upsample: one child process (its start is most of the cost)."""
    rows = dict(RMS=False, ADD=False, HAS_W=True, HAS_B=True, GROUPED=True, COMPUTE="tl.float32", BLOCK_ROWS=1,
                BLOCK_N=1024, WIDE=False)
    cases = [(*NORM_ROWS, {**rows, "ONE_PASS": one_pass, "INNER": inner, "TWO_D": inner > 1, "ACTIVATION": act})
             for one_pass in (True, False) for inner in (0, 1, 16) for act in (None, "silu")]
    cases += [(*NORM_STATS, {k: rows[k] for k in ("RMS", "ADD", "COMPUTE", "BLOCK_ROWS", "BLOCK_N", "WIDE")}
               | {"INNER": 16, "TWO_D": True})]
    cases += [(*NORM_WRITE, {**rows, "PART_BLOCK": 32, "INNER": 10, "TWO_D": True, "ACTIVATION": "silu"})]
    cases += [(*GRID_SAMPLE, {"NEAREST_MODE": nearest, "PADDING": padding, "ALIGN": align, "BLOCK_P": 64,
                              "BLOCK_C": 32})
              for nearest in (False, True) for padding in (0, 1, 2) for align in (False, True)]
    # a 1-pixel input: Triton specializes an int argument equal to 1 into a constexpr (the H200 refused `.to` on it)
    one_pixel = {k: v for k, v in GRID_SAMPLE[2].items() if k not in ("H", "W")}
    cases += [(GRID_SAMPLE[0], GRID_SAMPLE[1], one_pixel, {"NEAREST_MODE": False, "PADDING": 2, "ALIGN": False,
                                                           "BLOCK_P": 64, "BLOCK_C": 32, "H": 1, "W": 1})]
    gemm = dict(HAS_BIAS=True, ACTIVATION="silu", HAS_RES=False, DOT="tl.bfloat16", IEEE=False,
                BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, WIDE=True, EVEN_C=False, ONE_TAP=False, B_DESC=False,
                SPLIT_K=1, A_TILE=False, A_SHIFT=False, TAPS_W=1, PAD_W=0, DIL_W=1)
    cases += [(*CONV_GEMM, {**gemm, "UP_D": 1, "UP_H": up, "UP_W": up}) for up in (1, 2)]
    # the plain convolution's int32 offsets, whole channel blocks and descriptor-read weight (a transposed
    # convolution's phase is this plain form with a negative dilation, a runtime argument)
    cases += [(*CONV_GEMM, {**gemm, "WIDE": False, "EVEN_C": True, "BLOCK_N": 256, "UP_D": 1, "UP_H": 1, "UP_W": 1,
                            "B_DESC": True}),
              (*CONV_GEMM, {**gemm, "ONE_TAP": True, "EVEN_C": True, "UP_D": 1, "UP_H": 1, "UP_W": 1})]
    # a channels-first A tile's pointers formed once (A_TILE); split K: float32 partials, the first step's
    # counters divided out once
    cases += [(CONV_GEMM[0], CONV_GEMM[1], {**CONV_GEMM[2], "out": "*fp32"},
               {**gemm, "HAS_BIAS": False, "ACTIVATION": None, "WIDE": False, "EVEN_C": True, "UP_D": 1, "UP_H": 1,
                "UP_W": 1, "B_DESC": True, "SPLIT_K": 4}),
              (*CONV_GEMM, {**gemm, "WIDE": False, "EVEN_C": True, "UP_D": 1, "UP_H": 1, "UP_W": 1, "B_DESC": True,
                            "A_TILE": True})]
    # a channels-first conv1d's aligned loads and static shifts (A_SHIFT): HiFi-GAN's k 7, its resblocks' dilation 5
    cases += [(*CONV_GEMM, {**gemm, "WIDE": False, "EVEN_C": even, "UP_D": 1, "UP_H": 1, "UP_W": 1, "B_DESC": even,
                            "A_SHIFT": True, "TAPS_W": taps, "PAD_W": pad, "DIL_W": dil})
              for even, taps, pad, dil in ((True, 7, 3, 1), (False, 3, 5, 5))]
    assert lowering_failures(cases) == []


FUSED_MATMUL = ("nbx.kernels.matmul.fused", "fused_matmul_kernel", {
    **_typed("a_ptr b_ptr g_ptr c_ptr bias_ptr res_ptr nw_ptr", "*bf16"), **_typed("part_ptr sq_ptr xs_ptr ws_ptr", "*fp32"),
    **_typed("M N K sa0 sam sak sb0 sbk sbn sbias0 sbias_m sbias_n sres0 sres_m sres_n sxs sws sxk swk", "i32"),
    **_typed("alpha_bits beta_bits eps_bits", "i64")})
SPLIT_EPILOGUE = ("nbx.kernels.matmul.fused", "split_epilogue_kernel", {
    **_typed("part_ptr sq_ptr", "*fp32"), **_typed("c_ptr bias_ptr res_ptr", "*bf16"),
    **_typed("M N K BATCH sbias0 sbias_m sbias_n sres0 sres_m sres_n", "i32"),
    **_typed("alpha_bits beta_bits eps_bits", "i64")})


ROPE = ("nbx.kernels.attention.rope", "rope_kernel", {
    **_typed("x_ptr out_ptr v_ptr v_out_ptr q_ptr q_out_ptr", "*bf16"), **_typed("cos_ptr sin_ptr", "*fp32"),
    **_typed("pos_ptr slot_ptr", "*i64"),
    **_typed("tokens heads q_heads max_positions out_rows sxt sxh sct sot soh svt svh svot svoh sqt sqh sqot sqoh",
             "i32")})


def test_the_decode_steps_fused_product_norm_and_rope_lower_for_sm90():
    """The decode product with and without its norm (normed_k_steps), plain, gated and split, its gemv
    form (gemv_k_steps), the split epilogue's rstd, and the rope kernel alone, with the cache write
    and with q: one child process."""
    product = dict(DOT="tl.bfloat16", ACC="tl.float32", PRECISION=None, WIDE=False, BLOCK_M=16, BLOCK_N=64,
                   BLOCK_K=128, GROUP_M=8, HAS_BIAS=False, ACTIVATION=None, HAS_RES=True, SCALED=False,
                   BLOCK_SCALED=False, GEMV=False)
    cases = [(*FUSED_MATMUL, {**product, "EVEN_K": even, "SPLIT_K": split, "GATED": gated, "NORM": norm,
                              "ACTIVATION": "silu" if gated else None, "HAS_RES": not gated})
             for norm in (False, True) for split in (1, 4) for gated in (False, True) for even in (True, False)]
    cases += [(*FUSED_MATMUL, {**product, "GEMV": True, "BLOCK_M": rows, "BLOCK_N": 4, "BLOCK_K": 512, "EVEN_K": even,
                               "SPLIT_K": 1, "GATED": gated, "NORM": norm, "ACTIVATION": "silu" if gated else None,
                               "HAS_RES": not gated})
              for norm, gated, even, rows in ((False, False, True, 1), (True, True, False, 1), (True, False, True, 2))]
    cases += [(*SPLIT_EPILOGUE, {"ACC": "tl.float32", "SPLIT_K": 4, "BLOCK": 1024, "HAS_BIAS": False,
                                 "ACTIVATION": "silu" if gated else None, "HAS_RES": not gated, "GATED": gated,
                                 "NORM": norm}) for norm in (False, True) for gated in (False, True)]
    common = dict(DIM=128, V_DIM=128, BLOCK_TOKENS=2, BLOCK_H=8, BLOCK_QH=32, BLOCK_V=128)
    cases += [(*ROPE, {**common, "HALF": half, "INTERLEAVED": interleaved, "SLOTS": slots, "COPY_V": slots,
                       "ROTATE_Q": q, "BLOCK_R": max(half, 1), "BLOCK_P": max(128 - 2 * half, 1)})
              for half, interleaved, slots, q in ((64, False, False, False), (64, True, True, False),
                                                  (64, False, True, True), (32, True, True, True), (0, False, True, False))]
    assert lowering_failures(cases) == []


TMA_MATMUL = ("nbx.kernels.matmul.hopper", "tma_matmul_kernel")


def _product_signature(operand: str, out: str, ints: str, extra: str = "") -> dict:
    return {**_typed("a_ptr b_ptr g_ptr", operand), **_typed("c_ptr bias_ptr res_ptr", out), **_typed(extra, "*fp32"),
            **_typed("xs_ptr ws_ptr", "*fp32"), **_typed(ints, "i32"), **_typed("alpha_bits beta_bits", "i64")}


def test_the_float32_float8_and_batched_products_lower_for_sm90():
    """The descriptor kernel's TF32 (its weight rounded before it, or in the K loop) / 3xTF32 / IEEE
    float32 and its float8 128 x 256 x 128 tile (the linear-fp keys' widest candidates), the TF32
    rounding pass, and the pointer kernel's batched bfloat16 product (bmm)."""
    epilogue = dict(HAS_BIAS=False, ACTIVATION=None, HAS_RES=False, GATED=False)
    tma = {**epilogue, "ACC": "tl.float32", "B_KMAJOR": True, "BLOCK_M": 128, "GROUP_M": 8, "PROGRAMS": 132,
           "WARP_SPECIALIZE": False}
    tma_ints = "M N K sam sb sbias_m sbias_n sres_m sres_n sxs sws"
    cases = [(*TMA_MATMUL, _product_signature("*fp32", "*fp32", tma_ints),
              {**tma, "DOT": "tl.float32", "PRECISION": precision, "BLOCK_N": 256, "BLOCK_K": 32, "SCALED": False,
               "B_ROUNDED": rounded, "HALF_STORE": True})
             for precision, rounded in (("ieee", False), ("tf32", True), ("tf32", False), ("tf32x3", False))]
    cases.append(("nbx.kernels.matmul.hopper", "tf32_round_kernel",
                  {**_typed("src_ptr dst_ptr", "*fp32"), **_typed("ROWS COLS stride", "i32")},
                  {"BLOCK_R": 8, "BLOCK_C": 512}))
    cases += [(*TMA_MATMUL, _product_signature("*fp8e4nv", "*bf16", tma_ints),
               {**tma, "DOT": "tl.float8e4nv", "PRECISION": None, "BLOCK_N": 256, "BLOCK_K": 128, "SCALED": True,
                "WARP_SPECIALIZE": ws, "B_ROUNDED": False, "HALF_STORE": False}) for ws in (False, True)]
    cases.append((*FUSED_MATMUL, {**epilogue, "DOT": "tl.bfloat16", "ACC": "tl.float32", "PRECISION": None,
                                  "EVEN_K": True, "WIDE": False, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64,
                                  "GROUP_M": 8, "SPLIT_K": 1, "SCALED": False, "BLOCK_SCALED": False, "NORM": False,
                                  "GEMV": False}))
    assert lowering_failures(cases) == []


_FLASH_INTS = ("q_len k_len kv_heads window_left window_right block_tokens stride_table sqb sqh sql skb skh sks svb svh "
               "svs sob soh sol slb slh sll smb smh sml sms sab sah split_len sos sls")
FLASH_PREFILL = ("nbx.kernels.attention.flash", "prefill_kernel", {
    **_typed("q_ptr k_ptr v_ptr o_ptr mask_ptr", "*bf16"), **_typed("lse_ptr slope_ptr", "*fp32"),
    **_typed("cu_q_ptr kv_len_ptr table_ptr", "*i32"), **_typed(_FLASH_INTS, "i32"), **_typed("scale softcap", "fp32")})
FLASH_COMBINE = ("nbx.kernels.attention.flash", "combine_kernel", {
    **_typed("part_ptr part_lse_ptr lse_ptr", "*fp32"), "o_ptr": "*bf16",
    **_typed("rows_per_batch heads splits sob soh sol slb slh sll", "i32")})


def _flash(**change) -> dict:
    """prefill_kernel's constexprs for a dense bf16 causal launch at head dim 128, with change applied."""
    flags = dict(GROUP=1, HEAD_DIM=128, V_DIM=128, BLOCK_M=128, BLOCK_N=64, BLOCK_D=128, BLOCK_DV=128, VARLEN_Q=False,
                 KV_MODE=0, BOTTOM_RIGHT=True, HAS_LEFT=False, HAS_RIGHT=True, SOFTCAP=False, ALIBI=False, MASK_KIND=0,
                 WRITE_LSE=False, SPLIT=False, DOT="tl.bfloat16", IEEE=False, WIDE=False, TMA=True, FOLD=True)
    return {**flags, **change}


def test_the_flash_prefill_and_decode_kernels_lower_for_sm90_on_every_path_they_serve():
    """The descriptor and pointer loads, causal and not, a left window (the checked walk before), GQA,
    packed and paged keys, every score option, the split-K decode and its merge; ints Triton may
    specialize to 1 (one KV head, dense keys' block of one token, one query token) as constexprs."""
    cases = [(*FLASH_PREFILL, _flash(TMA=tma, HAS_RIGHT=causal, BOTTOM_RIGHT=causal, BLOCK_N=64 + 64 * causal,
                                     GROUP=group))
             for tma in (True, False) for causal in (True, False) for group in (1, 4) if tma or group == 4]
    cases += [(*FLASH_PREFILL, _flash(**change)) for change in (
        dict(HAS_LEFT=True), dict(KV_MODE=1, VARLEN_Q=True), dict(KV_MODE=2, TMA=False, VARLEN_Q=True, WIDE=True),
        dict(SOFTCAP=True, FOLD=False, WRITE_LSE=True), dict(ALIBI=True, MASK_KIND=2, FOLD=False, TMA=False),
        dict(MASK_KIND=1, HEAD_DIM=80, V_DIM=64, BLOCK_DV=64), dict(HEAD_DIM=256, BLOCK_D=256, V_DIM=256, BLOCK_DV=256),
        dict(DOT="tl.float32", IEEE=True, TMA=False, BLOCK_M=64),
        dict(SPLIT=True, TMA=False, BLOCK_M=16, WRITE_LSE=True, KV_MODE=2, GROUP=4))]
    one = {k: v for k, v in FLASH_PREFILL[2].items() if k not in ("kv_heads", "block_tokens", "q_len")}
    cases += [(FLASH_PREFILL[0], FLASH_PREFILL[1], one, _flash(kv_heads=1, block_tokens=1, q_len=1, GROUP=8,
                                                               BLOCK_M=16, SPLIT=True, TMA=False))]
    cases += [(*FLASH_COMBINE, dict(V_DIM=128, BLOCK_S=16, BLOCK_DV=128, WRITE_LSE=lse)) for lse in (False, True)]
    assert lowering_failures(cases) == []


REMAP = ("nbx.kernels.copies.kernel", "remap_kernel", {
    **_typed("out_ptr src_ptr fill_ptr", "*u16"),
    **_typed("rows col_blocks o1 o2 o3 n0 n1 n2 n3 a0 a1 a2 a3 s0 s1 s2 s3 t0 t1 t2 t3", "i32")})
CONCAT = ("nbx.kernels.copies.kernel", "concat_kernel", {
    **_typed("out_ptr src0 src1 src2 src3", "*u16"),
    **_typed("rows out_row w0 w1 w2 w3 sr0 sr1 sr2 sr3 col0 col1 col2 col3 end0 end1 end2", "i32")})
SCATTER_ADD = ("nbx.kernels.gather.kernel", "scatter_add_kernel", {
    "out_ptr": "*fp32", "idx_ptr": "*i64", "src_ptr": "*fp32", "count_ptr": "*i32", "flag_ptr": "*i64",
    **_typed("n k rows inner idx_s0 idx_s1 idx_s2 src_s0 src_s1 src_s2", "i32")})


def test_the_remap_copy_in_every_mode_path_and_the_grouped_concat_and_atomic_scatter_lower_for_sm90():
    """The remap's row tile, its flat-output walk (a pad's odd rows), its 16-byte flip groups and its
    shifted 16-byte groups (every word size, both walks, every mode but the flip's); the concat of
    four parts a launch; the relaxed atomic scatter, its index checked per element or per row."""
    base = dict(FILL_WORDS=1, INDEX64=False, BLOCK_R=2, BLOCK_C=1024, SHIFT_VEC=1)
    cases = [(*REMAP, {**base, "MODE": mode, "MAP_INNER": mode != 0, "FLAT_ROWS": flat_rows, "FLAT_OUT": flat_out,
                       "FLIP_VEC": 1, "INDEX64": wide, "ROW_DIMS": 1 if flat_rows else row_dims})
             for mode in range(7) for flat_rows in (False, True) for flat_out in (False, True)
             for wide in ((False, True) if mode < 2 else (False,)) for row_dims in ((2, 3) if mode < 2 else (3,))]
    cases += [(*REMAP, {**base, "MODE": 5, "MAP_INNER": True, "FLAT_ROWS": False, "FLAT_OUT": False, "FLIP_VEC": 8,
                        "ROW_DIMS": 3})]
    cases += [(REMAP[0], REMAP[1], {**REMAP[2], **_typed("out_ptr src_ptr fill_ptr", word)},
               {**base, "MODE": mode, "MAP_INNER": mode != 0, "FLAT_ROWS": True, "FLAT_OUT": flat_out, "FLIP_VEC": 1,
                "SHIFT_VEC": 16 // size, "ROW_DIMS": 1, "INDEX64": wide})
              for mode in (0, 1, 2, 3, 4, 6) for flat_out in (False, True) for size, word in ((2, "*u16"), (1, "*u8"))
              for wide in ((False, True) if mode == 1 else (False,))]
    cases += [(REMAP[0], REMAP[1], {**REMAP[2], **_typed("out_ptr src_ptr fill_ptr", word)},
               {**base, "MODE": 1, "MAP_INNER": True, "FLAT_ROWS": False, "FLAT_OUT": False, "FLIP_VEC": 1,
                "SHIFT_VEC": 16 // size, "ROW_DIMS": 3, "FILL_WORDS": 1})
              for size, word in ((4, "*u32"), (8, "*u64"))]
    cases += [(*CONCAT, {"INDEX64": wide, "BLOCK_R": 2, "BLOCK_C": 1024}) for wide in (False, True)]
    cases += [(*SCATTER_ADD, {"ROWS": 1, "COLS": 1024, "CLEAR": clear, "TAG": 1 << 40, "ROW_INDEX": row_index})
              for clear in (False, True) for row_index in (False, True)]
    assert lowering_failures(cases) == []


_GEMM = dict(DOT="tl.bfloat16", ACC="tl.float32", PRECISION=None, EVEN_K=True, BLOCK_M=64, BLOCK_N=128, BLOCK_K=64,
             GROUP_M=8, INT4=False, GROUP=1, SIGNED=False, ASYMMETRIC=False)
GATE_UP = ("nbx.kernels.moe.kernel", "expert_gate_up_kernel", {
    **_typed("x_ptr wg_ptr wu_ptr sg_ptr zg_ptr su_ptr zu_ptr h_ptr", "*bf16"),
    **_typed("sorted_ptr block_experts_ptr", "*i32"),
    **_typed("ROWS N K P TOP_K sx_t sx_k sw_e sw_n sw_k ss_e ss_n W_ROWS", "i32")})
DOWN = ("nbx.kernels.moe.kernel", "expert_down_kernel", {
    **_typed("h_ptr wd_ptr sd_ptr zd_ptr out_ptr", "*bf16"), "weights_ptr": "*fp32",
    **_typed("sorted_ptr block_experts_ptr", "*i32"), **_typed("ROWS N K P sw_e sw_n sw_k ss_e ss_n W_ROWS", "i32")})


_ROUTE_ARGS = {"logits_ptr": "*bf16", "bias_ptr": "*fp32", "weights_ptr": "*fp32", "experts_ptr": "*i32",
               **_typed("T E GROUP_SIZE s_t s_e", "i32"), "scaling_bits": "i64"}
ROUTE_ALIGN = ("nbx.kernels.moe.kernel", "route_align_kernel", {
    **_ROUTE_ARGS, **_typed("sorted_ptr block_experts_ptr inverse_ptr padded_ptr", "*i32"), "CAPACITY": "i32"})


def test_the_moe_kernels_lower_for_sm90():
    """route_kernel and the band's route_align_kernel (routing and alignment in one program) at
    Qwen3-MoE's (128 experts, top-8), Mixtral's (8, top-2), DeepSeek-V2-Lite's (64, top-6) and
    DeepSeek-V3's grouped, biased routing (256 experts, 8 groups, 4 kept, top2, top-8); the band
    at 1 to 16 tokens, specialized as its launches are (unit expert stride, one token) at their
    warps, and through TTGIR where Triton 3.6's layout pass broke dominance in it (sm_90: 4 and
    8 tokens of 8 experts, one of 64), which TTIR never showed; the expert GEMMs
    through pointers and through descriptors (one child process: its start is most of the cost)."""
    from nbx.kernels.rows import pow2_at_least
    cases = []
    unit_stride = {k: v for k, v in ROUTE_ALIGN[2].items() if k != "s_e"}
    for experts, top_k, groups, kept, sigmoid in ((128, 8, 1, 1, False), (8, 2, 1, 1, False), (64, 6, 1, 1, False),
                                                  (256, 8, 8, 4, True)):
        route = dict(TOP_K=top_k, SIGMOID=sigmoid, RENORM=True, HAS_BIAS=sigmoid, GROUPS=groups, KEPT=kept,
                     TOP2=sigmoid, BLOCK_E=experts, BLOCK_G=groups, BLOCK_K=pow2_at_least(top_k))
        cases.append(("nbx.kernels.moe.kernel", "route_kernel", _ROUTE_ARGS, {**route, "BLOCK_T": 16}))
        for tokens, block_m in ((1, 16), (4, 16), (8, 16), (16, 16), (16, 32)):
            signature = {k: v for k, v in unit_stride.items() if k != "T"} if tokens == 1 else unit_stride
            band = {**route, "BLOCK_T": tokens, "BLOCK_M": block_m, "BLOCKS_PER_EXPERT": 1, "BLOCK": 1024, "s_e": 1}
            warps = min(16, max(4, pow2_at_least(tokens * experts // 512)))   # moe._route_align_launch's
            # the layout passes (0.4-2.5 s a case) where 3.6's broke
            through = "ttgir" if (experts, tokens) in ((8, 4), (8, 8), (64, 1)) else "ttir"
            cases.append((ROUTE_ALIGN[0], ROUTE_ALIGN[1], signature, {**band, **({"T": 1} if tokens == 1 else {})},
                          {"num_warps": warps, "through": through}))
    cases += [(*kernel, {**_GEMM, "TMA": tma}) for kernel in (GATE_UP, DOWN) for tma in (False, True)]
    assert lowering_failures(cases) == []


def test_the_float8_expert_kernel_lowers_for_sm90_gated_and_down_over_both_float8_types():
    """expert_float8_kernel (block-scaled float8 expert weights, W8A16) at the H200 prefill tile and
    the band's 16-row one, bfloat16 and float16 activations, e4m3 and e5m2 weights."""
    cases = []
    for act, weight, gated, block_m in (("bf16", "fp8e4nv", True, 64), ("bf16", "fp8e4nv", False, 64),
                                        ("fp16", "fp8e5", True, 16), ("fp16", "fp8e5", False, 16)):
        signature = {**_typed("a_ptr out_ptr", f"*{act}"), **_typed("wg_ptr wu_ptr", f"*{weight}"),
                     **_typed("sg_ptr su_ptr weights_ptr", "*fp32"), **_typed("sorted_ptr block_experts_ptr", "*i32"),
                     **_typed("ROWS N K P TOP_K sa_t sa_k sw_e sw_n ss_e ss_n", "i32")}
        meta = dict(DOT=f"tl.{'bfloat16' if act == 'bf16' else 'float16'}", ACC="tl.float32", PRECISION=None,
                    GATED=gated, BLOCK_M=block_m, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SCALE_N=128, SCALE_K=128)
        cases.append(("nbx.kernels.moe.float8", "expert_float8_kernel", signature, meta))
    assert lowering_failures(cases) == []


INT4_LINEAR = ("nbx.kernels.matmul.quantized", "int4_linear_kernel", {
    **_typed("a_ptr c_ptr bias_ptr res_ptr", "*bf16"), "q_ptr": "*u8", "s_ptr": "*bf16", "z_ptr": "*bf16",
    "q2_ptr": "*u8", "s2_ptr": "*bf16", "z2_ptr": "*bf16", "part_ptr": "*fp32", **_typed("M N K sam sak sqn ssn sbias_m sbias_n sres_m sres_n alpha_bits beta_bits", "i32")})


def test_the_int4_linear_kernel_lowers_for_sm90_at_decode_and_prefill_tiles_in_every_scheme():
    """Decode tiles (16 rows of x: the scales applied to the dot's sums), prefill tiles (each
    weight element dequantized) and prescaled tiles, asymmetric and symmetric, bfloat16 and float16
    (the inline PTX's two forms) and float32 activations, split and unsplit."""
    base = dict(PRECISION=None, GROUP=128, WIDE=False, GROUP_M=8, HAS_BIAS=False, ACTIVATION=None, HAS_RES=False,
                GEMV=False, STAGES=3)
    cases = [(*INT4_LINEAR, {**base, "DOT": dot, "PRECISION": "ieee" if dot == "tl.float32" else None,
                             "SIGNED": signed, "ASYMMETRIC": not signed, "FOLD": block_m <= 32, "BLOCK_M": block_m,
                             "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split})
             for dot in ("tl.bfloat16", "tl.float16", "tl.float32")
             for signed, (block_m, block_n, block_k, split) in ((False, (16, 128, 128, 4)), (True, (128, 128, 64, 1)),
                                                                (True, (16, 64, 128, 1)))]
    cases.append((*INT4_LINEAR, {**base, "DOT": "tl.bfloat16", "SIGNED": False, "ASYMMETRIC": True, "FOLD": False,
                                 "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "SPLIT_K": 1, "HAS_BIAS": True,
                                 "ACTIVATION": "silu", "HAS_RES": True}))
    # the prescaled tiles (each step's weight dequantized from its halves): decode and prefill, both schemes, the
    # three activation dtypes (float32: the portable decode)
    cases += [(*INT4_LINEAR, {**base, "PRESCALED": True, "DOT": dot, "PRECISION": "ieee" if dot == "tl.float32" else None,
                              "SIGNED": signed, "ASYMMETRIC": not signed, "FOLD": False, "BLOCK_M": block_m,
                              "BLOCK_N": 128, "BLOCK_K": 128, "SPLIT_K": split})
              for dot, signed, block_m, split in (("tl.bfloat16", False, 16, 4), ("tl.float16", True, 16, 1),
                                                  ("tl.bfloat16", True, 128, 1), ("tl.float32", False, 64, 1))]
    # the gemv kernel (decode rows on the CUDA cores): one row (_gemv_row_sums: the paired conversion of 16-bit
    # activations, the word one of float32, K steps in a group and of eight or four groups), 4 and 16 rows
    cases += [(*INT4_LINEAR, {**base, "GEMV": True, "DOT": dot, "SIGNED": signed, "ASYMMETRIC": not signed, "FOLD": True,
                       "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split})
              for dot, signed, block_m, block_n, block_k, split in (
                  ("tl.bfloat16", False, 1, 64, 128, 8), ("tl.float16", True, 16, 32, 128, 1),
                  ("tl.float32", False, 4, 64, 128, 2), ("tl.bfloat16", True, 1, 32, 1024, 1),
                  ("tl.float32", True, 1, 16, 512, 1))]
    assert lowering_failures(cases) == []


def test_the_gated_int4_linear_kernel_lowers_for_sm90_in_every_form_split_and_unsplit():
    """GATED (two weights from the same loads of x, the gated epilogue or both halves of the
    partials), through the layout passes and the pipeliner: decode tiles folding the scales, prefill tiles dequantizing each element, the
    several-row gemv and the one-row gemv (the paired conversion of 16-bit activations, the word one
    of float32, K steps of several groups), both schemes, the three activation dtypes."""
    base = dict(PRECISION=None, GROUP=128, WIDE=False, GROUP_M=8, HAS_BIAS=False, ACTIVATION="silu", HAS_RES=False,
                STAGES=3, GATED=True)
    cases = [(*INT4_LINEAR, {**base, "GEMV": gemv, "DOT": dot, "PRECISION": "ieee" if dot == "tl.float32" else None,
                             "SIGNED": signed, "ASYMMETRIC": not signed, "FOLD": block_m <= 32, "BLOCK_M": block_m,
                             "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split},
              {"num_warps": 8 if block_m == 128 else 4, "num_stages": 3, "through": "ttgir"})   # the pipeliner too
             for gemv, dot, signed, block_m, block_n, block_k, split in (
                 (False, "tl.bfloat16", False, 16, 128, 128, 4), (False, "tl.float16", True, 16, 128, 128, 1),
                 (False, "tl.bfloat16", True, 128, 128, 64, 1), (False, "tl.float32", False, 64, 64, 32, 1),
                 (True, "tl.bfloat16", False, 4, 32, 128, 2), (True, "tl.float16", True, 16, 16, 128, 1),
                 (True, "tl.bfloat16", False, 1, 32, 512, 1), (True, "tl.float16", True, 1, 16, 1024, 1),
                 (True, "tl.float32", False, 1, 16, 512, 1))]
    cases += [(*INT4_LINEAR, {**base, "GEMV": False, "PRESCALED": True, "DOT": dot, "PRECISION": None, "SIGNED": signed,
                              "ASYMMETRIC": not signed, "FOLD": False, "BLOCK_M": block_m, "BLOCK_N": 128, "BLOCK_K": 128,
                              "SPLIT_K": split}, {"num_warps": 8 if block_m == 128 else 4, "num_stages": 3,
                                                  "through": "ttgir"})
              for dot, signed, block_m, split in (("tl.bfloat16", False, 16, 2), ("tl.float16", True, 128, 1))]
    assert lowering_failures(cases) == []


_SHARED = (Path(__file__).with_name("sm90_jit.py").read_text() + r'''
import json, sys, importlib
import triton.language as tl

found = []
for module, name, args, meta in json.loads(sys.argv[1]):
    kernel = getattr(importlib.import_module(module), name)
    args = [Pointer(a[1:]) if isinstance(a, str) and a.startswith("*") else a for a in args]
    meta = {k: getattr(tl, v[3:]) if isinstance(v, str) and v.startswith("tl.") else v for k, v in meta.items()}
    _, metadata = jit_stages(kernel, args, meta, "llir")   # the shared memory is allocated before LLVM IR; no ptxas
    found.append(metadata["shared"])
print(json.dumps(found))
''')


def shared_memory_asked(cases) -> list[int]:
    """The bytes of shared memory Triton's compile for sm_90 gives each (module, kernel, args, meta):
    pointer args spelled "*<dtype>", ints as the launch passes them (so Triton specializes alike)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _SHARED, json.dumps(cases)], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


ONE_BY_ONE = ((2 * 64 * 64, 640, 320), (2 * 32 * 32, 1280, 1280))   # bench_conv's 1 x 1 convolutions as (M, N, K)


def _tma_launch(m: int, n: int, k: int, setting: dict) -> list:
    """tma_matmul_kernel's (args, meta) for x [m, k] @ weight [n, k].T + a bias [n] (epilogue.py's launch)."""
    args = ["*bfloat16"] * 8 + [m, n, k, k, k, 0, 1, 0, 0, 0, 0, 0x3F800000, 0x3F800000]
    meta = dict(DOT="tl.bfloat16", ACC="tl.float32", PRECISION=None, B_KMAJOR=True, BLOCK_M=setting["block_m"],
                BLOCK_N=setting["block_n"], BLOCK_K=setting["block_k"], GROUP_M=8, PROGRAMS=setting["programs"],
                WARP_SPECIALIZE=bool(setting["warp_specialize"]), HAS_BIAS="row", ACTIVATION=None, HAS_RES=False,
                GATED=False, SCALED=False, B_ROUNDED=False, HALF_STORE=False, num_warps=setting["num_warps"],
                num_stages=setting["num_stages"])
    return [TMA_MATMUL[0], TMA_MATMUL[1], args, meta]


def test_every_kept_candidate_of_the_1x1_convolutions_products_fits_the_shared_memory_triton_asks_on_sm90():
    """A 1 x 1 convolution is nbx.linear with a bias [N]: on the H200 its served setting (a certified
    neighbour's 128 x 256 x 64 tma tile of 3 stages) asked 245,784 bytes of 232,448, the bias read as
    a tile and converted through shared memory. Every kept candidate's estimate (stages and epilogue,
    what the pruning holds to the limit) fits, and Triton's count is within it for the one served
    and the tma candidate nearest the limit."""
    from nbx.autotune import keys
    from nbx.core import device_files
    from nbx.kernels.matmul.linear_tuning import LINEAR, launch_key
    from nbx.kernels.matmul.tuning import shared_bytes
    facts = device_files.for_arch("sm_90")
    limit = facts.value("memory.max_shared_memory_per_block")
    kept = []
    for m, n, k in ONE_BY_ONE:
        fields = launch_key(m, n, k, "bfloat16", (k, 1), (1, k), "plain", True)
        key = keys.form(LINEAR.name, LINEAR.key_fields, facts, **fields)
        kept += [(m, n, k, s) for s in LINEAR.candidates(facts, keys.representative(key, LINEAR.key, facts))[0]]
    assert kept and all(shared_bytes(s, 2, 2) <= limit for *_, s in kept)
    served = {"kernel": "tma", "block_m": 128, "block_n": 256, "block_k": 64, "num_warps": 8, "num_stages": 3,
              "programs": 132, "warp_specialize": 0}
    widest = max((c for c in kept if c[3]["kernel"] == "tma"), key=lambda c: shared_bytes(c[3], 2, 2))
    checked = [(*ONE_BY_ONE[0], served), widest]
    asked = shared_memory_asked([_tma_launch(*c) for c in checked])
    assert all(found <= shared_bytes(c[3], 2, 2) <= limit for found, c in zip(asked, checked)), (asked, checked)


TAKE_ROWS = ("nbx.kernels.gather.kernel", "take_rows_kernel", {
    "x_ptr": "*bf16", "idx_ptr": "*i64", "out_ptr": "*bf16", "flag_ptr": "*i32", **_typed("n m rows inner", "i32")})


def test_the_decode_steps_kernels_wait_for_their_predecessor_before_touching_memory_when_launched_dependent():
    """Programmatic dependent launch (nbx.kernels.dependent_launch): with PDL each decode-path kernel's PTX
    waits (griddepcontrol.wait) before its first global load, store or atomic (a buffer the pool handed
    on may still be read by the kernel before it); without, its PTX holds no griddepcontrol."""
    product = dict(DOT="tl.bfloat16", ACC="tl.float32", PRECISION=None, WIDE=False, BLOCK_M=1, BLOCK_N=4,
                   BLOCK_K=512, GROUP_M=8, HAS_BIAS=False, ACTIVATION="silu", HAS_RES=False, SCALED=False,
                   BLOCK_SCALED=False, GEMV=True, EVEN_K=True, SPLIT_K=1, GATED=True, NORM=True)
    int4 = dict(PRECISION=None, GROUP=128, WIDE=False, GROUP_M=8, HAS_BIAS=False, ACTIVATION=None, HAS_RES=False,
                GEMV=True, STAGES=3, DOT="tl.bfloat16", SIGNED=False, ASYMMETRIC=True, FOLD=True, BLOCK_M=1,
                BLOCK_N=64, BLOCK_K=128, SPLIT_K=1)
    norm = dict(RMS=True, ADD=True, HAS_W=True, HAS_B=False, GROUPED=False, COMPUTE="tl.float32", BLOCK_ROWS=1,
                BLOCK_N=4096, ONE_PASS=True, WIDE=False, INNER=0, TWO_D=False, ACTIVATION=None)
    rope = dict(DIM=128, V_DIM=128, BLOCK_TOKENS=2, BLOCK_H=8, BLOCK_QH=32, BLOCK_V=128, HALF=64, INTERLEAVED=False,
                SLOTS=True, COPY_V=True, ROTATE_Q=True, BLOCK_R=64, BLOCK_P=1)
    split = _flash(SPLIT=True, TMA=False, BLOCK_M=16, WRITE_LSE=True, KV_MODE=2, GROUP=4)
    kernels = [(*FUSED_MATMUL, product), (*FUSED_MATMUL, {**product, "GEMV": False, "BLOCK_M": 16, "BLOCK_N": 64,
                                                           "BLOCK_K": 128, "SPLIT_K": 4}),
               (*SPLIT_EPILOGUE, {"ACC": "tl.float32", "SPLIT_K": 4, "BLOCK": 1024, "HAS_BIAS": False,
                                  "ACTIVATION": None, "HAS_RES": True, "GATED": False, "NORM": True}),
               (*INT4_LINEAR, int4), (*NORM_ROWS, norm), (*ROPE, rope), (*FLASH_PREFILL, split),
               (*FLASH_COMBINE, dict(V_DIM=128, BLOCK_S=16, BLOCK_DV=128, WRITE_LSE=False)),
               (*TAKE_ROWS, dict(ROWS=1, COLS=2048, TAG=0))]
    cases = [(module, name, signature, {**constexprs, "PDL": pdl}, {"dependent": pdl})
             for module, name, signature, constexprs in kernels for pdl in (True, False)]
    assert lowering_failures(cases) == []


GEMV_GATE_UP = ("nbx.kernels.moe.kernel", "expert_gemv_gate_up_kernel", {
    **_typed("x_ptr wg_ptr wu_ptr h_ptr", "*bf16"), "experts_ptr": "*i32",
    **_typed("N K TOP_K sx_t sx_k sw_e sw_n sw_k", "i32")})
GEMV_DOWN = ("nbx.kernels.moe.kernel", "expert_gemv_down_kernel", {
    **_typed("h_ptr wd_ptr out_ptr", "*bf16"), "weights_ptr": "*fp32", "experts_ptr": "*i32",
    **_typed("N K sw_e sw_n sw_k", "i32")})
COMBINE = ("nbx.kernels.moe.kernel", "combine_kernel", {"pairs_ptr": "*bf16", "out_ptr": "*bf16", "N": "i32"})


def test_the_moe_band_kernels_wait_for_their_predecessor_before_touching_memory_when_launched_dependent():
    """A decode token's MoE launches (routing, the GEMV form's gate/up and down, the combine), with PDL:
    each PTX waits before its first global access; without, none waits."""
    route = dict(TOP_K=8, SIGMOID=False, RENORM=True, HAS_BIAS=False, GROUPS=1, KEPT=1, TOP2=False, BLOCK_E=128,
                 BLOCK_G=1, BLOCK_K=8, BLOCK_T=1)
    gemv = dict(ACC="tl.float32", EVEN_K=True, BLOCK_N=16, BLOCK_K=256)
    kernels = [("nbx.kernels.moe.kernel", "route_kernel", _ROUTE_ARGS, route), (*GEMV_GATE_UP, gemv),
               (*GEMV_DOWN, gemv), (*COMBINE, dict(TOP_K=8, ACC="tl.float32", BLOCK=1024))]
    cases = [(module, name, signature, {**constexprs, "PDL": pdl}, {"dependent": pdl})
             for module, name, signature, constexprs in kernels for pdl in (True, False)]
    assert lowering_failures(cases) == []

"""The data movement benchmark's cases (tools/bench/bench_datamove.py, bf16: a (8192, 16384) pad of
(1, 1, 1, 1), a reflect pad of (3, 3), a roll by 7, a flip, a [32, 4096, 128] head transpose, a
KV append of one token to [32, 4096, 128]) planned as the H200 launches them (the sm_90 device
file's tile) and compiled for sm_90 through PTX (no GPU): each moves 16-byte vectors both ways.
The pads and the roll read the source off its 16-byte boundaries; the shifted path (SHIFT_VEC) is
what gives them vector loads: the same launch without it loads 2-byte words (checked too, so the
count can fail). The lowering runs in a child process without TRITON_INTERPRET (as
test_kernels_lower_for_hopper.py's)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton.backends.nvidia.compiler")

_PTX = Path(__file__).with_name("sm90_jit.py").read_text() + r'''
import json, re, sys
from math import prod
from nbx.core import device_files, dtypes
from nbx.core.layout import contiguous_strides
from nbx.kernels.copies import remap
from nbx.kernels.copies.concat import group_launch, parts_of
from nbx.kernels.copies.kernel import CONSTANT, COPY, FLIP, REFLECT, ROLL
from nbx.kernels.plans import Slot

WORD = dtypes.uint16
tiles = device_files.for_arch("sm_90").value("tiles.datamove")
MODES = {"constant": CONSTANT, "reflect": REFLECT, "roll": ROLL, "flip": FLIP, "copy": COPY}

def launch_of(case):
    if case["kind"] == "concat":
        shapes = [tuple(s) for s in case["parts"]]
        total = list(shapes[0])
        total[1] = sum(s[1] for s in shapes)
        parts = parts_of(tuple(total), contiguous_strides(tuple(total)),
                         [(s, contiguous_strides(s)) for s in shapes], 1)
        return group_launch(tuple(parts), 0, WORD, prod(total), None, tiles)[0]
    mode = MODES[case["kind"]]
    src_strides = tuple(case["src_strides"]) if case.get("src_strides") else contiguous_strides(tuple(case["src"]))
    dims = remap.call_dims(mode, tuple(case["out"]), contiguous_strides(tuple(case["out"])), tuple(case["src"]),
                           src_strides, tuple(case["params"]))
    return remap.plan_dims(mode, dims, WORD, 1, None, tiles).launches[0]

found = []
for case in json.loads(sys.argv[1]):
    launch = launch_of(case)
    meta = {**launch.meta, **case.get("meta", {}), "ptx_version": 87}   # (a PTX version given: no ptxas asked)
    args = [Pointer("uint16") if a is None or isinstance(a, Slot) else a for a in launch.args]
    module, _ = jit_stages(launch.kernel, args, meta, "ptx")
    accesses = {}
    for m in re.finditer(r"\b(ld|st)\.global((?:\.v[24])?)\.(b\d+)", module):
        key = m.group(1) + (m.group(2) or ".v1") + "." + m.group(3)
        accesses[key] = accesses.get(key, 0) + 1
    found.append({"meta": {k: v for k, v in meta.items() if k in ("SHIFT_VEC", "FLAT_OUT", "FLIP_VEC")},
                  "accesses": accesses})
print(json.dumps(found))
'''

BIG = [8192, 16384]
CASES = {
    "pad constant (1,1,1,1)": dict(kind="constant", out=[8194, 16386], src=BIG, params=[1, 1]),
    "pad reflect (3,3)": dict(kind="reflect", out=[8192, 16390], src=BIG, params=[0, 3]),
    "roll shift 7": dict(kind="roll", out=BIG, src=BIG, params=[0, 7]),
    "flip axis 1": dict(kind="flip", out=BIG, src=BIG, params=[0, 1]),
    "head transpose": dict(kind="copy", out=[4096, 32, 128], src=[4096, 32, 128], params=[0, 0, 0],
                           src_strides=[128, 4096 * 128, 1]),
    "kv append": dict(kind="concat", parts=[[32, 4096, 128], [32, 1, 128]]),
}
SHIFTED = ("pad constant (1,1,1,1)", "pad reflect (3,3)", "roll shift 7")


def compiled(cases) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _PTX, json.dumps(cases)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def sixteen_byte(accesses: dict, op: str) -> int:
    return sum(n for key, n in accesses.items() if re.fullmatch(rf"{op}\.v4\.b32|{op}\.v2\.b64", key))


def test_the_benchmark_cases_move_16_byte_vectors_both_ways_and_the_shift_is_what_vectorizes_the_pads_loads():
    names = list(CASES)
    plain = [{**CASES[name], "meta": {"SHIFT_VEC": 1}} for name in SHIFTED]
    results = compiled([CASES[name] for name in names] + plain)
    for name, got in zip(names, results):
        accesses = got["accesses"]
        if name in SHIFTED:
            # the run's two chunk loads and the seam's two (CONSTANT: and its 16-byte fill); its stores: both branches
            assert got["meta"]["SHIFT_VEC"] == 8, (name, got)
            assert sixteen_byte(accesses, "ld") >= 4 and sixteen_byte(accesses, "st") >= 2, (name, accesses)
        else:
            assert sixteen_byte(accesses, "ld") >= 1 and sixteen_byte(accesses, "st") >= 1, (name, accesses)
            assert not any(key.endswith((".v1.b16", ".v2.b16")) for key in accesses), (name, accesses)
    for name, got in zip(SHIFTED, results[len(names):]):
        assert got["meta"]["SHIFT_VEC"] == 1 and sixteen_byte(got["accesses"], "ld") == 0 and got["accesses"].get("ld.v1.b16"), (name, got)

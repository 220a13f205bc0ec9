"""top-k plans: one program a row for rows up to tiles.sort's max_block_n (sort_rows_kernel); for
longer ones a radix select (select.py) over rows x P programs or chunk candidates (chunks.py:
rows x chunks programs, then merge rounds), k = 1 as a two-launch reduction.

The launch setting (tiles.select of the device file, or the certified one of the `select`
tunable): `method`, "radix" or "chunks"; for the radix select `block`, the keys a program reads
a step, and `programs`, the programs a launch aims for (a row gets about programs / rows of them,
at least one block each, at most MAX_PROGRAMS); for the chunks `chunk`, the keys a program keeps
k of (and the most candidates a merge program reads), and `bound`, whose bound cuts a chunk's
words first: the chunk's own groups' ("chunk", where 32 runs of k fit a chunk) or the row's
("row": one more pass over the row, a tighter bound); num_warps for both. The chunks serve k up
to chunk / 2 (a chunk holds two runs of k to a power of two), the radix select larger k and
k = 1. The key: the row length to a power of two, k to a power of two (a chunk keeps k of its
words: the chunks' cost grows with k, the radix select's hardly), the element count's class, the dtype.
"""
from __future__ import annotations

from math import prod

import numpy as np
import triton

from nbx import autotune
from nbx.core import dtypes

from .. import launch, plans
from ..plans import Launch, LaunchPlan, Slot
from ..rows import pow2_at_least
from . import chunks
from .chunks import chunk_candidates_kernel, merge_candidates_kernel, row_bound_kernel
from .select import (best_word_kernel, candidate_histogram_kernel, select_compact_kernel, select_counts_kernel,
                     select_filter_kernel, select_histogram_kernel, sort_words_kernel, zero_kernel)

MAX_PROGRAMS = 1024   # a row's programs; the compaction sums the counts of the programs before it
# elements by octaves, not the elements ladder: a setting splits each row over programs by the rows
# there are, and served from the class up to 1 Mi to the next (up to 8 Mi) it lost 68 % on the H200
# (tools/bench/bucket_loss.py, 2026-12-04); with the width exact an octave of elements is one of rows
SELECT_KEY = {"width": "exact", "k": "pow2", "elements": "pow2", "dtype": "dtype"}


def select_setting(device, rows: int, n: int, dtype, k: int) -> dict:
    return autotune.setting(SELECT, device, width=pow2_at_least(n), k=k, elements=rows * n, dtype=dtype)


def lanes(count: int) -> int:
    """A power of two holding count, at least 16 (a block a kernel reduces over)."""
    return max(16, pow2_at_least(count))


def split(rows: int, n: int, block: int, programs: int) -> tuple[int, int]:
    """(programs a row, elements a program: a multiple of block)."""
    blocks = triton.cdiv(n, block)
    per_row = max(1, min(blocks, MAX_PROGRAMS, triton.cdiv(programs, max(rows, 1))))
    steps = triton.cdiv(blocks, per_row)
    return triton.cdiv(blocks, steps), steps * block


def served_plan(op: str, shape, dtype, device, flags: tuple, setting, lookup, make) -> LaunchPlan:
    """The cached plan make(shape, dtype, *flags, device, setting) of rows [..., n] of this shape,
    with the served setting lookup(device, rows, n, dtype) (looked up once a plan) unless setting
    overrides it: what a call runs and what its declared cost reads."""
    n = shape[-1]
    signature = (tuple(shape), dtype, *flags, device, plans.setting_key(setting))

    def build():
        served = setting if setting is not None else lookup(device, prod(shape) // n, n, dtype)
        return make(tuple(shape), dtype, *flags, device, served)
    return plans.cached(op, signature, build)


def takes_chunks(setting, k: int) -> bool:
    """Whether the chunk candidates serve this k under setting (else the radix select; also where the
    installed Triton lacks the bitonic merge they build on)."""
    return chunks.MERGES and setting["method"] == "chunks" and 1 < k <= setting["chunk"] // 2


def select_plan(shape, dtype, k: int, largest: bool, device, setting) -> LaunchPlan:
    """values, indices [..., k] of the k largest (smallest) of rows [..., n], n > max_block_n."""
    n = shape[-1]
    rows = prod(shape) // n
    s = {**launch.tiles("select", device), **dict(setting)}
    out_shape = tuple(shape[:-1]) + (k,)
    outputs = (plans.output("values", out_shape, dtype), plans.output("indices", out_shape, dtypes.INDEX))
    if takes_chunks(s, k):
        return chunks_plan(rows, n, k, largest, device, s, outputs)
    block, warps = s["block"], s["num_warps"]
    per_row, chunk = split(rows, n, block, s["programs"])
    grid = (rows, per_row)
    common = dict(LARGEST=largest, BLOCK=block, num_warps=warps)
    if k == 1:
        launches = (Launch(best_word_kernel, grid, (Slot("x"), Slot("words"), n, chunk), common),
                    Launch(sort_words_kernel, (rows,), (Slot("x"), Slot("words"), Slot("values"), Slot("indices"),
                                                        n, per_row, 1),
                           dict(BLOCK=lanes(per_row), num_warps=4)))
        return LaunchPlan(device, launches, outputs,
                          workspace=(plans.workspace("words", (rows * per_row,), dtypes.uint64),))
    hist_words = rows * 4 * 256 + rows   # the digit histograms, then each row's count of sure winners
    x, hist, cand, taken = Slot("x"), Slot("hist"), Slot("candidates"), Slot("taken")
    launches = [Launch(zero_kernel, (triton.cdiv(hist_words, 1024),), (hist, hist_words), dict(BLOCK=1024, num_warps=4)),
                Launch(select_histogram_kernel, grid, (x, hist, n, chunk), common),
                Launch(select_filter_kernel, grid, (x, hist, Slot("words"), cand, taken, n, k, chunk), common)]
    launches += [Launch(candidate_histogram_kernel, grid, (x, hist, cand, taken, n, k, chunk), {**common, "PASS": j})
                 for j in (2, 3)]
    launches += [
        Launch(select_counts_kernel, grid, (x, hist, cand, taken, Slot("counts"), n, k, chunk), common),
        Launch(select_compact_kernel, grid, (x, hist, cand, taken, Slot("counts"), Slot("words"), n, k, chunk),
               {**common, "PROGRAMS": lanes(per_row)}),
        Launch(sort_words_kernel, (rows,), (x, Slot("words"), Slot("values"), Slot("indices"), n, k, k),
               dict(BLOCK=lanes(k), num_warps=launch.tiles("sort", device)["num_warps"]))]
    return LaunchPlan(device, tuple(launches), outputs, workspace=(
        plans.workspace("hist", (hist_words,), dtypes.int32),
        plans.workspace("candidates", (rows * n,), dtypes.int32),
        plans.workspace("taken", (rows * per_row,), dtypes.int32),
        plans.workspace("counts", (rows * per_row * 2,), dtypes.int32),
        plans.workspace("words", (rows * k,), dtypes.uint64)))


def log2(power: int) -> int:
    return power.bit_length() - 1


def survivors_cap(chunk: int, K: int) -> int:
    """The words a stage-1 program compacts under its chunk's own bound (chunks._few_smallest_words):
    8 K holds iid keys' K (ln K + 0.6) survivors with room (k = 50: 512 for ~300), worth it where
    that is at most a quarter of the chunk; 0: the row's bound instead (row_bound_kernel: K groups
    of n / K keys leave ~K (ln K + 0.6) survivors a row, a few hundred a chunk of 4096 for k = 1024)."""
    return 8 * K if 8 * K <= chunk // 4 else 0


def row_survivors_cap(chunk: int, K: int) -> int:
    """The words a stage-1 program compacts under the row's bound: a row's ~K (ln K + 0.6)
    survivors spread over its chunks (k = 1024: ~200 a chunk of 4096 of logits, 512 sorted; k = 50:
    ~8, 256 sorted), an eighth of the chunk at most (the sort of those is the cost saved)."""
    return min(max(K, 256), chunk // 8)


def chunks_plan(rows: int, n: int, k: int, largest: bool, device, s: dict, outputs) -> LaunchPlan:
    """Stage 1 over rows x chunks, then merge rounds of `group` lists a program (runs of K words,
    group * K <= chunk) until one list a row is left (the last writes the outputs); the rounds'
    lists alternate between two workspaces.
    detail: the candidate words the launches write (each read once by the next), for the cost."""
    chunk, warps, K = s["chunk"], s["num_warps"], lanes(k)
    lists = triton.cdiv(n, chunk)
    x, values, indices = Slot("x"), Slot("values"), Slot("indices")
    cap = survivors_cap(chunk, K)
    row_bound = s["bound"] == "row" or cap == 0   # cap 0: too few groups a chunk for its own bound
    launches = []
    if row_bound:
        cap, bound = row_survivors_cap(chunk, K), Slot("bound")
        launches += [Launch(zero_kernel, (triton.cdiv(rows * K, 1024),), (bound, rows * K),
                            dict(BLOCK=1024, num_warps=4)),
                     Launch(row_bound_kernel, (rows, lists), (x, bound, n),
                            dict(LARGEST=largest, CHUNK=chunk, K=K, num_warps=warps))]
    launches.append(Launch(chunk_candidates_kernel, (rows, lists),
                           (x, Slot("candidates"), values, indices, Slot("scratch"),
                            Slot("bound" if row_bound else "scratch"), n, k),
                           dict(LARGEST=largest, FINAL=lists == 1, CHUNK=chunk, K=K, CAP=cap, ROW_BOUND=row_bound,
                                num_warps=warps)))
    group = max(2, chunk // K)
    written, source, target = rows * lists * k, "candidates", "merged"
    merged = triton.cdiv(lists, group)
    while lists > 1:
        groups = triton.cdiv(lists, group)
        launches.append(Launch(merge_candidates_kernel, (rows, groups),
                               (x, Slot(source), Slot(source if groups == 1 else target), values, indices, n, k,
                                lists, group),
                               dict(FINAL=groups == 1, LOG_RUNS=log2(min(group, pow2_at_least(lists))),
                                    LOG_K=log2(K), num_warps=warps)))
        written += 0 if groups == 1 else rows * groups * k
        lists, source, target = groups, target, source
    workspace = [plans.workspace("candidates", (rows * triton.cdiv(n, chunk) * k,), dtypes.uint64)]
    if merged > 1:
        workspace.append(plans.workspace("merged", (rows * merged * k,), dtypes.uint64))
    workspace.append(plans.workspace("scratch", (rows * triton.cdiv(n, chunk) * cap,), dtypes.uint64))
    if row_bound:
        workspace.append(plans.workspace("bound", (rows * K,), dtypes.uint64))
    return LaunchPlan(device, tuple(launches), outputs, workspace=tuple(workspace),
                      detail={"method": "chunks", "candidate_words": written, "passes": 2 if row_bound else 1})


def select_rows_plan(shape, dtype, k: int, largest: bool, device, setting=None) -> LaunchPlan:
    """The select's cached plan over rows of this shape, radix or chunks as the setting says
    (select_rows runs it, topk's cost reads it)."""
    return served_plan("topk", shape, dtype, device, (k, largest), setting,
                       lambda *where: select_setting(*where, k), select_plan)


def select_rows(rows, k: int, largest: bool, setting=None, values=None):
    """(values, indices) of the select over rows [..., n] (contiguous); setting overrides the
    served one (the certifier's), values is the output to write (its workload's)."""
    plan = select_rows_plan(rows.shape, rows.dtype, k, largest, rows.device, setting)
    done = plans.execute(plan, {"x": rows, "values": values})
    return done["values"], done["indices"]


def select_workload(rep, device):
    from nbx.core.ops.creation import asarray
    from nbx.core.reference import oracle
    n = rep["width"]
    count = max(1, rep["elements"] // n)
    a = np.sin(0.37 * np.arange(count * n)).reshape(count, n) * 4.0
    x = asarray(a.astype(rep["dtype"].host), device=device)
    k = min(rep["k"], n)
    out = launch.output((count, k), x.dtype, device)
    reference = oracle("topk", x, k, 1, True)[0]
    return autotune.TensorWorkload(out, lambda s: select_rows(x, k, True, setting=s, values=out),
                                   lambda r: np.asarray(reference)[r])


def one_of_its_kind(setting, facts) -> bool | str:
    """The parameters a method does not read take the device file's values, so no two candidates
    launch the same plan (the chunks read no block nor programs, the radix select no chunk). A
    certificate's setting made before the method existed lacks both: the radix select's."""
    default, method = facts.value("tiles.select"), setting.get("method", "radix")
    unread = ("chunk", "bound") if method == "radix" else ("block", "programs")
    return all(setting.get(p, default[p]) == default[p] for p in unread) or f"the {method} method reads no {unread}"


def words_fit(setting, facts) -> bool | str:
    """A chunk's words in registers: 64 a thread (8192 over 128 threads) took 255 registers and
    a stack on sm_90 (Triton 3.6); 32 a thread, none."""
    if setting.get("method", "radix") != "chunks":
        return True
    per_thread = setting["chunk"] // (setting["num_warps"] * facts.value("compute.warp_size"))
    return per_thread <= 32 or f"{per_thread} 64-bit words a thread spill"


SELECT = autotune.declare(autotune.Tunable(
    "select", params={"method": ("radix", "chunks"), "chunk": (2048, 4096, 8192), "bound": ("chunk", "row"),
                      "block": (1024, 2048, 4096), "num_warps": (4, 8), "programs": (264, 1056, 2112)},
    key=SELECT_KEY, default_from="tiles.select", workload=select_workload,
    constraint=autotune.all_of(one_of_its_kind, words_fit),
    implied={"method": "radix", "chunk": 4096, "bound": "chunk"}))

"""Certified settings of the attention kernels: the flash prefill tile, the decode split, the rope
tile.

attention: block_m query rows (tokens x the heads of a KV group) by block_n keys a step, warps,
pipeline stages, and how K and V are loaded (pointers, or tma: tensor descriptors, a candidate only
where the device file's matrix_unit.tma holds and the key's K and V are descriptor-ready);
candidates are pruned by the shared memory a stage's K and V blocks and the q tile take at the key's
head dims. Its key: the query and key lengths on the dims ladder, the head dims, the group (query
heads per KV head), the dtype, whether it is causal and whether K and V can be read by descriptors.

attention_decode: block_n keys a step, the warps and stages of the split-K decode, and programs, the
most the keys are split into over batch x KV heads (more programs than SMs keep more K and V loads
in flight; the split count follows from it, the batch and the context). Its key: the context on the
coarse_dims ladder (on the H200 a class's setting served one dims step away lost 1.9 / 3.3 % median /
worst), the query rows a program takes, the head dim, the dtype, whether the cache is paged, and
the batch (sequences) to a power of two: the H200 showed a batch-1 setting (one stage, short splits)
serving 8 sequences of 32k at 0.71x torch where the contiguous key's three stages reached 0.96x. Its
workload: that many sequences of 8 KV heads.

rope: tokens a program and warps (20 candidates). Its key: the element count class (of every tensor
the launch rotates: k and, fused in the cache write, q), the head dim and the dtype.
"""
from __future__ import annotations

import math

import numpy as np

from nbx import autotune
from nbx.core.dtypes import as_dtype
from nbx.core.ops.creation import asarray
from nbx.core.reference import oracle

from .. import rows

# the grid the last H200 run advised (block_n 32 and a single stage never won); x the load path
PREFILL_PARAMS = {"block_m": (64, 128), "block_n": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4),
                  "loads": ("pointers", "tma"), "max_registers": (0, 128)}
PREFILL_KEY = {"q_len": "dims", "k_len": "dims", "head_dim": "exact", "v_dim": "exact", "group": "exact",
               "dtype": "dtype", "causal": "flag", "tma": "flag"}
DECODE_PARAMS = {"block_n": (32, 64, 128), "num_warps": (2, 4, 8), "num_stages": (1, 2, 3),
                 "programs": (264, 528, 1056)}   # 2, 4, 8 an SM of the H200's 132 (the grid only: no new compile)
DECODE_KEY = {"k_len": "coarse_dims", "rows": "exact", "head_dim": "exact", "dtype": "dtype", "paged": "flag",
              "batch": "pow2"}
# 8 warps over 4-16 tokens: the most bytes in flight an SM at few registers a thread (sm_90 ptxas: a
# [4, 32, 128] bf16 tile at 8 warps is 61 registers, 16-byte loads, against 70 for one token at 4), where
# a program's life is two memory latencies (the positions, then the table rows they index)
ROPE_PARAMS = {"block_tokens": (1, 2, 4, 8, 16), "num_warps": (1, 2, 4, 8)}
ROPE_KEY = {"elements": "elements", "head_dim": "exact", "dtype": "dtype"}


def pow2_at_least(n: int, floor: int = 16) -> int:
    """The smallest power of two >= n and >= floor (tl.arange's extents; 16: tl.dot's smallest)."""
    return max(floor, rows.pow2_at_least(n))


# what Triton 3.6 allocates beside the tiles: the stages' mbarriers and the row reductions' scratch
# (sm_90 compiles, tools/sm90_attention_report.py: 128 x 128 at 3 stages takes 230 400 bytes, 1 024 past the tiles)
PREFILL_SHARED_SLACK = 1024


def prefill_stage_bytes(setting, head_dim: int, v_dim: int, itemsize: int = 2) -> int:
    """Shared memory of the prefill kernel: the q tile, a K and a V block per stage, and the slack."""
    d, dv = pow2_at_least(head_dim), pow2_at_least(v_dim)
    return itemsize * (setting["block_m"] * d + max(1, setting["num_stages"]) * setting["block_n"] * (d + dv)) \
        + PREFILL_SHARED_SLACK


def _loads_fit(setting, facts):
    if setting["loads"] == "tma" and not facts.value("matrix_unit.tma"):
        return "matrix_unit.tma is false: no tensor-descriptor copies"
    rows = _warpgroup_rows(facts)
    if rows and setting["block_m"] < rows * max(1, setting["num_warps"] // 4):
        # fewer query rows than a wgmma tile for each warpgroup: Triton splits the keys over the warpgroups
        # instead, and the softmax's row reductions cross them (the fused-attention tutorial drops these on sm_90)
        return f"block_m {setting['block_m']} over {setting['num_warps']} warps: under {rows} rows a warpgroup's wgmma"
    return True


def _warpgroup_rows(facts) -> int:
    """The rows of one warpgroup's matrix instruction (wgmma's m) where the device file lists one, else 0."""
    for shape in (facts.value("matrix_unit.shapes") if "matrix_unit.shapes" in facts else ()):
        if str(shape.get("instruction", "")).startswith("wgmma"):
            return int(shape["m"])
    return 0


# ptxas on sm_90 (tools/sm90_attention_report.py, Triton 3.6): the float32 accumulator and a block of
# scores a thread, block_m * (v_dim + block_n) / threads, spill past 160 (128 x 64 at 4 warps, 192: 21 spill
# stores; 128 x 128 at 4 warps, 256: 512 bytes of stack) and fit 128 registers up to 96 (128 x 64 at 8 warps,
# head dim 128: 142 registers by itself, 127 under a cap of 128, no spill)
SPILL_FLOATS, CAPPED_FLOATS = 160, 96


def live_floats(setting, v_dim: int) -> float:
    """float32 values a thread holds across a step: the accumulator and one block of scores."""
    return setting["block_m"] * (pow2_at_least(v_dim) + setting["block_n"]) / (32 * setting["num_warps"])


def _registers_fit(setting, rep, facts):
    """max_registers caps ptxas (Triton's maxnreg) where that lets an SM hold more programs than any uncapped
    count could (two 8-warp programs instead of one), so one's softmax runs while another's wgmma does (the
    overlap FlashAttention-3 gets from ping-pong warpgroups)."""
    cap = setting["max_registers"]
    if not cap:
        return True
    if setting["loads"] != "tma":
        return "a register cap with pointer loads: their 64-bit address tiles spill (sm_90 compile)"
    if live_floats(setting, rep["v_dim"]) > CAPPED_FLOATS:
        return f"{live_floats(setting, rep['v_dim']):.0f} live floats a thread do not fit {cap} registers"
    threads = 32 * setting["num_warps"]
    registers = facts.value("memory.max_registers_per_block")   # an sm_90 SM's register file is the same 64 Ki
    most = -(-facts.value("compute.max_registers_per_thread") // 8) * 8   # allocated 8 a thread at a time
    used = prefill_stage_bytes(setting, rep["head_dim"], rep["v_dim"], as_dtype(rep["dtype"]).itemsize)
    by_shared = facts.value("memory.shared_memory_per_multiprocessor") // used
    capped, uncapped = min(registers // (cap * threads), by_shared), min(registers // (most * threads), by_shared)
    if capped <= uncapped:
        return f"a cap of {cap} registers holds no more programs an SM ({capped}) than none ({uncapped})"
    return True


def _prefill_fits(setting, rep, facts):
    if live_floats(setting, rep["v_dim"]) > SPILL_FLOATS:
        return f"{live_floats(setting, rep['v_dim']):.0f} live floats a thread spill on sm_90 (above {SPILL_FLOATS})"
    capped = _registers_fit(setting, rep, facts)
    if capped is not True:
        return capped
    if setting["loads"] == "tma" and not rep["tma"]:
        return "the key's K and V are not descriptor-ready (paged, or strides or bases not 16-byte aligned)"
    if setting["loads"] == "pointers" and rep["tma"] and setting["num_stages"] > min(PREFILL_PARAMS["num_stages"]):
        # where descriptors serve, the pointer path stays only as the baseline the last H200 run measured
        # (the device file's 2 stages); its deeper pipelines hold 64-bit address tiles a stage
        return "pointer loads on a descriptor-ready key: the 2-stage baseline only"
    limit = facts.value("memory.max_shared_memory_per_block")
    used = prefill_stage_bytes(setting, rep["head_dim"], rep["v_dim"], as_dtype(rep["dtype"]).itemsize)
    if used > limit:
        return f"the q tile and {setting['num_stages']} K/V stages take {used} bytes, above {limit}"
    if setting["block_m"] > min(PREFILL_PARAMS["block_m"]) and setting["block_m"] // 2 >= rep["q_len"] * rep["group"]:
        return f"block_m {setting['block_m']} covers {rep['q_len'] * rep['group']} query rows twice over"
    return True


DECODE_WORKLOAD_KV_HEADS = 8   # a sequence's KV heads in decode_workload's launch (Llama's)


def _decode_fits(setting, rep, facts):
    if setting["block_n"] > min(DECODE_PARAMS["block_n"]) and setting["block_n"] // 2 >= rep["k_len"]:
        return f"block_n {setting['block_n']} covers a context of {rep['k_len']} twice over"
    fewest = min(DECODE_PARAMS["programs"])
    blocks = math.ceil(rep["k_len"] / setting["block_n"])
    if setting["programs"] > fewest and math.ceil(fewest / (rep["batch"] * DECODE_WORKLOAD_KV_HEADS)) >= blocks:
        return f"{fewest} programs already split the workload's {blocks} blocks one a program"
    return True


def _sin(shape, phase):
    return np.sin(phase * np.arange(int(np.prod(shape)), dtype=np.float64) + 0.3).reshape(shape)


def _normal(shape, seed):
    """Fixed pseudo-random standard normals: the attention screens' q, k and v.

    Not a sinusoid: a flash kernel rounds its probabilities to the dot's dtype, and over coherent
    (sinusoidal) keys and values those roundings add up while the output cancels to about 1/S of
    |v|, so a correct bfloat16 kernel failed the relative screen (0.085 at S = 1008, 0.87 at 3984 on
    the H200, which a float64 emulation rounding only P reproduces to three digits). Over independent
    values the output and the rounding error both shrink as 1/sqrt(S): a correct kernel stays near
    3e-3 at any S, and one key block dropped still deviates by 0.1 or more."""
    return np.random.default_rng(seed).standard_normal(shape)


# the programs of the largest block_m a prefill workload gives each multiprocessor, and the most query
# heads it takes (Llama's 32): with 2 KV heads a 1-4k key left the H200's 132 SMs under one wave, and its
# certified 64 x 128 tile then ran 32 heads of 4096 tokens at 0.63x torch (the GQA key, 8 query heads: 128 x 64, 0.77x)
PREFILL_WORKLOAD_WAVES = 4
PREFILL_WORKLOAD_HEADS = 32


def prefill_kv_heads(rep, facts) -> int:
    """The KV heads of a prefill key's workload: enough that its query blocks fill the device's
    multiprocessors PREFILL_WORKLOAD_WAVES times, as a model's heads do, within PREFILL_WORKLOAD_HEADS
    query heads; at least 2 (a device file without the fact: 2)."""
    if "compute.multiprocessors" not in facts:
        return 2
    blocks = -(-rep["q_len"] // max(PREFILL_PARAMS["block_m"]))
    wanted = -(-PREFILL_WORKLOAD_WAVES * facts.value("compute.multiprocessors") // blocks)
    heads = min(wanted, max(PREFILL_WORKLOAD_HEADS, rep["group"]))
    return max(2, -(-heads // rep["group"]))


def prefill_workload(rep, device):
    from . import launch_sdpa
    from .. import launch
    hk = prefill_kv_heads(rep, launch.facts(device))
    hq = hk * rep["group"]
    dtype = rep["dtype"]
    q = asarray(_normal((1, hq, rep["q_len"], rep["head_dim"]), 37).astype(dtype.host), device=device)
    k = asarray(_normal((1, hk, rep["k_len"], rep["head_dim"]), 21).astype(dtype.host), device=device)
    v = asarray(_normal((1, hk, rep["k_len"], rep["v_dim"]), 13).astype(dtype.host), device=device)
    from nbx.core.ops.attention import AttentionOptions
    options = AttentionOptions(1.0 / math.sqrt(rep["head_dim"]), bool(rep["causal"]), "bottom_right")
    out = launch.output((1, hq, rep["q_len"], rep["v_dim"]), dtype, device)
    q_len, k_len = rep["q_len"], rep["k_len"]
    host = [t.numpy() for t in (q, k, v)]

    def oracle_of(first: int, last: int, seen: int) -> np.ndarray:   # queries [first, last), the first seen keys
        qs, ks, vs = (asarray(np.ascontiguousarray(a)) for a in
                      (host[0][:, :, first:last], host[1][:, :, :seen], host[2][:, :, :seen]))
        return np.asarray(oracle("scaled_dot_product_attention", qs, ks, vs, None, None, options)).transpose(2, 0, 1, 3)

    def reference(rows: slice) -> np.ndarray:
        """The oracle of the query rows compared only (the whole one of a 16k key is minutes of float64
        and gigabytes of scores): bottom-right causal rows [start, stop) see the first stop + k_len -
        q_len keys, so the slice's own bottom-right mask over those keys is theirs."""
        start, stop, _ = rows.indices(q_len)
        seen = min(k_len, stop + k_len - q_len) if options.causal else k_len
        if seen < 1:   # rows before every key: as the whole oracle defines them
            return oracle_of(0, q_len, k_len)[rows]
        return oracle_of(start, stop, seen)

    return autotune.TensorWorkload(out.permute(2, 0, 1, 3),
                                   lambda setting: launch_sdpa(q, k, v, None, None, options, out=out, setting=setting),
                                   reference)


def decode_workload(rep, device):
    """One query token of rep["rows"] heads a KV head, for each of rep["batch"] sequences of 8 KV
    heads over a context of k_len, from a contiguous cache or (paged) a cache of the device file's
    blocks, each sequence's in its own range in a seeded shuffled order (_decode_block_order), as a
    cache's blocks lie after allocations and frees. Sequence b's K and V are the first's times +-1
    (_decode_signs, exact in every float dtype): neighbouring sequences' outputs differ, every one of
    the first's size (no offset or sharper scores to swamp a window's deviation), and its oracle is
    one of two, negated or not. In the paged cache every other pair of sequences is shorter
    (_decode_length), so a kernel reading one sequence's length for all is caught too."""
    from . import launch_paged, launch_sdpa
    from .. import launch
    from nbx.core.ops.attention import AttentionOptions
    batch, hk, dtype, d, n = rep["batch"], DECODE_WORKLOAD_KV_HEADS, rep["dtype"], rep["head_dim"], rep["k_len"]
    hq = rep["rows"] * hk
    host = [_normal(shape, seed).astype(dtype.host) for shape, seed in (((1, hq, 1, d), 37), ((1, hk, n, d), 21),
                                                                          ((1, hk, n, d), 13))]
    options = AttentionOptions(1.0 / math.sqrt(d), alignment="bottom_right")
    oracles: dict = {}

    def expected(rows: slice, lengths=lambda b: n) -> np.ndarray:   # (sequences of rows, hq, 1, d)
        out = []
        for b in range(*rows.indices(batch)):
            (k_scale, v_scale), seen = _decode_signs(b), lengths(b)
            if (k_scale, seen) not in oracles:
                q, k, v = host[0], host[1][:, :, :seen] * np.asarray(k_scale, dtype.host), host[2][:, :, :seen]
                oracles[k_scale, seen] = np.asarray(oracle("scaled_dot_product_attention", asarray(q),
                                                              asarray(k), asarray(v), None, None, options))
            out.append(oracles[k_scale, seen] * v_scale)   # +-1: exact
        return np.concatenate(out) if out else np.zeros((0, hq, 1, d))
    if not rep["paged"]:
        q, k, v = (asarray(a, device=device) for a in host)
        qs, ks, vs = _sequences(q, batch, None), _sequences(k, batch, 0), _sequences(v, batch, 1)
        out = launch.output((batch, hq, 1, d), dtype, device)
        return autotune.TensorWorkload(out, lambda setting: launch_sdpa(qs, ks, vs, None, None, options, out=out,
                                                                        decode_setting=setting), expected)
    bt = launch.tiles("kv_cache", device)["block_tokens"]
    blocks = -(-n // bt)

    # a sequence's blocks lie where a real cache's would after allocations and frees, out of order:
    # its logical block i at block placed[i] of the sequence's range (with the blocks in order the
    # certifier timed 8 x 32k paged at 0.2406 ms, where the bench's shuffled table took 0.2756)
    placed = _decode_block_order(blocks)

    def paged(a):  # (1, hk, n, d) -> (blocks, bt, hk, d) in placed order, the tail block zero
        cache = np.zeros((blocks * bt, hk, d), dtype.host)
        cache[:n] = a[0].transpose(1, 0, 2)
        shuffled = np.empty((blocks, bt, hk, d), dtype.host)
        shuffled[placed] = cache.reshape(blocks, bt, hk, d)
        return asarray(shuffled, device=device)

    kc, vc = _sequences(paged(host[1]), batch, 0), _sequences(paged(host[2]), batch, 1)
    table = asarray((np.arange(batch)[:, None] * blocks + placed[None, :]).astype(np.int32), device=device)
    lens = asarray(np.array([_decode_length(b, n) for b in range(batch)], dtype=np.int32), device=device)
    qp = _sequences(asarray(np.ascontiguousarray(host[0].transpose(0, 2, 1, 3)), device=device), batch, None)
    out = launch.output((batch, 1, hq, d), dtype, device)
    return autotune.TensorWorkload(out, lambda setting: launch_paged(qp, kc, vc, table, lens, None, None, options,
                                                                     False, n, out=out, decode_setting=setting),
                                   lambda rows: expected(rows, lambda b: _decode_length(b, n)).transpose(0, 2, 1, 3))


def _decode_block_order(count: int) -> np.ndarray:
    """Where the paged decode workload puts a sequence's logical blocks: a seeded permutation."""
    return np.random.default_rng(29).permutation(count)


def _decode_signs(b: int) -> tuple[float, float]:
    """(K's sign, V's sign) of the decode workload's sequence b: four pairs in turn (a scale other than
    +-1 would change the scores' spread and with it the outputs' size)."""
    return (1.0, -1.0)[b % 2], (1.0, -1.0)[(b // 2) % 2]


def _decode_length(b: int, n: int) -> int:
    """The context of the paged decode workload's sequence b: n, or for sequences 4-7 of every 8 a
    ninth fewer tokens (at least one)."""
    return n if (b // 4) % 2 == 0 else max(1, n - n // 9)


def _sequences(t, batch: int, which):
    """batch copies of t stacked along its first dim, copy b times _decode_signs(b)[which] (None:
    unscaled), written into one tensor (no list of copies beside it)."""
    if batch == 1:
        return t
    from nbx.core.tensor import empty
    rows = t.shape[0]
    out = empty((batch * rows, *t.shape[1:]), t.dtype, t.device)
    for b in range(batch):
        out[b * rows:(b + 1) * rows] = t if which is None else t * _decode_signs(b)[which]
    return out


def rope_workload(rep, device):
    from .rope import launch_rope
    from .. import launch
    dtype, d = rep["dtype"], rep["head_dim"]
    heads = 8
    tokens = max(1, rep["elements"] // (heads * d))
    x = asarray(_sin((tokens, heads, d), 0.37).astype(dtype.host), device=device)
    angles = np.arange(tokens)[:, None] * (1e-4 ** (np.arange(0, d, 2) / d))[None, :]
    cos = asarray(np.cos(np.concatenate([angles, angles], 1)).astype(np.float32), device=device)
    sin = asarray(np.sin(np.concatenate([angles, angles], 1)).astype(np.float32), device=device)
    positions = asarray(np.arange(tokens, dtype=np.int32), device=device)
    out = launch.output(x.shape, dtype, device)
    expected = np.asarray(oracle("rotary_embedding", x, cos, sin, positions, False))
    return autotune.TensorWorkload(out, lambda setting: launch_rope(x, cos, sin, positions, False, out=out,
                                                                    setting=setting),
                                   lambda rows: expected[rows])


ATTENTION = autotune.declare(autotune.Tunable(
    "attention", params=PREFILL_PARAMS, key=PREFILL_KEY, default_from="tiles.attention", workload=prefill_workload,
    constraint=_loads_fit, fits=_prefill_fits))
ATTENTION_DECODE = autotune.declare(autotune.Tunable(
    "attention_decode", params=DECODE_PARAMS, key=DECODE_KEY, default_from="tiles.attention_decode",
    workload=decode_workload, fits=_decode_fits))
ROPE = autotune.declare(autotune.Tunable(
    "rope", params=ROPE_PARAMS, key=ROPE_KEY, default_from="tiles.rope", workload=rope_workload))


def prefill_setting(device, q_len, k_len, head_dim, v_dim, group, dtype, causal, tma):
    return autotune.setting(ATTENTION, device, q_len=q_len, k_len=k_len, head_dim=head_dim, v_dim=v_dim,
                            group=group, dtype=dtype, causal=causal, tma=bool(tma))


def decode_setting(device, k_len, rows, head_dim, dtype, paged, batch):
    return autotune.setting(ATTENTION_DECODE, device, k_len=k_len, rows=rows, head_dim=head_dim, dtype=dtype,
                            paged=paged, batch=batch)


def rope_setting(device, elements, head_dim, dtype):
    return autotune.setting(ROPE, device, elements=elements, head_dim=head_dim, dtype=dtype)


__all__ = ["ATTENTION", "ATTENTION_DECODE", "ROPE", "prefill_setting", "decode_setting", "rope_setting",
           "pow2_at_least", "prefill_stage_bytes"]

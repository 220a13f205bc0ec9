"""Data movement, gathers, scatters, sorting, top-k and the sampling step: nbx against torch on the
same GPU, in one process (torch is the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_datamove.py

Timing as bench_softmax_norm.py (peer_timing.both): GPU us a call back to back behind a spin, host
us a call, and the cold single call after an L2 flush. TB/s counts the bytes an op must move once.
ratio = torch time / nbx time (above 1: nbx faster). The first line is the copy ceiling: a clone of
256 MiB; "copy %" is each side's TB/s against the faster clone of the same run (issue 17 asks >= 90
for copies, concat, pad, flip, roll and transposes; "clone heads" is the same clone at the 64 MiB
the head transpose and the KV append move, their ceiling at that size). Ops nbx refuses (a named
error: e.g. a full sort of rows longer than tiles.sort) print FAILED with the error and the run goes on.

Each case prints when timed; a side whose single call takes longer than SLOW_MS is timed with fewer
calls (one repeat of MIN_ITERS_SLOW, no cold figure), the others with REPEATS repeats of ~20 ms of
back-to-back calls (the best of them is the figure) and the cold figure: the whole run took about
100 s on the H200 with three repeats, of which compiling nbx's kernels is a share the Triton cache
of an earlier run (the GPU tests') saves.
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback

import torch
import torch.nn.functional as F

import nbx.core as nbx
from peer_timing import ONCE, Timed, banner, call_ms, cold, measure

L2_FLUSH_BYTES = 256 << 20
SLOW_MS = 5.0
MIN_ITERS_SLOW = 3
REPEATS = 2   # the best of two ~20 ms runs: a copy of 256 MiB is ~160 calls a run


def view(t):
    return nbx.from_dlpack(t)


def copies_of(make, nbytes):
    n = max(1, -(-L2_FLUSH_BYTES // max(nbytes, 1)))
    ts = [make() for _ in range(n)]
    return ts, [view(t) for t in ts], n


def cases():
    gen = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16
    big = (8192, 16384)  # 256 MiB of bf16
    xs, nx, c = copies_of(lambda: torch.randn(big, device="cuda", dtype=bf, generator=gen), 256 << 20)
    nb = 256 << 20
    yield "clone", f"{big} bf16", 2 * nb, c, lambda i: nx[i].clone(), lambda i: xs[i].clone()
    yield "cat", f"2 x {big[0] // 2, big[1]} bf16", 2 * nb, c, \
        lambda i: nbx.concat([nx[i][: big[0] // 2], nx[i][big[0] // 2:]], axis=1), \
        lambda i: torch.cat([xs[i][: big[0] // 2], xs[i][big[0] // 2:]], dim=1)
    yield "pad", f"{big} bf16 (1,1,1,1)", 2 * nb, c, lambda i: nbx.pad(nx[i], (1, 1, 1, 1)), \
        lambda i: F.pad(xs[i], (1, 1, 1, 1))
    yield "pad reflect", f"{big} bf16 (3,3)", 2 * nb, c, lambda i: nbx.pad(nx[i], (3, 3), mode="reflect"), \
        lambda i: F.pad(xs[i], (3, 3), mode="reflect")
    yield "flip", f"{big} bf16 axis 1", 2 * nb, c, lambda i: nbx.flip(nx[i], axis=1), lambda i: torch.flip(xs[i], (1,))
    yield "roll", f"{big} bf16 shift 7", 2 * nb, c, lambda i: nbx.roll(nx[i], 7, axis=1), \
        lambda i: torch.roll(xs[i], 7, 1)
    yield "transpose", f"{big} bf16 .T", 2 * nb, c, lambda i: nx[i].T.contiguous(), lambda i: xs[i].T.contiguous()
    heads = (32, 4096, 128)
    hs, nh, ch = copies_of(lambda: torch.randn(heads, device="cuda", dtype=bf, generator=gen), 32 * 4096 * 128 * 2)
    hb = 32 * 4096 * 128 * 2
    # the copy ceiling at the model shapes' size: a clone moving the head transpose's and the KV
    # append's 64 MiB (a launch's ramp and tail weigh more on it than on the 256 MiB clone's 512 MiB)
    yield "clone heads", f"{heads} bf16", 2 * hb, ch, lambda i: nh[i].clone(), lambda i: hs[i].clone()
    yield "head transpose", f"{heads} bf16 (1,0,2)", 2 * hb, ch, lambda i: nh[i].permute(1, 0, 2).contiguous(), \
        lambda i: hs[i].permute(1, 0, 2).contiguous()
    cache = torch.randn((32, 4096, 128), device="cuda", dtype=bf, generator=gen)
    new = torch.randn((32, 1, 128), device="cuda", dtype=bf, generator=gen)
    n_cache, n_new = view(cache), view(new)   # viewed once: a per-call from_dlpack is host time torch does not pay
    yield "kv append", "[32,4096,128] + [32,1,128] bf16", 2 * hb, 1, \
        lambda i: nbx.concat([n_cache, n_new], axis=1), lambda i: torch.cat([cache, new], dim=1)
    weight = torch.randn((151936, 4096), device="cuda", dtype=bf, generator=gen)
    nw = view(weight)
    for n_ids in (1, 64, 1024, 8192):
        ids = torch.randint(0, 151936, (n_ids,), device="cuda", generator=gen)
        ni = view(ids)
        yield "embedding", f"151936x4096 bf16, {n_ids} ids", 2 * n_ids * 4096 * 2, 1, \
            lambda i, ni=ni: nbx.embedding(ni, nw), lambda i, ids=ids: F.embedding(ids, weight)
    # a sum scatter is one atomic add an update (docs/kernels.md); nbx's scatters are out of place, so the
    # peers are torch's out-of-place spellings (a clone and the in-place op)
    target = torch.zeros((4096, 64), device="cuda", dtype=torch.float32)
    rows = torch.randint(0, 4096, (1024, 1), device="cuda", generator=gen).expand(1024, 64).contiguous()
    src = torch.randn((1024, 64), device="cuda", generator=gen)
    n_target, n_rows, n_src = view(target), view(rows), view(src)
    yield "scatter-add", "[4096,64] f32 <- 1024 rows", 3 * 1024 * 64 * 4, 1, \
        lambda i: nbx.scatter(n_target, 0, n_rows, n_src, reduce="sum"), \
        lambda i: target.scatter_add(0, rows, src)
    table = torch.randn((32768, 1024), device="cuda", generator=gen)   # 128 MiB of f32
    put_rows = torch.randint(0, 32768, (8192,), device="cuda", generator=gen)
    put_vals = torch.randn((8192, 1024), device="cuda", generator=gen)
    n_table, n_put_rows, n_put_vals = view(table), view(put_rows), view(put_vals)
    # bytes: the clone (read + write the table) and each update read once and added into its row
    yield "index_put", "[32768,1024] f32 += 8192 rows", 2 * table.numel() * 4 + 3 * put_vals.numel() * 4, 1, \
        lambda i: nbx.index_put(n_table, (n_put_rows,), n_put_vals, accumulate=True), \
        lambda i: torch.index_put(table, (put_rows,), put_vals, accumulate=True)
    yield "index_add", "[32768,1024] f32 <- 8192 rows", 2 * table.numel() * 4 + 3 * put_vals.numel() * 4, 1, \
        lambda i: nbx.index_add(n_table, 0, n_put_rows, n_put_vals), \
        lambda i: table.index_add(0, put_rows, put_vals)
    for log2 in (24, 26):
        keys = torch.randn(1 << log2, device="cuda", generator=gen)
        yield "sort", f"2^{log2} f32", 2 * keys.numel() * 4, 1, \
            lambda i, nk=view(keys): nbx.sort(nk), lambda i, keys=keys: torch.sort(keys)
    # 64-bit keys: two stable sorts of their 32-bit words (sort/wide.py); unique of int64 token ids
    wide = torch.randint(-(1 << 62), 1 << 62, (1 << 24,), device="cuda", generator=gen)
    yield "sort", "2^24 i64", 2 * wide.numel() * 8, 1, \
        lambda i, nw=view(wide): nbx.sort(nw), lambda i: torch.sort(wide)
    ids = torch.randint(0, 151936, (1 << 20,), device="cuda", generator=gen)
    yield "unique", "2^20 i64 ids of 151936", ids.numel() * 8, 1, \
        lambda i, ni=view(ids): nbx.unique_counts(ni), \
        lambda i: torch.unique(ids, sorted=True, return_inverse=False, return_counts=True)
    rows = torch.randn((64, 151936), device="cuda", generator=gen)
    yield "sort-rows", "[64,151936] f32", 2 * rows.numel() * 4, 1, \
        lambda i, nr=view(rows): nbx.sort(nr, axis=-1), lambda i: torch.sort(rows, dim=-1)
    for shape in ((1, 151936), (64, 151936)):
        logits = torch.randn(shape, device="cuda", generator=gen)
        nl = view(logits)
        for k in (1, 50, 1024):
            yield "topk", f"{shape} f32 k={k}", logits.numel() * 4, 1, \
                lambda i, nl=nl, k=k: nbx.topk(nl, k), lambda i, logits=logits, k=k: torch.topk(logits, k)
    step = torch.randn((64, 151936), device="cuda", dtype=bf, generator=gen) * 3
    ns = view(step)
    g = nbx.Generator(seed=0)

    def torch_step(i):
        probs = torch.softmax(step.float() / 0.7, -1)
        ordered, order = torch.sort(probs, descending=True)
        mass = torch.cumsum(ordered, -1)
        ordered[(mass - ordered) > 0.9] = 0
        return order.gather(-1, torch.multinomial(ordered, 1))

    yield "sample top-p", "[64,151936] bf16 T=0.7 p=0.9", step.numel() * 2, 1, \
        lambda i: nbx.sample(ns, temperature=0.7, top_p=0.9, generator=g), torch_step


def timed(fn, copies: int, cycles: float) -> Timed:
    """peer_timing's figures, with fewer calls for a side slower than SLOW_MS a call."""
    if ONCE:
        return Timed(*measure(fn, copies, cycles, repeats=REPEATS), cold(fn))
    start = time.perf_counter()
    fn(0)
    torch.cuda.synchronize()
    if (time.perf_counter() - start) * 1e3 > SLOW_MS:
        return Timed(*measure(fn, copies, cycles, repeats=1, min_iters=MIN_ITERS_SLOW), float("nan"))
    return Timed(*measure(fn, copies, cycles, repeats=REPEATS), cold(fn))


def launch_breakdown(name: str, plan, x) -> None:
    """Each launch of plan over x, us: the time of the launches up to it less that of those before
    (a radix pass or a select step needs the state its predecessors leave, so none runs alone;
    single calls between events: a launch's fixed cost shows)."""
    from nbx.kernels import plans
    values = plans.execute(plan, {"x": x})
    # the plan's first j launches as a plan of their own over the call's buffers (allocating nothing)
    firsts = {j: plans.prepared(plans.LaunchPlan(plan.device, plan.launches[:j]))
              for j in range(1, len(plan.launches) + 1)}

    def up_to(j):
        return lambda: firsts[j](values)
    print(f"# launches of {name} (setting {plan_setting(plan)}):", flush=True)
    before = 0.0
    for j, one in enumerate(plan.launches, 1):
        total = call_ms(up_to(j), 21) * 1e3
        print(f"  {one.kernel.fn.__name__:<28} grid {str(one.grid):<14} {total - before:8.1f} us "
              f"(up to it {total:8.1f})", flush=True)
        before = total


def plan_setting(plan) -> str:
    meta = plan.launches[-1].meta
    return ", ".join(f"{k}={v}" for k, v in sorted(meta.items()) if k in ("BLOCK", "BITS", "GROUP", "num_warps"))


def breakdowns() -> None:
    """The launches of the sort of 2^24 float32 keys, of [64, 151936] rows and of top-k 50 / 1024 of
    [64, 151936] float32 rows, at the served settings."""
    from nbx.kernels.sort.radix import radix_plan, radix_setting
    from nbx.kernels.sort.topk import select_plan, select_setting
    gen = torch.Generator(device="cuda").manual_seed(0)
    keys = view(torch.randn(1 << 24, device="cuda", generator=gen)).reshape(1, 1 << 24)
    rows = view(torch.randn((64, 151936), device="cuda", generator=gen))
    for name, x in (("sort 2^24 f32", keys), ("sort [64,151936] f32", rows)):
        setting = radix_setting(x.device, x.shape[0], x.shape[1], x.dtype)
        launch_breakdown(name, radix_plan(x.shape, x.dtype, False, x.device, setting), x)
    for k in (50, 1024):
        setting = select_setting(rows.device, 64, 151936, rows.dtype, k)
        launch_breakdown(f"topk [64,151936] f32 k={k}", select_plan(rows.shape, rows.dtype, k, True, rows.device,
                                                                    setting), rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", help="only these ops")
    parser.add_argument("--breakdown", action="store_true",
                        help="then each launch of the sort and top-k plans (sort 2^24, [64, 151936] rows)")
    args = parser.parse_args(argv)
    cycles = banner()
    began = time.perf_counter()
    print(f"{'op':<15} {'case':<34} {'nbx us':>9} {'torch us':>9} {'nbx TB/s':>9} {'torch TB/s':>10} {'ratio':>6} "
          f"{'copy % nbx/torch':>16} {'host us nbx/torch':>18} {'cold us nbx/torch':>18}", flush=True)
    ceiling = None   # TB/s of the faster clone of this run
    for op, case, nbytes, copies, nbx_fn, torch_fn in cases():
        if args.ops and op not in args.ops and not op.startswith("clone"):
            continue
        try:
            ours, peer = timed(nbx_fn, copies, cycles), timed(torch_fn, copies, cycles)
        except Exception as exc:  # one refused case must not hide the rest; where it was raised, to mend it
            where = traceback.extract_tb(exc.__traceback__)[-1]
            print(f"{op:<15} {case:<34} FAILED: {type(exc).__name__}: {exc} (at {where.filename}:{where.lineno} "
                  f"in {where.name})", flush=True)
            continue
        rate, peer_rate = nbytes / ours.gpu_us / 1e6, nbytes / peer.gpu_us / 1e6
        if op == "clone":
            ceiling = max(rate, peer_rate)
        share = f"{100 * rate / ceiling:7.1f}/{100 * peer_rate / ceiling:<7.1f}" if ceiling else f"{'-':>16}"
        print(f"{op:<15} {case:<34} {ours.gpu_us:9.1f} {peer.gpu_us:9.1f} {rate:9.2f} {peer_rate:10.2f} "
              f"{peer.gpu_us / ours.gpu_us:6.2f} {share:>16} "
              f"{ours.host_us:8.1f}/{peer.host_us:<8.1f} {ours.cold_us:8.1f}/{peer.cold_us:<9.1f}", flush=True)
    if args.breakdown:
        breakdowns()
    print(f"# {time.perf_counter() - began:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

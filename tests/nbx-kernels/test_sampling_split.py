"""The decoding step split over rows x chunks of programs (sampling/kernel.py) against the numpy
reference: the exact tokens, on every top-p path (the band's weights sorted in a short block, in
the whole copy, over the row), on interp in CI (tiles.sampling: 64-element blocks, 128 candidates)
and on the GPU at the benchmark's shape (marked gpu)."""
import numpy as np
import pytest

import nbx.core as nbx
from nbx.core.ops.sampling import floor_weight, sample_reference
from nbx.kernels import launch, plans
from nbx.kernels.sampling import sample_plan
from nbx.kernels.sort.topk import lanes

rng = np.random.default_rng(41)


def run(x, temperature, k, p, floor, u):
    """The plan's values after a run (tokens and workspace), with the row uniforms u."""
    rows, vocab = x.shape
    plan = sample_plan(rows, vocab, x.dtype, k < vocab, p < 1.0, floor > 0.0, x.device)
    f32 = lambda v: float(np.float32(v))  # noqa: E731 - the scalars as the front-end passes them
    return plans.execute(plan, {"x": x, "u": nbx.asarray(u).to(x.device), "inv_t": f32(1.0 / temperature), "k": k,
                                "p": f32(p), "floor": floor_weight(floor)})


def reference(x, temperature, k, p, floor, u, monkeypatch):
    """sample_reference with the row uniforms u (the reference reads them from the Philox stream)."""
    from nbx.core.random import philox
    monkeypatch.setattr(philox, "uniform_stream", lambda seed, offset, rows: u)
    return sample_reference(x.to("cpu"), temperature, k, p, floor, 0, 0)


def reference_cuts(x, temperature, p):
    """Each row's top-p threshold as sample_reference finds it: the least weight kept."""
    from nbx.core.ops.sampling import weight
    l = x.to("cpu").numpy().astype(np.float32) * np.float32(1.0 / temperature)
    cuts = []
    for row in l:
        ordered = np.sort(weight(row - row.max()))[::-1]
        mass = np.cumsum(ordered).astype(np.float64)
        cuts.append(ordered[min(int(np.searchsorted(mass, np.float64(np.float32(p)) * mass[-1])), len(row) - 1)])
    return np.array(cuts)


def test_every_top_p_path_draws_the_references_tokens_across_chunks(device, monkeypatch):
    from nbx.kernels.sampling.kernel import BAND
    tiles = launch.tiles("sampling", device)
    vocab = 2 * tiles["block"] + 11
    peaked = rng.standard_normal(vocab) * 3
    flat = rng.standard_normal(vocab) * 0.04   # a band of most of the row: more than a block, within the cap
    flatter = rng.standard_normal(vocab) * 0.002  # a band of all the row, its weights distinct: its fine steps
    equal = np.zeros(vocab)                    # one weight everywhere: more than the cap, even in one fine step
    x = nbx.asarray(np.stack([peaked, flat, flatter, equal]).astype(np.float32)).to(device)
    u = rng.random(4).astype(np.float32)
    for p in (0.6, 0.97):
        done = run(x, 1.0, vocab, p, 0.0, u)
        counts = done["count"].numpy()  # the band's weights: the short sort's, the whole copy's, the rest
        band = done["band"].numpy().reshape(4, BAND.value)
        fine = band[:, 5]   # the fine steps' copies, -1 where not taken
        np.testing.assert_array_equal(band[:, 4], counts)   # the band's count, known before its copy
        cap = lanes(tiles["candidates"])
        small = min(lanes(tiles["block"]), 256, cap)
        if p == 0.6:   # (at 0.97 the flat row's band narrows too)
            assert counts[0] <= small < counts[1] <= cap < counts[2] and cap < counts[3], counts
        assert fine[0] == fine[1] == fine[3] == -1 and 0 < fine[2] <= cap // 2, fine   # equal: the row bisection
        assert done["maxes"].shape[0] > 4  # rows split over chunks
        np.testing.assert_array_equal(done["cut"].numpy(), reference_cuts(x, 1.0, p))
        np.testing.assert_array_equal(done["tokens"].numpy(), reference(x, 1.0, vocab, p, 0.0, u, monkeypatch))


def test_flat_rows_past_the_cap_find_the_references_threshold_at_any_p_and_temperature(device, monkeypatch):
    """Rows whose band passes the copies' cap, at random p and temperatures: the fine steps' threshold is
    the reference's (near-equal weights with a few ties, a row of nearly one weight, one far above)."""
    from nbx.kernels.sampling.kernel import BAND
    vocab = 2 * launch.tiles("sampling", device)["block"] + 11
    draw = np.random.default_rng(7)
    rows = np.stack([draw.standard_normal(vocab) * spread for spread in (0.0005, 0.001, 0.003, 0.008)])
    rows[1, ::5] = rows[1, 0]                  # ties inside the band
    rows[2, 3] = 4.0                           # one weight far above the band
    x = nbx.asarray(rows.astype(np.float32)).to(device)
    u = draw.random(4).astype(np.float32)
    fine_taken = 0
    for p, temperature in ((0.05, 1.0), (0.5, 0.7), (0.9, 1.3), (0.99, 1.0)):
        done = run(x, temperature, vocab, p, 0.0, u)
        fine_taken += int((done["band"].numpy().reshape(4, BAND.value)[:, 5] >= 0).sum())
        np.testing.assert_array_equal(done["cut"].numpy(), reference_cuts(x, temperature, p))
        np.testing.assert_array_equal(done["tokens"].numpy(),
                                      reference(x, temperature, vocab, p, 0.0, u, monkeypatch))
    assert fine_taken >= 8, fine_taken   # most rows at most p took the fine steps


def test_top_k_top_p_and_min_p_together_and_masked_logits_draw_the_references_tokens(device, monkeypatch):
    vocab = launch.tiles("sampling", device)["block"] + 11  # two chunks a row
    a = rng.standard_normal((2, vocab)) * 2
    a[0, ::3] = -np.inf                        # a masked vocabulary
    a[1, :40] = a[1, 40]                       # ties at the top
    x = nbx.asarray(a.astype(np.float32)).to(dtype=nbx.bfloat16).to(device)
    u = np.array([0.999999, 0.3], np.float32)
    for temperature, k, p, floor in ((3.0, vocab - 1, 0.95, 0.02), (1.0, vocab, 0.0, 0.0)):  # p = 0: the argmaxes
        got = run(x, temperature, k, p, floor, u)["tokens"].numpy()
        np.testing.assert_array_equal(got, reference(x, temperature, k, p, floor, u, monkeypatch))


def _case(name: str, constexprs: dict):
    """(module, kernel, signature, constexprs) of a sampling kernel for the sm_90 lowering."""
    import inspect
    from nbx.kernels.sampling import kernel as module
    pointers = {"x_ptr": "*bf16", "max_ptr": "*fp32", "u_ptr": "*fp32", "sel_ptr": "*i32", "hist_ptr": "*i32",
                "count_ptr": "*i32", "fine_ptr": "*i32"}  # the others hold int64
    scalars = {"inv_t": "fp32", "P": "fp32", "FLOOR": "i64"}
    names = inspect.signature(getattr(module, name).fn).parameters
    signature = {n: pointers.get(n, "*i64") if n.endswith("_ptr") else scalars.get(n, "i32")
                 for n in names if n not in constexprs}
    return module.__name__, name, signature, constexprs


def test_the_split_sampling_kernels_lower_for_sm90_with_every_filter():
    from test_kernels_lower_for_hopper import lowering_failures
    tiles = dict(CB=16, BLOCK=2048)
    cases = [_case("chunk_max_kernel", {"BLOCK": 2048}), _case("band_kernel", {"CB": 16})]
    cases += [_case("top_k_digits_kernel", {"PASS": j, "BLOCK": 2048}) for j in range(4)]
    for on in (False, True):  # every filter off, every filter on
        flags = dict(tiles, TOP_K=on, TOP_P=on, MIN_P=on)
        cases += [_case("mass_kernel", dict(tiles, TOP_K=on)), _case("compact_kernel", dict(tiles, TOP_K=on)),
                  _case("resolve_kernel", dict(tiles, TOP_K=on, SMALL=256, CAP=4096)), _case("kept_kernel", flags),
                  _case("draw_kernel", flags)]
    # through the layout passes too, as the GPU compiles them: the band's kernels and the fine steps' sweep
    cases += [(*_case(name, dict(tiles, TOP_K=False, **extra)), {"num_warps": 8, "through": "ttgir"})
              for name, extra in (("compact_kernel", {}), ("resolve_kernel", dict(SMALL=256, CAP=4096)))]
    assert lowering_failures(cases) == []


@pytest.mark.gpu
def test_the_benchmark_step_draws_the_references_tokens_inside_the_float64_top_p_set_on_the_gpu():
    device = nbx.as_device("cuda")
    logits = (nbx.randn(64, 151936, generator=nbx.Generator(seed=0)) * 3.0).to(dtype=nbx.bfloat16)
    on_gpu = logits.to(device)
    for seed in range(3):
        got = nbx.sample(on_gpu, temperature=0.7, top_p=0.9, generator=nbx.Generator(seed=seed)).numpy()
        expected = nbx.sample(logits, temperature=0.7, top_p=0.9, generator=nbx.Generator(seed=seed)).numpy()
        np.testing.assert_array_equal(got, expected)
        l = logits.numpy().astype(np.float64) / 0.7
        prob = np.exp(l - l.max(axis=1, keepdims=True))
        prob /= prob.sum(axis=1, keepdims=True)
        ordered = -np.sort(-prob, axis=1)
        cut = np.argmax(np.cumsum(ordered, axis=1) >= 0.9, axis=1)
        smallest_kept = ordered[np.arange(64), cut]
        # the integer weights are exp within ~1e-7: only a token at the set's edge could differ
        assert np.all(prob[np.arange(64), got] >= smallest_kept * (1 - 1e-6))

"""Host microseconds per call of small ops on any machine: nbx's cuda path over the simulated CUDA
of the tests, with Triton's JIT and launcher stubbed out. Everything else runs as on a GPU host:
front-end, promotion, plans, the caching pool, plans.execute, the stream lookup and the Python of
Triton's launcher object (CudaLauncher.__call__, where a launch goes through it). The stubs skip the
C launcher (cuLaunchKernelEx: most of the 6-9 us a launch of the H200 host, tools/bench/host_parts.py)
and the kernels themselves.

    PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':') TRITON_INTERPRET=0 python3 tools/bench/host_sim.py [--profile OP]

Work on the host path without spending GPU time, then confirm on the GPU with host_parts.py: the
figures here are of this machine's Python, not the GPU host's (which ran 1.5-2.5x slower in 2026-11).
"""
from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import sys
from pathlib import Path

import numpy as np
from host_timing import per_call_us

ROOT = Path(__file__).resolve().parents[2]


def simulated_cuda():
    """Install the tests' simulated libcudart/libcuda (tests/nbx-devices/test_nvidia_simulated.py)."""
    import pytest
    sys.path.insert(0, str(ROOT / "tests" / "nbx-devices"))
    import test_nvidia_simulated
    fake = test_nvidia_simulated._install(pytest.MonkeyPatch(), 1)
    from nbx.devices.nvidia import triton_driver
    triton_driver.install()  # Triton's active driver nbx's, as the backend's start makes it on a GPU host
    return fake


def triton_launcher():
    """What a compiled kernel's `run` is on the GPU host: Triton's CudaLauncher (its Python __call__ runs
    as there, scratch asked for none), its C launch a no-op that takes any arguments (itertools.chain:
    no Python frame, as the C launcher's)."""
    from triton.backends.nvidia.driver import CudaLauncher
    launcher = object.__new__(CudaLauncher)   # its __init__ compiles the C launcher: not here
    launcher.launch = itertools.chain
    launcher.num_ctas = 1
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid = launcher.launch_pdl = False
    launcher.gsan_enabled, launcher.arg_annotations, launcher.kernel_signature = False, (), ()  # later Tritons'
    return launcher


class NoLaunch:
    """What plans._Runner keeps of a stubbed launch: a compiled kernel whose launcher launches nothing."""
    function, packed_metadata = 0, (4, 1, 0)
    run = None   # triton_launcher(), set by stub_triton


def stub_triton(on_launch=None) -> tuple:
    """kernel[grid](...) returns a NoLaunch; on_launch(kernel, args, meta) sees each launch (compile_count's
    binder). The stream lookup and Triton's launcher object run as on the GPU host. Returns what it
    replaced (restore_triton puts it back)."""
    import triton

    jit = triton.runtime.jit.JITFunction
    saved = (jit.__getitem__,)
    NoLaunch.run = triton_launcher()

    def launcher(fn, grid):
        def launch(*args, **meta):
            if on_launch is not None:
                on_launch(fn, args, meta)
            return NoLaunch()
        return launch
    jit.__getitem__ = launcher
    # the tests' fake serves copy_ by the backend's host round trip of a strided pair (it runs no Triton);
    # on a GPU the kernels' copy serves it (a band written into an output, a strided clone): its launch
    # here. fill_ stays the fake's memsets: what they zero (a kernel's check flags) is read back.
    from nbx.core import dispatch
    dispatch._IMPLEMENTATIONS.pop(("copy_", "cuda"), None)
    return saved


def restore_triton(saved: tuple) -> None:
    """Triton's launch as stub_triton found it."""
    import triton
    triton.runtime.jit.JITFunction.__getitem__, = saved


def stub_device_copies(fake) -> None:
    """A device-to-device cudaMemcpyAsync returns without moving the bytes (the fake moves them on
    this host: megabytes a call that a GPU's copy engine moves while its host goes on), as the stubbed
    launcher skips the kernels; its call still costs the runtime wrapper's Python."""
    from nbx.devices.nvidia import runtime
    copy = fake.cudaMemcpyAsync.impl
    fake.cudaMemcpyAsync.impl = lambda dst, src, nbytes, kind, stream: (
        0 if kind == runtime.DEVICE_TO_DEVICE else copy(dst, src, nbytes, kind, stream))


PREFILL = dict(hidden=2048, heads=32, kv_heads=8, head_dim=64, intermediate=8192, tokens=512)
PREFILL_CASES = ("linear +residual 512x2048x2048", "gated_linear 512x2048->8192", "paged_attention prefill 512",
                 "rotary_embedding q 512", "rotary_kv_cache_write 512", "varlen_attention 512",
                 "decoder layer (attention half)", "decoder layer (mlp half)", "decoder layer (whole)")


class _SeededWeights:
    """What nbx.models.Decoder reads of a checkpoint (device, get): seeded bf16 tensors."""

    def __init__(self, nbx, device):
        self.device, self._nbx, self._rng = device, nbx, np.random.default_rng(0)

    def get(self, name, shape):
        a = (self._rng.standard_normal(shape) * 0.02).astype(np.float32)
        if name.endswith("norm.weight"):
            a += 1
        return self._nbx.asarray(a).to(self.device).to(dtype="bfloat16")


def prefill_ops(nbx, device) -> dict:
    """One decoder layer of the Llama-1B shape over a 512-token prompt, as nbx.models' prefill
    forward calls it (decoder.py: _attention, _mlp; kv_cache.py: PagedStep.attend), op by op and whole."""
    from nbx.models.decoder import FAMILIES, Decoder
    s = PREFILL
    n, h, hq, hk, e = s["tokens"], s["hidden"], s["heads"], s["kv_heads"], s["head_dim"]
    config = dict(architectures=["LlamaForCausalLM"], hidden_size=h, num_attention_heads=hq, num_key_value_heads=hk,
                  head_dim=e, intermediate_size=s["intermediate"], num_hidden_layers=1, vocab_size=256,
                  rms_norm_eps=1e-5, max_position_embeddings=1024, tie_word_embeddings=True)
    model = Decoder(FAMILIES["LlamaForCausalLM"], config, _SeededWeights(nbx, device))
    layer = model.layers[0]
    cache = model.new_cache([n])
    model._ensure_rope(n)
    pos = nbx.asarray(np.arange(n), dtype=nbx.int64, device=device)
    step = cache.begin([0], [n])   # one step's slots, written again by every repeat
    x = model.embed_rows(nbx.asarray(np.arange(n) % 256, dtype=nbx.int64, device=device))
    hx = nbx.rms_norm(x, (h,), layer.input_norm, model.eps)
    qkv = nbx.linear(hx, layer.wqkv, layer.bqkv)
    q = qkv[:, :hq * e].reshape(n, hq, e)
    k = qkv[:, hq * e:(hq + hk) * e].reshape(n, hk, e)
    v = qkv[:, (hq + hk) * e:].reshape(n, hk, e)
    kc, vc = step.cache.k[0], step.cache.v[0]
    cu_k = nbx.asarray(np.array([0, n], np.int32)).to(device)
    kk, vv = k.contiguous(), v.contiguous()
    return {
        "linear +residual 512x2048x2048": lambda: model.output_linear(hx, layer.wo, layer.bo, x),
        "gated_linear 512x2048->8192": lambda: nbx.gated_linear(hx, layer.gate, layer.up, activation=model.activation),
        "rotary_embedding q 512": lambda: nbx.rotary_embedding(q, model._cos, model._sin, pos),
        "rotary_kv_cache_write 512": lambda: nbx.rotary_kv_cache_write(k, v, model._cos, model._sin, pos, kc, vc,
                                                                       step.slots),
        "paged_attention prefill 512": lambda: nbx.paged_attention(
            q, kc, vc, step.table, step.lens, step.cu, is_causal=True, window=None, max_seq_len=step.max_seq_len,
            max_q_len=step.max_q_len),
        "varlen_attention 512": lambda: nbx.varlen_attention(q, kk, vv, cu_k, cu_k, is_causal=True),
        "decoder layer (attention half)": lambda: model._attention(0, layer, x, pos, step, n),
        "decoder layer (mlp half)": lambda: model._mlp(layer, x),
        "decoder layer (whole)": lambda: model._mlp(layer, model._attention(0, layer, x, pos, step, n)),
    }


TILED_CHAIN = "tiled_conv_chain 2 x k3 (1,128,256^2) bands of 32"


def tiled_chain_ops(nbx, device) -> dict:
    """bench_conv.py's tiled_chain (two 3 x 3 convs 128 -> 128, SiLU between, channels-last bf16)
    at a quarter of its image: 8 bands of 32 rows, as the bench's 8 bands of 128 rows over 1024^2."""
    rng = np.random.default_rng(0)

    def channels_last(shape):
        a = rng.standard_normal((shape[0], *shape[2:], shape[1])).astype(np.float32)
        t = nbx.asarray(a).to(device).to(dtype="bfloat16")
        return t.permute(0, len(shape) - 1, *range(1, len(shape) - 1))
    x = channels_last((1, 128, 256, 256))
    w = [channels_last((128, 128, 3, 3)) for _ in range(2)]
    layers = [nbx.ConvLayer(w[0], None, 1, 1, activation="silu"), nbx.ConvLayer(w[1], None, 1, 1)]
    return {TILED_CHAIN: lambda: nbx.tiled_conv_chain(x, layers, 32),
            "conv2d k3 (1,128,34,256) bf16 cl (a band)": lambda: nbx.conv2d(x[:, :, :34], w[0], None, 1, 1)}


def host_work(op, repeats: int = 20) -> tuple[float, float]:
    """(Python function calls, bytecodes) of nbx's own in one repeat of op, its first calls made: what a
    repeat costs the host on any machine (the clock of a shared machine moves by 2x, these do not).
    Triton's own Python (its launcher object's __call__, which differs between Triton versions) is timed,
    not counted."""
    for _ in range(3):
        op()
    counts = [0, 0]
    import triton
    tritons = str(Path(triton.__file__).parent)

    def trace(frame, event, arg):
        if event == "call":
            if frame.f_code.co_filename.startswith(tritons):
                return None
            counts[0] += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            counts[1] += 1
        return trace
    sys.settrace(trace)
    try:
        for _ in range(repeats):
            op()
    finally:
        sys.settrace(None)
    return counts[0] / repeats, counts[1] / repeats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--profile", help="cProfile this op (by own time; SORT=cumtime for cumulative)")
    parser.add_argument("--tiled-chain", action="store_true",
                        help="also bench_conv.py's tiled_chain at (1,128,256^2), bands of 32 rows, and one band's conv")
    parser.add_argument("--parts", action="store_true", help="run host_parts.py's stages instead")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time this process's CPU time, not the wall clock (a machine shared with other work)")
    parser.add_argument("--count", action="store_true",
                        help="also each op's Python calls and bytecodes a repeat (a machine-independent measure)")
    parser.add_argument("--prefill", action="store_true",
                        help="also the ops of one Llama-1B prefill layer (512 tokens, bf16) and the whole layer")
    args = parser.parse_args(argv)
    if args.cpu_time:
        import time
        import host_timing
        host_timing.time = type("process_clock", (), {"perf_counter_ns": staticmethod(time.process_time_ns)})
    os.environ["NBX_AUTOTUNE_NO_SWEEP"] = "1"   # the device file's tiles: a simulated GPU cannot be timed
    stub_device_copies(simulated_cuda())
    stub_triton()
    if args.parts:
        import host_parts
        return host_parts.main(["--calls", str(args.calls)] + (["--prefill"] if args.prefill else []))
    import nbx.core as nbx
    from nbx.core.tensor import empty
    device = nbx.as_device("cuda:0")
    a = nbx.asarray(np.ones(4096, np.float32)).to(device)
    x = nbx.asarray(np.ones((16, 256), np.float32)).to(device)
    w = nbx.asarray(np.ones(256, np.float32)).to(device)
    m = nbx.asarray(np.ones((1, 256), np.float32)).to(device)
    wt = nbx.asarray(np.ones((256, 256), np.float32)).to(device)
    table = nbx.asarray(np.ones((1000, 256), np.float32)).to(device)
    ids = nbx.asarray(np.array([3], np.int64)).to(device)
    hx, hr, hw = (nbx.asarray(np.ones((1, 4096) if i < 2 else 4096, np.float32)).to(device).to(dtype="bfloat16")
                  for i in range(3))   # issue 14's decode chain: one bf16 row of 4096 (bench_host.py's)
    ops = {
        "empty((4096,))": lambda: empty((4096,), "float32", device),
        "a + b": lambda: a + a,
        "a * 2.0": lambda: a * 2.0,
        "exp(a)": lambda: nbx.exp(a),
        "softmax": lambda: nbx.softmax(x, dim=-1),
        "rms_norm": lambda: nbx.rms_norm(x, (256,), w),
        "sum": lambda: nbx.sum(x, dim=-1),
        "x @ W.T": lambda: m @ wt.T,
        "embedding (1 id)": lambda: nbx.embedding(ids, table),
        "chain silu(rms_norm(x + r, w)) * x": lambda: nbx.silu(nbx.rms_norm(hx + hr, (4096,), hw)) * hx,
    }
    if args.prefill or args.profile in PREFILL_CASES:
        ops.update(prefill_ops(nbx, device))
    if args.tiled_chain or args.profile == TILED_CHAIN:
        ops.update(tiled_chain_ops(nbx, device))
    print(f"{'op (simulated CUDA, launcher stubbed)':40s} us/call")
    for name, op in ops.items():
        print(f"{name:40s} {per_call_us(op, args.calls):7.2f}")
    from nbx.kernels import plans
    kept = plans.compiled_count()
    print(f"# compiled kernels kept by the direct path: {kept} (repeats reuse them)")
    if args.count:
        print(f"{'# op: host work a repeat':40s} python calls, bytecodes")
        for name, op in ops.items():
            calls, codes = host_work(op)
            print(f"# {name:38s} {calls:5.1f} {codes:8.1f}")
    if args.profile:
        op = ops[args.profile]

        def loop():
            for _ in range(args.calls):
                op()
        profiler = cProfile.Profile()
        profiler.runcall(loop)
        pstats.Stats(profiler).sort_stats(os.environ.get("SORT", "tottime")).print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Convolutions, pooling and interpolate: nbx against torch (cuDNN) on the same GPU, in one process
(torch is the peer here; nbx itself never imports it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') TRITON_INTERPRET=0 python3 tools/bench/bench_conv.py

Timing as bench_datamove.py (peer_timing.both): GPU us a call back to back behind a spin, host us a
call, and the cold single call after an L2 flush. TFLOP/s counts 2 * outputs * taps * input
channels a group; TB/s the bytes an op must move once (inputs read, output written). ratio = torch
time / nbx time (above 1: nbx faster). Every 4-D case is channels-last (torch.channels_last, the
weights too: the layout a model converts its weights to at load); the conv1d cases are
channels-first (N, C, L), nbx's conv1d weight with its input channels at unit stride (torch's contiguous). The first line is the copy ceiling (a clone of 256 MiB). The image cases
(`--ops gn_silu group_norm inst_norm grid_sample conv_up2 tiled_chain`): GroupNorm -> SiLU, group
and instance norm, grid_sample, a UNet upsample block (conv2d upsample=2 against interpolate +
conv2d) and a VAE stage run by tiled_conv_chain against torch's whole-image chain. A case nbx
refuses prints FAILED with the error and the run goes on. About two minutes on the H200.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import nbx.core as nbx
from bench_datamove import copies_of, view
from peer_timing import allocator_name, both, deviation, spin_cycles_per_ms

CL = torch.channels_last


def _input(shape, gen, channels_last=True):
    nbytes = 2 * torch.Size(shape).numel()

    def make():
        t = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        return t.to(memory_format=CL) if channels_last else t
    return copies_of(make, nbytes), nbytes


def conv_cases(gen):
    # (label, input shape, out channels, kernel, stride, padding, groups)
    shapes = [
        ("sd unet 64^2", (2, 320, 64, 64), 320, 3, 1, 1, 1),
        ("sd unet 32^2", (2, 640, 32, 32), 640, 3, 1, 1, 1),
        ("sd unet 16^2", (2, 1280, 16, 16), 1280, 3, 1, 1, 1),
        ("sdxl unet 128^2", (2, 320, 128, 128), 320, 3, 1, 1, 1),
        ("vae dec 128^2", (1, 512, 128, 128), 512, 3, 1, 1, 1),
        ("vae dec 256^2", (1, 512, 256, 256), 512, 3, 1, 1, 1),
        ("vae dec 512^2", (1, 256, 512, 512), 256, 3, 1, 1, 1),
        ("vae dec 1024^2", (1, 128, 1024, 1024), 128, 3, 1, 1, 1),
        ("1x1 320->640", (2, 320, 64, 64), 640, 1, 1, 0, 1),
        ("1x1 1280->1280", (2, 1280, 32, 32), 1280, 1, 1, 0, 1),
        ("depthwise 3x3", (8, 384, 56, 56), 384, 3, 1, 1, 384),
        ("depthwise 7x7", (8, 384, 56, 56), 384, 7, 1, 3, 384),
    ]
    for label, shape, out_ch, k, stride, pad, groups in shapes:
        (xs, nx, c), nbytes = _input(shape, gen)
        w = (torch.randn((out_ch, shape[1] // groups, k, k), device="cuda", dtype=torch.bfloat16, generator=gen)
             / (k * (shape[1] // groups) ** 0.5)).to(memory_format=CL)
        b = torch.randn(out_ch, device="cuda", dtype=torch.bfloat16, generator=gen)
        nw, nb = view(w), view(b)
        oh = (shape[2] + 2 * pad - k) // stride + 1
        flops = 2 * shape[0] * oh * oh * out_ch * (shape[1] // groups) * k * k
        moved = nbytes + 2 * shape[0] * oh * oh * out_ch + 2 * w.numel()
        yield ("conv2d", f"{label} {shape[1]}->{out_ch} k{k} bf16 cl", flops, moved, c,
               lambda i, nx=nx, nw=nw, nb=nb, s=stride, p=pad, g=groups: nbx.conv2d(nx[i], nw, nb, s, p, 1, g),
               lambda i, xs=xs, w=w, b=b, s=stride, p=pad, g=groups: F.conv2d(xs[i], w, b, s, p, 1, g))
    for length in (8192, 65536):
        (xs, nx, c), nbytes = _input((1, 512, length), gen, channels_last=False)
        vocoder = (  # op, case, weight shape, output elements, the nbx call, the torch call
            ("conv1d", "hifigan 512->512 k7", (512, 512, 7), 512 * length,
             lambda x, w: nbx.conv1d(x, w, None, 1, 3), lambda x, w: F.conv1d(x, w, None, 1, 3)),
            ("conv_t1d", "hifigan up x8 512->256 k16", (512, 256, 16), 256 * 8 * length,
             lambda x, w: nbx.conv_transpose1d(x, w, None, 8, 4), lambda x, w: F.conv_transpose1d(x, w, None, 8, 4)))
        for op, label, w_shape, outputs, ours, theirs in vocoder:
            w = torch.randn(w_shape, device="cuda", dtype=torch.bfloat16, generator=gen) / 60
            # conv1d's weight as a model converts it at load for nbx (its input channels at unit stride, the
            # layout the implicit GEMM reads coalesced; torch keeps its contiguous (O, C, K)); the transposed
            # one keeps torch's (C, O, K), which nbx reads through one dense copy a call (conv/__init__.py)
            nw = view(w.transpose(1, 2).contiguous()).permute(0, 2, 1) if op == "conv1d" else view(w)
            yield (op, f"{label} L={length} bf16", 2 * length * w.numel(), nbytes + 2 * outputs + 2 * w.numel(), c,
                   lambda i, nx=nx, nw=nw, ours=ours: ours(nx[i], nw),
                   lambda i, xs=xs, w=w, theirs=theirs: theirs(xs[i], w))


def memory_cases(gen):
    (xs, nx, c), nbytes = _input((2, 640, 64, 64), gen)
    for mode in ("nearest", "bilinear"):
        yield ("interpolate", f"(2,640,64,64) x2 {mode} bf16 cl", 0, 5 * nbytes, c,
               lambda i, m=mode: nbx.interpolate(nx[i], scale_factor=2, mode=m),
               lambda i, m=mode: F.interpolate(xs[i], scale_factor=2, mode=m))
    (ps, np_, cp), pbytes = _input((32, 64, 112, 112), gen)
    yield ("max_pool2d", "(32,64,112,112) k3 s2 p1 bf16 cl", 0, pbytes * 5 // 4, cp,
           lambda i: nbx.max_pool2d(np_[i], 3, 2, 1), lambda i: F.max_pool2d(ps[i], 3, 2, 1))
    yield ("avg_pool2d", "(32,64,112,112) k2 s2 bf16 cl", 0, pbytes * 5 // 4, cp,
           lambda i: nbx.avg_pool2d(np_[i], 2), lambda i: F.avg_pool2d(ps[i], 2))
    (gs, ng, cg), gbytes = _input((64, 2048, 7, 7), gen)
    yield ("adaptive_avg", "(64,2048,7,7) -> 1 bf16 cl", 0, gbytes, cg,
           lambda i: nbx.adaptive_avg_pool2d(ng[i], 1), lambda i: F.adaptive_avg_pool2d(gs[i], 1))


def image_cases(gen):
    """GroupNorm(32) -> SiLU of the SD VAE decoder, instance norm and grid_sample (issue 21), and a
    VAE decoder stage run band by band (tiled_conv_chain) against torch's whole-image chain."""
    (xs, nx, c), nbytes = _input((1, 512, 128, 128), gen)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(512, device="cuda", dtype=torch.bfloat16, generator=gen)
    nw, nb = view(w), view(b)
    yield ("gn_silu", "(1,512,128,128) G32 + silu bf16 cl", 0, 2 * nbytes, c,
           lambda i: nbx.group_norm(nx[i], 32, nw, nb, 1e-6, activation="silu"),
           lambda i: F.silu(F.group_norm(xs[i], 32, w, b, 1e-6)))
    yield ("group_norm", "(1,512,128,128) G32 bf16 cl", 0, 2 * nbytes, c,
           lambda i: nbx.group_norm(nx[i], 32, nw, nb, 1e-6), lambda i: F.group_norm(xs[i], 32, w, b, 1e-6))
    (ys, ny, cy), ybytes = _input((4, 256, 64, 64), gen)
    yield ("inst_norm", "(4,256,64,64) bf16 cl", 0, 2 * ybytes, cy,
           lambda i: nbx.instance_norm(ny[i]), lambda i: F.instance_norm(ys[i]))
    (gs, ng, cg), gbytes = _input((2, 64, 128, 128), gen)
    grid = torch.rand((2, 96, 96, 2), device="cuda", generator=gen).mul(2.2).sub(1.1).to(torch.bfloat16)
    n_grid = view(grid)
    out_bytes = 2 * 2 * 64 * 96 * 96
    for mode, padding in (("bilinear", "zeros"), ("bilinear", "reflection"), ("nearest", "border")):
        yield ("grid_sample", f"(2,64,128,128) grid 96^2 {mode} {padding} bf16 cl", 0,
               gbytes + out_bytes + 2 * grid.numel(), cg,
               lambda i, m=mode, p=padding: nbx.grid_sample(ng[i], n_grid, m, p, False),
               lambda i, m=mode, p=padding: F.grid_sample(gs[i], grid, m, p, False))
    (us, nu, cu), ubytes = _input((2, 640, 32, 32), gen)
    wu = (torch.randn((640, 640, 3, 3), device="cuda", dtype=torch.bfloat16, generator=gen) / 76).to(memory_format=CL)
    bu = torch.randn(640, device="cuda", dtype=torch.bfloat16, generator=gen)
    nwu, nbu = view(wu), view(bu)
    yield ("conv_up2", "unet upsample (2,640,32^2) x2 -> k3 bf16 cl", 2 * 2 * 64 * 64 * 640 * 640 * 9,
           ubytes + 4 * ubytes + 2 * wu.numel(), cu,
           lambda i: nbx.conv2d(nu[i], nwu, nbu, 1, 1, upsample=2),
           lambda i: F.conv2d(F.interpolate(us[i], scale_factor=2, mode="nearest"), wu, bu, 1, 1))
    (ts, nt, ct), tbytes = _input((1, 128, 1024, 1024), gen)
    weights = [(torch.randn((128, 128, 3, 3), device="cuda", dtype=torch.bfloat16, generator=gen) / 34)
               .to(memory_format=CL) for _ in range(2)]
    layers = [nbx.ConvLayer(view(weights[0]), None, 1, 1, activation="silu"), nbx.ConvLayer(view(weights[1]), None, 1, 1)]
    flops = 2 * 2 * 1024 * 1024 * 128 * 128 * 9
    yield ("tiled_chain", "2 x (1,128,1024^2) k3 bands of 128 rows bf16 cl", flops, 3 * tbytes, ct,
           lambda i: nbx.tiled_conv_chain(nt[i], layers, 128),
           lambda i: F.conv2d(F.silu(F.conv2d(ts[i], weights[0], None, 1, 1)), weights[1], None, 1, 1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", help="only these ops")
    args = parser.parse_args(argv)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | cuDNN {torch.backends.cudnn.version()} "
          f"| allocator: {allocator_name()}")
    cycles = spin_cycles_per_ms()
    gen = torch.Generator(device="cuda").manual_seed(0)
    big = torch.randn((8192, 16384), device="cuda", dtype=torch.bfloat16, generator=gen)
    ours, peer = both(lambda i: view(big).clone(), lambda i: big.clone(), 1, cycles)
    print(f"copy ceiling: clone of 256 MiB bf16: nbx {2 * big.nbytes / ours.gpu_us / 1e6:.2f} TB/s, torch "
          f"{2 * big.nbytes / peer.gpu_us / 1e6:.2f} TB/s")
    del big
    print(f"{'op':<12} {'case':<44} {'nbx us':>9} {'torch us':>9} {'nbx TF|TB/s':>11} {'torch':>8} {'ratio':>6} "
          f"{'dev':>8} {'host us nbx/torch':>18} {'cold us nbx/torch':>18}")
    for source in (conv_cases(gen), memory_cases(gen), image_cases(gen)):
        for op, case, flops, moved, copies, nbx_fn, torch_fn in source:
            if args.ops and op not in args.ops:
                continue
            try:
                dev = deviation(nbx_fn(0), torch_fn(0))
                ours, peer = both(nbx_fn, torch_fn, copies, cycles)
            except Exception as exc:  # one refused case must not hide the rest
                print(f"{op:<12} {case:<44} FAILED: {type(exc).__name__}: {exc}", flush=True)
                continue
            work, unit = (flops, 1e6) if flops else (moved, 1e6)   # TFLOP/s or TB/s: both per us / 1e6
            print(f"{op:<12} {case:<44} {ours.gpu_us:9.1f} {peer.gpu_us:9.1f} {work / ours.gpu_us / unit:11.2f} "
                  f"{work / peer.gpu_us / unit:8.2f} {peer.gpu_us / ours.gpu_us:6.2f} {dev:8.1e} "
                  f"{ours.host_us:8.1f}/{peer.host_us:<8.1f} {ours.cold_us:8.1f}/{peer.cold_us:<9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

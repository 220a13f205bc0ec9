"""Write the convolution keys the H200 benchmark and the diffusion models form, without a GPU:
certificates/keys/nvidia-h200-140gb-conv-bench.json and -conv-models.json (the models' keys the
benchmark does not form, certified after it).

    PYTHONPATH=$(ls -d packages/*/src | tr '\n' ':') python3 tools/write_conv_keys.py

A `conv` key is the implicit GEMM's M (output positions), N (output channels a group), K (input
channels a group x taps), dtype, whether the input is channels-last and `spatial`, the convolution's
spatial dims (nbx.kernels.conv.tuning.conv_key, classed by the device file's dims ladder): "2" for the
UNet / VAE convolutions and the tiled chain's bands, "1" for HiFi-GAN's conv1d (channels-first:
certified on a conv1d, whose A tile takes A_SHIFT), "1t" for its upsampler's phases (certified on
two phase launches of a transposed convolution); a 1 x 1 convolution of a
channels-last input with stride 1 is nbx.linear of the (positions, C) rows by the [O, C] weight: a
`linear` key (layout "nt", plain, descriptor-eligible). Depthwise convolutions and pooling run the window kernel (tiles.window, no key).

- bench:  tools/bench/bench_conv.py's cases: the UNet / VAE 3 x 3 convolutions and the two 1 x 1 ones
          (bfloat16, channels-last), HiFi-GAN's conv1d (channels-first) and its x8 upsampler's phases
          (conv_transpose1d k 16 stride 8 padding 4: eight launches of M = L, N = 256, K = 512 x 2
          taps, one key), the fused upsample block
          (2 x 640 at 32^2 upsampled to 64^2) and tiled_conv_chain's bands (128 output rows of
          1024 wide, the first layer 130 with its halo);
- models: Stable Diffusion 1.5's UNet at 512 px (latent 64^2, batch 2 for guidance), SDXL's at
          1024 px (latent 128^2, batch 2) and their VAE decoder (512 -> 128 channels, batch 1) at
          512 and 1024 px: every 3 x 3 convolution (resnets, down- and upsamplers, conv_in / conv_out)
          and every 1 x 1 one (resnet shortcuts, attention proj_in / proj_out).
"""
from __future__ import annotations

from nbx.autotune import records
from nbx.kernels.conv.tuning import CONV, PHASE_LABEL, conv_key

from keys_files import h200_facts, key_record, keys_path, save_keys
from write_linear_keys import record as linear_record

# (batch, side, in channels, out channels, kernel, stride): a square image, padding kernel // 2
BENCH_3X3 = [(2, 64, 320, 320), (2, 32, 640, 640), (2, 16, 1280, 1280), (2, 128, 320, 320), (1, 128, 512, 512),
             (1, 256, 512, 512), (1, 512, 256, 256), (1, 1024, 128, 128)]
BENCH_1X1 = [(2, 64, 320, 640), (2, 32, 1280, 1280)]
HIFIGAN_LENGTHS = (8192, 65536)


def unet_convs(batch: int, latent: int, channels: tuple, attention_levels: tuple) -> list[tuple]:
    """(batch, side, in, out, kernel, stride) of a Stable-Diffusion-style UNet: per level two resnets
    down (3 x 3, a 1 x 1 shortcut where the channels change), a stride-2 downsampler but the last;
    up, three resnets a level whose inputs carry the skip's channels, an upsampler's 3 x 3 but the
    last; attention levels' proj_in / proj_out as 1 x 1."""
    convs = [(batch, latent, 4, channels[0], 3, 1), (batch, latent, channels[0], 4, 3, 1)]
    skips, side, c = [channels[0]], latent, channels[0]
    for level, out in enumerate(channels):
        for _ in range(2):
            convs += [(batch, side, c, out, 3, 1), (batch, side, out, out, 3, 1)]
            if c != out:
                convs.append((batch, side, c, out, 1, 1))
            if level in attention_levels:
                convs += [(batch, side, out, out, 1, 1)]
            c = out
            skips.append(c)
        if level < len(channels) - 1:
            convs.append((batch, side, c, c, 3, 2))
            side //= 2
            skips.append(c)
    for level in reversed(range(len(channels))):
        out = channels[level]
        for _ in range(3):
            cin = c + skips.pop()
            convs += [(batch, side, cin, out, 3, 1), (batch, side, out, out, 3, 1), (batch, side, cin, out, 1, 1)]
            if level in attention_levels:
                convs.append((batch, side, out, out, 1, 1))
            c = out
        if level > 0:
            side *= 2
            convs.append((batch, side, c, c, 3, 1))   # the upsampler's conv, on the upsampled image
    return convs


def vae_decoder_convs(image: int) -> list[tuple]:
    """SD's VAE decoder (block channels 512, 512, 256, 128 from the latent up; three resnets a block)."""
    side, c = image // 8, 512
    convs = [(1, side, 4, 512, 3, 1)] + [(1, side, 512, 512, 3, 1)] * 4   # conv_in, the mid block's resnets
    for level, out in enumerate((512, 512, 256, 128)):
        for _ in range(3):
            convs += [(1, side, c, out, 3, 1), (1, side, out, out, 3, 1)]
            if c != out:
                convs.append((1, side, c, out, 1, 1))
            c = out
        if level < 3:
            side *= 2
            convs.append((1, side, c, c, 3, 1))
    return convs + [(1, side, 128, 3, 3, 1)]


def conv_record(facts, batch, side, cin, cout, kernel, stride, channels_last=True):
    """The key of a square 2-D convolution (padding kernel // 2): conv's, or linear's for a 1 x 1 product."""
    out = (side + 2 * (kernel // 2) - kernel) // stride + 1
    m = batch * out * out
    if kernel == 1 and stride == 1 and channels_last:
        return linear_record(facts, m, cout, cin)
    return key_record(facts, CONV, **conv_key(m, cout, cin * kernel * kernel, "bfloat16", channels_last, 2))


def bench_records(facts) -> list[records.KeyRecord]:
    recs = [conv_record(facts, b, s, cin, cout, 3, 1) for b, s, cin, cout in BENCH_3X3]
    recs += [conv_record(facts, b, s, cin, cout, 1, 1) for b, s, cin, cout in BENCH_1X1]
    for length in HIFIGAN_LENGTHS:   # channels-first (1, 512, L)
        recs.append(key_record(facts, CONV, **conv_key(length, 512, 512 * 7, "bfloat16", False, 1)))
        recs.append(key_record(facts, CONV, **conv_key(length, 256, 512 * 2, "bfloat16", False, PHASE_LABEL)))
    recs.append(conv_record(facts, 2, 64, 640, 640, 3, 1))   # conv_up2: the conv sees the upsampled 64^2
    recs += [key_record(facts, CONV, **conv_key(rows * 1024, 128, 128 * 9, "bfloat16", True, 2)) for rows in (128, 130)]
    return recs


def model_records(facts) -> list[records.KeyRecord]:
    convs = unet_convs(2, 64, (320, 640, 1280, 1280), (0, 1, 2)) + unet_convs(2, 128, (320, 640, 1280), (1, 2))
    convs += vae_decoder_convs(512) + vae_decoder_convs(1024)
    return [conv_record(facts, *c) for c in convs]


def main() -> int:
    facts = h200_facts()
    bench = records.merge(bench_records(facts))
    seen = {r.identity for r in bench}
    models = [r for r in records.merge(model_records(facts)) if r.identity not in seen]   # certified after the bench's
    save_keys(keys_path("conv-bench"), bench, facts)
    save_keys(keys_path("conv-models"), models, facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

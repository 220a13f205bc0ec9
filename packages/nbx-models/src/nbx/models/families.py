"""The families nbx.models implements, chosen by the config's `architectures`."""
from __future__ import annotations

from . import decoder, encoder, mla
from .config import architecture_of
from .errors import UnknownArchitectureError

KNOWN_ARCHITECTURES = tuple(decoder.FAMILIES) + (mla.ARCHITECTURE,) + encoder.ARCHITECTURES


def check_known(config: dict) -> str:
    name = architecture_of(config)
    if name not in KNOWN_ARCHITECTURES:
        raise UnknownArchitectureError(name, KNOWN_ARCHITECTURES)
    return name


def parameter_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint of this config holds, by name (what the seeded writer writes)."""
    name = check_known(config)
    if name in decoder.FAMILIES:
        return decoder.parameter_shapes(decoder.FAMILIES[name], config)
    if name == mla.ARCHITECTURE:
        return mla.parameter_shapes(config)
    return encoder.parameter_shapes(config)


def build(config: dict, weights, folder):
    name = check_known(config)
    if name in decoder.FAMILIES:
        return decoder.Decoder(decoder.FAMILIES[name], config, weights)
    if name == mla.ARCHITECTURE:
        return mla.MlaDecoder(config, weights)
    return encoder.Encoder(config, weights, folder)

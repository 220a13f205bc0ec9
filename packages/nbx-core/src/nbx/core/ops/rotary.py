"""Rotary position embeddings: `rotary_embedding` and the cos/sin tables of the scalings checkpoints
use, read from a Hugging Face config dict.

Tables are laid out as Hugging Face builds them: cos and sin of shape (max_positions, rotary_dim),
rotary_dim = head_dim * partial_rotary_factor. In the half-split layout (NeoX, Llama) column c and
c + rotary_dim/2 hold the same angle (torch.cat((freqs, freqs))); in the interleaved layout (GPT-J)
columns 2i and 2i + 1 do (repeat_interleave). With them the rotation is HF's own formula,
x * cos + rotate(x) * sin over the first rotary_dim dims of each head, rotate being rotate_half
(-x2, x1) or rotate_every_two (-x[1::2], x[::2] interleaved); the dims past rotary_dim pass through.

The tables are computed in float64 (angles position * inv_freq) and rounded once to the dtype asked
for: HF computes them in float32, whose angles drift by ~1e-3 rad at 100k positions.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes, reference
from ..dispatch import implementation, register
from ..errors import ArgumentError, DTypeError, IndexingError, NotSupportedError, ShapeError
from ..spec import OpSpec, define, front_end, params
from ..tensor import Tensor
from ._common import check_category, common_device, compute_dtype, oracle_dtype, wrap

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


def _check_rotary_call(call, facts) -> None:
    facts.device = check_rotary("rotary_embedding", call.x, call.cos, call.sin, call.positions)
    facts.out_dtype = call.x.dtype
    facts.interleave = bool(call.interleaved)


rotary_embedding = front_end(define(OpSpec(
    "rotary_embedding", params("x", "cos", "sin", "positions", interleaved=False), _check_rotary_call,
    doc="""x (*tokens, heads, head_dim) rotated by the angles of each token's position.

cos, sin: (max_positions, rotary_dim) tables as HF builds them (rotary_dim even, <= head_dim);
positions: an integer tensor of x's token shape (*tokens), each in [0, max_positions).
interleaved: GPT-J's layout (pairs 2i, 2i + 1) instead of the half-split one (i, i + rotary_dim/2).
Returns a new tensor of x's shape and dtype (computed in float32 for the half types).
On a GPU a position outside the table is not checked on the host (that would wait for the
device): the kernel writes NaN for that token's rotated dims, so it cannot pass unseen; the cpu
checks every call's positions. Checked once a signature (the operands' layouts, interleaved).""")))


def check_rotary(op: str, x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor):
    """The checks of rotary_embedding's operands (its fused forms share them); their device."""
    for role, t in (("x", x), ("cos", cos), ("sin", sin), ("positions", positions)):
        if not isinstance(t, Tensor):
            raise DTypeError(f"{op}: {role} must be a tensor, got {type(t).__name__}")
    check_category(f"{op} (x)", x.dtype, "real_floating")
    check_category(f"{op} (cos)", cos.dtype, "real_floating")
    check_category(f"{op} (sin)", sin.dtype, "real_floating")
    check_category(f"{op} (positions)", positions.dtype, "integer")
    if x.ndim < 2:
        raise ShapeError(f"{op}: x is (*tokens, heads, head_dim), got shape {tuple(x.shape)}")
    if cos.ndim != 2 or tuple(cos.shape) != tuple(sin.shape):
        raise ShapeError(f"{op}: cos and sin are (max_positions, rotary_dim) tables of one shape, got "
                         f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    rotary_dim = cos.shape[1]
    if rotary_dim % 2 or rotary_dim == 0 or rotary_dim > x.shape[-1]:
        raise ShapeError(f"{op}: rotary_dim {rotary_dim} must be even, > 0 and <= head_dim {x.shape[-1]}")
    if tuple(positions.shape) != tuple(x.shape[:-2]):
        raise ShapeError(f"{op}: positions has shape {tuple(positions.shape)}, expected x's token shape "
                         f"{tuple(x.shape[:-2])}")
    return common_device(x, cos, sin, positions)   # position values: checked per call on the cpu


def check_positions(positions: Tensor, max_positions: int) -> None:
    p = positions.numpy()
    if p.size and (p.min() < 0 or p.max() >= max_positions):
        raise IndexingError(f"rotary_embedding: positions span [{p.min()}, {p.max()}], the tables hold "
                            f"{max_positions} positions")


def rotate(a: np.ndarray, rotary_dim: int, interleaved: bool) -> np.ndarray:
    """rotate_half or rotate_every_two of a's first rotary_dim dims (the rest: zeros)."""
    out = np.zeros_like(a)
    r = a[..., :rotary_dim]
    if interleaved:
        out[..., 0:rotary_dim:2] = -r[..., 1::2]
        out[..., 1:rotary_dim:2] = r[..., 0::2]
    else:
        half = rotary_dim // 2
        out[..., :half] = -r[..., half:]
        out[..., half:rotary_dim] = r[..., :half]
    return out


def _rotary_reference(x, cos, sin, positions, interleaved=False, precision=reference.NATIVE):
    compute = oracle_dtype(x.dtype) if precision == reference.FLOAT64 else compute_dtype(x.dtype)
    a = x.numpy().astype(compute)
    rotary_dim = cos.shape[1]
    index = positions.numpy().astype(np.int64)
    c = cos.numpy().astype(compute)[index][..., None, :]   # (*tokens, 1, rotary_dim)
    s = sin.numpy().astype(compute)[index][..., None, :]
    out = a.copy()
    out[..., :rotary_dim] = a[..., :rotary_dim] * c + rotate(a, rotary_dim, interleaved)[..., :rotary_dim] * s
    return out


reference.register("rotary_embedding", _rotary_reference)


@register("rotary_embedding", "cpu")
def _rotary_cpu(call):
    check_positions(call.positions, call.cos.shape[0])
    return wrap(_rotary_reference(call.x, call.cos, call.sin, call.positions, call.interleave), call.x.dtype)


# ---- the tables, from a Hugging Face config --------------------------------------------------------

def _get(config: dict, name: str, default=None):
    value = config.get(name)
    return default if value is None else value


def rope_parameters(config: dict) -> dict:
    """The rope settings of an HF config, in one dict: rope_type, rope_theta and the scaling's own
    keys. Reads `rope_scaling` (transformers 4.x: `type` or `rope_type`) or `rope_parameters` (5.x)."""
    scaling = dict(_get(config, "rope_parameters", None) or _get(config, "rope_scaling", None) or {})
    rope_type = scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type == "dynamic" and scaling.get("factor") is None:
        raise ArgumentError("rope scaling 'dynamic' needs a factor")
    if rope_type not in ROPE_TYPES:
        raise NotSupportedError(f"rope scaling {rope_type!r} is not implemented (nbx builds {ROPE_TYPES})")
    theta = scaling.get("rope_theta", _get(config, "rope_theta", 10000.0))
    return {**scaling, "rope_type": rope_type, "rope_theta": float(theta)}


def head_dim_of(config: dict) -> int:
    head_dim = _get(config, "head_dim")
    if head_dim is None:
        try:
            head_dim = config["hidden_size"] // config["num_attention_heads"]
        except KeyError:
            raise ArgumentError("the config names neither head_dim nor hidden_size and num_attention_heads") from None
    return int(head_dim)


def rotary_dim_of(config: dict) -> int:
    """head_dim * partial_rotary_factor (HF rounds down), or a GPT-J style `rotary_dim`."""
    if _get(config, "rotary_dim") is not None:
        return int(config["rotary_dim"])
    params = rope_parameters(config)
    factor = params.get("partial_rotary_factor", _get(config, "partial_rotary_factor", 1.0))
    return int(head_dim_of(config) * float(factor))


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(params: dict, config: dict, dim: int, base: float) -> tuple[np.ndarray, float]:
    factor = float(params["factor"])
    original = params.get("original_max_position_embeddings") or config.get("max_position_embeddings")
    if original is None:
        raise ArgumentError("yarn needs original_max_position_embeddings or max_position_embeddings")
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        attention_factor = (_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all) if mscale and mscale_all
                            else _yarn_mscale(factor))
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as HF: no zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation = 1 - ramp
    inv_freq = (1 / (factor * pos_freqs)) * (1 - extrapolation) + (1 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


def _llama3(params: dict, inv_freq: np.ndarray) -> np.ndarray:
    factor = float(params["factor"])
    low_factor, high_factor = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    old_context = float(params["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    low_wavelen, high_wavelen = old_context / low_factor, old_context / high_factor
    scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_factor) / (high_factor - low_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def rope_frequencies(config: dict, seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """(inv_freq (rotary_dim/2,) float64, attention_factor) as HF's rope init functions compute them.

    seq_len matters to dynamic NTK only: the length of the sequence the table serves (HF recomputes
    the base once a sequence outgrows max_position_embeddings); None is max_position_embeddings."""
    params = rope_parameters(config)
    dim = rotary_dim_of(config)
    base = params["rope_theta"]
    rope_type = params["rope_type"]
    if rope_type == "dynamic":
        max_pos = int(config["max_position_embeddings"])
        length = max(int(seq_len or max_pos), max_pos)
        factor = float(params["factor"])
        base = base * ((factor * length / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    if rope_type == "yarn":
        return _yarn(params, config, dim, base)
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if rope_type == "linear":
        inv_freq = inv_freq / float(params["factor"])
    elif rope_type == "llama3":
        inv_freq = _llama3(params, inv_freq)
    return inv_freq, 1.0


def rope_tables(config: dict, max_positions: int | None = None, *, seq_len: int | None = None,
                interleaved: bool = False, dtype=None, device=None) -> tuple[Tensor, Tensor]:
    """(cos, sin), each (max_positions, rotary_dim), for the rope of an HF config dict (rope_theta,
    rope_scaling or rope_parameters, head_dim or hidden_size / num_attention_heads,
    partial_rotary_factor). max_positions None: max_position_embeddings. interleaved: GPT-J's
    column order. dtype: float32 unless given. YaRN's attention factor is folded into both tables,
    as HF does."""
    from ..tensor import from_numpy
    if max_positions is None:
        if config.get("max_position_embeddings") is None:
            raise ArgumentError("rope_tables needs max_positions or the config's max_position_embeddings")
        max_positions = int(config["max_position_embeddings"])
    inv_freq, attention_factor = rope_frequencies(config, seq_len)
    angles = np.arange(int(max_positions), dtype=np.float64)[:, None] * inv_freq[None, :]
    angles = np.repeat(angles, 2, axis=1) if interleaved else np.concatenate([angles, angles], axis=1)
    dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.float32
    cos = from_numpy(np.ascontiguousarray((np.cos(angles) * attention_factor).astype(dt.host)))
    sin = from_numpy(np.ascontiguousarray((np.sin(angles) * attention_factor).astype(dt.host)))
    if device is not None:
        cos, sin = cos.to(device), sin.to(device)
    return cos, sin


__all__ = ["rotary_embedding", "rope_tables", "rope_frequencies", "rope_parameters", "rotary_dim_of"]

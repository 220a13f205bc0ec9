"""The API reference, generated from the docstrings with pdoc: one page per distribution.

    python tools/api_docs.py --out build/api        # build/api/index.html and one page per distribution

Each distribution's page documents its top-level module (nbx.core, nbx.memory, ...) and links the
pages of its submodules, all written under --out. Nothing is committed: the pages are built from
the source (CI builds them in tests/test_api_docs.py, so a docstring that breaks pdoc fails there).
Run it from the repository root with every distribution importable (hatch shell, or PYTHONPATH on
each packages/*/src).
"""
from __future__ import annotations

import argparse
import html
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def distributions(root: Path = ROOT) -> dict[str, str]:
    """Distribution name -> its top-level module: packages/nbx-devices-nvidia -> nbx.devices.nvidia."""
    return {p.name: p.name.replace("-", ".") for p in sorted((root / "packages").glob("nbx-*"))
            if (p / "src" / Path(*p.name.split("-"))).is_dir()}


def build(out: Path, root: Path = ROOT) -> dict[str, Path]:
    """Write the reference under out; returns distribution -> the path of its page."""
    os.environ.setdefault("TRITON_INTERPRET", "1")  # nbx.kernels imports triton: the interpreter needs no GPU
    import pdoc
    import pdoc.render

    dists = distributions(root)
    pdoc.render.configure(docformat="google", show_source=False,
                          footer_text="nbx: generated from the docstrings by tools/api_docs.py")
    pdoc.pdoc(*dists.values(), output_directory=out)
    pages = {dist: out / Path(*module.split(".")).with_suffix(".html") for dist, module in dists.items()}
    missing = [str(p) for p in pages.values() if not p.is_file()]
    if missing:
        raise SystemExit(f"pdoc wrote no page for {missing}")
    links = "\n".join(f'<li><a href="{html.escape(str(p.relative_to(out)))}">{html.escape(dist)}</a> '
                      f'(<code>{html.escape(dists[dist])}</code>)</li>' for dist, p in pages.items())
    (out / "index.html").write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>nbx API</title>"
                                    f"</head><body><h1>nbx API reference</h1><ul>\n{links}\n</ul></body></html>\n")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "api")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(p) for p in sorted(ROOT.glob("packages/*/src")) if str(p) not in sys.path]
    pages = build(args.out)
    for dist, page in pages.items():
        print(f"{dist:<20} {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Plot text-information curves: the gap (nats per token, other row's transcript minus the
right one) against the training step, one line per run, from `text_conditioning.py --out` files.

    python -m benchmarks.diagnostics.plot_text_information out/textinfo_palle_*.json \
        --out benchmarks/palle_text_layout.png
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="JSON files written by text_conditioning.py --out")
    ap.add_argument("--head", type=int, default=1, help="MTP head to plot (1 = next token)")
    ap.add_argument("--out", required=True, help="PNG to write")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = defaultdict(list)
    for path in args.files:
        try:
            with open(path) as f:
                d = json.load(f)
            h = args.head - 1
            curves[d["workdir"]].append((d["step"], d["ce_other"][h] - d["ce_right"][h]))
        except (OSError, ValueError, KeyError, IndexError) as e:
            msg = f"error: {path}: not a text_conditioning.py --out file ({e})"
            raise SystemExit(msg) from None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, pts in sorted(curves.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel("text information (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

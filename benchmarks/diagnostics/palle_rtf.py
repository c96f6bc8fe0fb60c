"""LM-RTF against utterance length: the AR backbone (steps grow with length) against PALLE
(fixed steps), batch 1, on texts of 2-20 s built from test sentences.

    python -m benchmarks.diagnostics.palle_rtf --ar pretrained/car_small --palle runs/palle_refine \
        --strategies far,par,palle --out benchmarks/palle_rtf

Each text is one or more test sentences joined (no splitting: `max_seconds` 24); every
(strategy, text) is compiled once, then timed once (the median of `--repeats`). LM-RTF =
model wall time / generated audio seconds (vocoder excluded). Writes `<out>.png` and
`<out>.json`; prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ar", default="pretrained/car_small")
    ap.add_argument("--palle", default="runs/palle_refine")
    ap.add_argument("--strategies", default="far,par,palle")
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--sentences", default="1,2,3,4,6")  # sentences joined per text
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/palle_rtf")
    args = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxtts.data.manifest import read_split
    from jaxtts.evaluate import split_specs
    from jaxtts.synthesize import Synthesizer

    pool = read_split(args.corpus, "test")
    texts = []
    for n in (int(x) for x in args.sentences.split(",")):
        texts.append(" ".join(u.text for u in pool[:n]))
    synths = {}
    rows = []
    for spec in split_specs(args.strategies):
        workdir = args.ar if spec.split(":")[0] in ("far", "car", "vadusa") else args.palle
        if workdir not in synths:
            synths[workdir] = Synthesizer.from_workdir(workdir)
        synth = synths[workdir]
        for text in texts:
            kw = dict(strategy=spec, max_seconds=24.0, batch_size=1, progress=False)
            synth.synthesize([text], None, **kw)  # compile
            runs = [synth.synthesize([text], None, **kw)[0] for _ in range(args.repeats)]
            r = runs[0]
            lm_s = statistics.median(x.info["lm_s"] for x in runs)
            rows.append(
                {
                    "strategy": spec,
                    "seconds": r.info["duration"],
                    "lm_s": lm_s,
                    "lm_rtf": lm_s / max(r.info["duration"], 1e-6),
                    "steps": r.info["steps"],
                    "pieces": r.info.get("pieces", 1),
                }
            )
            print(
                f"| {spec} | {r.info['duration']:.1f} | {rows[-1]['lm_rtf']:.4f} | "
                f"{r.info['steps']} |",
                flush=True,
            )
    print("\n| strategy | audio s | LM-RTF | steps |\n|---|--:|--:|--:|")
    for r in rows:
        print(f"| {r['strategy']} | {r['seconds']:.1f} | {r['lm_rtf']:.4f} | {r['steps']} |")
    fig, ax = plt.subplots(figsize=(6, 4))
    for spec in split_specs(args.strategies):
        pts = sorted((r["seconds"], r["lm_rtf"]) for r in rows if r["strategy"] == spec)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=spec)
    ax.set_xlabel("generated audio (s)")
    ax.set_ylabel("LM-RTF (batch 1)")
    ax.set_title("AR steps grow with length; PALLE's are fixed")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    fig.savefig(args.out + ".png", dpi=100)
    with open(args.out + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

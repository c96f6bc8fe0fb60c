"""SSD acceptance: acceptance rate (accepted / proposed draft tokens) and mean tokens per
target forward for a grid of draft lengths L and tolerances beta, on the first N test
sentences with their zero-shot prompts (the run's sampling settings); and the share of the
accepted drafts that the target's filtered distribution gives probability 0 (outside its top-p
nucleus: only the tolerance let them in; 0 at beta = 0).

    python -m benchmarks.diagnostics.ssd_acceptance --workdir pretrained/ssd_deep --num 40 \
        --L 1,2,3,4,5 --beta 0,0.1,0.2,0.4,0.6

(A batch whose padded shape is new is decoded twice, compile then timed, with the same keys:
its rows count twice in the acceptance sums; the ratio is a slightly reweighted mean.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/ssd_deep")
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--num", type=int, default=40)
    ap.add_argument("--L", default="1,2,3,4,5")
    ap.add_argument("--beta", default="0,0.1,0.2,0.4,0.6")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", default="out/ssd_acceptance.json")
    args = ap.parse_args(argv)

    from jaxtts.synthesize import Synthesizer, zero_shot_sentences

    synth = Synthesizer.from_workdir(args.workdir)
    texts, prompts = zero_shot_sentences(args.corpus, args.num)
    eng = synth.engine
    rows = []
    print(
        "| L | beta | acceptance % | accepted outside the target's nucleus % | "
        f"tokens / target forward | LM-RTF (batch {args.batch}) |\n|--:|--:|--:|--:|--:|--:|",
        flush=True,
    )
    orig = eng.generate
    for L in [int(x) for x in args.L.split(",")]:
        for beta in [float(x) for x in args.beta.split(",")]:
            stats = {"acc": 0, "prop": 0, "out": 0}

            def gen(batch, keys, plan, stats=stats):
                out = orig(batch, keys, plan)
                n = int(batch.text.shape[0])
                stats["acc"] += int(out.stats["accepted_drafts"][:n].sum())
                stats["prop"] += int(out.stats["proposed_drafts"][:n].sum())
                stats["out"] += int(out.stats["accepted_outside"][:n].sum())
                return out

            eng.generate = gen
            spec = f"ssd:L={L},beta={beta:g}"
            synth.synthesize(
                texts[: args.batch],
                prompts[: args.batch],
                strategy=spec,
                batch_size=args.batch,
                progress=False,
            )  # compile
            stats.update(acc=0, prop=0, out=0)
            res = synth.synthesize(
                texts, prompts, strategy=spec, batch_size=args.batch, progress=False
            )
            eng.generate = orig
            toks = sum(r.info["num_tokens"] for r in res)
            steps = sum(r.info["steps"] for r in res)
            audio = sum(r.info["duration"] for r in res)
            row = {
                "L": L,
                "beta": beta,
                "acceptance": stats["acc"] / max(stats["prop"], 1),
                "outside_nucleus": stats["out"] / max(stats["acc"], 1),
                "tokens_per_forward": toks / max(steps, 1),
                "lm_rtf": sum(r.info["lm_s"] for r in res) / audio,
            }
            rows.append(row)
            print(
                f"| {L} | {beta:g} | {100 * row['acceptance']:.1f} | "
                f"{100 * row['outside_nucleus']:.1f} | "
                f"{row['tokens_per_forward']:.2f} | {row['lm_rtf']:.4f} |",
                flush=True,
            )
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

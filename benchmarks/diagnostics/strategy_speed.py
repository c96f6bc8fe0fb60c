"""LM decoding speed of every strategy on real sentences: LM-RTF, tokens per step (mean chunk)
and steps per audio second at batch 1 and 8, on the first N test utterances with their
zero-shot prompts (the evaluation's), run's own sampling settings. Vocoder and ASR excluded;
each (strategy, batch shape) is compiled once before timing.

    python -m benchmarks.diagnostics.strategy_speed --workdir pretrained/dcar_deep \
        --strategies far,car:2,car:3,car:4,vadusa:2,vadusa:3,dcar --batch 1,8 --num 40

Run it on a quiet machine: every number is wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/dcar_deep")
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--split", default="test")
    ap.add_argument("--num", type=int, default=40)
    ap.add_argument("--strategies", default="far,car:2,car:3,car:4,vadusa:2,vadusa:3,dcar")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--out", default="out/strategy_speed.json")
    args = ap.parse_args(argv)

    import jax

    from jaxtts.evaluate import split_specs
    from jaxtts.synthesize import Synthesizer, zero_shot_sentences

    synth = Synthesizer.from_workdir(args.workdir)
    texts, prompts = zero_shot_sentences(args.corpus, args.num, args.split)
    print(
        f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); "
        f"{args.workdir}; {len(texts)} {args.split} sentences",
        flush=True,
    )
    rows = []
    for b in [int(x) for x in args.batch.split(",")]:
        for spec in split_specs(args.strategies):  # 'ssd:L=3,beta=0.4' stays one spec
            synth.synthesize(
                texts[:b], prompts[:b], strategy=spec, batch_size=b, progress=False
            )  # compile this shape
            t0 = time.perf_counter()
            res = synth.synthesize(texts, prompts, strategy=spec, batch_size=b, progress=False)
            wall = time.perf_counter() - t0
            lm_s = sum(r.info["lm_s"] for r in res)
            audio = sum(r.info["duration"] for r in res)
            toks = sum(r.info["num_tokens"] for r in res)
            steps = sum(r.info["steps"] for r in res)
            row = {
                "strategy": spec,
                "batch": b,
                "lm_rtf": lm_s / audio,
                "mean_chunk": toks / steps,
                "steps_per_audio_s": steps / audio,
                "audio_s": audio,
                "wall_s": wall,
                "compile_s": sum(r.info["compile_s"] for r in res),
            }
            rows.append(row)
            print(
                f"| {spec} | {b} | {row['lm_rtf']:.4f} | {row['mean_chunk']:.2f} | "
                f"{row['steps_per_audio_s']:.1f} |",
                flush=True,
            )
    far = {r["batch"]: r["lm_rtf"] for r in rows if r["strategy"] == "far"}
    print("\n| strategy | batch | LM-RTF | speed-up vs FAR | mean chunk | steps / audio s |")
    print("|---|--:|--:|--:|--:|--:|")
    for r in rows:
        up = far.get(r["batch"], float("nan")) / r["lm_rtf"]
        print(
            f"| {r['strategy']} | {r['batch']} | {r['lm_rtf']:.4f} | {up:.2f}x | "
            f"{r['mean_chunk']:.2f} | {r['steps_per_audio_s']:.1f} |"
        )
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""LM decoding speed of TLDR's variants against FAR on their shared frozen backbone, at a fixed
output length: tokens/s, LM-RTF and backbone forwards per audio second, batch 1 and 8.

    python -m benchmarks.diagnostics.tldr_speed                          # every variant of \
        configs/tldr.py
    python -m benchmarks.diagnostics.tldr_speed --variants deep_p2 --runs pretrained/tldr_deep

Speed does not depend on the weights once the length is fixed: EOS is suppressed until
`--tokens` (`SamplingConfig.min_tokens`), so every row of every variant generates exactly
`--tokens` tokens. Each `--variants` entry is built from its config with the frozen parts
shipped (backbone, speaker encoder) and its trained parts freshly initialised, so the ablation
variants (P = 8, mean-pool, no LoRA, no speaker) are timed without training them; `--runs`
times trained TLDR run folders the same way (a check that trained weights run at the same
speed). Sampling: the backbone's own settings (its config.decode). Prompt and text are random
ids of the given lengths, as in benchmarks/decode.py (whose timing helper this reuses).
Run it on a quiet machine: every number is wall time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from benchmarks.decode import random_batch, time_decode


def _variant(name: str, base):
    """(TLDRModel, params) of configs/tldr.py:<name>: frozen parts shipped, the rest new."""
    import jax
    import numpy as np

    from configs.tldr import get_config
    from jaxtts.methods.tldr.assemble import frozen_params, load_speaker, mel_table, tldr_config
    from jaxtts.methods.tldr.model import TLDRModel
    from jaxtts.trees import tree_from_flat, tree_to_flat

    section = get_config(name).tldr
    _, spk_model, spk_params = load_speaker(section)
    cfg = tldr_config(section, base.cfg, base.tokenizer, spk_model)
    model = TLDRModel(cfg, spk_model)
    b = np.ones((1, 8), np.int32)
    new = jax.jit(model.init)(jax.random.key(0), b, np.array([8]), b, np.array([8]), np.array([4]))[
        "params"
    ]
    table = mel_table(base.tokenizer) if spk_model is not None else None
    flat = tree_to_flat(new)  # the frozen leaves overwrite their fresh initialisation
    flat.update(tree_to_flat(frozen_params(base.params, spk_params, table)))
    return model, tree_from_flat(flat)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="pretrained/car_small")
    ap.add_argument(
        "--variants", default="small,small_p2,small_p8,small_meanpool,small_nolora,small_nospk"
    )
    ap.add_argument("--runs", default="", help="trained TLDR run folders, comma-separated")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--tokens", type=int, default=200, help="tokens per row (200 = 8 s)")
    ap.add_argument("--text_len", type=int, default=60)
    ap.add_argument("--prompt_len", type=int, default=75)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="out/tldr_speed.json")
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    from jaxtts.decode import registry
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.methods.lm.engine import LMEngine
    from jaxtts.methods.tldr.engine import TLDREngine
    from jaxtts.run_folder import RunFolder

    base = LMEngine.from_run(RunFolder(args.backbone))
    sampling = dataclasses.replace(
        SamplingConfig.from_config(base.decode_config), min_tokens=args.tokens
    )
    entries = [("far", args.backbone, {"target": base.model}, {"target": base.params})]
    for v in [v for v in args.variants.split(",") if v]:
        model, params = _variant(v, base)
        entries.append(
            (
                f"tldr P={model.cfg.patch}",
                f"configs/tldr.py:{v} (untrained)",
                {"target": base.model, "tldr": model},
                {"target": base.params, "tldr": params},
            )
        )
    for r in [r for r in args.runs.split(",") if r]:
        eng = TLDREngine.from_run(RunFolder(r))
        entries.append(
            (f"tldr P={eng.tldr.cfg.patch}", r, eng.decode_models(), eng.decode_params())
        )
    print(
        f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}); backbone "
        f"{args.backbone}; {args.tokens} tokens/row, text {args.text_len}, prompt "
        f"{args.prompt_len}; {sampling}",
        flush=True,
    )
    rng = np.random.default_rng(0)
    rows = []
    for b in [int(x) for x in args.batch.split(",")]:
        batch, keys = random_batch(rng, base.cfg, b, args.text_len, args.prompt_len)
        for spec, source, models, params in entries:
            strat = registry.get(spec.split()[0])
            out, wall, compile_s = time_decode(
                strat, models, params, batch, keys, args.tokens, sampling, args.repeats
            )
            n_tok = int(np.asarray(out.length).sum())
            audio_s = n_tok / base.frame_rate
            rows.append(
                {
                    "strategy": spec,
                    "source": source,
                    "batch": b,
                    "tokens": n_tok,
                    "wall_s": wall,
                    "compile_s": compile_s,
                    "tokens_per_s": n_tok / wall,
                    "lm_rtf": wall / audio_s,
                    "forwards_per_audio_s": (int(out.num_forwards) + 1) / (audio_s / b),
                }
            )
            r = rows[-1]
            print(
                f"  {spec:10s} B={b:2d} {source:42s} {r['tokens_per_s']:8.1f} tok/s  LM-RTF "
                f"{r['lm_rtf']:.4f}  compile {compile_s:.1f}s",
                flush=True,
            )
    far = {r["batch"]: r["tokens_per_s"] for r in rows if r["strategy"] == "far"}
    print(
        "\n| row | source | batch | tokens/s | LM-RTF | x FAR | backbone forwards / audio s |\n"
        "|---|---|--:|--:|--:|--:|--:|"
    )
    for r in rows:
        print(
            f"| {r['strategy']} | {r['source']} | {r['batch']} | {r['tokens_per_s']:.0f} | "
            f"{r['lm_rtf']:.4f} | {r['tokens_per_s'] / far[r['batch']]:.2f} | "
            f"{r['forwards_per_audio_s']:.1f} |"
        )
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {"device": str(jax.devices()[0].device_kind), "args": vars(args), "rows": rows},
            f,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

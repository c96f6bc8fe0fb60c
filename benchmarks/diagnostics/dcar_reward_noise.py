"""Can DCPO's reward tell chunk sizes apart? The reward's noise against the gaps between sizes.

For P training prompts (the DCPO rows of `--config`), every chunk size c in `--sizes` is decoded
G times with fixed c (different seeds: `forced_chunk`, the policy does not choose). Each
rollout is scored by the reward ASR as in DCPO: the reward's WER term (per-sentence WER
relative to the ground truth's, without the out-of-range penalty), and the same with CER.
Per size: the mean reward and the within-prompt standard deviation (the noise a group
advantage sees). Between neighbouring sizes: the mean per-prompt gap and its signal-to-noise
ratio at the group size G, gap / (noise * sqrt(2 / (G / 2))): the z-score of the gap between
the two half-groups of a chase-then-exceed group.

    python -m benchmarks.diagnostics.dcar_reward_noise --config configs/dcar.py:deep \
        --prompts 8 --group 8 \
        --sizes 1,2,3,4 --out out/dcar_reward_noise_deep.json
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def summarize(table: dict, sizes, group: int) -> dict:
    """table[metric][c]: [P, G] rewards. -> per metric: mean / noise per size, gaps and SNR."""
    out = {}
    for metric, per in table.items():
        m = {c: float(np.mean(per[c])) for c in sizes}
        noise = {c: float(np.sqrt(np.mean(np.var(per[c], axis=1, ddof=1)))) for c in sizes}
        gaps = {}
        for a, b in zip(sizes[:-1], sizes[1:], strict=True):
            d = np.mean(per[a], axis=1) - np.mean(per[b], axis=1)  # [P] per-prompt gap
            sd = np.sqrt((noise[a] ** 2 + noise[b] ** 2) / 2)
            se_half = sd * np.sqrt(2 / max(group // 2, 1))  # two half-groups of G/2
            gaps[f"{a}-{b}"] = {
                "gap": float(np.mean(d)),
                "gap_sd_over_prompts": float(np.std(d, ddof=1)) if d.size > 1 else 0.0,
                "snr_at_group": float(abs(np.mean(d)) / se_half) if se_half > 0 else float("inf"),
            }
        out[metric] = {"mean": m, "noise": noise, "gaps": gaps}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/dcar.py:deep")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8, help="rollouts per prompt and size")
    ap.add_argument("--sizes", default="1,2,3,4")
    ap.add_argument("--out", default="out/dcar_reward_noise.json")
    args = ap.parse_args(argv)

    import jax

    from jaxtts.config_help import load_config
    from jaxtts.methods.dcar.dcpo import (
        RolloutSource,
        config_policy,
        load_backbone,
        load_reward_asr,
        training_rows,
    )
    from jaxtts.methods.dcar.policy import ChunkPolicy

    sizes = [int(c) for c in args.sizes.split(",")]
    config = load_config(args.config)
    config.dcpo.prompts_per_step, config.dcpo.group_size = args.prompts, args.group
    engine = load_backbone(str(config.dcpo.backbone))
    asr = load_reward_asr(str(config.dcpo.reward_asr))
    rows = training_rows(config, engine, asr)
    source = RolloutSource(config, engine, asr, rows, progress=False)
    policy = ChunkPolicy(config_policy(config, engine))
    x = np.zeros((1, 1, policy.cfg.d_in), np.float32)
    pparams = policy.init(jax.random.PRNGKey(0), x, np.ones((1,), np.int32))["params"]
    pick = np.random.default_rng(0).choice(len(rows), args.prompts, replace=False)
    table = {"reward_wer": {}, "reward_cer": {}}
    t0 = time.time()
    for i, c in enumerate(sizes):
        forced = np.full((args.prompts * args.group,), c, np.int32)
        b, host = source.rollout(pparams, step=1000 + i, pick=pick, forced=forced)
        wer_gt = np.repeat([rows[j].wer_gt for j in pick], args.group)
        # the WER term of DCPO's reward (without the out-of-range penalty)
        table["reward_wer"][c] = -(b["wer"] - wer_gt).reshape(args.prompts, args.group)
        cer = b["cer"]
        cer_gt = np.repeat([rows[j].cer_gt for j in pick], args.group)
        table["reward_cer"][c] = -(cer - cer_gt).reshape(args.prompts, args.group)
        print(
            f"c={c}: WER {100 * np.mean(b['wer']):.1f} % (gt {100 * np.mean(wer_gt):.1f}), "
            f"CER {100 * np.mean(cer):.1f} %, {time.time() - t0:.0f} s",
            flush=True,
        )
    res = summarize(table, sizes, args.group)
    res["setup"] = vars(args) | {"pick": pick.tolist()}
    for metric, r in res.items():
        if metric == "setup":
            continue
        print(f"\n{metric}: size mean / within-prompt noise")
        for c in sizes:
            print(f"  c={c}: {r['mean'][c]:+.4f} / {r['noise'][c]:.4f}")
        for k, g in r["gaps"].items():
            print(
                f"  gap {k}: {g['gap']:+.4f} (sd over prompts {g['gap_sd_over_prompts']:.4f}), "
                f"SNR at G={args.group}: {g['snr_at_group']:.2f}"
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1, default=str))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""DCPO curves (reward, reward-ASR WER, mean chunk of the policy's rollouts, KL) of one or
more DCAR runs, and the histogram of the chunk sizes a policy chooses on test sentences.

    python -m benchmarks.diagnostics.dcar_report --out benchmarks/dcar \
        --policy pretrained/dcar_deep --num 240 \
        --runs runs/dcar,runs/dcar_nochase,runs/dcar_nopenalty,runs/dcar_234

Writes <out>_curves.png, <out>_chunks.png and prints a markdown table (time per step and per
epoch of the qualifying prompts, last-25-step means) and the histogram.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

KEYS = [
    ("train/reward_policy", "reward (policy rollouts)"),
    ("train/wer", "reward-ASR WER"),
    ("train/mean_chunk_policy", "mean chunk (policy rollouts)"),
    ("train/kl", "KL to ref"),
]


def _smooth(y: np.ndarray, k: int = 5) -> np.ndarray:
    if len(y) < k:
        return y
    return np.convolve(y, np.ones(k) / k, mode="valid")


def curves(runs: list[str], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(KEYS), figsize=(4 * len(KEYS), 3.2))
    print(
        "| run | steps | s / step | s / epoch | reward (last 25) | WER (last 25) | "
        "mean chunk (last 25) |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|")
    for run in runs:
        rows = [json.loads(x) for x in open(Path(run) / "metrics.jsonl")]
        step = np.array([r["step"] for r in rows])
        for ax, (key, title) in zip(axes, KEYS, strict=True):
            y = np.array([r.get(key, np.nan) for r in rows])
            ys = _smooth(y)
            ax.plot(step[len(step) - len(ys) :], ys, label=Path(run).name)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("DCPO step")
        cfg = json.loads((Path(run) / "config.json").read_text())
        per_step = rows[-1]["elapsed_s"] / rows[-1]["step"]
        n_prompts = _num_prompts(run)
        epoch = per_step * n_prompts / int(cfg["dcpo"]["prompts_per_step"]) if n_prompts else None
        last = [r for r in rows if r["step"] > rows[-1]["step"] - 25]

        def mean(k, rows=last):
            return float(np.mean([r[k] for r in rows]))

        print(
            f"| {Path(run).name} | {rows[-1]['step']} | {per_step:.1f} | "
            f"{'—' if epoch is None else f'{epoch:.0f}'} | {mean('train/reward_policy'):.3f} | "
            f"{100 * mean('train/wer'):.1f} % | {mean('train/mean_chunk_policy'):.2f} |"
        )
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}_curves.png", dpi=110)
    print(f"\n{out}_curves.png")


def _num_prompts(run: str) -> int | None:
    log = Path(str(run) + ".log")
    if log.is_file():
        for line in log.read_text(errors="ignore").splitlines():
            if "DCPO prompts" in line:
                return int(line.split("DCPO prompts")[0].split()[-1])
    return None


def chunk_histogram(policy: str, corpus: str, num: int, out: str, sample: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxtts.data.manifest import read_split
    from jaxtts.engine import load_engine
    from jaxtts.methods.dcar.engine import chunk_schedule
    from jaxtts.synthesize import prompts_from_utterances

    eng = load_engine(policy)
    pool = read_split(corpus, "test")
    utts = pool[:num]
    prompts = prompts_from_utterances(pool, utts)
    k = eng.cfg.num_mtp_heads
    counts = np.zeros(k, np.int64)
    for i, (u, p) in enumerate(zip(utts, prompts, strict=True)):
        _, chunks, _ = chunk_schedule(eng, u.text, p, seed=i, sample=sample)
        counts += np.bincount(chunks, minlength=k + 1)[1:]
    share = counts / counts.sum()
    how = "sampled from the policy, dcar:sample" if sample else "argmax policy, dcar"
    print(f"\nchunk sizes chosen by {policy} on {len(utts)} test sentences ({how}):")
    print("| chunk | " + " | ".join(str(c) for c in range(1, k + 1)) + " |")
    print("|---|" + "--:|" * k)
    print("| share % | " + " | ".join(f"{100 * s:.1f}" for s in share) + " |")
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar(range(1, k + 1), 100 * share)
    ax.set_xlabel("chunk size")
    ax.set_ylabel("% of decisions")
    ax.set_title(f"{Path(policy).name} ({how}): {counts.sum()} decisions", fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}_chunks.png", dpi=110)
    print(f"{out}_chunks.png")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="runs/dcar")
    ap.add_argument("--policy", default="pretrained/dcar_deep")
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--num", type=int, default=240)
    ap.add_argument("--out", default="out/dcar")
    ap.add_argument("--sample", action="store_true", help="histogram of dcar:sample")
    args = ap.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r and Path(r, "metrics.jsonl").is_file()]
    if runs:  # --runs "" skips the curves (and keeps an earlier plot)
        curves(runs, args.out)
    if args.num > 0:
        chunk_histogram(args.policy, args.corpus, args.num, args.out, args.sample)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Loss / accuracy curve of a training run: markdown table + PNG.

    python -m benchmarks.diagnostics.training_curve --workdir runs/car_small --every 100 \
        --png benchmarks/car_small_curve.png

Train rows: loss and per-head top-1 accuracy (means over the logging window); wall minutes are
integrated from the logged steps/s (training steps only: data preparation and evaluation
excluded). Dev rows: dev loss, per-head accuracy and, when the run synthesised samples, their
mean length, cap hits and domain-LM ASR WER.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _lineage(rows: list[dict]) -> list[dict]:
    """Rows of the run that the final checkpoint descends from: a resumed run logs again from
    its checkpoint step, so rows of an earlier invocation at or past that step (work lost when
    it was killed) are dropped."""
    out: list[dict] = []
    for r in rows:
        while out and out[-1]["step"] >= r["step"]:
            out.pop()
        out.append(r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--png", default=None)
    a = ap.parse_args(argv)
    rows = [json.loads(line) for line in open(Path(a.workdir) / "metrics.jsonl")]
    train = _lineage([r for r in rows if "train/loss" in r])
    dev = _lineage([r for r in rows if "dev/loss" in r])
    minutes, t = {}, 0.0
    for r in train:
        t += 10.0 / max(r.get("train/steps_per_s", 1e-9), 1e-9) if "train/steps_per_s" in r else 0
        minutes[r["step"]] = t / 60
    heads = sorted(int(k.split("_")[1]) for k in train[0] if k.startswith("train/acc_"))
    print("| step | train min | train loss | " + " | ".join(f"acc h{k}" for k in heads) + " |")
    print("|--:|--:|--:|" + "--:|" * len(heads))
    for r in train:
        if r["step"] % a.every == 0 or r is train[-1]:
            accs = " | ".join(f"{r[f'train/acc_{k}']:.3f}" for k in heads)
            print(f"| {r['step']} | {minutes[r['step']]:.0f} | {r['train/loss']:.2f} | {accs} |")
    if dev:
        print(
            "\n| step | dev loss | "
            + " | ".join(f"dev acc h{k}" for k in heads)
            + " | sample tokens | cap hits | sample WER (domain) |"
        )
        print("|--:|--:|" + "--:|" * len(heads) + "--:|--:|--:|")
        for r in dev:
            accs = " | ".join(f"{r[f'dev/acc_{k}']:.3f}" for k in heads)
            wer = r.get("samples/wer_domain")
            print(
                f"| {r['step']} | {r['dev/loss']:.2f} | {accs} | "
                f"{r.get('samples/mean_tokens', float('nan')):.0f} | "
                f"{r.get('samples/hit_max', float('nan')):.2f} | "
                f"{'—' if wer is None else f'{100 * wer:.0f} %'} |"
            )
    if a.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
        ax[0].plot([r["step"] for r in train], [r["train/loss"] for r in train], label="train")
        if dev:
            ax[0].plot([r["step"] for r in dev], [r["dev/loss"] for r in dev], "o-", label="dev")
        ax[0].set_xlabel("step"), ax[0].set_ylabel("MTP loss (sum of heads)"), ax[0].legend()
        for k in heads:
            ax[1].plot(
                [r["step"] for r in train], [r[f"train/acc_{k}"] for r in train], label=f"head {k}"
            )
        ax[1].set_xlabel("step"), ax[1].set_ylabel("train top-1 accuracy"), ax[1].legend()
        fig.suptitle(a.workdir)
        fig.tight_layout()
        fig.savefig(a.png, dpi=80)
        print(f"\nwrote {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

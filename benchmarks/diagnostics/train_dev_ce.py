"""Teacher-forced CE on train vs dev utterances: the backbone's FAR head against TLDR models.
Separates a method's underfitting (high CE on the utterances it trained on) from its
overfitting (the train -> dev gap beyond the backbone's).

    python -m benchmarks.diagnostics.train_dev_ce --corpus data/builtin-n20000-s0 \\
        --backbone pretrained/car_deep --tldr pretrained/tldr_deep_p4 --num 120
    python -m benchmarks.diagnostics.train_dev_ce \
        --backbone pretrained/car_small,pretrained/car_deep --tldr ""

Train utterances: `--num` drawn with a fixed seed from the corpus's train split; dev: its
first `--num`. Prompts: other utterances of the same speaker, as in training
(`jaxtts.methods.lm.diagnostics.teacher_forcing_loader`). Prints nats per target token: a
backbone's FAR head, and its K heads in brackets.
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="data/builtin-n20000-s0")
    ap.add_argument("--backbone", default="pretrained/car_deep", help="comma-separated folders")
    ap.add_argument("--tldr", default="pretrained/tldr_deep_p4", help="comma-separated folders")
    ap.add_argument("--num", type=int, default=120)
    args = ap.parse_args(argv)

    import numpy as np

    from jaxtts.data.manifest import read_split
    from jaxtts.engine import load_engine
    from jaxtts.errors import JaxttsError
    from jaxtts.methods.lm.diagnostics import text_information, utterance_tokens
    from jaxtts.methods.tldr.task import text_information as tldr_information

    try:
        train, dev = read_split(args.corpus, "train"), read_split(args.corpus, "dev")
        rng = np.random.default_rng(0)
        pick = sorted(rng.choice(len(train), min(args.num, len(train)), replace=False))
        splits = {"train": [train[i] for i in pick], "dev": dev[: args.num]}
        for folder in [f for f in args.backbone.split(",") if f]:
            bb = load_engine(folder)
            for name, utts in splits.items():
                ce = text_information(bb, utts, utterance_tokens(bb, utts)).ce_right  # [K]
                heads = " / ".join(f"{c:.4f}" for c in ce)
                print(f"{folder} (FAR head) {name}: CE {ce[0]:.3f} (heads {heads})", flush=True)
        for folder in [f for f in args.tldr.split(",") if f]:
            engine = load_engine(folder)
            for name, utts in splits.items():
                ce = tldr_information(engine, utts).ce_right[0]
                print(f"{folder} {name}: CE {ce:.3f}", flush=True)
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

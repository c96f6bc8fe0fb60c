"""How much does a trained TTS LM use its text? Dev cross-entropy with the right transcript vs
with another row's transcript (the batch's texts rolled by one row), per MTP head.

    python benchmarks/text_conditioning.py --workdir runs/car_small

A model that has learned to align speech with text predicts its tokens much better from the
right text; a model that only continues the speaker prompt's acoustics (babble) does not care.
The gap, in nats per token, is the information the model takes from the text. Prints a
markdown table; `--out` writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import ml_collections as mlc
    import numpy as np

    from jaxtts.data import tokenizers as tok_lib
    from jaxtts.data.manifest import read_split
    from jaxtts.data.pipeline import LMLoader, make_lm_records
    from jaxtts.methods.lm.model import with_bos
    from jaxtts.methods.lm.task import LMTask
    from jaxtts.synthesize import Synthesizer
    from jaxtts.train import losses
    from jaxtts.train.checkpoint import Checkpointer

    step = args.step
    if step is None:
        step = Checkpointer(os.path.join(args.workdir, "checkpoints"), read_only=True).latest_step()
    synth = Synthesizer.from_workdir(args.workdir, step=step)
    config = mlc.ConfigDict(json.load(open(os.path.join(args.workdir, "config.json"))))
    data_info = json.load(open(os.path.join(args.workdir, "data.json")))
    corpus = data_info["corpus_dir"]
    utts = read_split(corpus, args.split)
    tokens = tok_lib.load_tokens(corpus, data_info["tokenizer"], [u.id for u in utts])
    records = make_lm_records(utts, tokens, synth.engine.frontend)
    loader = LMLoader.from_config(records, config.data, frame_rate=data_info["frame_rate"],
                                  shuffle=False, drop_remainder=False, num_epochs=1,
                                  sort_window=1_000_000)  # fmt: skip
    task = LMTask(synth.engine.cfg)
    k = synth.engine.cfg.num_mtp_heads

    @jax.jit
    def head_ce(params, batch):
        # Per-head summed CE and token count, as in losses.mtp_loss but unweighted.
        x, x_len = with_bos(batch["speech"], batch["speech_len"], task.cfg)
        logits, _ = task.model.apply({"params": params}, batch["text"], batch["text_len"], x,
                                     x_len, train=False)  # fmt: skip
        targets, valid = losses.mtp_targets(batch["speech"], batch["speech_len"],
                                            batch["prompt_len"], task.cfg.eos, k)  # fmt: skip
        valid = valid & (batch["text_len"] > 0)[:, None, None]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)  # [B, T, K, V]
        nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]  # [B, T, K]
        return (jnp.sum(nll * valid, (0, 1)), jnp.sum(valid, (0, 1)),
                jnp.sum(valid[..., 0], 1))  # [K], [K], [B]

    sums = {"right": np.zeros(k), "other": np.zeros(k)}
    count = np.zeros(k)
    for s in range(len(loader)):
        b = {name: jnp.asarray(v) for name, v in loader.get_batch(s).items()}
        ce, n, per_row = head_ce(synth.engine.params, b)
        real = np.asarray(per_row) > 0
        if real.sum() < 2:
            continue  # rolling needs two real rows
        sums["right"] += np.asarray(ce)
        count += np.asarray(n)
        # Roll the text among the real rows only (padding rows keep empty text).
        idx = np.arange(real.size)
        r = idx[real]
        idx[r] = np.roll(r, 1)
        rolled = dict(b, text=b["text"][idx], text_len=b["text_len"][idx])
        ce2, n2, _ = head_ce(synth.engine.params, rolled)
        if not np.array_equal(np.asarray(n2), np.asarray(n)):
            raise RuntimeError("token counts changed under the text roll")
        sums["other"] += np.asarray(ce2)

    right, other = sums["right"] / count, sums["other"] / count
    print(f"{args.workdir} step {step}, {args.split} split, {int(count[0])} tokens")
    print("| head | CE right text (nats) | CE other row's text | gap (nats/token) |")
    print("|--:|--:|--:|--:|")
    for h in range(k):
        print(f"| {h + 1} | {right[h]:.3f} | {other[h]:.3f} | {other[h] - right[h]:+.3f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"workdir": args.workdir, "step": step, "split": args.split,
                       "tokens": int(count[0]), "ce_right": right.tolist(),
                       "ce_other": other.tolist()}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()

"""How far SSD's tolerance moves a token's distribution from the target's, teacher-forced.

For every scored position of the first N test utterances (zero-shot prompts as in training),
with the run's top-p / top-k filter on both sides: the target's q, each draft's p, and the
distribution of the first token that one speculative step emits at tolerance beta,

    o = min(p, q + beta p) + (1 - sum(min(p, q + beta p))) * normalize(max(0, q - p))

(accepted with probability min(1, q/p + beta), else the residual). At beta = 0, o = q exactly.
Prints per-token means: entropies H(p), H(q), H(o), TV(p, q), TV(o, q) and the mass o puts
outside the target's nucleus (q = 0). Only the first draft position of a step, with the true
prefix: later drafts see drafted prefixes, which this does not model.

    python -m benchmarks.diagnostics.ssd_tolerance_bias \
        --drafts pretrained/ssd_deep,runs/ssd_untrained
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--drafts", default="pretrained/ssd_deep", help="SSD run folders, comma-separated"
    )
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--split", default="test")
    ap.add_argument("--num", type=int, default=40)
    ap.add_argument("--beta", default="0,0.2,0.4")
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--top_p", type=float, default=None, help="instead of the run's top_p")
    args = ap.parse_args(argv)

    import dataclasses

    import jax
    import jax.numpy as jnp

    from jaxtts.data.manifest import read_split
    from jaxtts.engine import load_engine
    from jaxtts.methods.lm.diagnostics import teacher_forcing_loader
    from jaxtts.methods.lm.model import with_bos
    from jaxtts.methods.ssd.draft import teacher_logits_fn
    from jaxtts.methods.ssd.strategy import probs_of, residual
    from jaxtts.train import losses

    betas = [float(b) for b in args.beta.split(",")]
    engines = {d: load_engine(d) for d in args.drafts.split(",")}
    targets = {os.path.realpath(e.target_path) for e in engines.values()}
    if len(targets) > 1:
        ap.error(f"--drafts: expected drafts of one target, got {sorted(targets)}")
    first = next(iter(engines.values()))
    target, cfg = first, first.cfg  # an SSD engine: its params are the target's
    sampling = dataclasses.replace(first.options().sampling, greedy=False)
    if args.top_p is not None:
        sampling = dataclasses.replace(sampling, top_p=args.top_p)
    teacher = teacher_logits_fn(cfg, target.params)

    def entropy(d):  # [..., V] -> [...]
        return -jnp.sum(jnp.where(d > 0, d * jnp.log(jnp.maximum(d, 1e-30)), 0.0), -1)

    def tv(a, b):
        return 0.5 * jnp.sum(jnp.abs(a - b), -1)

    def stats_fn(draft_model):
        @jax.jit
        def stats(params, b, q_logits):
            x, x_len = with_bos(b["speech"], b["speech_len"], cfg)
            logits, _ = draft_model.apply({"params": params}, b["text"], b["text_len"], x, x_len)
            _, valid = losses.mtp_targets(b["speech"], b["speech_len"], b["prompt_len"], cfg.eos, 1)
            w = (valid[..., 0] & (b["text_len"] > 0)[:, None]).astype(jnp.float32)  # [B, T]
            p = probs_of(logits[:, :, 0].astype(jnp.float32), sampling)  # [B, T, V]
            q = probs_of(q_logits.astype(jnp.float32), sampling)
            res = jnp.vectorize(residual, signature="(v),(v)->(v)")(q, p)  # the strategy's
            out = {"H(p)": entropy(p), "H(q)": entropy(q), "TV(p,q)": tv(p, q)}
            for beta in betas:
                r = jnp.minimum(p, q + beta * p)  # [B, T, V] accepted mass per token
                o = r + (1.0 - jnp.sum(r, -1, keepdims=True)) * res
                out[f"H(o) b{beta:g}"] = entropy(o)
                out[f"TV(o,q) b{beta:g}"] = tv(o, q)
                out[f"outside b{beta:g}"] = jnp.sum(jnp.where(q == 0, o, 0.0), -1)
            return {k: jnp.sum(v * w) for k, v in out.items()}, jnp.sum(w)

        return stats

    utts = read_split(args.corpus, args.split)[: args.num]
    loader = teacher_forcing_loader(target, utts, None, args.batch)
    fns = {d: stats_fn(e.draft) for d, e in engines.items()}
    sums = {d: {} for d in engines}
    count = 0.0
    for i in range(len(loader)):
        b = {k: jnp.asarray(v) for k, v in loader.get_batch(i).items()}
        q = jnp.asarray(teacher(b))
        for d, e in engines.items():
            got, n = fns[d](e.draft_params, b, q)
            for k, v in got.items():
                sums[d][k] = sums[d].get(k, 0.0) + float(v)
        count += float(n)
    keys = list(next(iter(sums.values())))
    print(f"{int(count)} scored tokens of {len(utts)} {args.split} utterances, {sampling}")
    print("| draft | " + " | ".join(keys) + " |\n|---|" + "--:|" * len(keys))
    for d, s in sums.items():
        print(f"| {d} | " + " | ".join(f"{s[k] / count:.4f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

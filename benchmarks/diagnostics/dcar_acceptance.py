"""Can a chunk-size policy know where a large chunk is safe? Draft acceptance against the
heads' own confidence at the decision state.

    python -m benchmarks.diagnostics.dcar_acceptance --config configs/dcar.py:deep_pr --batches 2 \
        --out out/dcar_acceptance.json

Decodes DCPO training prompts with every row forced to c = K (the `RolloutSource` of
`jaxtts.methods.dcar.dcpo`, so the same prompts, sampling and keys as training), checks every
drafted token with the base head (teacher-forced, rank < `dcpo.process_tau`: the process
reward's check, VADUSA's rule) and relates the outcome to what is known when the size is
chosen: the top probability of head k at the decision's hidden state h_t.

Prints (1) the pass rate of draft k by quintile of head k's top probability, and (2) the
frontier of tokens per decision against failed drafts per token for two rules that choose c
from h_t alone: a confidence threshold (c = 1 + the leading heads 2..c whose top probability
is above theta) and a state-free mixture with the same mean chunk. A chunk of size c keeps
the first c tokens of the size-K chunk (a slot's draw does not depend on the chunk size), so
one decode at c = K scores every rule on the same states.

With `--policy <DCAR run>` the same decode runs with that policy (forced to c = K; it reads
the states as it would when decoding) and its own rule joins the frontier: its argmax, and
its draws in expectation (sum_c pi(c) x tokens / failed drafts of size c).
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/dcar.py:deep_pr")
    ap.add_argument("--batches", type=int, default=2, help="rollout batches of P x G rows")
    ap.add_argument("--policy", default="", help="a DCAR run: score its choices too")
    ap.add_argument("--out", default="out/dcar_acceptance.json")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    from jaxtts.config_help import load_config
    from jaxtts.decode.driver import decode
    from jaxtts.decode.sampling import row_keys
    from jaxtts.methods.dcar.dcpo import (
        DCPOTask,
        RolloutSource,
        config_policy,
        load_backbone,
        load_reward_asr,
        training_rows,
    )

    config = load_config(args.config)
    engine = load_backbone(str(config.dcpo.backbone))
    asr = load_reward_asr(str(config.dcpo.reward_asr))
    rows = training_rows(config, engine, asr, progress=False)
    src = RolloutSource(config, engine, asr, rows, progress=False)
    k = engine.cfg.num_mtp_heads
    task = DCPOTask(config_policy(config, engine), config.dcpo)
    pol = task.init(jax.random.key(0), None)["policy"]  # any policy: every row is forced
    if args.policy:
        from jaxtts.engine import load_engine

        peng = load_engine(args.policy)
        src.models = dict(src.models, policy=peng.policy)
        pol = peng.policy_params
    conf, kept_all, acc_all, probs_all = [], [], [], []
    for b in range(args.batches):
        rng = np.random.default_rng([src.seed, 10_000 + b])
        batch, rs = src.prompt_batch(rng.choice(len(rows), src.prompts, replace=False))
        n = len(rs)
        params = {"target": engine.params, "policy": pol, "forced_chunk": jnp.full((n,), k)}
        out = jax.device_get(
            decode(
                src.strategy,
                src.models,
                params,
                batch,
                row_keys(src.seed * 1_000_003 + 10_000 + b, range(n)),
                max_new_tokens=src.max_new,
                sampling=src.sampling,
            )
        )
        actions = np.asarray(out.stats["actions"])
        kept, acc = src.acceptance(batch, out, actions)
        x = jnp.asarray(out.stats["policy_inputs"])  # [N, S, D (+ F)]
        h = x[..., : engine.cfg.d_model]  # [N, S, D]
        logits = engine.model.apply({"params": engine.params}, h, method="heads")  # [N,S,K,V]
        top = np.asarray(jnp.max(jax.nn.softmax(logits, -1), -1))  # [N, S, K]
        full = kept == k  # decisions that kept all K tokens (not a row's last)
        if args.policy:
            lg = src.models["policy"].apply({"params": pol}, x, jnp.asarray(out.steps))
            probs_all.append(np.asarray(jax.nn.softmax(lg, -1))[full])  # [M, K]
        conf.append(top[full])
        kept_all.append(kept[full])
        acc_all.append(acc[full])
        print(f"batch {b}: {int(full.sum())} decisions of {k} tokens", flush=True)
    top = np.concatenate(conf)  # [M, K]
    acc = np.concatenate(acc_all)  # [M]
    res = {"decisions": int(acc.size), "quintiles": {}, "frontier": []}
    print(f"\n{acc.size} decisions; draft j passes (given drafts before it passed):")
    print("| draft | head top-prob quintile | pass % |")
    print("|---|---|--:|")
    for j in range(2, k + 1):
        reach = acc >= j - 1  # drafts 2..j-1 passed
        p = top[reach, j - 1]
        ok = acc[reach] >= j
        edges = np.quantile(p, [0, 0.2, 0.4, 0.6, 0.8, 1.0])
        q = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, 4)
        rates = [float(ok[q == i].mean()) if np.any(q == i) else float("nan") for i in range(5)]
        res["quintiles"][j] = {"edges": edges.tolist(), "pass": rates, "all": float(ok.mean())}
        for i in range(5):
            print(f"| {j} | {edges[i]:.2f}-{edges[i + 1]:.2f} | {100 * rates[i]:.1f} |")
        print(f"| {j} | all | {100 * ok.mean():.1f} |")

    def score(c):  # chosen sizes [M] -> (tokens per decision, failed drafts per token)
        a = np.minimum(acc, c)
        return float(c.mean()), float((c - a).sum() / c.sum())

    print("\n| rule | mean chunk | failed drafts per token |")
    print("|---|--:|--:|")
    for theta in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        lead = np.cumprod(top[:, 1:] > theta, axis=1).sum(1)
        c = 1 + lead
        mc, fail = score(c)
        # the state-free mixture with the same size shares, shuffled over the states
        shuffled = np.random.default_rng(0).permutation(c)
        _, fail_mix = score(shuffled)
        res["frontier"].append(dict(theta=theta, mean_chunk=mc, fail=fail, fail_mix=fail_mix))
        print(f"| top-prob > {theta} | {mc:.2f} | {fail:.3f} (state-free mix {fail_mix:.3f}) |")
    for c0 in range(1, k + 1):
        mc, fail = score(np.full(acc.shape, c0))
        print(f"| fixed c = {c0} | {mc:.2f} | {fail:.3f} |")
    if args.policy:
        pi = np.concatenate(probs_all)  # [M, K]
        c = 1 + np.argmax(pi, -1)
        mc, fail = score(c)
        _, fail_mix = score(np.random.default_rng(0).permutation(c))
        sizes = np.arange(1, k + 1)[None]  # [1, K]
        tok = (pi * sizes).sum(1)  # [M] expected tokens
        bad = (pi * (sizes - np.minimum(acc[:, None], sizes))).sum(1)  # [M] expected fails
        mix = pi.mean(0)  # the state-free policy with the same mean distribution
        bad_mix = (mix[None] * (sizes - np.minimum(acc[:, None], sizes))).sum(1)
        share = np.bincount(c - 1, minlength=k) / c.size
        res["policy"] = dict(
            path=args.policy,
            argmax=dict(mean_chunk=mc, fail=fail, fail_mix=fail_mix, share=share.tolist()),
            drawn=dict(
                mean_chunk=float(tok.mean()),
                fail=float(bad.sum() / tok.sum()),
                fail_mix=float(bad_mix.sum() / tok.sum()),
                mean_pi=mix.tolist(),
            ),
        )
        print(f"| {args.policy} argmax | {mc:.2f} | {fail:.3f} (state-free mix {fail_mix:.3f}) |")
        d = res["policy"]["drawn"]
        print(
            f"| {args.policy} drawn | {d['mean_chunk']:.2f} | {d['fail']:.3f} "
            f"(state-free mix {d['fail_mix']:.3f}) |"
        )
        print(f"argmax sizes 1..{k}: " + " / ".join(f"{100 * v:.1f}" for v in share) + " %")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(args.out)


if __name__ == "__main__":
    main()

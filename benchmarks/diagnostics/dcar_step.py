"""What a DCAR step costs next to `car:c`: a policy that always picks c, the policy's own cost.

    python -m benchmarks.diagnostics.dcar_step --backbone pretrained/car_deep \
        --policy pretrained/dcar_deep

A fixed-length decode (EOS suppressed: `--tokens` per row, random text and prompt of the
benchmark's sizes, the backbone's own sampling settings) of the backbone with
- `car:c`;
- DCAR whose policy always picks c: the run's policy with its output layer set so that c
  wins by 100 logits (the whole policy still runs every step and its output decides the
  size; with `forced_chunk` instead, XLA dropped the unused policy from a decode that records
  nothing, so the earlier rows of RESULTS that used it did not include the policy's cost),
  with the step that follows the choice (`dynamic_chunk_step`, shipped), with the old
  extend-by-K step (`extend_all`) and with the step that writes the cache inside its
  `lax.switch` branch (`write_in_branch`);
for c in `--chunks`, at each batch size, in `--rounds` interleaved rounds (median). The
policy's own cost per step is the DCAR-forced time minus `car:c`'s, divided by the steps. Its
parameters come from `--policy` (a DCAR run; the benchmark loads them whatever backbone they
were trained on: only their cost matters here) or a random init of the `small` policy.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.decode import random_batch, time_decode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backbone", default="pretrained/car_small")
    ap.add_argument("--policy", default="pretrained/dcar_deep")
    ap.add_argument("--chunks", default="2,3")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--tokens", type=int, default=150)
    ap.add_argument("--text_len", type=int, default=128)
    ap.add_argument("--prompt_len", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="float32", help="float32 | bfloat16 matmuls")
    ap.add_argument(
        "--variants",
        default="follows,extend by K,writes in branch",
        help="DCAR steps to time beside car:c (substrings of the row names)",
    )
    args = ap.parse_args(argv)

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxtts.decode import registry
    from jaxtts.decode.precision import at_precision
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.methods.dcar.dcpo import config_policy
    from jaxtts.methods.dcar.policy import ChunkPolicy, PolicyConfig
    from jaxtts.methods.dcar.strategies import DCAR
    from jaxtts.run_folder import RunFolder
    from jaxtts.synthesize import Synthesizer

    engine = Synthesizer.from_workdir(args.backbone).engine
    cfg = engine.cfg
    config = RunFolder(args.policy).read_config("dcar") if args.policy else None
    pcfg = config_policy(config, engine) if config else PolicyConfig(cfg.d_model, cfg.num_mtp_heads)
    policy = ChunkPolicy(pcfg)
    like = {"policy": policy.init(jax.random.key(0), jnp.zeros((1, 2, pcfg.d_in)),
                                  jnp.array([2]))["params"]}  # fmt: skip
    like = nn.unbox(like)
    pparams = like["policy"]
    if config is not None:  # the run's policy, whatever backbone it was trained on
        pparams = RunFolder(args.policy).load_params(dict(like, ref=like["policy"]))[0]["policy"]
    models = {"target": engine.model, "policy": policy}

    def always(pp, c):  # the trained policy, its output shifted so that size c always wins
        out = dict(
            pp["out"], bias=pp["out"]["bias"] + 100.0 * jax.nn.one_hot(c - 1, pcfg.num_actions)
        )
        return dict(pp, out=out)

    sampling = SamplingConfig.from_config(dict(engine.decode_config))
    sampling = SamplingConfig(sampling.greedy, sampling.temperature, sampling.top_k,
                              sampling.top_p, min_tokens=args.tokens)  # fmt: skip
    rng = np.random.default_rng(0)
    print(f"{args.backbone} ({cfg.num_layers} layers), policy {args.policy or 'random'}; "
          f"{args.tokens} tokens per row, top_p {sampling.top_p}, {args.precision}")  # fmt: skip
    rows = []
    for b in [int(v) for v in args.batch.split(",")]:
        batch, keys = random_batch(rng, cfg, b, args.text_len, args.prompt_len)
        for c in [int(v) for v in args.chunks.split(",")]:
            ps = {"target": engine.params, "policy": always(pparams, c)}
            runs = {
                f"car:{c}": (registry.get(f"car:{c}"), {"target": engine.model},
                             {"target": engine.params}),
                "dcar forced (follows c)": (DCAR(write_in_branch=False), models, ps),
                "dcar forced (extend by K)": (DCAR(extend_all=True), models, ps),
                "dcar forced (writes in branch)": (DCAR(write_in_branch=True), models, ps),
            }  # fmt: skip
            runs = {k: v for k, v in runs.items() if k.startswith("car:") or
                    any(w in k for w in args.variants.split(","))}  # fmt: skip
            runs = {k: (s, *at_precision(m, p, args.precision)) for k, (s, m, p) in runs.items()}
            times = {k: [] for k in runs}
            steps = {}
            for _ in range(args.rounds):
                for name, (strat, ms, p) in runs.items():
                    out, wall, _ = time_decode(strat, ms, p, batch, keys, args.tokens,
                                               sampling, repeats=1)  # fmt: skip
                    times[name].append(wall)
                    steps[name] = int(out.num_forwards)
            base = statistics.median(times[f"car:{c}"])
            for name in runs:
                t = statistics.median(times[name])
                pol_ms = (t - base) / steps[name] * 1e3 if name != f"car:{c}" else 0.0
                rows.append((b, c, name, t * 1e3, t / base, steps[name], pol_ms))
    print("\n| batch | c | decode | ms | / car:c | steps | extra ms per step |")
    print("|--:|--:|---|--:|--:|--:|--:|")
    for b, c, name, ms, ratio, n, pol in rows:
        print(f"| {b} | {c} | {name} | {ms:.0f} | {ratio:.3f} | {n} | {pol:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a synthesis call's fixed LM time goes: fit LM time against steps, and time its parts.

    python benchmarks/call_overhead.py --workdir pretrained/car_small --strategies far,car:3
    python benchmarks/call_overhead.py --workdir pretrained/car_deep --precision bfloat16

For N test sentences at batch 1 with their zero-shot prompts (the evaluation's; shapes
bucketed as `Synthesizer` does), each strategy is timed three ways (median of `--repeats`,
every shape compiled first):
- `generate`: the whole LM call (`engine.generate`: dispatch, prefill, loop, device_get);
- `prefill`: the strategy's `init` alone (cache set-up + the prefill forward), jitted;
- `one step`: `generate` capped at one new token (everything but the loop's other steps).
The least-squares fit of `generate` = fixed + per_step * steps over the sentences gives the
fixed per-call cost; `prefill` and `one step - prefill - per_step` say what it is made of.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _median_ms(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _measure(engine, spec: str, batches, keys, repeats: int, precision: str = "float32"):
    """(fixed ms, per-step ms, prefill ms, one-step call ms) of `spec` over `batches`."""
    import jax
    import numpy as np

    from jaxtts.decode import registry

    opts = engine.options(strategy=spec, precision=precision)
    _, models, params = engine.at_precision(
        None, engine.decode_models(), engine.decode_params(), opts
    )
    one = dataclasses.replace(opts, max_seconds=1.0 / engine.frame_rate)
    strategy = registry.get(spec).bind(models)
    n_max = engine.max_new_units(opts)

    def init(p, b):  # what `decode` runs before the loop (the split prefill: + widen_text)
        carry = strategy.init(models, p, b, n_max)
        if b.text_width:
            carry = strategy.widen_text(models, carry, b.text_width)
        return carry

    init = jax.jit(init)
    gen_ms, steps, pre_ms, one_ms = [], [], [], []
    for b in batches:
        steps.append(int(engine.generate(b, keys, opts).steps[0]))
        gen_ms.append(_median_ms(lambda b=b: engine.generate(b, keys, opts), repeats))
        pre_ms.append(_median_ms(lambda b=b: jax.block_until_ready(init(params, b)), repeats))
        one_ms.append(_median_ms(lambda b=b: engine.generate(b, keys, one), repeats))
    per_step, fixed = np.polyfit(np.asarray(steps, float), np.asarray(gen_ms), 1)
    return fixed, per_step, float(np.median(pre_ms)), float(np.median(one_ms))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_small")
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--strategies", default="far,car:3")
    ap.add_argument("--num", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument(
        "--bucket", type=int, default=64, help="text / prompt width step (Synthesizer: 64)"
    )
    ap.add_argument(
        "--prefill_bucket",
        type=int,
        default=None,
        help="the prefill's text width step (the split prefill; default: the engine's, "
        "Synthesizer's: 8 for the token-LM families); = --bucket: no split",
    )
    args = ap.parse_args(argv)

    import jax

    from jaxtts.data.manifest import read_split
    from jaxtts.decode.sampling import row_keys
    from jaxtts.evaluate import split_specs
    from jaxtts.methods.lm.engine import sentence_batch
    from jaxtts.synthesize import Synthesizer, prompts_from_utterances

    engine = Synthesizer.from_workdir(args.workdir).engine
    pool = read_split(args.corpus, "test")
    utts = pool[: args.num]
    prompts = prompts_from_utterances(pool, utts)
    pb = args.prefill_bucket or engine.prefill_bucket
    batches = [
        sentence_batch(engine, u.text, p, args.bucket, pb)
        for u, p in zip(utts, prompts, strict=True)
    ]
    keys = row_keys(0, [0])
    print(
        f"{args.workdir}: {len(utts)} test sentences, batch 1, {args.precision}, "
        f"widths bucketed to {args.bucket}, the prefill's text to {min(pb, args.bucket)}, "
        f"{jax.devices()[0].device_kind}"
    )
    print("\n| strategy | fixed (fit) ms | per step ms | prefill ms | one-step call ms | rest ms |")
    print("|---|--:|--:|--:|--:|--:|")
    for spec in split_specs(args.strategies):
        fixed, per_step, pre, one_call = _measure(
            engine, spec, batches, keys, args.repeats, args.precision
        )
        print(
            f"| {spec} | {fixed:.1f} | {per_step:.2f} | {pre:.1f} | {one_call:.1f} | "
            f"{one_call - pre - per_step:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a synthesis call's fixed LM time goes: fit LM time against steps, and time its parts.

    python -m benchmarks.diagnostics.call_overhead --workdir pretrained/car_small \
        --strategies far,car:3
    python -m benchmarks.diagnostics.call_overhead --workdir pretrained/car_deep \
        --precision bfloat16
    python -m benchmarks.diagnostics.call_overhead --workdir pretrained/car_deep --layout_ab \
        --num 16

For N test sentences at batch 1 with their zero-shot prompts (the evaluation's; batches
built as `Synthesizer` builds them, with the split prefill unless `--prefill_bucket 64`),
each strategy is timed three ways (median of `--repeats`, every shape compiled first):
- `generate`: the whole LM call (`engine.generate`: dispatch, prefill, loop, device_get);
- `prefill`: the strategy's `init` alone (cache set-up + the prefill forward), jitted;
- `one step`: `generate` capped at one new token (everything but the loop's other steps).
The least-squares fit of `generate` = fixed + per_step * steps over the sentences gives the
fixed per-call cost; `prefill` and `one step - prefill - per_step` say what it is made of.
`--ab` times the split prefill against the text padded to the loop's width; `--layout_ab`
times whole calls with decoding's fused projections against the training layout; `--phases`
times the split prefill's two programs apart (`jaxtts.decode.driver`: the prefill, then the
loop) and fits the loop's time alone against steps. The fit of whole calls mixes the prefill's
growth with the text (longer texts decode longer) into its per-step slope and can give a
negative fixed cost; the loop's own fit reads what a step costs inside a running loop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _median_ms(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def _setup(engine, spec: str, precision: str):
    """(options, one-step options, params, jitted prefill) of `spec`."""
    import jax

    from jaxtts.decode import registry
    from jaxtts.engine import resolve

    plan = resolve(engine, spec, precision=precision)
    _, models, params = engine.at_precision(
        None, engine.decode_models(), engine.decode_params(), plan.options
    )
    one = resolve(engine, spec, precision=precision, max_seconds=1.0 / engine.frame_rate)
    strategy = registry.get(spec).bind(models)
    n_max = engine.max_new_units(plan.options)

    def init(p, b):  # what `decode` runs before the loop (the split prefill: + widen_text)
        carry = strategy.init(models, p, b, n_max)
        if b.text_width:
            carry = strategy.widen_text(models, carry, b.text_width)
        return carry

    return plan, one, params, jax.jit(init)


def _measure(engine, spec: str, batches, keys, repeats: int, precision: str = "float32"):
    """(fixed ms, per-step ms, prefill ms, one-step call ms) of `spec` over `batches`."""
    import jax
    import numpy as np

    opts, one, params, init = _setup(engine, spec, precision)
    gen_ms, steps, pre_ms, one_ms = [], [], [], []
    for b in batches:
        steps.append(int(engine.generate(b, keys, opts).steps[0]))
        gen_ms.append(_median_ms(lambda b=b: engine.generate(b, keys, opts), repeats))
        pre_ms.append(_median_ms(lambda b=b: jax.block_until_ready(init(params, b)), repeats))
        one_ms.append(_median_ms(lambda b=b: engine.generate(b, keys, one), repeats))
    per_step, fixed = np.polyfit(np.asarray(steps, float), np.asarray(gen_ms), 1)
    return fixed, per_step, float(np.median(pre_ms)), float(np.median(one_ms))


def _prefill_ab(engine, spec: str, pairs, keys, repeats: int, precision: str):
    """Mean over sentences of the median prefill and one-step call ms, the text padded to the
    loop's width (plain) against the split prefill, timed in turn within every repeat."""
    import jax
    import numpy as np

    _, one, params, init = _setup(engine, spec, precision)
    ms = {k: [] for k in ("pre_plain", "pre_split", "one_plain", "one_split")}
    for pair in pairs:
        for b in pair:  # compile
            jax.block_until_ready(init(params, b))
            engine.generate(b, keys, one)
        ts = {k: [] for k in ms}
        for _ in range(repeats):
            for name, b in zip(("plain", "split"), pair, strict=True):
                t0 = time.perf_counter()
                jax.block_until_ready(init(params, b))
                t1 = time.perf_counter()
                engine.generate(b, keys, one)
                t2 = time.perf_counter()
                ts[f"pre_{name}"].append(t1 - t0)
                ts[f"one_{name}"].append(t2 - t1)
        for k, v in ts.items():
            ms[k].append(1e3 * statistics.median(v))
    return {k: float(np.mean(v)) for k, v in ms.items()}


def _layout_ab(engine, spec: str, batches, keys, repeats: int, precision: str):
    """Mean over sentences of the median whole-call LM ms with decoding's fused projections
    against the training layout (`at_precision(..., fused=False)`), timed in turn within every
    repeat, and whether both give the same tokens."""
    import jax
    import numpy as np

    from jaxtts.decode import registry
    from jaxtts.decode.driver import decode
    from jaxtts.decode.precision import at_precision

    opts = engine.options(strategy=spec, precision=precision)
    n = engine.max_new_units(opts)

    def generate(b, strategy, models, params):
        out = decode(strategy, models, params, b, keys, max_new_tokens=n, sampling=opts.sampling)
        return jax.device_get(out)

    strategy = registry.get(spec)
    plans = {}
    for name, fused in (("fused", True), ("plain", False)):
        models, params = at_precision(
            engine.decode_models(), engine.decode_params(), precision, fused=fused
        )
        plans[name] = (strategy.bind(models), models, params)
    ms, same = {k: [] for k in plans}, 0
    for b in batches:
        outs = {k: generate(b, *plan) for k, plan in plans.items()}  # compile
        same += int(np.array_equal(outs["fused"].tokens, outs["plain"].tokens))
        ts = {k: [] for k in plans}
        for _ in range(repeats):
            for name, plan in plans.items():
                t0 = time.perf_counter()
                generate(b, *plan)
                ts[name].append(time.perf_counter() - t0)
        for k, v in ts.items():
            ms[k].append(1e3 * statistics.median(v))
    return {k: float(np.mean(v)) for k, v in ms.items()}, same


def _phases(engine, spec: str, batches, keys, repeats: int, precision: str):
    """Mean over sentences of the median ms of the split prefill's program and of the loop's
    (timed apart, in turn within every repeat), the mean steps, and the loop's least-squares
    fit (fixed ms, ms a step) against steps."""
    import jax
    import numpy as np

    from jaxtts.decode import driver
    from jaxtts.engine import resolve

    plan = resolve(engine, spec, precision=precision)
    models, params = engine.decode_models_for(batches[0], plan)
    strategy, params = plan.strategy.bind(models), dict(params)
    kw = dict(strategy=strategy, models=tuple(sorted(models.items())))
    n, sampling = engine.max_new_units(plan.options), plan.options.sampling.traced()

    def run(b):
        t0 = time.perf_counter()
        state = driver._prefill(params, b, max_new_tokens=n, text_width=int(b.text_width), **kw)
        jax.block_until_ready(state)
        t1 = time.perf_counter()
        windows = tuple(strategy.windows(models, b, n))
        out = driver._loop(
            state, params, keys, max_new_tokens=n, windows=windows, sampling=sampling, **kw
        )
        steps = int(jax.block_until_ready(out).steps[0])
        return 1e3 * (t1 - t0), 1e3 * (time.perf_counter() - t1), steps

    pre, loop, steps = [], [], []
    for b in batches:
        run(b)  # compile
        ts = [run(b) for _ in range(repeats)]
        pre.append(statistics.median(t[0] for t in ts))
        loop.append(statistics.median(t[1] for t in ts))
        steps.append(ts[0][2])
    per_step, fixed = np.polyfit(np.asarray(steps, float), np.asarray(loop), 1)
    return float(np.mean(pre)), float(np.mean(loop)), float(np.mean(steps)), fixed, per_step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_small")
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--strategies", default="far,car:3")
    ap.add_argument("--num", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument(
        "--bucket", type=int, default=None, help="the loop's text width step (default 64)"
    )
    ap.add_argument(
        "--prefill_bucket",
        type=int,
        default=None,
        help="the prefill's text width step (the split prefill; default: the engine's, 8 "
        "for the token-LM families); = --bucket: no split",
    )
    ap.add_argument(
        "--ab",
        action="store_true",
        help="time the prefill and a one-step call with the text padded to the loop's width "
        "against the split prefill, in turn (the split prefill's saving)",
    )
    ap.add_argument(
        "--layout_ab",
        action="store_true",
        help="time whole calls with decoding's fused q/k/v and gate/up kernels against the "
        "training layout, in turn (`jaxtts.nn.layers.fuse_projections`)",
    )
    ap.add_argument(
        "--phases",
        action="store_true",
        help="time the split prefill's program and the loop's apart; fit the loop alone "
        "against steps (a step's cost inside a running loop)",
    )
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    from jaxtts.data.manifest import read_split
    from jaxtts.decode.sampling import row_keys
    from jaxtts.evaluate import split_specs
    from jaxtts.synthesize import Synthesizer, prompts_from_utterances

    synth = Synthesizer.from_workdir(args.workdir)
    engine = synth.engine
    engine.text_bucket = args.bucket or engine.text_bucket
    engine.prefill_bucket = args.prefill_bucket or engine.prefill_bucket
    pb = min(engine.prefill_bucket, engine.text_bucket)
    pool = read_split(args.corpus, "test")
    utts = pool[: args.num]
    prompts = prompts_from_utterances(pool, utts)
    batches = []  # each sentence's first piece as `Synthesizer` builds its batch of one
    for i, (u, p) in enumerate(zip(utts, prompts, strict=True)):
        row = synth.text_rows(i, u.text, *engine.encode_prompt(p))[0]
        batches.append(synth.prompt_batch([row], 1, 0)[0])
    keys = row_keys(0, [0])
    print(
        f"{args.workdir}: {len(utts)} test sentences, batch 1, {args.precision}, "
        f"text widths bucketed to {engine.text_bucket}, the prefill's to {pb}, "
        f"{jax.devices()[0].device_kind}"
    )
    if args.layout_ab:
        print("\n| strategy | LM ms a call, fused / plain layout | speed-up | same tokens |")
        print("|---|--:|--:|--:|")
        for spec in split_specs(args.strategies):
            m, same = _layout_ab(engine, spec, batches, keys, args.repeats, args.precision)
            print(
                f"| {spec} | {m['fused']:.1f} / {m['plain']:.1f} | "
                f"{m['plain'] / m['fused']:.3f}x | {same}/{len(batches)} |",
                flush=True,
            )
        return 0
    if args.phases:
        if any(b.text_width is None for b in batches):
            print(
                "error: --phases: needs the split prefill (--prefill_bucket < --bucket)",
                file=sys.stderr,
            )
            return 2
        print("\n| strategy | prefill ms | loop ms | steps | loop ms a step | loop fit: fixed ms "
              "+ ms a step |")  # fmt: skip
        print("|---|--:|--:|--:|--:|--:|")
        for spec in split_specs(args.strategies):
            pre, loop, steps, fixed, per = _phases(
                engine, spec, batches, keys, args.repeats, args.precision
            )
            print(
                f"| {spec} | {pre:.1f} | {loop:.1f} | {steps:.1f} | {loop / steps:.2f} | "
                f"{fixed:.1f} + {per:.2f} |",
                flush=True,
            )
        return 0
    if args.ab:
        plain = []  # the same rows, the prefill at the loop's width
        for b in batches:
            x = b.text_width or b.text.shape[1]
            text = np.zeros((1, x), np.int32)
            text[:, : b.text.shape[1]] = b.text
            plain.append(b.replace(text=text, text_width=None))
        print("\n| strategy | prefill ms, text at the loop width / split | saved | "
              "one-step call ms, loop width / split |")  # fmt: skip
        print("|---|--:|--:|--:|")
        for spec in split_specs(args.strategies):
            m = _prefill_ab(
                engine,
                spec,
                list(zip(plain, batches, strict=True)),
                keys,
                args.repeats,
                args.precision,
            )
            print(
                f"| {spec} | {m['pre_plain']:.1f} / {m['pre_split']:.1f} | "
                f"{m['pre_plain'] - m['pre_split']:.1f} | "
                f"{m['one_plain']:.1f} / {m['one_split']:.1f} |",
                flush=True,
            )
        return 0
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

"""Where a multi-token step's extra time goes, measured by ablation instead of the profiler.

    python -m benchmarks.diagnostics.step_ablation --workdir pretrained/car_deep \
        --precision bfloat16

Under `jax.profiler` every XLA thunk pays the tracer's cost, and a FAR step (many small thunks)
reads up to 1.5x its real time (`benchmarks/diagnostics/step_parts.py`: 4.4 ms a FAR step at 66
tokens, where the loop timed alone takes ~3.0; CAR c=3 1.06x FAR there, 1.43x unprofiled), so the
parts of a step that are small next to that distortion cannot be ranked there. This
script times whole fixed-length decodes (EOS suppressed until `--tokens`, random text and
prompt of `--text_len` / `--prompt_len`, top_p 0.6) of variants that each add or remove one
part of a `car:c` step, in interleaved rounds in one process, and reports each variant's
median ratio to FAR over the rounds (the machine's drift hits every variant of a round alike):

- `far`: the shipped one-token step;
- `far+heads`: FAR that also computes heads 2..c every step (kept alive, not sampled);
- `far+draws`: FAR that draws c tokens from head 1 (keeps the first);
- `car`: the shipped `car:c` step;
- `car/1-row`: `car:c` whose forward carries only the first of its c tokens (the same heads,
  draws and number of steps; the cache grows by one slot a step, so its attention is shorter).

(variant - far) / steps is that part's cost per step, in ms. Timing only: the ablated variants
decode other tokens than their parents (`car/1-row` is not a language model any more).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

from benchmarks.timing_lock import exclusive


def variants(chunk: int) -> dict:
    """name -> (strategy spec of the shipped plan, the strategy to time in its place or None)."""
    import jax.numpy as jnp

    from jaxtts.decode.driver import Proposal
    from jaxtts.decode.sampling import sample_tokens, step_keys
    from jaxtts.methods.lm import strategies as S

    def one_row(state):
        return jnp.ones(state.length.shape, jnp.int32)

    @dataclasses.dataclass(frozen=True)
    class FarHeads(S.ChunkedAR):  # FAR + heads 2..heads, their logits kept alive
        heads: int = 1

        def step(self, models, params, state, keys, sampling):
            m, p = models["target"], params["target"]
            lg = S.chunk_logits(m, p, state.carry, state, sampling, self.heads)  # [B, c, V]
            alive = 0.0 * jnp.max(lg[:, 1:], axis=(1, 2))[:, None, None]  # [B, 1, 1]
            toks = sample_tokens(step_keys(keys, state.steps), lg[:, :1] + alive, sampling)
            h, cache = S.extend_rows(m, p, toks, one_row(state), state.carry.cache)
            return Proposal(tokens=toks, count=one_row(state), carry=S.ChunkCarry(cache, h))

    @dataclasses.dataclass(frozen=True)
    class FarDraws(S.ChunkedAR):  # FAR drawing `draws` tokens from head 1, keeping the first
        draws: int = 1

        def step(self, models, params, state, keys, sampling):
            m, p = models["target"], params["target"]
            lg = S.chunk_logits(m, p, state.carry, state, sampling, 1)  # [B, 1, V]
            lg = jnp.tile(lg, (1, self.draws, 1))  # [B, draws, V]
            toks = sample_tokens(step_keys(keys, state.steps), lg, sampling)[:, :1]
            h, cache = S.extend_rows(m, p, toks, one_row(state), state.carry.cache)
            return Proposal(tokens=toks, count=one_row(state), carry=S.ChunkCarry(cache, h))

    @dataclasses.dataclass(frozen=True)
    class CarOneRow(S.ChunkedAR):  # car:chunk forwarding only the first of its tokens
        def step(self, models, params, state, keys, sampling):
            m, p = models["target"], params["target"]
            toks = S._sample_chunk(m, p, state.carry, state, keys, sampling, self.chunk)
            h, cache = S.extend_rows(m, p, toks[:, :1], one_row(state), state.carry.cache)
            count = jnp.full(state.length.shape, self.chunk, jnp.int32)
            return Proposal(tokens=toks, count=count, carry=S.ChunkCarry(cache, h))

        def window_fits(self, state, window):
            return S.window_fits(state.carry.cache, state.done, 1)

    c = chunk
    return {
        "far": ("far", None),
        f"far+heads 2..{c}": ("far", FarHeads(chunk=1, heads=c)),
        f"far+draws x{c}": ("far", FarDraws(chunk=1, draws=c)),
        f"car:{c}": (f"car:{c}", None),
        f"car:{c}/1-row": (f"car:{c}", CarOneRow(chunk=c)),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_deep")
    ap.add_argument("--precision", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--chunk", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=66, help="tokens per row (66: the mean of the "
                    "first 16 test sentences under FAR)")  # fmt: skip
    ap.add_argument("--text_len", type=int, default=72)
    ap.add_argument("--prompt_len", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    from benchmarks.decode import random_batch
    from jaxtts.decode.driver import decode
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.engine import load_engine, resolve
    from jaxtts.errors import JaxttsError

    try:
        eng = load_engine(args.workdir)
        resolve(eng, f"car:{args.chunk}")  # a token LM with enough heads
    except JaxttsError as e:
        print(f"error: --workdir {args.workdir}: {e}", file=sys.stderr)
        return 2
    if args.chunk < 2:
        print(f"error: --chunk {args.chunk}: expected >= 2 (1 is FAR itself)", file=sys.stderr)
        return 2
    batch, keys = random_batch(
        np.random.default_rng(0), eng.cfg, args.batch, args.text_len, args.prompt_len
    )
    samp = SamplingConfig(temperature=1.0, top_p=0.6, min_tokens=args.tokens).traced()
    runs = {}
    for name, (spec, replacement) in variants(args.chunk).items():
        plan = resolve(eng, spec, precision=args.precision)
        models, params = eng.decode_models_for(batch, plan)
        runs[name] = (replacement or plan.strategy, models, params)

    def run(name):
        strat, models, params = runs[name]
        out = decode(strat, models, params, batch, keys, max_new_tokens=args.tokens, sampling=samp)
        return jax.block_until_ready(out)

    steps = {name: int(np.max(np.asarray(run(name).steps))) for name in runs}  # compiles
    ms = {name: [] for name in runs}
    with exclusive("step_ablation"):
        for _ in range(args.rounds):
            for name in runs:
                t0 = time.perf_counter()
                run(name)
                ms[name].append(1e3 * (time.perf_counter() - t0))
    far = ms["far"]
    print(
        f"{args.workdir}, {args.precision}, batch {args.batch}, {args.tokens} tokens, "
        f"{args.rounds} interleaved rounds, {jax.devices()[0].device_kind}\n"
    )
    print(
        "| variant | steps | median ms a call | vs far: median (IQR) of rounds | part, ms a step |"
    )
    print("|---|--:|--:|--:|--:|")
    far_med, car = statistics.median(far), f"car:{args.chunk}"
    ratio = {}
    for name, t in ms.items():
        r = [a / b for a, b in zip(t, far, strict=True)]
        ratio[name] = statistics.median(r)
        q1, q3 = np.percentile(r, [25, 75])
        if name.startswith("far+"):  # the part FAR gained
            part = f"{(ratio[name] - 1.0) * far_med / steps['far']:+.2f}"
        elif name.endswith("/1-row"):  # what the c-row forward costs over one row
            extra = (ratio[car] - ratio[name]) * far_med / steps[car]
            part = f"{extra:+.2f} (the {args.chunk}-row forward)"
        else:
            part = ""
        cells = [name, str(steps[name]), f"{statistics.median(t):.1f}"]
        cells += [f"{ratio[name]:.3f} ({q1:.3f}-{q3:.3f})", part]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

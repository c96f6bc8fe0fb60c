"""Decoding speed of FAR and fixed-chunk CAR: tokens/s, LM-RTF, forwards and KV-cache bytes per
second of audio, at several batch sizes; compile time reported separately.

    python -m benchmarks.decode --config configs/car.py:small             # random weights
    python -m benchmarks.decode --workdir runs/car_small --tokens 250      # a trained model
    python -m benchmarks.decode --config configs/car.py:paper --batch 1,8,32 --tokens 500
    python -m benchmarks.decode --workdir pretrained/car_deep --batch 1 --strategies far,car:3 \
        --tokens 200 --precision bfloat16                                 # as the LM decodes
    python -m benchmarks.decode --workdir pretrained/car_deep --batch 8 --top_p 0.6  # top-p's cost

EOS is suppressed until `--tokens` (`SamplingConfig.min_tokens`), so every row of every
strategy generates exactly `--tokens` tokens (random or trained weights alike).
Audio seconds = tokens / the model's token rate (its tokenizer's, or the config's
`data.tokenizer_frames` mel frames per token). Each (strategy, batch) is run once to compile
(timed as `compile_s`), then `--repeats` times; the median run is reported.
Output: a markdown table on stdout and `--out` JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from benchmarks.timing_lock import exclusive


def _load(args):
    import flax.linen as nn
    import jax
    import numpy as np

    from jaxtts.methods.lm.model import TTSLM, LMConfig

    if args.workdir:
        from jaxtts.synthesize import Synthesizer

        synth = Synthesizer.from_workdir(args.workdir)
        cfg, params = synth.engine.cfg, synth.engine.params
        source, frame_rate = args.workdir, float(synth.engine.frame_rate)
    else:
        import importlib.util

        path, _, arg = args.config.partition(":")
        spec = importlib.util.spec_from_file_location("cfgmod", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        config = mod.get_config(arg or None)
        m = dict(config.model)
        m["num_text_symbols"] = m["num_text_symbols"] if m["num_text_symbols"] > 0 else 64
        m["num_speech_tokens"] = (
            m["num_speech_tokens"] if m["num_speech_tokens"] > 0 else config.data.tokenizer_k
        )
        cfg = LMConfig.from_config(m)
        one = np.ones((1, 4), np.int32)
        params = nn.unbox(
            jax.jit(TTSLM(cfg).init)(jax.random.key(0), one, np.array([4]), one, np.array([4]))
        )["params"]
        source = args.config
        from jaxtts.data.audio import MelConfig

        frames = int(config.data.get("tokenizer_frames", 1))  # mel frames per token
        frame_rate = MelConfig().frame_rate / frames
    return cfg, params, source, frame_rate


def random_batch(rng, cfg, b: int, text_len: int, prompt_len: int):
    """(PromptBatch of b rows with random text symbols and prompt tokens, per-row keys)."""
    import numpy as np

    from jaxtts.decode.driver import PromptBatch
    from jaxtts.decode.sampling import row_keys

    text = rng.integers(2, cfg.num_text_symbols, (b, text_len)).astype(np.int32)
    prompt = rng.integers(0, cfg.num_speech_tokens, (b, prompt_len)).astype(np.int32)
    batch = PromptBatch(
        text, np.full((b,), text_len, np.int32), prompt, np.full((b,), prompt_len, np.int32)
    )
    return batch, row_keys(0, range(b))


def time_decode(strat, models, params, batch, keys, tokens: int, sampling, repeats: int):
    """(output, median wall s of `repeats` timed runs, compile s) of one decode call: the
    first run compiles (its time minus the median is reported as compile time)."""
    import jax

    from jaxtts.decode.driver import decode

    def run():
        out = decode(strat, models, params, batch, keys, max_new_tokens=tokens, sampling=sampling)
        return jax.block_until_ready(out)

    t0 = time.perf_counter()
    out = run()
    first = time.perf_counter() - t0
    times = []
    with exclusive("decode"):  # gpu_check.sh: one process times at a time
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = run()
            times.append(time.perf_counter() - t0)
    wall = statistics.median(times)
    return out, wall, first - wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/car.py:small")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--batch", default="1,8,32")
    ap.add_argument("--strategies", default="")
    ap.add_argument("--tokens", type=int, default=250, help="tokens per row (250 = 5 s)")
    ap.add_argument("--text_len", type=int, default=64)
    ap.add_argument("--prompt_len", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--param_dtype",
        default="",
        help="store the weights in this dtype for decoding (bfloat16: half the bytes per step; "
        "default: as loaded, float32)",
    )
    ap.add_argument(
        "--dtype", default="", help="compute dtype override (the config's model.dtype otherwise)"
    )
    ap.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "bfloat16"],
        help="decode.precision: bfloat16 casts the matmul kernels once and sums in float32 "
        "(`jaxtts.decode.precision`)",
    )
    ap.add_argument(
        "--top_p",
        type=float,
        default=1.0,
        help="nucleus sampling (the shipped models decode at 0.6; 1.0: no filter)",
    )
    ap.add_argument("--out", default="out/bench_decode.json")
    args = ap.parse_args(argv)

    import jax
    import numpy as np

    from jaxtts.decode import registry
    from jaxtts.decode.precision import at_precision
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.methods.lm.model import TTSLM

    cfg, params, source, frame_rate = _load(args)
    if args.dtype:
        import dataclasses

        cfg = dataclasses.replace(cfg, dtype=args.dtype)
    if args.param_dtype:
        import jax.numpy as jnp

        pd = jnp.dtype(args.param_dtype)
        params = jax.tree.map(
            lambda x: x.astype(pd) if jnp.issubdtype(x.dtype, jnp.floating) else x, params
        )
    strategies = [s for s in args.strategies.split(",") if s] or (
        ["far"] + [f"car:{c}" for c in range(2, cfg.num_mtp_heads + 1)]
    )
    if not 0.0 < args.top_p <= 1.0:
        print(f"error: --top_p={args.top_p}: expected 0 < top_p <= 1", file=sys.stderr)
        return 2
    sampling = SamplingConfig(temperature=1.0, top_k=0, top_p=args.top_p, min_tokens=args.tokens)
    rng = np.random.default_rng(0)
    rows = []
    dev = jax.devices()[0]
    print(
        f"device: {dev.device_kind} ({jax.default_backend()}), {jax.device_count()} device(s); "
        f"model {source}: L={cfg.num_layers} D={cfg.d_model} K={cfg.num_mtp_heads} "
        f"V={cfg.out_vocab}; {args.tokens} tokens/row, text {args.text_len}, prompt "
        f"{args.prompt_len}, {frame_rate:g} tokens per audio second; compute "
        f"{cfg.dtype}, weights {jax.tree.leaves(params)[0].dtype}, precision {args.precision}",
        flush=True,
    )
    per_pos = cfg.kv_bytes_per_token()
    models, dparams = at_precision({"target": TTSLM(cfg)}, {"target": params}, args.precision)
    for b in [int(x) for x in args.batch.split(",")]:
        batch, keys = random_batch(rng, cfg, b, args.text_len, args.prompt_len)
        for spec in strategies:
            strat = registry.get(spec)

            out, wall, compile_s = time_decode(
                strat, models, dparams, batch, keys, args.tokens, sampling, args.repeats
            )
            n_tok = int(np.asarray(out.length).sum())
            audio_s = n_tok / frame_rate
            forwards = int(out.num_forwards) + 1  # + prefill
            kv_total = per_pos * (args.text_len + 1 + args.prompt_len + args.tokens)
            rows.append(
                {
                    "strategy": spec,
                    "batch": b,
                    "tokens": n_tok,
                    "wall_s": wall,
                    "compile_s": compile_s,
                    "tokens_per_s": n_tok / wall,
                    "lm_rtf": wall / audio_s,
                    "forwards_per_audio_s": forwards / (audio_s / b),
                    "kv_bytes_per_audio_s": kv_total / (args.tokens / frame_rate),
                }
            )
            r = rows[-1]
            _write(args, dev, source, rows)
            print(
                f"  {spec:6s} B={b:3d}: {r['tokens_per_s']:9.1f} tok/s  LM-RTF "
                f"{r['lm_rtf']:.4f}  compile {r['compile_s']:.1f}s",
                flush=True,
            )
    print(
        "\n| strategy | batch | tokens/s | LM-RTF | forwards / audio s | KV MiB / audio s | "
        "compile s |\n|---|--:|--:|--:|--:|--:|--:|"
    )
    for r in rows:
        print(
            f"| {r['strategy']} | {r['batch']} | {r['tokens_per_s']:.0f} | {r['lm_rtf']:.4f} | "
            f"{r['forwards_per_audio_s']:.1f} | {r['kv_bytes_per_audio_s'] / 2**20:.3f} | "
            f"{r['compile_s']:.1f} |"
        )
    _write(args, dev, source, rows)
    return 0


def _write(args, dev, source, rows) -> None:
    """The JSON of the rows so far (rewritten after each: a run stopped early keeps them)."""
    import jax

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "device": str(dev.device_kind),
                "backend": jax.default_backend(),
                "platform": platform.platform(),
                "source": source,
                "args": vars(args),
                "rows": rows,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    sys.exit(main())

"""Where a TLDR decoding step's time goes: its parts left out, one at a time, in the real loop.

    python -m benchmarks.diagnostics.tldr_step --workdir pretrained/tldr_deep_p4 --batch 1,8 \\
        --precision bfloat16

A fixed-length decode (EOS suppressed: `--tokens` per row, random text and prompt of the
benchmark's sizes, top_p 0.6) of the TLDR run with its step as shipped (`full`) and with
- `no_compressor`: the patch vector is the mean of its token embeddings (the compressor's
  local layer, cross-attention and MLP left out);
- `backbone_only`: that, and the patch's tokens are read off the previous hidden state instead
  of the extractor (no slots, no extractor calls, no sampling);
- `no_backbone`: the extractor only (the compressor and the backbone forward left out, the
  hidden state carried unchanged);
beside FAR on the backbone for the same tokens. The parts' costs are differences of these
(ms per step; median of `--rounds` interleaved rounds). Timing inside the decode loop keeps what
XLA does there (buffer reuse, fusion across parts); a part timed alone in its own jit measures
something else. The variants' tokens are not TLDR's: only their cost matters here.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from benchmarks.decode import random_batch, time_decode

VARIANTS = ("full", "no_compressor", "backbone_only", "no_backbone")


def ablated(mode: str):
    """The TLDR strategy with the parts named by `mode` left out (module docstring)."""
    import jax
    import jax.numpy as jnp

    from jaxtts.decode.driver import Proposal
    from jaxtts.methods.tldr.strategy import TLDR, TLDRCarry

    @dataclasses.dataclass(frozen=True)
    class Ablated(TLDR):
        def step(self, models, params, state, keys, sampling):
            if mode == "full":
                return super().step(models, params, state, keys, sampling)
            m, p = models["tldr"], {"params": params["tldr"]}
            c: TLDRCarry = state.carry
            b, n = state.length.shape[0], self.patch
            if mode == "backbone_only":  # tokens from the hidden state: keeps it live
                tokens = jnp.abs(c.hidden[:, :n] * 1000).astype(jnp.int32) % 1000
            else:
                tokens = super().step(models, params, state, keys, sampling).tokens
            if mode == "no_backbone":
                hidden, cache = c.hidden + 1e-9 * tokens.sum(), c.cache
            else:

                def mean_patch(mod, tokens, cache):  # the 'mean' compressor without its norm
                    z = mod.backbone.embed_speech(tokens).mean(1, keepdims=True)  # [B, 1, D]
                    h, cache = mod.backbone.extend_embedded(z, cache, stride=mod.cfg.stride)
                    return h[:, 0], cache

                hidden, cache = m.apply(p, tokens, c.cache, method=mean_patch)
            carry = c.replace(cache=cache, hidden=hidden.astype(jnp.float32))
            count = jnp.full((b,), n, jnp.int32)
            return Proposal(tokens=jax.lax.stop_gradient(tokens), count=count, carry=carry)

    return Ablated


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/tldr_deep_p4")
    ap.add_argument("--batch", default="1")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--text_len", type=int, default=48)
    ap.add_argument("--prompt_len", type=int, default=75)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    args = ap.parse_args(argv)

    import numpy as np

    from jaxtts.decode import registry
    from jaxtts.decode.sampling import SamplingConfig
    from jaxtts.engine import load_engine

    eng = load_engine(args.workdir)
    if eng.family != "tldr":
        raise SystemExit(f"--workdir {args.workdir}: a TLDR run expected, got {eng.family}")
    opts = eng.options(strategy="tldr", precision=args.precision)
    _, models, params = eng.at_precision(None, eng.decode_models(), eng.decode_params(), opts)
    sampling = SamplingConfig(temperature=1.0, top_p=0.6, min_tokens=args.tokens)
    rows = {v: (ablated(v)().bind(models), models, params) for v in VARIANTS}
    rows["far"] = (registry.get("far"), {"target": models["target"]}, {"target": params["target"]})
    for b in (int(x) for x in args.batch.split(",")):
        batch, keys = random_batch(
            np.random.default_rng(0), eng.cfg, b, args.text_len, args.prompt_len
        )
        times: dict[str, list[float]] = {k: [] for k in rows}
        steps: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, (strat, ms, ps) in rows.items():
                o, wall, _ = time_decode(strat, ms, ps, batch, keys, args.tokens, sampling, 1)
                steps[name] = max(1, int(np.max(np.asarray(o.steps))))
                times[name].append(wall)
        ms = {k: 1e3 * statistics.median(v) / steps[k] for k, v in times.items()}
        print(f"\nbatch {b}, {args.tokens} tokens a row, ms per step (median of {args.rounds}):")
        for k, v in ms.items():
            print(f"  {k:14s} {v:7.2f}  ({steps[k]} steps)")
        patch = rows["full"][0].patch
        comp, ext = ms["full"] - ms["no_compressor"], ms["no_compressor"] - ms["backbone_only"]
        print(
            f"  parts: compressor {comp:.2f}, extractor (slots, {patch} calls, sampling) "
            f"{ext:.2f}, backbone forward + loop {ms['backbone_only']:.2f}; TLDR step / FAR "
            f"step {ms['full'] / ms['far']:.2f} for {patch} tokens"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

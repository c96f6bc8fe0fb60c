"""Per-piece timing of one decoding step (FAR) of the `small` LM shapes on this machine.

    python -m benchmarks.diagnostics.step_profile --batch 32 --filled 225 --budget 351

A cache of `--budget` speech slots (prompt 100 + 250 tokens + BOS) holds `--filled` valid
slots (the middle of a 250-token generation). Timed separately, each jitted and run
`--repeats` times (median): the cached forward of one token (`extend`: embeddings, 4 layers,
KV writes, attention over the whole buffer), the same forward attending over the smallest
power-of-two cache window that holds the valid slots (if the cache can `resize`), attention
alone (one layer, whole buffer), writing one token's keys/values into every layer's cache
(in a loop with donated buffers, as in decoding; the standalone forwards above include the
copy of their non-donated cache),
the prediction heads, and sampling. Random weights; the numbers are per step of the batch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _time(fn, *args, repeats: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compile
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3  # ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--text_len", type=int, default=64)
    ap.add_argument("--filled", type=int, default=225)
    ap.add_argument("--budget", type=int, default=351)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxtts.decode.sampling import SamplingConfig, row_keys, sample_tokens
    from jaxtts.methods.lm.model import TTSLM, LMConfig
    from jaxtts.nn import attention as att

    cfg = LMConfig(
        num_text_symbols=64,
        num_speech_tokens=1024,
        d_model=256,
        num_layers=4,
        num_heads=4,
        head_dim=64,
        d_ff=1024,
        num_mtp_heads=4,
    )
    m = TTSLM(cfg)
    b, x = args.batch, args.text_len
    one = np.ones((1, 4), np.int32)
    p = nn.unbox(jax.jit(m.init)(jax.random.key(0), one, np.array([4]), one, np.array([4])))[
        "params"
    ]
    cache = m.apply({"params": p}, b, x, args.budget, method="init_cache")
    cache = cache.replace(
        text_len=jnp.full((b,), x, jnp.int32), speech_len=jnp.full((b,), args.filled, jnp.int32)
    )
    tok = jnp.ones((b, 1), jnp.int32)
    rows = {}
    extend = jax.jit(lambda p, t, c: m.apply({"params": p}, t, c, method="extend"))
    rows["cached forward, whole buffer"] = _time(extend, p, tok, cache, repeats=args.repeats)
    if hasattr(cache, "resize"):  # the decode loop grows its cache window by window
        w = 64
        while w < args.filled + 1:
            w *= 2
        small = m.apply({"params": p}, b, x, w, method="init_cache").replace(
            text_len=cache.text_len, speech_len=cache.speech_len
        )
        rows[f"cached forward, cache window {w}"] = _time(
            extend, p, tok, small, repeats=args.repeats
        )
    lc = cache.layers[0]
    q = jnp.ones((b, 1, cfg.num_heads, cfg.head_dim), jnp.float32)
    mask = jnp.ones((b, 1, cache.num_slots), bool)
    attend_out = jax.jit(lambda *a: att.attend(*a)[0])  # the output only, not the logits
    rows["attention, 1 layer, whole buffer"] = _time(
        attend_out, q, lc.k, lc.v, mask, repeats=args.repeats
    )
    new = jnp.ones((b, 1, cfg.num_heads, cfg.head_dim), jnp.float32)
    head_major = lc.k.shape[1] == cfg.num_heads and lc.k.shape[2] == cache.num_slots

    def write(layers, start):
        if head_major:
            n = new.transpose(0, 2, 1, 3)
            return [att.write_rows(c, n, start, axis=2) for c in layers]
        return [att.write_rows(c, new, start) for c in layers]

    def write_loop(layers, start):  # 50 steps in one loop, buffers donated: in place
        return jax.lax.fori_loop(0, 50, lambda i, ls: write(ls, start + i % 2), layers)

    wl = jax.jit(write_loop, donate_argnums=(0,))
    fresh = lambda: [jnp.zeros_like(c.k) for c in cache.layers]  # noqa: E731
    start = cache.speech_len + x
    jax.block_until_ready(wl(fresh(), start))
    ts = []
    for _ in range(5):
        bufs = jax.block_until_ready(fresh())
        t0 = time.perf_counter()
        jax.block_until_ready(wl(bufs, start))
        ts.append((time.perf_counter() - t0) / 50 * 1e3)
    rows["KV write, all layers (K and V), in place"] = 2 * statistics.median(ts)
    h = jnp.ones((b, cfg.d_model), jnp.float32)
    heads = jax.jit(lambda p, h: m.apply({"params": p}, h, method="heads")[:, :1])
    rows["heads (head 1 used)"] = _time(heads, p, h, repeats=args.repeats)
    logits = heads(p, h)
    keys = row_keys(0, range(b))
    samp = jax.jit(lambda k, lg: sample_tokens(k, lg, SamplingConfig()))
    rows["sampling"] = _time(samp, keys, logits, repeats=args.repeats)
    layout = "[B, N, S, H]" if head_major else "[B, S, N, H]"
    print(
        f"batch {b}, cache {layout}, {cache.num_slots} slots ({x} text + {args.budget} "
        f"speech), {args.filled} valid speech slots; median of {args.repeats}, ms per step\n"
    )
    print("| piece | ms |\n|---|--:|")
    for k, v in rows.items():
        print(f"| {k} | {v:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

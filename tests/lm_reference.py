"""Test helpers: a tiny random TTS LM and a plain-Python, uncached reference decoder.

The reference re-runs the full (uncached) forward on the whole sequence at every step and
implements chunked decoding with ordinary Python control flow, one row at a time: it shares
no code with `jaxtts.decode` except the model's forward and heads.
"""

import functools

import flax.linen as nn
import jax
import numpy as np

from jaxtts.decode.driver import PromptBatch, decode
from jaxtts.methods.lm.model import TTSLM, LMConfig

TINY = LMConfig(
    num_text_symbols=24,
    num_speech_tokens=16,
    d_model=32,
    num_layers=2,
    num_heads=2,
    head_dim=16,
    d_ff=64,
    num_mtp_heads=4,
)


def run(strategy, params, batch, keys, *, max_new_tokens, sampling, cfg=TINY):
    """Decode with `strategy` on the target model `TTSLM(cfg)` through the generic driver."""
    return decode(
        strategy,
        {"target": TTSLM(cfg)},
        {"target": params},
        batch,
        keys,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
    )


def batch_of(rows, text_width=None, prompt_width=None):
    """PromptBatch of (text ids, prompt tokens) rows, padded to the given or the largest widths."""
    x = text_width or max(len(t) for t, _ in rows)
    p = prompt_width or max(1, max(len(q) for _, q in rows))
    text = np.zeros((len(rows), x), np.int32)
    prompt = np.zeros((len(rows), p), np.int32)
    for i, (t, q) in enumerate(rows):
        text[i, : len(t)], prompt[i, : len(q)] = t, q
    return PromptBatch(
        text,
        np.array([len(t) for t, _ in rows], np.int32),
        prompt,
        np.array([len(q) for _, q in rows], np.int32),
    )


def random_rows(n, seed=0, cfg=TINY, max_text=9, max_prompt=6):
    """n rows of (text ids, prompt tokens) with different lengths."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        t = rng.integers(2, cfg.num_text_symbols, rng.integers(3, max_text + 1))
        p = rng.integers(0, cfg.num_speech_tokens, rng.integers(0, max_prompt + 1))
        rows.append((t.astype(np.int32), p.astype(np.int32)))
    return rows


def init_params(cfg=TINY, seed=0, eos_bias=None):
    """Random params; `eos_bias` adds a constant to the EOS logit of every head so random
    models stop at different times."""
    m = TTSLM(cfg)
    text = np.ones((1, 4), np.int32)
    speech = np.full((1, 3), cfg.bos, np.int32)
    # jitted: one compile, where op-by-op init compiles every primitive of the model
    params = nn.unbox(
        jax.jit(m.init)(jax.random.key(seed), text, np.array([4]), speech, np.array([3]))
    )
    params = params["params"]
    if eos_bias is not None:
        params = jax.tree_util.tree_map_with_path(
            lambda p, x: x.at[..., cfg.eos].add(eos_bias) if _is_out_bias(p, cfg) else x, params
        )
    return params


def _is_out_bias(path, cfg):
    keys = [getattr(k, "key", "") for k in path]
    return keys[-1] == "bias" and keys[0] == "base_head"


@functools.lru_cache(maxsize=4)
def _forward(cfg):
    m = TTSLM(cfg)
    return jax.jit(lambda p, t, tl, s, sl: m.apply({"params": p}, t, tl, s, sl)[0])


def reference_decode(params, text, prompt, chunk, max_new, cfg=TINY):
    """Greedy chunked decoding of ONE row with full uncached forwards; returns token list.

    Every step re-runs the whole sequence through the training forward (padded to one fixed
    width, so it compiles once; padding is masked by `speech_len`).
    """
    width = 1 + len(prompt) + max_new + chunk
    out = []
    while len(out) < max_new:
        seq = [cfg.bos, *prompt.tolist(), *out]
        speech = np.full((1, width), cfg.pad, np.int32)
        speech[0, : len(seq)] = seq
        logits = _forward(cfg)(
            params, text[None], np.array([len(text)]), speech, np.array([len(seq)])
        )
        heads = np.asarray(logits[0, len(seq) - 1, :chunk])  # [C, V]
        stop = False
        for k in range(chunk):
            tok = int(np.argmax(heads[k]))
            if tok == cfg.eos:
                stop = True
                break
            out.append(tok)
            if len(out) >= max_new:
                break
        if stop:
            break
    return out


def run_in_segments(strategy, models, params, batch, keys, *, max_new_tokens, sampling, seg):
    """The same decode as `decode(...)`, run by `driver.advance` in segments of `seg` steps
    (a list cycles: 1, 3, 7, 1, ...). Returns (DecodeOutput, number of segments)."""
    import itertools

    from jaxtts.decode import driver

    st = driver.start(strategy, models, params, batch, max_new_tokens=max_new_tokens)
    n = 0
    for k in itertools.cycle(seg if isinstance(seg, list | tuple) else [seg]):
        if st.all_done():
            break
        st = driver.advance(st, params, keys, num_steps=k, sampling=sampling)
        n += 1
    return driver.output(st), n


def assert_same_decode(got, want, stats: bool = False) -> None:
    """Two DecodeOutputs agree token for token: tokens, lengths, steps, cap flags (and every
    strategy statistic when `stats`)."""
    import numpy as np

    for name in ("tokens", "length", "steps", "hit_max"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    if stats:
        assert set(got.stats) == set(want.stats)
        for k, v in want.stats.items():
            np.testing.assert_array_equal(got.stats[k], v, err_msg=k)

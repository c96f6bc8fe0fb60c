"""PALLE inference: fixed-step loops over a masked speech buffer (jitted `lax.fori_loop`s,
batched, per-row lengths; the same code on CPU, GPU and TPU).

A row holds its prompt tokens at positions [0, P), then G positions to generate (T = P + G),
then padding up to the buffer width. Three decoders:

- `par_decode` (stage one, PAR): `steps` steps; each predicts every position in parallel and
  commits the leftmost k' = min(floor(r' T), N_left) still-masked positions. The paper picks
  steps and r' so that steps * floor(r' T) >= G; where floor(r' T) is too small for that
  (short rows, or r' * steps < 1), k' is raised to ceil(G / steps) so every row finishes in
  exactly `steps` steps. Each committed token keeps its confidence log max_v P(v).
- `refine` (stage two, NAR refinement): `steps` steps; each re-masks the ceil(gamma * G)
  generated tokens of lowest confidence that were never updated, predicts them with the
  refine model, and marks them updated (never re-masked again: their confidence becomes
  log 1 = 0 and they leave the candidate set).
- `nar_decode` (MaskGCT-style baseline): all G positions start masked; step i predicts every
  masked position and keeps the most confident ones, so that floor(G cos(pi/2 (i+1)/steps))
  stay masked after it (none after the last step).

Sampling is `jaxtts.decode.sampling` (greedy or temperature / top-k / top-p, one key per row and
step, so batch-N == batch-1 per row).

Axis letters: B batch, T buffer positions, X text, W commit window, V vocabulary.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from jaxtts.decode.sampling import SamplingConfig, sample_tokens, step_keys
from jaxtts.methods.palle.model import MaskedGenTransformer

REFINE_KEY_OFFSET = 1_000_003  # refine steps draw with fold_in(row key, offset + step)


def commit_sizes(
    total: jax.Array, gen: jax.Array, left: jax.Array, ratio: float, steps: int
) -> jax.Array:
    """k' per row: min(max(floor(r' T), ceil(G / steps)), N_left) (see the module docstring)."""
    base = jnp.floor(ratio * total.astype(jnp.float32)).astype(jnp.int32)
    need = (gen + steps - 1) // steps
    return jnp.minimum(jnp.maximum(base, need), left)


def window_width(width: int, ratio: float, steps: int) -> int:
    """Static bound on k' for rows of at most `width` positions."""
    return max(1, min(width, max(int(math.floor(ratio * width)), -(-width // steps))))


def _logits(model, params, text, text_len, speech, total):
    return model.apply({"params": params}, text, text_len, speech, total)  # [B, T, V]


@functools.partial(jax.jit, static_argnames=("model", "steps", "ratio", "sampling"))
def par_decode(
    model: MaskedGenTransformer,
    params,
    text,
    text_len,
    speech,
    prompt_len,
    total,
    keys,
    *,
    steps: int,
    ratio: float,
    sampling: SamplingConfig,
):
    """speech [B, T] (prompt tokens, anything after) -> (tokens [B, T], conf float [B, T],
    commits int [steps, B]: tokens committed by each step). Positions >= total are -1."""
    b, t = speech.shape
    mask_id = model.cfg.mask_id
    idx = jnp.arange(t)[None]  # [1, T]
    gen = total - prompt_len  # [B]
    speech = jnp.where(idx < prompt_len[:, None], speech, mask_id)
    w = window_width(t, ratio, steps)
    conf = jnp.zeros((b, t), jnp.float32)
    commits = jnp.zeros((steps, b), jnp.int32)

    def body(i, carry):
        speech, conf, done, commits = carry  # done [B]: generated tokens committed so far
        logits = _logits(model, params, text, text_len, speech, total)  # [B, T, V]
        start = prompt_len + done  # [B] first still-masked position
        pos = jnp.minimum(start[:, None] + jnp.arange(w)[None], t - 1)  # [B, W]
        win = jnp.take_along_axis(logits, pos[..., None], axis=1)  # [B, W, V]
        toks = sample_tokens(step_keys(keys, i), win, sampling)  # [B, W]
        c = jnp.max(jax.nn.log_softmax(win, axis=-1), axis=-1)  # [B, W] log max P
        k = commit_sizes(total, gen, gen - done, ratio, steps)  # [B]
        take = jnp.arange(w)[None] < k[:, None]  # [B, W]
        rows = jnp.arange(b)[:, None]
        dst = jnp.where(take, pos, t)  # slots not taken write out of bounds (dropped)
        speech = speech.at[rows, dst].set(toks, mode="drop")
        conf = conf.at[rows, dst].set(c, mode="drop")
        return speech, conf, done + k, commits.at[i].set(k)

    speech, conf, _, commits = jax.lax.fori_loop(
        0, steps, body, (speech, conf, jnp.zeros((b,), jnp.int32), commits)
    )
    valid = idx < total[:, None]
    return jnp.where(valid, speech, -1), jnp.where(valid, conf, 0.0), commits


def _lowest(conf: jax.Array, candidate: jax.Array, n: jax.Array) -> jax.Array:
    """bool [B, T]: the n[b] candidates of lowest confidence in each row (ties: leftmost)."""
    key = jnp.where(candidate, conf, jnp.inf)
    rank = jnp.argsort(jnp.argsort(key, axis=1, stable=True), axis=1, stable=True)
    return candidate & (rank < n[:, None])


@functools.partial(jax.jit, static_argnames=("model", "steps", "gamma", "sampling"))
def refine(
    model: MaskedGenTransformer,
    params,
    text,
    text_len,
    speech,
    conf,
    prompt_len,
    total,
    keys,
    *,
    steps: int,
    gamma: float,
    sampling: SamplingConfig,
):
    """Stage two on stage one's tokens and confidences -> (tokens [B, T], updated bool [B, T],
    remasked int [steps, B])."""
    b, t = speech.shape
    mask_id = model.cfg.mask_id
    idx = jnp.arange(t)[None]
    generated = (idx >= prompt_len[:, None]) & (idx < total[:, None])  # [B, T]
    gen = total - prompt_len
    n = jnp.where(gen > 0, jnp.ceil(gamma * gen.astype(jnp.float32)).astype(jnp.int32), 0)
    tokens = jnp.where(idx < total[:, None], speech, 0)

    def body(i, carry):
        tokens, conf, updated, remasked = carry
        sel = _lowest(conf, generated & ~updated, n)  # [B, T]
        logits = _logits(model, params, text, text_len, jnp.where(sel, mask_id, tokens), total)
        new = sample_tokens(step_keys(keys, REFINE_KEY_OFFSET + i), logits, sampling)  # [B, T]
        tokens = jnp.where(sel, new, tokens)
        conf = jnp.where(sel, 0.0, conf)  # log 1: an updated token is never re-masked
        return tokens, conf, updated | sel, remasked.at[i].set(jnp.sum(sel, axis=1))

    tokens, _, updated, remasked = jax.lax.fori_loop(
        0, steps, body, (tokens, conf, jnp.zeros((b, t), bool), jnp.zeros((steps, b), jnp.int32))
    )
    return jnp.where(idx < total[:, None], tokens, -1), updated, remasked


@functools.partial(jax.jit, static_argnames=("model", "steps", "sampling"))
def nar_decode(
    model: MaskedGenTransformer,
    params,
    text,
    text_len,
    speech,
    prompt_len,
    total,
    keys,
    *,
    steps: int,
    sampling: SamplingConfig,
):
    """MaskGCT-style confidence-ordered parallel decoding -> (tokens [B, T], unmasked int
    [steps, B])."""
    b, t = speech.shape
    mask_id = model.cfg.mask_id
    idx = jnp.arange(t)[None]
    gen = (total - prompt_len).astype(jnp.float32)
    generated = (idx >= prompt_len[:, None]) & (idx < total[:, None])
    speech = jnp.where(idx < prompt_len[:, None], speech, mask_id)

    def body(i, carry):
        speech, unmasked = carry
        masked = generated & (speech == mask_id)  # [B, T]
        logits = _logits(model, params, text, text_len, speech, total)
        toks = sample_tokens(step_keys(keys, i), logits, sampling)  # [B, T]
        lp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), toks[..., None], -1)[..., 0]
        remain = jnp.floor(gen * jnp.cos(0.5 * jnp.pi * (i + 1) / steps)).astype(jnp.int32)
        remain = jnp.where(i == steps - 1, 0, remain)
        n_now = jnp.sum(masked, axis=1)
        keep = _lowest(-lp, masked, n_now - jnp.minimum(remain, n_now))  # most confident
        return jnp.where(keep, toks, speech), unmasked.at[i].set(jnp.sum(keep, axis=1))

    speech, unmasked = jax.lax.fori_loop(0, steps, body, (speech, jnp.zeros((steps, b), jnp.int32)))
    return jnp.where(idx < total[:, None], speech, -1), unmasked

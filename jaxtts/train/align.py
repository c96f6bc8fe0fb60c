"""Alignment learning for the decoder-only TTS LM (issue 12, part 1; pure functions, tested,
NOT yet wired into `LMTask`: the wiring needs the stack to return the chosen heads'
speech->text attention, which is the next step).

- `beta_binomial_log_prior(text_len, speech_len, X, T, scaling)`: the static alignment prior of
  Badlani et al. 2021 ("One TTS Alignment To Rule Them All"): speech frame t (1-based) of a row
  with N text tokens and M frames puts BetaBinomial(N - 1, a = s t, b = s (M - t + 1)) mass on
  text position k. Added to the chosen heads' speech->text attention logits (i.e. multiplied
  into their probabilities), annealed to off with `prior_weight`.
- `ctc_alignment_loss(log_attn, text_len, speech_len)`: the forward-sum ("CTC") alignment loss
  (Badlani et al. 2021; Neekhara et al. 2024): the speech->text attention, renormalised over
  the row's valid text keys plus a blank with log-probability `blank_logprob`, must explain
  the text sequence 1..N in order over the M frames; per-row CTC negative log-likelihood
  divided by N, averaged over rows.

Axis letters: B batch, T speech frames (queries), X text positions (keys).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.scipy.special import gammaln

NEG_INF = -1e30


def beta_binomial_log_prior(text_len: jax.Array, speech_len: jax.Array, x: int, t: int,
                            scaling: float = 1.0) -> jax.Array:  # fmt: skip
    """log prior [B, T, X]: row b, frame j < speech_len[b], text k < text_len[b]; NEG_INF
    elsewhere (padding). Each valid frame's prior sums to 1 over the valid text positions."""
    n = (text_len - 1).astype(jnp.float32)[:, None, None]  # [B, 1, 1] BetaBinomial's n
    m = speech_len.astype(jnp.float32)[:, None, None]
    frame = jnp.arange(1, t + 1, dtype=jnp.float32)[None, :, None]  # [1, T, 1] 1-based
    k = jnp.arange(x, dtype=jnp.float32)[None, None, :]  # [1, 1, X]
    a, b = scaling * frame, scaling * (m - frame + 1.0)

    def betaln(p, q):
        return gammaln(p) + gammaln(q) - gammaln(p + q)

    log_choose = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(jnp.maximum(n - k, 0.0) + 1.0)
    logp = log_choose + betaln(k + a, jnp.maximum(n - k, 0.0) + b) - betaln(a, b)  # [B, T, X]
    valid = ((jnp.arange(t)[None, :, None] < speech_len[:, None, None])
             & (jnp.arange(x)[None, None, :] < text_len[:, None, None]))  # fmt: skip
    return jnp.where(valid, logp, NEG_INF)


def prior_weight(step: jax.Array, anneal_start: int, anneal_end: int) -> jax.Array:
    """1 until `anneal_start`, linearly to 0 at `anneal_end`, 0 after."""
    span = max(anneal_end - anneal_start, 1)
    return jnp.clip(1.0 - (step - anneal_start) / span, 0.0, 1.0)


def ctc_alignment_loss(log_attn: jax.Array, text_len: jax.Array, speech_len: jax.Array,
                       blank_logprob: float = -1.0) -> jax.Array:  # fmt: skip
    """Forward-sum alignment loss. log_attn [B, T, X]: speech->text attention scores (logits or
    log-probabilities; renormalised here over the valid keys + blank). Returns a scalar."""
    b, t, x = log_attn.shape
    key_ok = jnp.arange(x)[None, None, :] < text_len[:, None, None]  # [B, 1, X]
    scores = jnp.where(key_ok, log_attn.astype(jnp.float32), NEG_INF)
    scores = jax.nn.log_softmax(scores, axis=-1)  # over the valid text keys
    blank = jnp.full((b, t, 1), blank_logprob, jnp.float32)
    logits = jax.nn.log_softmax(jnp.concatenate([blank, scores], axis=-1), axis=-1)  # [B,T,1+X]
    frame_pad = (jnp.arange(t)[None, :] >= speech_len[:, None]).astype(jnp.float32)  # [B, T]
    labels = jnp.broadcast_to(jnp.arange(1, x + 1)[None], (b, x))  # text position k -> k + 1
    label_pad = (jnp.arange(x)[None, :] >= text_len[:, None]).astype(jnp.float32)  # [B, X]
    nll = optax.ctc_loss(logits, frame_pad, labels, label_pad, blank_id=0)  # [B]
    valid = (text_len > 0) & (speech_len > 0)
    per_row = jnp.where(valid, nll / jnp.maximum(text_len, 1), 0.0)
    return per_row.sum() / jnp.maximum(valid.sum(), 1)

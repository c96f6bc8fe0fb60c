"""Alignment learning for the decoder-only TTS LM (training only; no parameters; decoding is
unchanged). `LMTask` adds the prior to the attention logits of the configured layers/heads
(`TransformerStack(..., attn_bias=, bias_layers=)`), reads their logits back and adds the CTC
loss; `AlignConfig` holds the `loss.align_*` keys.

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

import dataclasses

import jax
import jax.numpy as jnp
import optax
from jax.scipy.special import gammaln

from jaxtts.errors import ConfigError

NEG_INF = -1e30


def beta_binomial_log_prior(
    text_len: jax.Array, speech_len: jax.Array, x: int, t: int, scaling: float = 1.0
) -> jax.Array:
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
    valid = (jnp.arange(t)[None, :, None] < speech_len[:, None, None]) & (
        jnp.arange(x)[None, None, :] < text_len[:, None, None]
    )
    return jnp.where(valid, logp, NEG_INF)


def prior_weight(step: jax.Array, anneal_start: int, anneal_end: int) -> jax.Array:
    """1 until `anneal_start`, linearly to 0 at `anneal_end`, 0 after."""
    span = max(anneal_end - anneal_start, 1)
    return jnp.clip(1.0 - (step - anneal_start) / span, 0.0, 1.0)


def ctc_alignment_loss(
    log_attn: jax.Array, text_len: jax.Array, speech_len: jax.Array, blank_logprob: float = -1.0
) -> jax.Array:
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


@dataclasses.dataclass(frozen=True)
class AlignConfig:
    """The `loss.align_*` keys of an LM config (see configs/help.py for each)."""

    layers: tuple[int, ...] = ()  # () = alignment learning off
    heads: tuple[int, ...] = ()  # () = every head of those layers
    ctc_weight: float = 0.0
    prior_scaling: float = 0.0  # 0 = no prior
    prior_start: int = 0
    prior_end: int = 0
    prior_normalize: bool = True  # peak of each frame's log prior at 0 (see `prior_bias`)
    blank_logprob: float = -1.0
    band: float = 0.1  # half-width of the diagonal band of `diagonal_mass`, fraction of N

    @property
    def enabled(self) -> bool:
        return bool(self.layers) and (self.ctc_weight > 0 or self.prior_scaling > 0)

    @classmethod
    def from_loss_config(cls, loss_cfg, num_layers: int, num_heads: int) -> AlignConfig:
        """From `config.loss` (keys `align_<field>`; other keys belong to the task)."""
        d = {
            k[len("align_") :]: v for k, v in dict(loss_cfg or {}).items() if k.startswith("align_")
        }
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ConfigError(
                f"loss.align_{unknown[0]}: unknown key, expected one of "
                f"{sorted('align_' + f for f in fields)}"
            )
        for key in ("layers", "heads"):
            d[key] = tuple(int(i) for i in d.get(key, ()) or ())
            if len(set(d[key])) != len(d[key]):
                raise ConfigError(f"loss.align_{key}={list(d[key])}: an index is listed twice")
        cfg = cls(**d)
        for key, n in (("layers", num_layers), ("heads", num_heads)):
            bad = [i for i in getattr(cfg, key) if not 0 <= i < n]
            if bad:
                raise ConfigError(
                    f"loss.align_{key}={list(getattr(cfg, key))}: expected indices in [0, {n})"
                )
        if cfg.prior_scaling > 0 and cfg.prior_end < cfg.prior_start:
            raise ConfigError(
                f"loss.align_prior_end={cfg.prior_end}: expected >= "
                f"align_prior_start={cfg.prior_start}"
            )
        return cfg

    def head_mask(self, num_heads: int) -> jax.Array:
        """float [N]: 1 on the aligned heads."""
        if not self.heads:
            return jnp.ones((num_heads,), jnp.float32)
        return jnp.zeros((num_heads,), jnp.float32).at[jnp.asarray(self.heads)].set(1.0)

    def prior_weight(self, step: jax.Array | None) -> jax.Array:
        """The prior's weight at `step` (0 without a prior or a step: evaluation)."""
        if self.prior_scaling <= 0 or step is None:
            return jnp.zeros((), jnp.float32)
        return prior_weight(step, self.prior_start, self.prior_end)


def prior_bias(
    text_len: jax.Array,
    speech_len: jax.Array,
    x: int,
    t: int,
    head_mask: jax.Array,
    scaling: float,
    weight: jax.Array,
    normalize: bool = True,
) -> jax.Array:
    """Additive attention bias [B, N, X+T, X+T] of a prefix-LM row [text X | speech T]:
    `weight * log prior` on the speech-query x text-key block of the heads in `head_mask` [N],
    0 elsewhere (text queries, speech keys, other heads, padding).

    normalize: subtract each frame's largest log prior, so the diagonal key gets 0 and only
    off-diagonal text keys are penalised. In a prefix-LM the same softmax also covers the
    speech keys (bias 0); the raw log prior (<= 0 everywhere, about -2.5 at the peak for ~80
    text symbols) would also push the head's mass from the text to the speech keys, which the
    encoder-decoder setting of Badlani et al. (text keys only) never does.
    """
    logp = beta_binomial_log_prior(text_len, speech_len, x, t, scaling)  # [B, T, X]
    ok = logp > NEG_INF / 2
    if normalize:
        peak = jnp.max(jnp.where(ok, logp, NEG_INF), axis=-1, keepdims=True)  # [B, T, 1]
        logp = logp - jnp.where(peak > NEG_INF / 2, peak, 0.0)
    logp = jnp.where(ok, logp, 0.0) * weight
    block = logp[:, None] * head_mask[None, :, None, None]  # [B, N, T, X]
    return jnp.pad(block, ((0, 0), (0, 0), (x, 0), (0, t)))


def speech_text_logits(logits: jax.Array, x: int, heads: tuple[int, ...]) -> jax.Array:
    """[B, N, X+T, X+T] attention logits -> the speech->text block [B, N', T, X] of `heads`
    (all when empty)."""
    block = logits[:, :, x:, :x]
    return block if not heads else block[:, jnp.asarray(heads)]


def diagonal_mass(
    log_attn: jax.Array, text_len: jax.Array, speech_len: jax.Array, band: float = 0.1
) -> jax.Array:
    """Alignment score in [0, 1]: the share of each valid frame's attention (renormalised over
    the valid text keys) within `band * N + 1` keys of the diagonal k = (t + 0.5) N / M,
    averaged over valid frames. log_attn [B, T, X]."""
    b, t, x = log_attn.shape
    key_ok = jnp.arange(x)[None, None, :] < text_len[:, None, None]
    p = jax.nn.softmax(jnp.where(key_ok, log_attn.astype(jnp.float32), NEG_INF), axis=-1)
    n = text_len.astype(jnp.float32)[:, None, None]
    m = jnp.maximum(speech_len, 1).astype(jnp.float32)[:, None, None]
    centre = (jnp.arange(t, dtype=jnp.float32)[None, :, None] + 0.5) * n / m
    near = jnp.abs(jnp.arange(x, dtype=jnp.float32)[None, None, :] - centre) <= band * n + 1
    frame_ok = (jnp.arange(t)[None, :] < speech_len[:, None]) & (text_len > 0)[:, None]
    mass = jnp.where(near & key_ok, p, 0.0).sum(-1)  # [B, T]
    return jnp.where(frame_ok, mass, 0.0).sum() / jnp.maximum(frame_ok.sum(), 1)

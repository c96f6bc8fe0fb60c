"""Sampling, shared by every decoding strategy.

- `SamplingConfig`: greedy or temperature / top-k / top-p (static under jit).
- `filter_logits`: the filtered distribution (speculative decoding applies it to the draft
  and the target alike).
- `sample_tokens`: per-row PRNG keys (key array [B]), so a row's samples do not depend on
  which other rows share its batch (batch-N == batch-1 also when sampling).
- `row_keys` / `step_keys`: one key per row from (seed, row id), folded with the step.

Axis letters: B batch, C tokens per step, V vocabulary.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """greedy=True takes the argmax; else softmax(logits / temperature) restricted to the
    top_k ids (0 = all) and to the smallest set with mass >= top_p (1.0 = all). EOS is
    suppressed for a row's first `min_tokens` tokens (benchmarks use it for fixed lengths)."""

    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_tokens: int = 0

    def __post_init__(self):
        if not self.greedy and self.temperature <= 0:
            raise ConfigError(f"decode.temperature={self.temperature}: expected > 0 (or greedy)")
        if self.top_k < 0 or not 0 < self.top_p <= 1 or self.min_tokens < 0:
            raise ConfigError(
                f"decode.top_k={self.top_k} (>= 0), decode.top_p={self.top_p} ((0, 1]), "
                f"min_tokens={self.min_tokens} (>= 0) expected")

    @classmethod
    def from_config(cls, decode_cfg) -> SamplingConfig:
        get = decode_cfg.get
        return cls(bool(get("greedy", False)), float(get("temperature", 1.0)),
                   int(get("top_k", 0)), float(get("top_p", 1.0)),
                   int(get("min_tokens", 0) or 0))  # fmt: skip


def filter_logits(logits: jax.Array, s: SamplingConfig) -> jax.Array:
    """Temperature, top-k and top-p applied to logits [..., V] (removed ids -> -inf)."""
    logits = logits.astype(jnp.float32) / s.temperature
    if s.top_k > 0 and s.top_k < logits.shape[-1]:
        kth = jax.lax.top_k(logits, s.top_k)[0][..., -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if s.top_p < 1.0:
        srt = jnp.sort(logits, axis=-1)[..., ::-1]
        probs = jax.nn.softmax(srt, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each sorted id
        keep = before < s.top_p  # always keeps the first
        cutoff = jnp.min(jnp.where(keep, srt, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < cutoff, -jnp.inf, logits)
    return logits


def suppress_early_eos(logits: jax.Array, length: jax.Array, s: SamplingConfig, eos: int
                       ) -> jax.Array:  # fmt: skip
    """logits [B, C, V] of the next C tokens of rows that have `length` [B] tokens: EOS is
    removed where the token's index would be < s.min_tokens."""
    if s.min_tokens <= 0:
        return logits
    idx = length[:, None] + jnp.arange(logits.shape[1])[None]  # [B, C]
    early = (idx < s.min_tokens)[..., None] & (jnp.arange(logits.shape[-1]) == eos)
    return jnp.where(early, -jnp.inf, logits)


def sample_tokens(keys: jax.Array, logits: jax.Array, s: SamplingConfig) -> jax.Array:
    """keys [B] PRNG keys, logits [B, C, V] -> int32 [B, C] (one independent draw per slot)."""
    if s.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def row(key, lg):  # [C, V]; slot i draws with fold_in(key, i): a slot's draw does not
        # depend on how many slots the step samples (DCAR sampling K heads and keeping c
        # tokens then equals car:c sampling c)
        ks = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(lg.shape[0]))
        return jax.vmap(jax.random.categorical)(ks, filter_logits(lg, s))

    return jax.vmap(row)(keys, logits).astype(jnp.int32)


def step_keys(keys: jax.Array, step: jax.Array) -> jax.Array:
    """Per-row keys for decoding step `step`: fold_in(row key, step)."""
    return jax.vmap(lambda k: jax.random.fold_in(k, step))(keys)


def row_keys(seed: int, row_ids: np.ndarray | list[int]) -> jax.Array:
    """One PRNG key per row from (seed, row id): independent of batch composition."""
    base = jax.random.key(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(row_ids, jnp.uint32))

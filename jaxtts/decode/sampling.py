"""What every decoding strategy shares: inputs, outputs, sampling, and the prefill step.

- `PromptBatch`: B rows of text ids and speech-prompt tokens, each with its own length.
- `SamplingConfig`: greedy or temperature / top-k / top-p (static under jit).
- `sample_tokens`: per-row PRNG keys (int [B] key array), so a row's samples do not depend on
  which other rows share its batch (batch-N == batch-1 also when sampling).
- `DecodeOutput`: generated tokens [B, N] (-1 past each row's length), lengths, per-row decoding
  steps (model forwards after prefill), and whether a row hit the length cap without EOS.
- `prefill`: text + BOS + prompt in one forward into a fixed-size KV cache; returns each row's
  last hidden state.

Axis letters: B batch, X text, P prompt, N generated tokens, C chunk, V vocabulary, D width.
"""

from __future__ import annotations

import dataclasses

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.errors import ConfigError
from jaxtts.models.lm import TTSLM, KVCache, LMConfig


@flax.struct.dataclass
class PromptBatch:
    text: jax.Array  # int32 [B, X] prompt transcript + target text ids, 0-padded
    text_len: jax.Array  # int32 [B]
    prompt: jax.Array  # int32 [B, P] speech-prompt tokens (raw ids), padded
    prompt_len: jax.Array  # int32 [B] (0 = no prompt)

    @property
    def batch_size(self) -> int:
        return self.text.shape[0]


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

    def row(key, lg):  # [C, V]
        ks = jax.random.split(key, lg.shape[0])
        return jax.vmap(jax.random.categorical)(ks, filter_logits(lg, s))

    return jax.vmap(row)(keys, logits).astype(jnp.int32)


def step_keys(keys: jax.Array, step: jax.Array) -> jax.Array:
    """Per-row keys for decoding step `step`: fold_in(row key, step)."""
    return jax.vmap(lambda k: jax.random.fold_in(k, step))(keys)


def row_keys(seed: int, row_ids: np.ndarray | list[int]) -> jax.Array:
    """One PRNG key per row from (seed, row id): independent of batch composition."""
    base = jax.random.key(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(row_ids, jnp.uint32))


@flax.struct.dataclass
class DecodeOutput:
    tokens: jax.Array  # int32 [B, N] generated speech tokens, -1 past `length`
    length: jax.Array  # int32 [B]
    steps: jax.Array  # int32 [B] decoding steps (model forwards after prefill) of the row
    hit_max: jax.Array  # bool [B] stopped by the length cap, not by EOS
    num_forwards: jax.Array  # int32 [] loop iterations of the batch (forwards after prefill)


def speech_input(prompt: jax.Array, prompt_len: jax.Array, cfg: LMConfig) -> jax.Array:
    """[BOS, prompt tokens, PAD...]: int32 [B, P + 1]."""
    b, p = prompt.shape
    x = jnp.concatenate([jnp.full((b, 1), cfg.bos, jnp.int32), prompt.astype(jnp.int32)], 1)
    return jnp.where(jnp.arange(p + 1)[None] <= prompt_len[:, None], x, cfg.pad)


def prefill(model: TTSLM, params, batch: PromptBatch, speech_slots: int
            ) -> tuple[jax.Array, KVCache]:  # fmt: skip
    """Fills a cache with text + BOS + prompt; returns (last hidden [B, D], cache)."""
    b, x = batch.text.shape
    cache = model.apply({"params": params}, b, x, speech_slots, method="init_cache")
    speech = speech_input(batch.prompt, batch.prompt_len, model.cfg)
    h, cache = model.apply({"params": params}, batch.text, batch.text_len, speech,
                           batch.prompt_len + 1, cache, method="prefill")  # fmt: skip
    last = jnp.take_along_axis(h, batch.prompt_len[:, None, None], axis=1)[:, 0]  # [B, D]
    return last, cache


def write_tokens(buf: jax.Array, new: jax.Array, start: jax.Array, active: jax.Array) -> jax.Array:
    """buf [B, N] with new [B, C] written at start[b] for rows where `active`."""

    def one(b, n, s):
        return jax.lax.dynamic_update_slice_in_dim(b, n, s, axis=0)

    written = jax.vmap(one)(buf, new.astype(buf.dtype), start)
    return jnp.where(active[:, None], written, buf)


def first_eos(tokens: jax.Array, eos: int) -> tuple[jax.Array, jax.Array]:
    """tokens [B, C] -> (index of the first EOS or C, bool any EOS) per row."""
    is_eos = tokens == eos
    has = is_eos.any(axis=1)
    return jnp.where(has, jnp.argmax(is_eos, axis=1), tokens.shape[1]).astype(jnp.int32), has

"""Decoder-only TTS language model with multi-token prediction heads (FAR / CAR / DCAR backbone).

Sequence (METHODS.md section 0): `[text prompt + target text] [BOS] [speech prompt] [speech]`.
It is held as two padded segments, so rows of different lengths never need re-packing:
  text   int32 [B, Lx]  symbol ids, valid where index < text_len (0 = PAD)
  speech int32 [B, Ly]  [BOS, speech prompt tokens, target tokens], valid where index < speech_len
Slot s of the concatenated sequence is text position s (s < Lx) or speech position s - Lx.
RoPE positions are per-row *logical* positions (text i -> i, speech j -> text_len + j), so the
padding between the segments is invisible: a row gives the same outputs in any batch
(batch-N == batch-1). Attention is a prefix-LM mask (`prefix_lm_mask`): text queries see every
valid text key (bidirectional), speech queries see all valid text keys and the speech keys at or
before them (causal).

Vocabularies: speech inputs `K_tok + 3` ids (tokens 0..K_tok-1, EOS = K_tok, BOS = K_tok + 1,
PAD = K_tok + 2); outputs `K_tok + 1` (tokens + EOS). Embedding tables and output layers are
padded to a multiple of `vocab_multiple` (128) rows/columns so the vocab axis shards evenly
over `tensor`; padded rows are never indexed and padded logits are sliced off in `heads`.

Heads (the CAR paper): the base head is a linear layer predicting y_{t+1} from h_t; each of the
K-1 additional heads is `mtp_blocks` residual blocks `h <- h + SiLU(W h + b)` then a bias-free
linear layer, predicting y_{t+k}. `apply(..., method='heads')` maps hidden states [.., D] to
logits [.., K, V].

Decoding API (used by `jaxtts.decode`): `prefill` runs text + BOS + speech prompt in one forward
and fills a fixed-size `KVCache`; `extend` appends C tokens per row at the row's own offset.
`KVCache.speech_len` is per row, so a row can be rolled back (speculative decoding) by
lowering it: entries past it are masked and later overwritten.

Axis letters: B batch, T speech positions, X text positions, S cache slots, D width, K heads,
V output vocabulary.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError
from jaxtts.models import axes
from jaxtts.models.layers import Dense, LayerCache, TransformerStack, param_with_axes


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """Static model hyper-parameters (from `config.model`)."""

    num_text_symbols: int
    num_speech_tokens: int  # K_tok: tokenizer vocabulary (without EOS/BOS/PAD)
    d_model: int = 256
    num_layers: int = 6
    num_heads: int = 4
    head_dim: int = 64
    d_ff: int = 1024
    num_mtp_heads: int = 4  # K: base head + K-1 additional heads
    mtp_blocks: int = 4
    mlp: str = "swiglu"
    dropout: float = 0.0
    dtype: str = "float32"
    rope_theta: float = 10_000.0
    lora_rank: int = 0
    lora_alpha: float = 0.0
    vocab_multiple: int = 128  # tables / output layers padded so the vocab axis shards evenly

    @property
    def eos(self) -> int:
        return self.num_speech_tokens

    @property
    def bos(self) -> int:
        return self.num_speech_tokens + 1

    @property
    def pad(self) -> int:
        return self.num_speech_tokens + 2

    @property
    def out_vocab(self) -> int:
        return self.num_speech_tokens + 1

    def padded(self, n: int) -> int:
        m = max(1, self.vocab_multiple)
        return -(-n // m) * m

    @classmethod
    def from_config(cls, model_cfg) -> LMConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in dict(model_cfg).items() if k in fields}
        for key in ("num_text_symbols", "num_speech_tokens"):
            if int(d.get(key, -1)) < 1:
                raise ConfigError(f"model.{key}={d.get(key)}: expected a positive size (filled "
                                  "from the data by the trainer)")  # fmt: skip
        if d.get("num_mtp_heads", 1) < 1:
            raise ConfigError(f"model.num_mtp_heads={d['num_mtp_heads']}: expected >= 1")
        return cls(**d)


@flax.struct.dataclass
class KVCache:
    """Per-layer key/value buffers plus the per-row lengths that say which slots are valid.

    layers[l].k / .v [B, X + S, N, H]: slots 0..X-1 hold the text (valid < text_len), slots
    X + j speech position j (valid j < speech_len).
    """

    layers: tuple[LayerCache, ...]
    text_len: jax.Array  # int32 [B]
    speech_len: jax.Array  # int32 [B] valid speech slots (BOS + prompt + generated)
    text_slots: int = flax.struct.field(pytree_node=False)

    @property
    def num_slots(self) -> int:
        return self.layers[0].k.shape[1]

    @property
    def speech_slots(self) -> int:
        return self.num_slots - self.text_slots

    def rollback(self, speech_len: jax.Array) -> KVCache:
        """Per-row rollback: keep only the first `speech_len[b]` speech slots of row b."""
        return self.replace(speech_len=jnp.minimum(self.speech_len, speech_len))

    def nbytes_per_token(self) -> int:
        """Bytes of K and V stored per sequence position (all layers)."""
        layer = self.layers[0]
        per = layer.k.shape[2] * layer.k.shape[3] * layer.k.dtype.itemsize
        return 2 * len(self.layers) * per


def prefix_lm_mask(q_speech: jax.Array, q_idx: jax.Array, k_speech: jax.Array, k_idx: jax.Array,
                   k_valid: jax.Array) -> jax.Array:  # fmt: skip
    """Visibility [B, T, S]: key valid and (key is text, or both speech and k_idx <= q_idx).

    q_speech/q_idx [B, T], k_speech/k_idx/k_valid [B, S] (segment flag and index in segment).
    """
    causal = k_speech[:, None, :] & q_speech[:, :, None] & (k_idx[:, None, :] <= q_idx[:, :, None])
    return k_valid[:, None, :] & (~k_speech[:, None, :] | causal)


class MTPHead(nn.Module):
    """Additional head k >= 2: `blocks` x (h + SiLU(W h + b)), then a bias-free linear to V."""

    vocab: int
    blocks: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, h: jax.Array) -> jax.Array:  # [..., D] -> [..., V]
        d = h.shape[-1]
        for i in range(self.blocks):
            z = Dense(d, (axes.EMBED, None), use_bias=True, dtype=self.dtype, name=f"res_{i}",
                      kernel_init=nn.initializers.normal(0.02 / d**0.5))(h)  # fmt: skip
            h = h + jax.nn.silu(z.astype(jnp.float32))
        return Dense(self.vocab, (axes.EMBED, axes.VOCAB), dtype=self.dtype, name="out")(h)


class TTSLM(nn.Module):
    """The TTS LM. Methods: `__call__` (training forward), `prefill`, `extend`, `heads`,
    `init_cache`. See the module docstring for the sequence layout."""

    cfg: LMConfig

    def setup(self):
        c = self.cfg
        emb_init = nn.initializers.normal(1.0)
        self.text_embed = param_with_axes(self, "text_embed", emb_init,
                                          (c.padded(c.num_text_symbols), c.d_model),
                                          (axes.VOCAB, axes.EMBED))  # fmt: skip
        self.speech_embed = param_with_axes(self, "speech_embed", emb_init,
                                            (c.padded(c.num_speech_tokens + 3), c.d_model),
                                            (axes.VOCAB, axes.EMBED))  # fmt: skip
        self.stack = TransformerStack(c.num_layers, c.num_heads, c.head_dim, c.d_ff, c.mlp,
                                      c.dropout, jnp.dtype(c.dtype), c.rope_theta, c.lora_rank,
                                      c.lora_alpha)  # fmt: skip
        v = c.padded(c.out_vocab)
        self.base_head = Dense(v, (axes.EMBED, axes.VOCAB), use_bias=True,
                               dtype=jnp.dtype(c.dtype))  # fmt: skip
        self.mtp_heads = [MTPHead(v, c.mtp_blocks, jnp.dtype(c.dtype), name=f"head_{k}")
                          for k in range(2, c.num_mtp_heads + 1)]  # fmt: skip

    # -- pieces
    def _embed(self, text: jax.Array, speech: jax.Array) -> jax.Array:
        t = jnp.take(self.text_embed, text, axis=0)  # [B, X, D]
        s = jnp.take(self.speech_embed, speech, axis=0)  # [B, T, D]
        return jnp.concatenate([t, s], axis=1)  # [B, X+T, D]

    def heads(self, hidden: jax.Array) -> jax.Array:
        """hidden [..., D] -> logits float32 [..., K, V] (head k predicts k tokens ahead)."""
        outs = [self.base_head(hidden)] + [h(hidden) for h in self.mtp_heads]
        return jnp.stack(outs, axis=-2)[..., : self.cfg.out_vocab].astype(jnp.float32)

    @staticmethod
    def _segments(text_len, speech_len, x: int, t: int):
        """Per-slot (is_speech, index, valid, position) for [text X | speech T] slots."""
        b = text_len.shape[0]
        idx = jnp.concatenate([jnp.arange(x), jnp.arange(t)])[None].repeat(b, 0)  # [B, X+T]
        is_speech = jnp.concatenate([jnp.zeros(x, bool), jnp.ones(t, bool)])[None].repeat(b, 0)
        valid = jnp.where(is_speech, idx < speech_len[:, None], idx < text_len[:, None])
        pos = jnp.where(is_speech, text_len[:, None] + idx, idx)  # [B, X+T]
        return is_speech, idx, valid, pos

    # -- training forward
    def __call__(
        self, text: jax.Array, text_len: jax.Array, speech: jax.Array, speech_len: jax.Array,
        *, train: bool = False,
    ) -> tuple[jax.Array, jax.Array]:
        """text [B, X], speech [B, T] ([BOS, tokens...]) -> (logits [B, T, K, V], hidden [B, T, D]).

        Position t of `speech` yields hidden h_t and logits whose head k predicts the speech
        token k positions after it.
        """
        x_len, t_len = text.shape[1], speech.shape[1]
        is_speech, idx, valid, pos = self._segments(text_len, speech_len, x_len, t_len)
        mask = prefix_lm_mask(is_speech, idx, is_speech, idx, valid)  # [B, X+T, X+T]
        h, _ = self.stack(self._embed(text, speech), pos, mask, train=train)
        hidden = h[:, x_len:]  # [B, T, D]
        return self.heads(hidden), hidden

    # -- decoding
    def init_cache(self, batch: int, text_slots: int, speech_slots: int,
                   dtype: Any = None) -> KVCache:  # fmt: skip
        c = self.cfg
        shape = (batch, text_slots + speech_slots, c.num_heads, c.head_dim)
        dt = jnp.dtype(dtype or c.dtype)
        layers = tuple(LayerCache(jnp.zeros(shape, dt), jnp.zeros(shape, dt))
                       for _ in range(c.num_layers))  # fmt: skip
        zeros = jnp.zeros((batch,), jnp.int32)
        return KVCache(layers, zeros, zeros, text_slots)

    def prefill(self, text: jax.Array, text_len: jax.Array, speech: jax.Array,
                speech_len: jax.Array, cache: KVCache) -> tuple[jax.Array, KVCache]:  # fmt: skip
        """One forward over text [B, X] + speech [B, P] ([BOS, prompt]); X must equal
        cache.text_slots. Returns (hidden [B, P, D], cache with text_len / speech_len set)."""
        x_len, p_len = text.shape[1], speech.shape[1]
        if x_len != cache.text_slots:
            raise ValueError(f"prefill: text width {x_len} != cache.text_slots {cache.text_slots}")
        is_speech, idx, valid, pos = self._segments(text_len, speech_len, x_len, p_len)
        n = cache.num_slots
        k_speech = jnp.arange(n)[None] >= x_len  # [1, S]
        k_idx = jnp.where(k_speech, jnp.arange(n)[None] - x_len, jnp.arange(n)[None])
        k_valid = jnp.where(k_speech, k_idx < speech_len[:, None], k_idx < text_len[:, None])
        b = text.shape[0]
        mask = prefix_lm_mask(is_speech, idx, k_speech.repeat(b, 0), k_idx.repeat(b, 0), k_valid)
        start = jnp.zeros((b,), jnp.int32)
        h, layers = self.stack(self._embed(text, speech), pos, mask, cache.layers, start)
        cache = KVCache(layers, text_len.astype(jnp.int32), speech_len.astype(jnp.int32), x_len)
        return h[:, x_len:], cache

    def extend(self, tokens: jax.Array, cache: KVCache) -> tuple[jax.Array, KVCache]:
        """Append tokens [B, C] at each row's speech_len; -> (hidden [B, C, D], cache)."""
        b, c = tokens.shape
        n, x_len = cache.num_slots, cache.text_slots
        q_idx = cache.speech_len[:, None] + jnp.arange(c)[None]  # [B, C]
        pos = cache.text_len[:, None] + q_idx
        k_speech = jnp.arange(n)[None] >= x_len
        k_idx = jnp.where(k_speech, jnp.arange(n)[None] - x_len, jnp.arange(n)[None])
        new_len = cache.speech_len + c
        k_valid = jnp.where(k_speech, k_idx < new_len[:, None], k_idx < cache.text_len[:, None])
        mask = prefix_lm_mask(jnp.ones((b, c), bool), q_idx, k_speech.repeat(b, 0),
                              k_idx.repeat(b, 0), k_valid)  # [B, C, S]  # fmt: skip
        emb = jnp.take(self.speech_embed, tokens, axis=0)  # [B, C, D]
        h, layers = self.stack(emb, pos, mask, cache.layers, x_len + cache.speech_len)
        return h, cache.replace(layers=layers, speech_len=new_len.astype(jnp.int32))

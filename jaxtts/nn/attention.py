"""Multi-head attention over an explicit key/value buffer.

Without a cache the keys are the block itself (training); with a `LayerCache` the block's
keys/values are first written into the buffer at a per-row slot offset (`write_rows`), then the
queries attend over the whole buffer. The visibility mask is an argument (`jaxtts.nn.masks`):
layers never decide causality themselves.

Axis letters: B batch, T query length, S key length, D width, N heads, H head dim.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.nn import axes
from jaxtts.nn.layers import Dense, apply_rope

Dtype = Any
NEG_INF = -1e30


@flax.struct.dataclass
class LayerCache:
    """Key/value buffer of one attention layer: k, v [B, S, N, H]."""

    k: jax.Array
    v: jax.Array


def write_rows(buf: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
    """buf [B, S, ...] with new [B, C, ...] written at slots start[b] .. start[b] + C - 1.

    Used for KV buffers and for decoded-token buffers alike.
    """

    def one(b, n, s):
        return jax.lax.dynamic_update_slice_in_dim(b, n.astype(b.dtype), s, axis=0)

    return jax.vmap(one)(buf, new, start)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax attention. q [B, T, N, H], k/v [B, S, N, H], mask bool [B, T, S] -> [B, T, N, H].

    Rows whose mask is all False (padding queries) return zeros, never NaN.
    """
    h = q.shape[-1]
    logits = jnp.einsum("BTNH,BSNH->BNTS", q, k).astype(jnp.float32) / jnp.sqrt(h)
    logits = jnp.where(mask[:, None], logits, NEG_INF)
    probs = jax.nn.softmax(logits, axis=-1)
    probs = jnp.where(mask[:, None], probs, 0.0)
    return jnp.einsum("BNTS,BSNH->BTNH", probs.astype(v.dtype), v)


class Attention(nn.Module):
    num_heads: int
    head_dim: int
    dtype: Dtype = jnp.float32
    rope_theta: float = 10_000.0
    lora_rank: int = 0
    lora_alpha: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, positions: jax.Array, mask: jax.Array,
                 cache: LayerCache | None = None, write_start: jax.Array | None = None
                 ) -> tuple[jax.Array, LayerCache | None]:  # fmt: skip
        """x [B, T, D], positions [B, T] (RoPE; ignored when rope_theta == 0), mask bool
        [B, T, S].

        cache None: keys are the T positions of x (S == T). Else the new keys/values are
        written into the cache at slots write_start[b] .. + T - 1 and attention runs over the
        whole buffer (S = cache length); returns the updated cache.
        """
        d = x.shape[-1]
        nh = (self.num_heads, self.head_dim)
        kw = dict(dtype=self.dtype, lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        names = (axes.EMBED, axes.HEADS, axes.KV)
        q = Dense(nh, names, name="q", **kw)(x)  # [B, T, N, H]
        k = Dense(nh, names, name="k", **kw)(x)
        v = Dense(nh, names, name="v", **kw)(x)
        if self.rope_theta:  # 0 = no rotary embedding (e.g. the conformer ASR)
            q = apply_rope(q, positions, self.rope_theta)
            k = apply_rope(k, positions, self.rope_theta)
        if cache is not None:
            cache = LayerCache(k=write_rows(cache.k, k, write_start),
                               v=write_rows(cache.v, v, write_start))  # fmt: skip
            k, v = cache.k.astype(q.dtype), cache.v.astype(q.dtype)
        out = attend(q, k, v, mask)  # [B, T, N, H]
        out = Dense(d, (axes.HEADS, axes.KV, axes.EMBED), in_axes=2, name="o", **kw)(out)
        return out, cache

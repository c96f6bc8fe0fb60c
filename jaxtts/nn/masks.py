"""Every visibility mask in one place. A mask is bool, True = the query may see the key.

Axis letters: B batch, T query positions, S key positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def length_mask(lengths: jax.Array, t: int) -> jax.Array:
    """[B] lengths -> bool [B, t] (True on valid frames)."""
    return jnp.arange(t)[None, :] < lengths[:, None]


def padding_mask(valid: jax.Array) -> jax.Array:
    """Bidirectional attention among valid positions: valid [B, S] -> [B, S, S] (a query sees
    every valid key; padded queries see the valid keys too and are ignored downstream)."""
    return jnp.broadcast_to(valid[:, None, :], valid.shape + valid.shape[-1:])


def prefix_lm_mask(
    q_speech: jax.Array, q_idx: jax.Array, k_speech: jax.Array, k_idx: jax.Array, k_valid: jax.Array
) -> jax.Array:
    """Prefix-LM visibility [B, T, S] over two segments (text, then speech): the key is valid
    and (the key is text, or both are speech and k_idx <= q_idx).

    q_speech/q_idx [B, T], k_speech/k_idx/k_valid [B, S] (segment flag and index in segment).
    """
    causal = k_speech[:, None, :] & q_speech[:, :, None] & (k_idx[:, None, :] <= q_idx[:, :, None])
    return k_valid[:, None, :] & (~k_speech[:, None, :] | causal)

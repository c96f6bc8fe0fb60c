"""The training masks of PALLE's two stages (and the MaskGCT-style NAR baseline), on device.

All three act on rows of `length` valid speech positions (prompt + target tokens of a
loader row, T = length) padded to a common width; positions < floor(0.3 T) always stay visible.

- stage one (PAR): a mask start s ~ U[floor(0.3T), T - floor(0.1T) - 1]; every position >= s
  is masked; the loss covers only the leftmost span [s, s + floor(0.1T)) of the masked part.
- stage two (NAR refine): each position >= floor(0.3T) masked i.i.d. with probability p
  (default 0.1); the loss covers the masked positions.
- NAR (MaskGCT stage one): a mask ratio r = cos(pi/2 u), u ~ U(0, 1]; each position >= floor(0.3T)
  masked with probability r; the loss covers the masked positions.

Each returns (masked, loss_mask), bool [B, T]. A row too short for the rule (T < 10 gives an
empty PAR span) has an all-False loss mask.

Axis letters: B batch, T positions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

VISIBLE = 0.3  # share of each row's positions that is always visible
SPAN = 0.1  # PAR training span (share of T)


def visible_len(length: jax.Array) -> jax.Array:
    """floor(0.3 T) [B] int32 (exact for integer T: 3T // 10)."""
    return (3 * length) // 10


def span_len(length: jax.Array) -> jax.Array:
    """floor(0.1 T) [B] int32."""
    return length // 10


def par_start_bounds(length: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The inclusive range [floor(0.3T), T - floor(0.1T) - 1] of the stage-one mask start."""
    return visible_len(length), length - span_len(length) - 1


def par_masks(start: jax.Array, length: jax.Array, t: int) -> tuple[jax.Array, jax.Array]:
    """Stage one for a given mask start [B]: masked = [start, T), loss on [start, start + k)."""
    idx = jnp.arange(t)[None]  # [1, T]
    valid = idx < length[:, None]
    masked = valid & (idx >= start[:, None])
    k = span_len(length)
    return masked, masked & (idx < (start + k)[:, None])


def sample_par_start(rng: jax.Array, length: jax.Array) -> jax.Array:
    """s ~ U[floor(0.3T), T - floor(0.1T) - 1] per row (int32 [B])."""
    lo, hi = par_start_bounds(length)
    u = jax.random.uniform(rng, length.shape)
    return jnp.minimum(
        lo + jnp.floor(u * jnp.maximum(hi - lo + 1, 1)).astype(jnp.int32), jnp.maximum(hi, lo)
    )


def refine_masks(
    rng: jax.Array, length: jax.Array, t: int, p: float
) -> tuple[jax.Array, jax.Array]:
    """Stage two: i.i.d. masks with probability p beyond the visible 30 %."""
    idx = jnp.arange(t)[None]
    region = (idx < length[:, None]) & (idx >= visible_len(length)[:, None])
    masked = region & jax.random.bernoulli(rng, p, (length.shape[0], t))
    return masked, masked


def nar_masks(rng: jax.Array, length: jax.Array, t: int) -> tuple[jax.Array, jax.Array]:
    """MaskGCT-style: a cosine-schedule ratio per row, i.i.d. masks beyond the visible 30 %."""
    k1, k2 = jax.random.split(rng)
    u = 1.0 - jax.random.uniform(k1, (length.shape[0], 1))  # (0, 1]
    ratio = jnp.cos(0.5 * jnp.pi * (1.0 - u))  # (0, 1], cos schedule of the "time" 1 - u
    idx = jnp.arange(t)[None]
    region = (idx < length[:, None]) & (idx >= visible_len(length)[:, None])
    masked = region & (jax.random.uniform(k2, (length.shape[0], t)) < ratio)
    return masked, masked


def stage_masks(
    stage: str, rng: jax.Array, length: jax.Array, t: int, refine_p: float = 0.1
) -> tuple[jax.Array, jax.Array]:
    if stage == "par":
        return par_masks(sample_par_start(rng, length), length, t)
    if stage == "refine":
        return refine_masks(rng, length, t, refine_p)
    if stage == "nar":
        return nar_masks(rng, length, t)
    raise ValueError(f"palle.stage={stage!r}: expected 'par', 'refine' or 'nar'")

"""Order-agnostic training masks (the ARDM ELBO) and the decoding orders of MDM.

Training (`elbo_masks`): per row of T_b frames, a step t ~ U{1..T_b} and a uniformly random
order; the first t - 1 frames of the order are visible, the other T_b - t + 1 masked, and the
row's loss is `T_b / (T_b - t + 1) * sum over masked frames of the NLL` (every masked term in
one forward: an unbiased estimate of the order-agnostic log-likelihood bound).

Decoding orders are given as a per-frame *rank* (the step at which the frame is decoded, each
row a permutation of 0..T_b-1; padded frames rank T_max and are never decoded):
  `random`        a uniformly random permutation;
  `l2r` / `r2l`   left to right / right to left;
  `swap:<lam>`    l2r with round(lam * N) random transpositions, N = round(T/2 log T);
Confidence-driven orders (`top1`, `top1*`, `topk:<k>`, `duration`) pick frames while decoding
(`select_confident`, `duration_segments`) and live in the decoding loop.

Axis letters: B batch, T frames.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError

STATIC_ORDERS = ("random", "l2r", "r2l", "swap")
DYNAMIC_ORDERS = ("top1", "top1*", "topk", "duration")


@dataclasses.dataclass(frozen=True)
class MDMOrder:
    """The `mdm:<order>` strategy (`jaxtts.decode.registry`): MDM decoding in that order."""

    order: str

    @property
    def name(self) -> str:
        return f"mdm:{self.order}"


def strategy(name: str, arg: str | None) -> MDMOrder:
    """Registry factory: 'mdm:<order>' -> MDMOrder (the order checked by `parse_order`)."""
    if not arg:
        raise ConfigError(
            f"--strategy {name!r}: expected mdm:<order>, order one of "
            f"{list(STATIC_ORDERS + DYNAMIC_ORDERS)} (swap:<lambda>, topk:<k>)"
        )
    parse_order(arg)
    return MDMOrder(arg)


def parse_order(spec: str) -> tuple[str, float]:
    """'swap:0.01' -> ('swap', 0.01); 'topk:4' -> ('topk', 4); one-line errors."""
    name, _, arg = str(spec).partition(":")
    if name not in STATIC_ORDERS + DYNAMIC_ORDERS:
        raise ConfigError(
            f"decoding order {spec!r}: expected one of "
            f"{list(STATIC_ORDERS + DYNAMIC_ORDERS)} (swap:<lambda>, topk:<k>)"
        )
    if name == "swap":
        try:
            lam = float(arg)
        except ValueError:
            raise ConfigError(f"decoding order {spec!r}: expected swap:<lambda>") from None
        if not 0.0 <= lam <= 1.0:
            raise ConfigError(f"decoding order {spec!r}: lambda must be in [0, 1]")
        return name, lam
    if name == "topk":
        try:
            k = int(arg)
        except ValueError:
            raise ConfigError(f"decoding order {spec!r}: expected topk:<k>") from None
        if k < 1:
            raise ConfigError(f"decoding order {spec!r}: k must be >= 1")
        return name, float(k)
    if arg:
        raise ConfigError(f"decoding order {spec!r}: {name!r} takes no argument")
    return name, 0.0


def _random_ranks(key: jax.Array, lengths: jax.Array, t: int) -> jax.Array:
    """A uniformly random permutation of 0..T_b-1 per row; padding ranks t."""
    idx = jnp.arange(t)[None]
    valid = idx < lengths[:, None]
    u = jnp.where(valid, jax.random.uniform(key, (lengths.shape[0], t)), 2.0)
    ranks = jnp.argsort(jnp.argsort(u, axis=1), axis=1)  # valid frames take 0..T_b-1
    return jnp.where(valid, ranks, t).astype(jnp.int32)


def swap_count(length: int, lam: float) -> int:
    """round(lam * N), N = round(T/2 * ln T): the transpositions of `swap:<lam>`."""
    n = round(0.5 * length * math.log(max(length, 1)))
    return int(round(lam * n))


def static_ranks(name: str, arg: float, key: jax.Array, lengths: jax.Array, t: int) -> jax.Array:
    """int32 [B, T] decoding step of every frame for `random`, `l2r`, `r2l`, `swap`."""
    idx = jnp.broadcast_to(jnp.arange(t)[None], (lengths.shape[0], t))
    valid = idx < lengths[:, None]
    if name == "random":
        return _random_ranks(key, lengths, t)
    if name == "l2r":
        return jnp.where(valid, idx, t).astype(jnp.int32)
    if name == "r2l":
        return jnp.where(valid, lengths[:, None] - 1 - idx, t).astype(jnp.int32)
    if name == "swap":
        # l2r, then round(lam * N_b) random transpositions among the row's valid frames
        n_b = jnp.round(arg * jnp.round(0.5 * lengths * jnp.log(jnp.maximum(lengths, 1))))
        n_max = swap_count(t, arg)
        ranks = jnp.where(valid, idx, t).astype(jnp.int32)
        if n_max == 0:
            return ranks
        ks = jax.random.split(key, n_max)
        rows = jnp.arange(lengths.shape[0])

        def body(r, i):
            a, b = jax.random.randint(ks[i], (2, lengths.shape[0]), 0, jnp.maximum(lengths, 1))
            on = i < n_b
            ra, rb = r[rows, a], r[rows, b]
            r = r.at[rows, a].set(jnp.where(on, rb, ra))
            r = r.at[rows, b].set(jnp.where(on, ra, r[rows, b]))
            return r, None

        ranks, _ = jax.lax.scan(body, ranks, jnp.arange(n_max))
        return ranks
    raise ConfigError(f"decoding order {name!r} is not a static order")


def elbo_masks(key: jax.Array, lengths: jax.Array, t: int) -> tuple[jax.Array, jax.Array]:
    """(masked bool [B, T], weight float [B] = T_b / (T_b - t_b + 1)) for a step
    t_b ~ U{1..T_b} and a random order per row (0 weight, nothing masked for empty rows)."""
    k1, k2 = jax.random.split(key)
    ranks = _random_ranks(k1, lengths, t)
    step = 1 + jnp.floor(jax.random.uniform(k2, lengths.shape) * lengths).astype(jnp.int32)
    step = jnp.minimum(step, jnp.maximum(lengths, 1))  # t in 1..T_b
    masked = (ranks >= (step - 1)[:, None]) & (jnp.arange(t)[None] < lengths[:, None])
    weight = jnp.where(lengths > 0, lengths / jnp.maximum(lengths - step + 1, 1), 0.0)
    return masked, weight.astype(jnp.float32)


def select_confident(conf: jax.Array, undecoded: jax.Array, k: jax.Array) -> jax.Array:
    """bool [B, T]: the k[b] most confident undecoded frames of each row (ties: leftmost)."""
    key = jnp.where(undecoded, -conf, jnp.inf)
    rank = jnp.argsort(jnp.argsort(key, axis=1, stable=True), axis=1, stable=True)
    return undecoded & (rank < k[:, None])


def duration_segments(durations: jax.Array, t: int) -> jax.Array:
    """Phone durations int [B, N] -> the segment (phone index) of every frame int32 [B, T]
    (N for frames past the last phone)."""
    ends = jnp.cumsum(durations, axis=1)  # [B, N]
    frames = jnp.arange(t)[None, :, None]  # [1, T, 1]
    return jnp.sum(frames >= ends[:, None, :], axis=-1).astype(jnp.int32)

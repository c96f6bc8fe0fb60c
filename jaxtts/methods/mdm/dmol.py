"""Discretised mixture of logistics over Q quantisation levels (PixelCNN++-style), the MDM
decoder's output distribution for every (frame, mel bin).

Levels v = 0..Q-1 sit at centres c_v = -1 + 2 v / (Q - 1) of bins of half-width h = 1 / (Q - 1)
on [-1, 1] (`LinearMelQuantizer` levels mapped there). A component k with mean m_k and
log-scale s_k gives level v the logistic mass between its bin edges, the outermost levels
taking the tails, so the Q probabilities of a component sum to exactly 1:

    P_k(v) = sigma((c_v + h - m_k) / e^{s_k}) - sigma((c_v - h - m_k) / e^{s_k})
    P_k(0) = sigma((c_0 + h - m_k) / e^{s_k}),   P_k(Q-1) = 1 - sigma((c_{Q-1} - h - m_k) / e^{s_k})
    log p(v) = logsumexp_k (log pi_k + log P_k(v))

`params` [..., 3K] holds (mixture logits, means, log-scales). Sampling (`sample`): the
component by Gumbel-max on logits + tau_1 * Gumbel noise, the value m_k + tau_2 e^{s_k}
logit(u), clipped to [-1, 1] and rounded to the nearest level.

Axis letters: K components, Q levels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

MIN_LOG_SCALE = -7.0


def split(params: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """[..., 3K] -> (logits, means, log_scales), each [..., K] (log-scales clipped below)."""
    k = params.shape[-1] // 3
    logits, means, log_s = params[..., :k], params[..., k : 2 * k], params[..., 2 * k :]
    return logits, means, jnp.maximum(log_s, MIN_LOG_SCALE)


def _log_mass(v: jax.Array, means: jax.Array, log_s: jax.Array, q: int) -> jax.Array:
    """log P_k(v) of integer levels v [...] under components means, log_s [..., K] (v
    broadcast against their leading axes) -> [..., K]."""
    h = 1.0 / (q - 1)
    centred = (-1.0 + 2.0 * v.astype(jnp.float32) / (q - 1))[..., None] - means
    inv_s = jnp.exp(-log_s)
    plus, minus = (centred + h) * inv_s, (centred - h) * inv_s
    log_cdf_plus = jax.nn.log_sigmoid(plus)  # log sigma(plus): the lowest level's mass
    log_sf_minus = -jax.nn.softplus(minus)  # log (1 - sigma(minus)): the highest level's
    # interior levels: log(sigma(plus) - sigma(minus)), computed as
    # log sigma(plus) + log(1 - exp(log sigma(minus) - log sigma(plus)))
    diff = jax.nn.log_sigmoid(minus) - log_cdf_plus
    log_mid = log_cdf_plus + jnp.log(-jnp.expm1(jnp.minimum(diff, -1e-12)))
    v = v[..., None]
    return jnp.where(v == 0, log_cdf_plus, jnp.where(v == q - 1, log_sf_minus, log_mid))


def level_log_probs(params: jax.Array, levels: int) -> jax.Array:
    """log p(v) for every level: params [..., 3K] -> float32 [..., Q]."""
    logits, means, log_s = split(params.astype(jnp.float32))
    v = jnp.arange(levels)  # [Q]
    comp = _log_mass(v, means[..., None, :], log_s[..., None, :], levels)  # [..., Q, K]
    log_pi = jax.nn.log_softmax(logits, axis=-1)[..., None, :]  # [..., 1, K]
    return jax.nn.logsumexp(log_pi + comp, axis=-1)  # [..., Q]


def nll(params: jax.Array, target: jax.Array, levels: int) -> jax.Array:
    """-log p(target) for integer levels target [...] -> float32 [...]. Only the target's bin
    is evaluated (O(K) per value, not O(Q K): training memory does not grow with Q)."""
    logits, means, log_s = split(params.astype(jnp.float32))
    comp = _log_mass(target, means, log_s, levels)  # [..., K]
    return -jax.nn.logsumexp(jax.nn.log_softmax(logits, axis=-1) + comp, axis=-1)


def sample(
    key: jax.Array, params: jax.Array, levels: int, tau1: float = 1.0, tau2: float = 1.0
) -> jax.Array:
    """One level per distribution: params [..., 3K] -> int32 [...]."""
    logits, means, log_s = split(params.astype(jnp.float32))
    k1, k2 = jax.random.split(key)
    g = jax.random.gumbel(k1, logits.shape)
    comp = jnp.argmax(logits + tau1 * g, axis=-1)  # [...]
    m = jnp.take_along_axis(means, comp[..., None], axis=-1)[..., 0]
    s = jnp.exp(jnp.take_along_axis(log_s, comp[..., None], axis=-1)[..., 0])
    u = jax.random.uniform(k2, m.shape, minval=1e-5, maxval=1.0 - 1e-5)
    x = jnp.clip(m + tau2 * s * (jnp.log(u) - jnp.log1p(-u)), -1.0, 1.0)
    return jnp.round((x + 1.0) / 2.0 * (levels - 1)).astype(jnp.int32)


def argmax_level(params: jax.Array, levels: int) -> jax.Array:
    """The most probable level (greedy values; `mode`'s level)."""
    return mode(params, levels)[1]


def mode(params: jax.Array, levels: int) -> tuple[jax.Array, jax.Array]:
    """(max_v log p(v) float32 [...], its level int32 [...]): what decoding needs every step
    (the confidence of `top1` / `topk` / `duration` and the greedy value), computed in
    probability space from each component's CDF at the Q + 1 bin edges,
    p(v) = sum_k pi_k (F_k(e_{v+1}) - F_k(e_v)), with one log per distribution: the same
    numbers as `level_log_probs`' max / argmax (tested), 8.5x faster on a CPU core for
    [1, 384, 80] mixtures (0.19 s vs 1.61 s: no log-masses for every level; RESULTS 16b)."""
    logits, means, log_s = split(params.astype(jnp.float32))
    q = levels
    edges = -1.0 + (2.0 * jnp.arange(q + 1) - 1.0) / (q - 1)  # [Q+1] e_v = c_v - h
    z = (edges[:, None] - means[..., None, :]) * jnp.exp(-log_s)[..., None, :]  # [..., Q+1, K]
    cdf = jax.nn.sigmoid(z)
    cdf = cdf.at[..., 0, :].set(0.0).at[..., q, :].set(1.0)  # the outer levels take the tails
    mass = cdf[..., 1:, :] - cdf[..., :-1, :]  # [..., Q, K]
    p = jnp.einsum("...QK,...K->...Q", mass, jax.nn.softmax(logits, axis=-1))
    best = jnp.argmax(p, axis=-1).astype(jnp.int32)  # [...]
    top = jnp.take_along_axis(p, best[..., None], axis=-1)[..., 0]
    return jnp.log(jnp.maximum(top, 1e-30)), best

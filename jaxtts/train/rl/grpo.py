r"""GRPO objective: group-relative advantages and the clipped surrogate loss (pure JAX, float32).

Notation: P prompts, G rollouts per prompt, N = P * G rollouts, T actions per rollout (padded;
`mask` marks the real ones). An "action" is one policy decision, e.g. one chunk size chosen by a
DCAR chunk-size policy, and `logp[i, t]` is its log-probability under the current policy.

Group-relative advantage (one scalar per rollout, broadcast over its actions; `grpo_loss` also
takes one advantage per action [N, T], e.g. an outcome advantage plus a per-decision process
advantage, `process_advantages`):

    A_{p,g} = (r_{p,g} - mean_g r_{p,:}) / (std_g r_{p,:} + eps)      (population std, ddof=0)

with `std_normalize=False` the division is skipped (Dr. GRPO). A group whose rewards are all
equal carries no learning signal and gets A = 0 exactly.

Clipped surrogate per valid action (i, t), with the old log-probs held constant:

    rho_{i,t} = exp(logp_{i,t} - stop_gradient(logp_old_{i,t}))
    s_{i,t}   = min(rho_{i,t} A_i, clip(rho_{i,t}, 1 - clip_eps, 1 + clip_eps) A_i)

optional KL penalty to a frozen reference policy (unbiased "k3" estimator, always >= 0):

    d_{i,t}   = logp_ref_{i,t} - logp_{i,t}
    kl_{i,t}  = exp(d_{i,t}) - d_{i,t} - 1
    o_{i,t}   = s_{i,t} - kl_beta * kl_{i,t}

aggregation over the valid actions (m_{i,t} = mask):

    token_level=True  (DAPO):        J = sum_{i,t} m o / sum_{i,t} m
    token_level=False (GRPO paper):  J = mean_{i: |o_i|>0} ( sum_t m_{i,t} o_{i,t} / |o_i| )

and the loss is -J. In the unclipped region dL/dlogp_{i,t} = -A_i rho_{i,t} / M (M = number of
valid actions, token level); an action whose ratio is clipped in the direction of its advantage
(A > 0 and rho > 1 + eps, or A < 0 and rho < 1 - eps) gets zero gradient.
Padding is safe: masked entries may hold anything finite or -inf (no NaN reaches the loss or
the gradients) and an all-empty mask gives loss 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxtts.errors import ConfigError


def group_advantages(
    rewards: jax.Array, eps: float = 1e-6, std_normalize: bool = True
) -> jax.Array:
    """rewards [P, G] -> advantages float32 [P, G], normalised within each group of G rollouts.

    `(r - mean) / (std + eps)` (population std), or `r - mean` with `std_normalize=False`.
    Groups with all-equal rewards give exactly 0 (never NaN, whatever `eps`).
    """
    r = jnp.asarray(rewards, jnp.float32)  # [P, G]
    if r.ndim != 2:
        raise ConfigError(f"group_advantages: rewards shape {r.shape}, expected [P, G]")
    mean = jnp.mean(r, axis=-1, keepdims=True)  # [P, 1]
    centered = r - mean  # [P, G]
    flat = jnp.max(r, axis=-1, keepdims=True) == jnp.min(r, axis=-1, keepdims=True)  # [P, 1]
    if std_normalize:
        std = jnp.std(r, axis=-1, keepdims=True)  # [P, 1] (ddof=0)
        denom = jnp.where(flat, 1.0, std + eps)  # [P, 1]
        centered = centered / denom  # [P, G]
    return jnp.where(flat, 0.0, centered)  # [P, G]


def process_advantages(rewards: jax.Array, mask: jax.Array, eps: float = 1e-6) -> jax.Array:
    """Per-action (process) rewards [P, G, T] -> advantages float32 [P, G, T], normalised over
    the valid actions (`mask` [P, G, T]) of each group of G rollouts:

        A_{p,g,t} = (r_{p,g,t} - mean_p) / (std_p + eps)    (over the valid (g, t) of group p)

    DeepSeekMath's process supervision normalises the same way and sums the normalised rewards
    from t on (the return-to-go); this keeps only the action's own reward, for actions whose
    effect is local (a DCAR chunk size). Invalid actions and all-equal groups get exactly 0."""
    r = jnp.asarray(rewards, jnp.float32)  # [P, G, T]
    m = jnp.asarray(mask).astype(bool)  # [P, G, T]
    if r.ndim != 3 or m.shape != r.shape:
        raise ConfigError(
            f"process_advantages: rewards {r.shape}, mask {m.shape}: expected the same [P, G, T]"
        )
    n = jnp.maximum(jnp.sum(m, axis=(1, 2), keepdims=True), 1)  # [P, 1, 1]
    mean = jnp.sum(jnp.where(m, r, 0.0), axis=(1, 2), keepdims=True) / n  # [P, 1, 1]
    centered = jnp.where(m, r - mean, 0.0)  # [P, G, T]
    std = jnp.sqrt(jnp.sum(centered**2, axis=(1, 2), keepdims=True) / n)  # [P, 1, 1]
    hi = jnp.max(jnp.where(m, r, -jnp.inf), axis=(1, 2), keepdims=True)
    lo = jnp.min(jnp.where(m, r, jnp.inf), axis=(1, 2), keepdims=True)
    flat = ~(hi > lo)  # [P, 1, 1] all equal, or no valid action
    return jnp.where(flat | ~m, 0.0, centered / jnp.where(flat, 1.0, std + eps))


def grpo_loss(
    logp: jax.Array,
    logp_old: jax.Array,
    advantages: jax.Array,
    mask: jax.Array,
    *,
    clip_eps: float = 0.2,
    kl_beta: float = 0.0,
    logp_ref: jax.Array | None = None,
    token_level: bool = True,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped GRPO surrogate loss (see the module docstring for the equations).

    logp, logp_old, logp_ref: float [N, T] per-action log-probs (current, behaviour, reference);
    `logp_old` and `logp_ref` get no gradient. advantages: [N] one per rollout (broadcast over
    its actions) or [N, T] one per action. mask: bool or
    float [N, T] (1 = valid action). `clip_eps` and `token_level` are Python values (static
    under jit); `kl_beta` a Python float or a traced scalar (a warm-up schedule; then
    `logp_ref` is required).

    Returns (loss float32 scalar, metrics): 'clip_frac' (fraction of valid actions whose
    gradient is cut by the clip), 'ratio_mean', 'kl' (mean k3 KL; 0 when kl_beta == 0) and
    'adv_mean', all over valid actions only (0 when there are none).
    """
    if clip_eps < 0:
        raise ConfigError(f"grpo_loss: clip_eps={clip_eps}, expected >= 0")
    static_beta = isinstance(kl_beta, (int, float))  # else a traced schedule value (>= 0)
    if static_beta and kl_beta < 0:
        raise ConfigError(f"grpo_loss: kl_beta={kl_beta}, expected >= 0")
    if (not static_beta or kl_beta > 0) and logp_ref is None:
        raise ConfigError(f"grpo_loss: kl_beta={kl_beta} > 0 needs logp_ref [N, T], got None")
    logp = jnp.asarray(logp, jnp.float32)  # [N, T]
    logp_old = jax.lax.stop_gradient(jnp.asarray(logp_old, jnp.float32))  # [N, T]
    adv = jnp.asarray(advantages, jnp.float32)  # [N] or [N, T]
    valid = jnp.asarray(mask).astype(bool)  # [N, T]
    if logp.ndim != 2 or logp_old.shape != logp.shape or valid.shape != logp.shape:
        raise ConfigError(
            f"grpo_loss: logp {logp.shape}, logp_old {logp_old.shape}, mask "
            f"{valid.shape}: expected the same [N, T]"
        )
    if adv.shape not in (logp.shape[:1], logp.shape):
        raise ConfigError(
            f"grpo_loss: advantages {adv.shape}, expected [N]={logp.shape[:1]} or "
            f"[N, T]={logp.shape}"
        )
    m = valid.astype(jnp.float32)  # [N, T]
    a = adv[:, None] if adv.ndim == 1 else jnp.where(valid, adv, 0.0)  # [N, 1] or [N, T]

    # Masked entries are replaced by 0 before exp, so padding (even -inf) cannot make NaN/inf.
    log_ratio = jnp.where(valid, logp - logp_old, 0.0)  # [N, T]
    ratio = jnp.exp(log_ratio)  # [N, T]
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)  # [N, T]
    obj = jnp.minimum(ratio * a, clipped * a)  # [N, T]
    is_clipped = ((a > 0) & (ratio > 1.0 + clip_eps)) | ((a < 0) & (ratio < 1.0 - clip_eps))

    if not static_beta or kl_beta > 0:
        ref = jax.lax.stop_gradient(jnp.asarray(logp_ref, jnp.float32))  # [N, T]
        if ref.shape != logp.shape:
            raise ConfigError(f"grpo_loss: logp_ref {ref.shape}, expected {logp.shape}")
        d = jnp.where(valid, ref - logp, 0.0)  # [N, T]
        kl = jnp.exp(d) - d - 1.0  # [N, T] k3 estimator, >= 0
        obj = obj - kl_beta * kl  # [N, T]
    else:
        kl = jnp.zeros_like(logp)  # [N, T]

    obj = obj * m  # [N, T]
    n_valid = jnp.sum(m)  # []
    denom = jnp.maximum(n_valid, 1.0)  # []
    if token_level:
        objective = jnp.sum(obj) / denom  # []
    else:
        seq_len = jnp.sum(m, axis=1)  # [N]
        seq_obj = jnp.sum(obj, axis=1) / jnp.maximum(seq_len, 1.0)  # [N]
        has = (seq_len > 0).astype(jnp.float32)  # [N]
        objective = jnp.sum(seq_obj * has) / jnp.maximum(jnp.sum(has), 1.0)  # []
    loss = -objective  # []

    def masked_mean(x: jax.Array) -> jax.Array:  # x [N, T] -> []
        return jax.lax.stop_gradient(jnp.sum(jnp.where(valid, x, 0.0)) / denom)

    metrics = {
        "clip_frac": masked_mean(is_clipped.astype(jnp.float32)),
        "ratio_mean": masked_mean(ratio),
        "kl": masked_mean(kl),
        "adv_mean": masked_mean(jnp.broadcast_to(a, logp.shape)),
    }
    return loss, metrics


def grpo_update_fn(
    optimizer: optax.GradientTransformation,
    logp_fn: Callable[[Any, dict[str, jax.Array]], jax.Array],
    *,
    clip_eps: float = 0.2,
    kl_beta: float = 0.0,
    token_level: bool = True,
) -> Callable:
    """Build a pure GRPO update `step(params, opt_state, batch) -> (params, opt_state, loss,
    metrics)` (wrap it in `jax.jit` yourself).

    `logp_fn(params, batch) -> logp [N, T]` recomputes the current policy's per-action
    log-probs; `batch` holds 'logp_old' [N, T], 'advantages' [N] or [N, T], 'mask' [N, T],
    optionally 'logp_ref' [N, T] (needed when kl_beta > 0), plus whatever `logp_fn` reads
    (e.g. actions).
    """

    def loss_fn(params, batch):
        logp = logp_fn(params, batch)  # [N, T]
        return grpo_loss(
            logp,
            batch["logp_old"],
            batch["advantages"],
            batch["mask"],
            clip_eps=clip_eps,
            kl_beta=kl_beta,
            logp_ref=batch.get("logp_ref"),
            token_level=token_level,
        )

    def step(params, opt_state, batch):
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss, metrics

    return step

"""Losses shared by the model families.

`mtp_targets` / `mtp_loss`: the CAR paper's multi-token prediction loss
`L = sum_k alpha^(k-1) CE_k`. Head k at speech input position t predicts target index
`j = t + k - 1` of `y_ext = [speech tokens..., EOS]`. A (t, k) pair counts iff
`prompt_len <= j <= speech_len` (the EOS index): padding, positions past EOS and speech-prompt
tokens are excluded.

Normalisation: every head's summed CE is divided by N_1, the number of valid base-head
targets (not by its own count, which is smaller by k-1 per row). The loss is then a sum over
tokens divided by a per-batch count, so gradient accumulation over microbatches with weight
N_1 reproduces the full-batch gradient exactly (`jaxtts.train.loop`). Per-head means and
top-1 accuracies (over each head's own valid targets) are reported as metrics.

`distill_loss`: the forward KL from a teacher's next-token distribution to the base head's
(SSD's draft distilled to its target, `ssd.distill`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def mtp_targets(
    speech: jax.Array, speech_len: jax.Array, prompt_len: jax.Array, eos: int, num_heads: int
) -> tuple[jax.Array, jax.Array]:
    """speech [B, T] raw tokens -> (targets int32 [B, T+1, K], valid bool [B, T+1, K]).

    Row t of the outputs belongs to input position t of `[BOS, speech...]` (length T+1).
    """
    b, t = speech.shape
    pos = jnp.arange(t + 1)[None]  # [1, T+1]
    y_ext = jnp.concatenate([speech, jnp.zeros((b, 1), speech.dtype)], axis=1)  # [B, T+1]
    y_ext = jnp.where(pos == speech_len[:, None], eos, y_ext)
    tgts, valid = [], []
    for k in range(1, num_heads + 1):
        j = pos + (k - 1)  # [1, T+1] target index
        tk = jnp.take_along_axis(
            jnp.pad(y_ext, ((0, 0), (0, k))), jnp.broadcast_to(j, (b, t + 1)), axis=1
        )
        tgts.append(tk)
        valid.append((j >= prompt_len[:, None]) & (j <= speech_len[:, None]))
    return jnp.stack(tgts, -1).astype(jnp.int32), jnp.stack(valid, -1)


def mtp_loss(
    logits: jax.Array, targets: jax.Array, valid: jax.Array, alpha: float = 1.0
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """logits [B, T, K, V], targets/valid [B, T, K] -> (loss, metrics incl. 'weight' = N_1)."""
    k = logits.shape[2]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    v = valid.astype(jnp.float32)  # [B, T, K]
    n_k = v.sum(axis=(0, 1))  # [K]
    n1 = jnp.maximum(n_k[0], 1.0)
    ce_k = (ce * v).sum(axis=(0, 1))  # [K]
    weights = jnp.asarray(alpha, jnp.float32) ** jnp.arange(k, dtype=jnp.float32)
    loss = jnp.sum(weights * ce_k) / n1
    correct = ((jnp.argmax(logits, -1) == targets) & valid).sum(axis=(0, 1))  # [K]
    metrics = {"weight": n1}
    for i in range(k):
        metrics[f"ce_{i + 1}"] = ce_k[i] / jnp.maximum(n_k[i], 1.0)
        metrics[f"acc_{i + 1}"] = correct[i] / jnp.maximum(n_k[i], 1.0)
    return loss, metrics


def distill_loss(
    logits: jax.Array, teacher_logits: jax.Array, valid: jax.Array, reverse: bool = False
) -> tuple[jax.Array, jax.Array]:
    """KL to a teacher's next-token distribution (forward by default), summed over the valid
    positions.

    logits, teacher_logits [B, T, V] (the student's and the teacher's base head at the same
    positions), valid bool [B, T] -> (sum_{b,t valid} KL(q_bt || p_bt), the same sum of the
    teacher's entropies). Divide by the same count as the CE (`mtp_loss`'s N_1) so that
    microbatch accumulation stays exact. KL(q || p) = sum_v q_v (log q_v - log p_v) with
    q = softmax(teacher), p = softmax(student), in float32. `reverse`: KL(p || q) instead (the
    student's own distribution weighs the log-ratio: mode-seeking rather than mode-covering);
    the second output stays the teacher's entropy.
    """
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)  # [B, T, V]
    logq = jax.nn.log_softmax(teacher_logits.astype(jnp.float32), -1)  # [B, T, V]
    q = jnp.exp(logq)
    v = valid.astype(jnp.float32)
    if reverse:
        kl = jnp.sum(jnp.exp(logp) * (logp - logq), -1)  # [B, T]
    else:
        kl = jnp.sum(q * (logq - logp), -1)  # [B, T]
    ent = -jnp.sum(q * logq, -1)  # [B, T]
    return jnp.sum(kl * v), jnp.sum(ent * v)

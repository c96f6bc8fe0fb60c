"""Optimizers: AdamW with linear warmup + cosine decay and global-norm clipping (optax)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax

from jaxtts.errors import ConfigError


def learning_rate_schedule(cfg) -> optax.Schedule:
    """Linear warmup to `cfg.learning_rate` over `cfg.warmup_steps`, cosine decay to
    `cfg.learning_rate * cfg.get('final_lr_fraction', 0.1)` at `cfg.steps`."""
    peak = float(cfg.learning_rate)
    warmup = int(cfg.get("warmup_steps", 0))
    steps = int(cfg.steps)
    if steps <= 0:
        raise ConfigError(f"train.steps={steps}: expected a positive number of steps")
    if warmup >= steps:
        warmup = max(0, steps // 10)
    final = peak * float(cfg.get("final_lr_fraction", 0.1))
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0 if warmup else peak,
        peak_value=peak,
        warmup_steps=warmup,
        decay_steps=max(steps, warmup + 1),
        end_value=final,
    )


def _decay_mask(params: Any) -> Any:
    """Weight decay on matrices only (not on norms' scales or biases)."""
    return jax.tree.map(lambda p: getattr(p, "ndim", 0) >= 2, params)


def make_optimizer(
    cfg, trainable: Callable[[Any], Any] | None = None
) -> optax.GradientTransformation:
    """AdamW(b1, b2, eps, weight_decay) with clipping; frozen params get no update.

    `cfg` is `config.train`. `trainable` maps a params tree (possibly with logical-partitioning
    boxes) to a same-shaped tree of bools, or is None for all-trainable (SSD drafts and TLDR's
    LoRA use it to freeze the backbone).
    """
    name = cfg.get("optimizer", "adamw")
    if name != "adamw":
        raise ConfigError(f"train.optimizer='{name}': expected 'adamw'")
    tx = optax.chain(
        optax.clip_by_global_norm(float(cfg.get("grad_clip", 1.0))),
        optax.adamw(
            learning_rate_schedule(cfg),
            b1=float(cfg.get("b1", 0.9)),
            b2=float(cfg.get("b2", 0.98)),
            eps=float(cfg.get("eps", 1e-8)),
            weight_decay=float(cfg.get("weight_decay", 0.01)),
            mask=_decay_mask,
        ),
    )
    if trainable is None:
        return tx

    def labels(params):
        return jax.tree.map(lambda t: "train" if t else "freeze", trainable(params))

    return optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()}, labels)

"""The SSD draft: a shallower TTSLM made of the target's own layers (docs/methods/ssd.md).

The paper's draft is 8 of CosyVoice 2's 24 layers: the first two and the last six, sharing the
embeddings; only the draft's first layers and its output head train. Here the draft is its own
`TTSLM` (`num_layers = len(layers)`, one output head) whose layer j starts as the target's
layer `layers[j]`; embeddings, final norm and the base head start as the target's.

    layers = draft_layers(4, first=1, last=1)        # (0, 3)
    cost = forward_cost(draft_cfg) / forward_cost(target_cfg, heads=1)

`forward_cost` counts the multiply-adds per token of the stack and the base head (attention
score work over the cache excluded: it grows with the context for both models alike).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.errors import ConfigError
from jaxtts.methods.lm import TTSLM, LMConfig, with_bos


def draft_layers(num_layers: int, first: int, last: int) -> tuple[int, ...]:
    """Target layer indices of the draft: the first `first` and the last `last`."""
    if first < 1 or last < 0 or first + last > num_layers:
        raise ConfigError(
            f"ssd.first={first}, ssd.last={last}: expected first >= 1, last >= 0 "
            f"and first + last <= the target's {num_layers} layers"
        )
    return tuple(range(first)) + tuple(range(num_layers - last, num_layers))


def draft_config(target: LMConfig, layers) -> LMConfig:
    return dataclasses.replace(target, num_layers=len(layers), num_mtp_heads=1, dropout=0.0)


def draft_params(target_params: dict, layers) -> dict:
    """The draft's initial parameters: layer j <- target layer layers[j]; embeddings, final
    norm and base head copied; the additional heads dropped (host numpy copies)."""
    tp = {k: v for k, v in target_params.items() if not k.startswith("head_")}
    stack = target_params["stack"]
    new_stack = {f"layer_{j}": stack[f"layer_{i}"] for j, i in enumerate(layers)}
    new_stack["final_norm"] = stack["final_norm"]
    tp["stack"] = new_stack
    return jax.tree.map(lambda x: np.array(x, np.float32), tp)


def teacher_logits_fn(target: LMConfig, target_params: dict):
    """The target as a distillation teacher (`ssd.distill`): an LM batch -> the target's
    base-head logits [B, T+1, V] float32 at every input position of `[BOS, speech...]`, the
    positions the draft's base head is scored at. The additional heads are dropped (one-head
    model, `draft_config` with every layer); one jitted forward, no gradients."""
    layers = tuple(range(target.num_layers))
    cfg = draft_config(target, layers)
    model = TTSLM(cfg)
    params = jax.device_put(draft_params(target_params, layers))

    @jax.jit
    def fwd(params, text, text_len, speech, speech_len):
        x, x_len = with_bos(speech, speech_len, cfg)
        logits, _ = model.apply({"params": params}, text, text_len, x, x_len)
        return logits[:, :, 0].astype(jnp.float32)  # [B, T+1, V]

    def teacher(batch) -> np.ndarray:
        out = fwd(params, batch["text"], batch["text_len"], batch["speech"], batch["speech_len"])
        return np.asarray(out)

    return teacher


def forward_cost(cfg: LMConfig) -> int:
    """Multiply-adds per token of the stack + the base head."""
    d, n, h, f = cfg.d_model, cfg.num_heads, cfg.head_dim, cfg.d_ff
    mlp = (3 if cfg.mlp == "swiglu" else 2) * d * f
    per_layer = 4 * d * n * h + mlp
    return cfg.num_layers * per_layer + d * cfg.out_vocab

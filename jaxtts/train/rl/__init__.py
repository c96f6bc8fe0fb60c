"""Reinforcement-learning objectives (pure functional JAX, usable with any optax optimizer).

Intended use: fine-tune a policy from sampled rollouts scored by a reward, e.g. a DCAR
chunk-size policy trained with DCPO (a GRPO variant) on ASR rewards (WER/CER of the
synthesised audio). The pieces here are model-agnostic; they only see per-action log-probs:

- `group_advantages(rewards [P, G])`: group-relative advantages over the G rollouts of each of
  P prompts.
- `process_advantages(rewards [P, G, T], mask)`: per-action (process) rewards normalised over
  each group's valid actions.
- `grpo_loss(logp, logp_old, advantages, mask, ...)`: PPO-style clipped surrogate with an
  optional k3 KL penalty to a reference policy, token- or sequence-level averaging.
- `grpo_update_fn(optimizer, logp_fn)`: a pure `step(params, opt_state, batch)` that applies one
  optax update with that loss.

See `jaxtts.train.rl.grpo` for the equations.
"""

from __future__ import annotations

from jaxtts.train.rl.grpo import (
    group_advantages,
    grpo_loss,
    grpo_update_fn,
    process_advantages,
)

__all__ = ["group_advantages", "grpo_loss", "grpo_update_fn", "process_advantages"]

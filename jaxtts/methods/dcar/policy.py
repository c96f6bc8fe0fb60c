"""The DCAR chunk-size policy: one causal transformer layer over the frozen TTS model's hidden
states at decision positions, then a linear layer to logits over chunk sizes {1..K}.

The policy's sequence is the decisions of one row: decision j reads h_{t_j}, the backbone's
hidden state of the last token kept before step j (`ChunkCarry.hidden`), at RoPE position j.
Training (`__call__`) runs it over the recorded decision inputs of whole rollouts with a causal
mask; decoding (`step`) appends one decision per row to its own KV cache (`PolicyCache`), so the
two see exactly the same inputs and give the same log-probabilities (tested).

The output layer starts at zero: an untrained policy is uniform over {1..K}.

Axis letters: B batch, S decisions (slots), D backbone width, A actions (chunk sizes 1..K).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError
from jaxtts.nn import axes
from jaxtts.nn.attention import LayerCache
from jaxtts.nn.layers import Dense
from jaxtts.nn.transformer import StackConfig, TransformerStack


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """Static policy hyper-parameters (`config.policy` plus the backbone's width and K)."""

    d_model: int  # the backbone's hidden width (the policy's input and residual width)
    num_actions: int  # K: chunk sizes 1..K (the backbone's number of heads)
    num_heads: int = 4
    head_dim: int = 64
    d_ff: int = 1024

    def __post_init__(self):
        if self.num_actions < 1:
            raise ConfigError(f"policy: num_actions={self.num_actions}, expected >= 1")

    @property
    def stack(self) -> StackConfig:
        return StackConfig(
            num_layers=1, num_heads=self.num_heads, head_dim=self.head_dim, d_ff=self.d_ff
        )


@flax.struct.dataclass
class PolicyCache:
    layer: LayerCache  # k, v [B, N, S, H]
    length: jax.Array  # int32 [B] decisions held


def decision_mask(length: jax.Array, slots: int) -> jax.Array:
    """Causal mask over decisions: query j sees keys i <= j, i < length. -> bool [B, S, S]."""
    i = jnp.arange(slots)
    causal = i[None, :] <= i[:, None]  # [S, S]
    return causal[None] & (i[None, None, :] < length[:, None, None])


class ChunkPolicy(nn.Module):
    cfg: PolicyConfig

    def setup(self):
        self.stack = TransformerStack(self.cfg.stack)
        self.out = Dense(
            self.cfg.num_actions,
            (axes.EMBED, None),
            use_bias=True,
            kernel_init=nn.initializers.zeros,
        )

    def __call__(self, inputs: jax.Array, length: jax.Array) -> jax.Array:
        """inputs [B, S, D] (decision j's backbone hidden), length [B] -> logits [B, S, A]."""
        b, s = inputs.shape[:2]
        pos = jnp.arange(s)[None].repeat(b, 0)  # [B, S]
        h, _ = self.stack(inputs.astype(jnp.float32), pos, decision_mask(length, s))
        return self.out(h).astype(jnp.float32)

    def init_cache(self, batch: int, slots: int) -> PolicyCache:
        c = self.cfg
        shape = (batch, c.num_heads, slots, c.head_dim)  # [B, N, S, H]
        z = jnp.zeros(shape, jnp.float32)
        return PolicyCache(LayerCache(z, z), jnp.zeros((batch,), jnp.int32))

    def step(self, hidden: jax.Array, cache: PolicyCache) -> tuple[jax.Array, PolicyCache]:
        """One decision per row: hidden [B, D] -> (logits [B, A], cache with it appended)."""
        slots = cache.layer.k.shape[2]
        pos = cache.length[:, None]  # [B, 1]
        mask = jnp.arange(slots)[None, None, :] <= cache.length[:, None, None]  # [B, 1, S]
        h, (layer,) = self.stack(
            hidden[:, None].astype(jnp.float32), pos, mask, (cache.layer,), cache.length
        )
        logits = self.out(h[:, 0]).astype(jnp.float32)  # [B, A]
        return logits, PolicyCache(layer, jnp.minimum(cache.length + 1, slots))


def action_logp(logits: jax.Array, actions: jax.Array) -> jax.Array:
    """log pi(a) of chunk sizes `actions` (1..K) [..] under logits [.., A] -> float32 [..]."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    idx = jnp.clip(actions - 1, 0, logits.shape[-1] - 1)
    return jnp.take_along_axis(logp, idx[..., None], axis=-1)[..., 0]

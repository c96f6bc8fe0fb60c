"""The DCAR chunk-size policy: one causal transformer layer over the frozen TTS model's hidden
states at decision positions, then a linear layer to logits over chunk sizes {1..K} (the paper;
`num_layers = 0`, below: the linear layer alone, shipped in pretrained/dcar_deep).

The policy's sequence is the decisions of one row: decision j reads h_{t_j}, the backbone's
hidden state of the last token kept before step j (`ChunkCarry.hidden`), at RoPE position j.
Training (`__call__`) runs it over the recorded decision inputs of whole rollouts with a causal
mask; decoding (`step`) appends one decision per row to its own KV cache (`PolicyCache`), so the
two see exactly the same inputs and give the same log-probabilities (tested).

The output layer starts at zero: an untrained policy is uniform over {1..K}.

`features = "confidence"` (not the paper's, which reads h_t only): the input vector of decision
j is [h_{t_j} ; f_j], f_j = the top probability and the entropy of each of the K heads'
next-token distributions at h_{t_j} (2K numbers, `head_confidence`), the quantities that
predict whether head k's draft will pass the base head's check
(benchmarks/diagnostics/dcar_acceptance.py: draft 2 passes 43 % of the time in the lowest quintile
of head 2's top probability, 99.7 % in the highest). f enters twice: projected into the layer's
input (h + W_f f) and linearly into the logits (a zero-initialised layer), so that a confidence
threshold is one step away from the uniform start. A policy with features costs the K heads' logits
before the choice; the decode step then samples from them (`dynamic_chunk_step(logits=...)`), so no
head runs twice.

`num_layers = 0` (not the paper's, which has one causal layer): no layer and no history, the
logits are a linear function of [h_t ; f] (`out(h_t) + feat_out(gain f)`); the policy then costs
two small matmuls a step. `threshold_prior` sets such a policy (or the direct path of one with a
layer) to the confidence-threshold rule, a start for DCPO that is already dynamic.

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
    features: str = "hidden"  # "hidden" (the paper) | "confidence" (+ the heads' confidence)
    num_layers: int = 1  # causal layers over the decisions (1: the paper; 0: a linear policy)

    def __post_init__(self):
        if self.num_actions < 1:
            raise ConfigError(f"policy: num_actions={self.num_actions}, expected >= 1")
        if self.num_layers not in (0, 1):
            raise ConfigError(f"policy.num_layers={self.num_layers}: expected 0 or 1")
        if self.features not in FEATURES:
            raise ConfigError(
                f"policy.features={self.features!r}: expected one of {list(FEATURES)}"
            )

    @property
    def num_features(self) -> int:
        """Numbers appended to h_t: 2K with the heads' confidence, else 0."""
        return 2 * self.num_actions if self.features == "confidence" else 0

    @property
    def d_in(self) -> int:
        """Width of one decision's input vector [h_t ; f]."""
        return self.d_model + self.num_features

    @property
    def stack(self) -> StackConfig:
        return StackConfig(
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            d_ff=self.d_ff,
        )


FEATURES = ("hidden", "confidence")
# The direct path reads the features times this gain: Adam moves a weight by about the learning
# rate per step, so with features in [0, 1] a logit would move by ~lr x F per step; the gain
# lets a few dozen DCPO steps move it by O(1) (a reparametrisation: a 40x learning rate there;
# at 10, 80 steps moved the size logits by only ~0.5 over the features' range, docs/history/deep.md
# §deep-dcar).
FEATURE_GAIN = 40.0


def head_confidence(logits: jax.Array) -> jax.Array:
    """The heads' next-token logits [..., K, V] -> [..., 2K]: each head's top probability, then
    each head's entropy in nats divided by log V (both in [0, 1])."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [..., K, V]
    p = jnp.exp(logp)
    top = jnp.max(p, axis=-1)  # [..., K]
    ent = -jnp.sum(jnp.where(p > 0, p * logp, 0.0), axis=-1) / jnp.log(logits.shape[-1])
    return jnp.concatenate([top, ent], axis=-1)


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
        if self.cfg.num_layers:
            self.stack = TransformerStack(self.cfg.stack)
        self.out = Dense(
            self.cfg.num_actions,
            (axes.EMBED, None),
            use_bias=True,
            kernel_init=nn.initializers.zeros,
        )
        if self.cfg.num_features:
            if self.cfg.num_layers:
                self.feat_in = Dense(self.cfg.d_model, (None, axes.EMBED), use_bias=False)
            self.feat_out = Dense(
                self.cfg.num_actions,
                (None, None),
                use_bias=False,
                kernel_init=nn.initializers.zeros,
            )

    def _split(self, inputs: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        """[.., D + F] -> (the layer's input [.., D], the features [.., F] or None)."""
        x = inputs.astype(jnp.float32)
        d_in = x.shape[-1]
        if d_in != self.cfg.d_in:
            raise ConfigError(
                f"policy: inputs of width {d_in}, expected {self.cfg.d_in} (d_model "
                f"{self.cfg.d_model} + {self.cfg.num_features} features)"
            )
        if not self.cfg.num_features:
            return x, None
        h, f = x[..., : self.cfg.d_model], x[..., self.cfg.d_model :]
        if not self.cfg.num_layers:  # linear: out(h) + feat_out(f), nothing to mix in
            return h, f
        return h + self.feat_in(f).astype(jnp.float32), f

    def _logits(self, h: jax.Array, f: jax.Array | None) -> jax.Array:
        logits = self.out(h).astype(jnp.float32)
        if f is not None:
            logits = logits + self.feat_out(FEATURE_GAIN * f).astype(jnp.float32)
        return logits

    def __call__(self, inputs: jax.Array, length: jax.Array) -> jax.Array:
        """inputs [B, S, D + F] (decision j's backbone hidden [; features]), length [B] ->
        logits [B, S, A]."""
        b, s = inputs.shape[:2]
        pos = jnp.arange(s)[None].repeat(b, 0)  # [B, S]
        x, f = self._split(inputs)
        if not self.cfg.num_layers:
            return self._logits(x, f)
        h, _ = self.stack(x, pos, decision_mask(length, s))
        return self._logits(h, f)

    def init_cache(self, batch: int, slots: int) -> PolicyCache:
        c = self.cfg
        slots = slots if c.num_layers else 0  # a linear policy keeps no history
        shape = (batch, c.num_heads, slots, c.head_dim)  # [B, N, S, H]
        z = jnp.zeros(shape, jnp.float32)
        return PolicyCache(LayerCache(z, z), jnp.zeros((batch,), jnp.int32))

    def step(self, inputs: jax.Array, cache: PolicyCache) -> tuple[jax.Array, PolicyCache]:
        """One decision per row: inputs [B, D + F] -> (logits [B, A], cache with it appended)."""
        slots = cache.layer.k.shape[2]
        pos = cache.length[:, None]  # [B, 1]
        mask = jnp.arange(slots)[None, None, :] <= cache.length[:, None, None]  # [B, 1, S]
        x, f = self._split(inputs[:, None])  # [B, 1, D], [B, 1, F]
        if not self.cfg.num_layers:
            return self._logits(x, f)[:, 0], cache.replace(length=cache.length + 1)
        h, (layer,) = self.stack(x, pos, mask, (cache.layer,), cache.length)
        logits = self._logits(h, f)[:, 0]  # [B, A]
        return logits, PolicyCache(layer, jnp.minimum(cache.length + 1, slots))


def threshold_prior(params, cfg: PolicyConfig, theta: float, gain: float):
    """`params` of a confidence policy set to the threshold rule: the logit of size c is
    gain x sum_{k=2..c} (top_k - theta), top_k = head k's top probability at h_t (size 1: 0),
    and h_t's own path (`out`'s kernel) at zero. Its argmax takes c = 1 + the leading heads
    2..c above theta (exactly so unless a head below theta is outweighed by later ones above);
    its draws are spread over sizes whose heads sit near theta.
    benchmarks/diagnostics/dcar_acceptance.py: theta 0.4 keeps 3.27 tokens a decision at 0.128
    failed drafts a token (CAR c=3: 3.00 / 0.160). Not the paper's (its policy starts uniform)."""
    if cfg.features != "confidence":
        raise ConfigError(
            f"dcpo.prior_threshold={theta}: needs policy.features='confidence', "
            f"got {cfg.features!r}"
        )
    k = cfg.num_actions
    size = jnp.arange(k)  # c - 1
    # feat_out reads FEATURE_GAIN x f, f = [top_1..top_K, entropies]: kernel [2K, A]
    head = jnp.arange(2 * k)[:, None]
    kernel = ((head >= 1) & (head <= size[None])).astype(jnp.float32) * (gain / FEATURE_GAIN)

    def put(leaf, value):  # keeps a logically partitioned box around the new value
        return leaf.replace_boxed(value) if isinstance(leaf, nn.meta.AxisMetadata) else value

    out, feat = params["out"], params["feat_out"]
    out = dict(
        out,
        kernel=put(out["kernel"], jnp.zeros_like(nn.unbox(out["kernel"]))),
        bias=put(out["bias"], (-gain * theta * size).astype(jnp.float32)),
    )
    return dict(params, out=out, feat_out=dict(feat, kernel=put(feat["kernel"], kernel)))


def action_logp(logits: jax.Array, actions: jax.Array) -> jax.Array:
    """log pi(a) of chunk sizes `actions` (1..K) [..] under logits [.., A] -> float32 [..]."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    idx = jnp.clip(actions - 1, 0, logits.shape[-1] - 1)
    return jnp.take_along_axis(logp, idx[..., None], axis=-1)[..., 0]

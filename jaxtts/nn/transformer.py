"""A pre-norm transformer stack configured by one dataclass, able to run any subset of its
layers with the same weights.

    cfg = StackConfig(num_layers=24, num_heads=8, head_dim=64, d_ff=2048)
    stack = TransformerStack(cfg)
    h, caches = stack(x, positions, mask)                       # all layers (training)
    h, caches = stack(x, positions, mask, caches, start,        # an SSD draft: layers 0, 1 and
                      layers=(0, 1, 18, 19, 20, 21, 22, 23))    # the last six, same parameters

Layers are named `layer_<i>` whatever subset runs, so a subset reads the full model's
parameters; `caches` holds one `LayerCache` per layer *run* (in `layers` order).
The input is embeddings [B, T, D] (token, patch or any other vectors: the stack never embeds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtts.nn.attention import Attention, LayerCache
from jaxtts.nn.layers import MLP, RMSNorm


@dataclasses.dataclass(frozen=True)
class StackConfig:
    """Hyper-parameters of a `TransformerStack` (static, hashable)."""

    num_layers: int
    num_heads: int
    head_dim: int
    d_ff: int
    mlp: str = "swiglu"  # or "gelu"
    dropout: float = 0.0
    dtype: str = "float32"  # matmul dtype; parameters and norms stay float32
    rope_theta: float = 10_000.0  # 0 = no rotary embedding
    lora_rank: int = 0
    lora_alpha: float = 0.0

    def check_layers(self, layers: Sequence[int] | None) -> tuple[int, ...]:
        """The layer indices to run (all when None); a bad index is a ValueError."""
        if layers is None:
            return tuple(range(self.num_layers))
        layers = tuple(int(i) for i in layers)
        bad = [i for i in layers if not 0 <= i < self.num_layers]
        if bad or not layers:
            raise ValueError(f"layers={layers}: expected indices in [0, {self.num_layers})")
        return layers


class Block(nn.Module):
    cfg: StackConfig

    @nn.compact
    def __call__(self, x, positions, mask, cache=None, write_start=None, *, train=False,
                 bias=None, capture=False):
        c = self.cfg
        lora = dict(lora_rank=c.lora_rank, lora_alpha=c.lora_alpha)
        dtype = jnp.dtype(c.dtype)
        h, cache = Attention(c.num_heads, c.head_dim, dtype, c.rope_theta, name="attn",
                             **lora)(RMSNorm(name="attn_norm")(x), positions, mask, cache,
                                     write_start, bias, capture)  # fmt: skip
        x = x + nn.Dropout(c.dropout, deterministic=not train)(h.astype(jnp.float32))
        h = MLP(c.d_ff, c.mlp, dtype, name="mlp", **lora)(RMSNorm(name="mlp_norm")(x))
        x = x + nn.Dropout(c.dropout, deterministic=not train)(h.astype(jnp.float32))
        return x, cache


class TransformerStack(nn.Module):
    """Pre-norm blocks `layer_<i>` + a final RMSNorm over input embeddings [B, T, D]."""

    cfg: StackConfig

    @nn.compact
    def __call__(
        self, x: jax.Array, positions: jax.Array, mask: jax.Array,
        caches: Sequence[LayerCache] | None = None, write_start: jax.Array | None = None,
        *, layers: Sequence[int] | None = None, train: bool = False,
        attn_bias: jax.Array | None = None, bias_layers: Sequence[int] = (),
    ) -> tuple[jax.Array, tuple[LayerCache, ...] | None]:
        """x [B, T, D] float32 -> (hidden [B, T, D] after the final norm, updated caches).

        layers: which blocks run, in order (default all); caches[j] belongs to layers[j].
        attn_bias [B, N, T, S]: added to the attention logits of the blocks in `bias_layers`,
        which also sow their logits (`intermediates/layer_<i>/attn/attn_logits`): the
        alignment prior and loss of `jaxtts.train.align` (training only).
        """
        run = self.cfg.check_layers(layers)
        self.cfg.check_layers(bias_layers or None)
        if caches is not None and len(caches) != len(run):
            raise ValueError(f"{len(caches)} layer caches for {len(run)} layers")
        new_caches = []
        for j, i in enumerate(run):
            x, c = Block(self.cfg, name=f"layer_{i}")(
                x, positions, mask, None if caches is None else caches[j], write_start,
                train=train, bias=attn_bias if i in bias_layers else None,
                capture=i in bias_layers)  # fmt: skip
            new_caches.append(c)
        return RMSNorm(name="final_norm")(x), (None if caches is None else tuple(new_caches))

"""Conv-net helpers of the conformer CTC ASR and the speaker encoder: flax layers whose
parameters carry logical axis names (so they shard by the mesh rules like every other weight).

Axis letters: B batch, T frames, C channels.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from jaxtts.nn import axes

LECUN = nn.initializers.lecun_normal()


def with_axes(names: tuple, init=LECUN):
    """An initializer that attaches logical axis names to its parameter."""
    return nn.with_logical_partitioning(init, names)


def layer_norm(name: str | None = None) -> nn.LayerNorm:
    """LayerNorm over the embed axis (scale and bias sharded like `embed`)."""
    return nn.LayerNorm(
        scale_init=with_axes((axes.EMBED,), nn.initializers.ones),
        bias_init=with_axes((axes.EMBED,), nn.initializers.zeros),
        name=name,
    )


def dense(features: int, names: tuple, name: str | None = None) -> nn.Dense:
    """`nn.Dense` with a bias; kernel axes `names` (input, output)."""
    return nn.Dense(
        features,
        kernel_init=with_axes(names),
        bias_init=with_axes((names[-1],), nn.initializers.zeros),
        name=name,
    )


def masked_conv1d(
    x: jax.Array,
    mask: jax.Array,
    features: int,
    kernel: int,
    *,
    stride: int = 1,
    dilation: int = 1,
    groups: int = 1,
    names: tuple = (None, axes.EMBED, axes.MLP),
    name: str | None = None,
) -> jax.Array:
    """Conv over time of x [B, T, C] with padded frames (mask [B, T] False) zeroed first and
    symmetric explicit padding, so valid outputs do not depend on the padding."""
    pad = dilation * (kernel - 1) // 2
    x = x * mask[..., None].astype(x.dtype)
    return nn.Conv(
        features,
        (kernel,),
        strides=(stride,),
        padding=[(pad, dilation * (kernel - 1) - pad)],
        kernel_dilation=(dilation,),
        feature_group_count=groups,
        kernel_init=with_axes(names),
        bias_init=with_axes((names[-1],), nn.initializers.zeros),
        name=name,
    )(x)

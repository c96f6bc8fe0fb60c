"""Conv-net helpers of the conformer CTC ASR, the speaker encoder, the vocoder and the codec:
flax layers whose parameters carry logical axis names (so they shard by the mesh rules like
every other weight), and the ConvNeXt block.

Axis letters: B batch, T frames, C channels.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError, DataError
from jaxtts.nn import axes
from jaxtts.nn.masks import length_mask

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


def mel_stats(model_cfg) -> tuple[float, float]:
    """(mel_mean, mel_std) of a mel encoder's config (the CTC ASR, the speaker encoder);
    a one-line error while they are unset (their train() fills them from the data)."""
    m = dict(model_cfg)
    if m.get("mel_mean") is None or m.get("mel_std") is None:
        raise ConfigError("model.mel_mean/mel_std: not set (train() fills them from the data)")
    return float(m["mel_mean"]), float(m["mel_std"])


def mel_input(mel: jax.Array, mel_len: jax.Array, n_mels: int, mean: float, std: float, who: str):
    """The shared input of the mel encoders: log-mel [B, T, M] with lengths [B] -> (globally
    normalised float32 [B, T, M], valid-frame mask [B, T], int32 lengths [B]); a mel with
    another number of bins is a one-line error naming `who`."""
    if mel.shape[-1] != n_mels:
        raise DataError(f"{who}: mel has {mel.shape[-1]} bins, expected {n_mels}")
    mel_len = mel_len.astype(jnp.int32)
    x = (mel.astype(jnp.float32) - mean) / std  # [B, T, M]
    return x, length_mask(mel_len, mel.shape[1]), mel_len


class ConvNeXtBlock(nn.Module):
    """Depthwise conv (k 7) -> LayerNorm -> Dense 4x -> GELU -> Dense -> layer scale, residual."""

    dim: int
    mlp_dim: int
    kernel: int = 7

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:  # x [B, T, D]
        h = x * mask[..., None]
        pad = self.kernel // 2
        h = nn.Conv(
            self.dim,
            (self.kernel,),
            padding=[(pad, pad)],
            feature_group_count=self.dim,
            name="dwconv",
        )(h)
        h = nn.LayerNorm(epsilon=1e-6, name="norm")(h)
        h = nn.gelu(nn.Dense(self.mlp_dim, name="pw1")(h))  # [B, T, 4D]
        h = nn.Dense(self.dim, name="pw2")(h)
        gamma = self.param("gamma", nn.initializers.constant(1.0 / 8), (self.dim,))
        return x + gamma * h

"""The masked generative transformer of PALLE (both stages; docs/methods/palle.md).

Two equal-length streams over the T speech positions of a row (prompt tokens, then the
tokens to generate):
- text: the prompt transcript followed by the target text, padded with [PAD] to T (the
  paper's layout, `text_layout='pad'`), or stretched uniformly over the row's valid positions
  (`text_layout='stretch'`, a deviation: position t shows symbol floor(t * L / T_valid), a
  diagonal first guess of the alignment that training refines), embedded, through one ConvNeXt
  V2 block (depthwise conv k=7, LayerNorm, pointwise MLP with global response normalisation,
  residual);
- speech: tokens with [MASK] where unknown, embedded.
Each stream gets sinusoidal positions times a learnable scale, then dropout; the two are
concatenated along features, projected to D, and a convolutional positional embedding
(depthwise conv, kernel 7, GELU, residual) is added; then a full-attention
`jaxtts.nn.TransformerStack` (no causal mask: every valid position sees every valid position)
and a linear layer to logits over the speech vocabulary (never [MASK]).

Ids: speech tokens 0..V-1, [MASK] = V; text symbols 0..X-1, [PAD] = X. A row whose text is
longer than its speech positions cannot be represented (the text would be cut): training
drops such rows from the loss, inference refuses a target length that short.

Axis letters: B batch, T speech positions, D width, F ConvNeXt MLP width, V vocabulary.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError
from jaxtts.nn import axes
from jaxtts.nn.conv import layer_norm, masked_conv1d
from jaxtts.nn.layers import Dense, param_with_axes, sinusoidal
from jaxtts.nn.masks import length_mask, padding_mask
from jaxtts.nn.transformer import StackConfig, TransformerStack

_KEYS = (
    "num_text_symbols",
    "num_speech_tokens",
    "d_model",
    "num_layers",
    "num_heads",
    "head_dim",
    "d_ff",
    "convnext_ff",
    "conv_pos_kernel",
    "conv_pos_groups",
    "mlp",
    "dropout",
    "dtype",
    "rope_theta",
    "text_layout",
)
TEXT_LAYOUTS = ("pad", "stretch")


@dataclasses.dataclass(frozen=True)
class PALLEConfig:
    num_text_symbols: int
    num_speech_tokens: int
    d_model: int = 256
    num_layers: int = 4
    num_heads: int = 4
    head_dim: int = 64
    d_ff: int = 1024
    convnext_ff: int = 512  # the text ConvNeXt V2 block's pointwise MLP width
    conv_pos_kernel: int = 7
    conv_pos_groups: int = 16  # depthwise-grouped convolutional positional embedding
    mlp: str = "swiglu"
    dropout: float = 0.0
    dtype: str = "float32"
    rope_theta: float = 0.0  # the paper's model: absolute (sinusoidal + conv) positions only
    text_layout: str = "pad"  # 'pad' (the paper) or 'stretch' (see the module docstring)

    @property
    def mask_id(self) -> int:
        return self.num_speech_tokens

    @property
    def pad_id(self) -> int:
        return self.num_text_symbols

    @property
    def stack(self) -> StackConfig:
        return StackConfig(
            self.num_layers,
            self.num_heads,
            self.head_dim,
            self.d_ff,
            mlp=self.mlp,
            dropout=self.dropout,
            dtype=self.dtype,
            rope_theta=self.rope_theta,
        )

    @classmethod
    def from_config(cls, model_cfg) -> PALLEConfig:
        d = dict(model_cfg)
        unknown = sorted(set(d) - set(_KEYS))
        if unknown:
            raise ConfigError(f"model.{unknown[0]}: unknown key, expected one of {list(_KEYS)}")
        if d.get("text_layout", "pad") not in TEXT_LAYOUTS:
            raise ConfigError(
                f"model.text_layout={d['text_layout']!r}: expected one of {list(TEXT_LAYOUTS)}"
            )
        if d.get("d_model", 256) % d.get("conv_pos_groups", 16):
            raise ConfigError(
                f"model.conv_pos_groups={d.get('conv_pos_groups')}: must divide "
                f"model.d_model={d.get('d_model')}"
            )
        return cls(**d)


def sinusoid(t: int, d: int) -> jax.Array:
    """Sinusoidal position table [T, D] (`jaxtts.nn.layers.sinusoidal` of 0..T-1)."""
    return sinusoidal(jnp.arange(t), d)


class GRN(nn.Module):
    """Global response normalisation (ConvNeXt V2) over the valid frames of x [B, T, F]."""

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        f = x.shape[-1]
        gamma = param_with_axes(self, "gamma", nn.initializers.zeros, (f,), (axes.MLP,))
        beta = param_with_axes(self, "beta", nn.initializers.zeros, (f,), (axes.MLP,))
        xm = x * mask[..., None]
        g = jnp.sqrt(jnp.sum(xm * xm, axis=1, keepdims=True) + 1e-6)  # [B, 1, F] L2 over time
        n = g / (jnp.mean(g, axis=-1, keepdims=True) + 1e-6)
        return gamma * (x * n) + beta + x


class ConvNeXtV2Block(nn.Module):
    d_ff: int
    kernel: int = 7

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:  # [B, T, D] -> [B, T, D]
        d = x.shape[-1]
        h = masked_conv1d(
            x, mask, d, self.kernel, groups=d, names=(None, None, axes.EMBED), name="dwconv"
        )
        h = layer_norm("norm")(h)
        h = jax.nn.gelu(Dense(self.d_ff, (axes.EMBED, axes.MLP), use_bias=True, name="pw1")(h))
        h = GRN(name="grn")(h, mask)
        return x + Dense(d, (axes.MLP, axes.EMBED), use_bias=True, name="pw2")(h)


class MaskedGenTransformer(nn.Module):
    """text [B, X], speech [B, T] ([MASK] = cfg.mask_id where unknown) -> logits [B, T, V]."""

    cfg: PALLEConfig

    @nn.compact
    def __call__(
        self,
        text: jax.Array,
        text_len: jax.Array,
        speech: jax.Array,
        speech_len: jax.Array,
        *,
        train: bool = False,
    ) -> jax.Array:
        c = self.cfg
        b, t = speech.shape
        d = c.d_model
        valid = length_mask(speech_len, t)  # [B, T]
        text_t = text_positions(c, text, text_len, speech_len, t)  # [B, T]
        emb_init = nn.initializers.normal(1.0)  # unit-scale, like the sinusoid it is added to
        text_table = param_with_axes(
            self, "text_embed", emb_init, (c.num_text_symbols + 1, d), (axes.VOCAB, axes.EMBED)
        )
        speech_table = param_with_axes(
            self, "speech_embed", emb_init, (c.num_speech_tokens + 1, d), (axes.VOCAB, axes.EMBED)
        )
        te = jnp.take(text_table, text_t, axis=0)  # [B, T, D]
        te = ConvNeXtV2Block(c.convnext_ff, name="text_convnext")(te, valid)
        se = jnp.take(speech_table, speech, axis=0)  # [B, T, D]
        pos = sinusoid(t, d)[None]  # [1, T, D]
        drop = nn.Dropout(c.dropout, deterministic=not train)
        t_scale = param_with_axes(self, "text_pos_scale", nn.initializers.ones, (), ())
        s_scale = param_with_axes(self, "speech_pos_scale", nn.initializers.ones, (), ())
        te = drop(te + t_scale * pos)
        se = drop(se + s_scale * pos)
        h = Dense(d, (None, axes.EMBED), use_bias=True, name="in_proj")(
            jnp.concatenate([te, se], axis=-1)
        )  # [B, T, D]
        conv = masked_conv1d(
            h,
            valid,
            d,
            c.conv_pos_kernel,
            groups=c.conv_pos_groups,
            names=(None, None, axes.EMBED),
            name="conv_pos",
        )
        h = h + jax.nn.gelu(conv)
        positions = jnp.broadcast_to(jnp.arange(t)[None], (b, t))
        h, _ = TransformerStack(c.stack, name="stack")(
            h, positions, padding_mask(valid), train=train
        )
        return Dense(
            c.num_speech_tokens,
            (axes.EMBED, axes.VOCAB),
            use_bias=True,
            dtype=jnp.dtype(c.dtype),
            name="out",
        )(h).astype(jnp.float32)


def text_positions(
    cfg: PALLEConfig, text: jax.Array, text_len: jax.Array, speech_len: jax.Array, t: int
) -> jax.Array:
    """The text symbol shown at each of the T speech positions [B, T] ([PAD] = cfg.pad_id).

    'pad': symbol t for t < L (cut at T), [PAD] after; 'stretch': symbol floor(t * L / S) for
    t < S (S = the row's valid speech length), [PAD] beyond S; a row without text is all [PAD].
    Depends on the lengths only, never on the buffer size T, so padding changes nothing.
    """
    x = text.shape[1]
    pos = jnp.arange(t)[None]  # [1, T]
    if cfg.text_layout == "stretch":
        idx = pos * text_len[:, None] // jnp.maximum(speech_len, 1)[:, None]  # [B, T]
        shown = jnp.take_along_axis(text, jnp.clip(idx, 0, max(x - 1, 0)), axis=1)
        keep = (pos < speech_len[:, None]) & (text_len[:, None] > 0)
    else:
        shown = jnp.pad(text, ((0, 0), (0, max(t - x, 0))))[:, :t]
        keep = pos < jnp.minimum(text_len, t)[:, None]
    return jnp.where(keep, shown, cfg.pad_id)


def init_params(cfg: PALLEConfig, rng: jax.Array | None = None) -> Any:
    """Unboxed parameters of a fresh model."""
    one = jnp.ones((1, 8), jnp.int32)
    n = jnp.array([8], jnp.int32)
    rng = jax.random.key(0) if rng is None else rng
    return nn.unbox(MaskedGenTransformer(cfg).init(rng, one, n, one, n)["params"])

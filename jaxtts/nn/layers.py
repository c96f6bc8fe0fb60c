"""Shared transformer layers (functional Flax linen): every model family builds on these.

- `Dense`: einsum dense layer whose kernel carries logical axis names (for the mesh rules) and
  an optional LoRA adapter (`lora_rank > 0`: `W x + (alpha / r) B A x`, B zero-initialised, so
  an adapted model starts exactly at the frozen one). Freezing is the optimizer's job
  (`jaxtts.train.optim.make_optimizer(trainable=...)`), e.g. `lora_only` below.
- `RMSNorm`, rotary position embeddings (`apply_rope`), `MLP` (SwiGLU or GELU).
- `Attention`: multi-head self-attention over an explicit key/value buffer. Without a cache the
  keys are the block itself (training); with `KVCache` arrays the block's keys/values are first
  written into the buffer at a per-row slot offset, then the queries attend over the buffer.
  The visibility mask is an argument: layers never decide causality themselves.
- `TransformerStack`: pre-norm blocks over input embeddings; returns hidden states and the
  updated per-layer caches.

All softmax / norm arithmetic is float32; matmuls run in `dtype` (bf16 optional) with float32
parameters. Axis letters (see `jaxtts.models.axes`): B batch, T query length, S key length,
D model width, N heads, H head dim, F MLP width, L layers, R LoRA rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.models import axes

Dtype = Any
NEG_INF = -1e30


def _dtype(name: str | Dtype) -> Dtype:
    return jnp.dtype(name) if isinstance(name, str) else name


def param_with_axes(module: nn.Module, name: str, init: Callable, shape: Sequence[int],
                    names: tuple, dtype=jnp.float32):  # fmt: skip
    """`module.param` with logical axis names attached (for `nn.get_partition_spec`)."""
    return module.param(name, nn.with_logical_partitioning(init, names), tuple(shape), dtype)


class Dense(nn.Module):
    """y = x W (+ b) over the last `len(in_shape)` axes; kernel axes `names`.

    `features` may be a tuple (e.g. (N, H) for attention projections); `in_axes` > 1 contracts
    several trailing input axes (the attention output projection contracts (N, H)).
    """

    features: int | tuple[int, ...]
    names: tuple  # logical axes of the kernel: input axes then output axes
    in_axes: int = 1
    use_bias: bool = False
    dtype: Dtype = jnp.float32
    lora_rank: int = 0
    lora_alpha: float = 0.0
    kernel_init: Callable = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        feats = (self.features,) if isinstance(self.features, int) else tuple(self.features)
        in_shape = x.shape[-self.in_axes :]
        fan_in = 1
        for s in in_shape:
            fan_in *= s
        init = self.kernel_init
        if self.in_axes > 1 or len(feats) > 1:  # lecun over the flattened fan-in
            out_axis = tuple(range(self.in_axes, self.in_axes + len(feats)))
            init = nn.initializers.variance_scaling(
                1.0, "fan_in", "truncated_normal", in_axis=tuple(range(self.in_axes)),
                out_axis=out_axis)
        kernel = param_with_axes(self, "kernel", init, (*in_shape, *feats), self.names)
        letters = "abcdefgh"
        xi = letters[: self.in_axes]
        fo = "wxyz"[: len(feats)]
        eq = f"...{xi},{xi}{fo}->...{fo}"
        dt = _dtype(self.dtype)
        y = jnp.einsum(eq, x.astype(dt), kernel.astype(dt))
        if self.lora_rank > 0:
            a = param_with_axes(self, "lora_a", nn.initializers.normal(1.0 / fan_in**0.5),
                                (*in_shape, self.lora_rank), (*self.names[: self.in_axes], None))
            b = param_with_axes(self, "lora_b", nn.initializers.zeros,
                                (self.lora_rank, *feats), (None, *self.names[self.in_axes :]))
            scale = (self.lora_alpha or self.lora_rank) / self.lora_rank
            low = jnp.einsum(f"...{xi},{xi}r->...r", x.astype(dt), a.astype(dt))
            y = y + scale * jnp.einsum(f"...r,r{fo}->...{fo}", low, b.astype(dt))
        if self.use_bias:
            bias = param_with_axes(self, "bias", nn.initializers.zeros, feats,
                                   self.names[self.in_axes :])  # fmt: skip
            y = y + bias.astype(dt)
        return y


def lora_only(params: Any) -> Any:
    """`trainable` predicate for the optimizer: True for LoRA leaves only."""

    def leaf(path, _):
        return any(getattr(k, "key", None) in ("lora_a", "lora_b") for k in path)

    return jax.tree_util.tree_map_with_path(leaf, params)


class RMSNorm(nn.Module):
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., D] -> [..., D] float32
        scale = param_with_axes(self, "scale", nn.initializers.ones, (x.shape[-1],),
                                (axes.EMBED,))  # fmt: skip
        x = x.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return x * scale


def apply_rope(x: jax.Array, positions: jax.Array, theta: float = 10_000.0) -> jax.Array:
    """Rotary embedding (half-split convention). x [B, T, N, H], positions int [B, T]."""
    h = x.shape[-1]
    freq = theta ** (-jnp.arange(0, h // 2, dtype=jnp.float32) * 2.0 / h)  # [H/2]
    ang = positions.astype(jnp.float32)[..., None] * freq  # [B, T, H/2]
    sin, cos = jnp.sin(ang)[:, :, None, :], jnp.cos(ang)[:, :, None, :]  # [B, T, 1, H/2]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


class MLP(nn.Module):
    d_ff: int
    kind: str = "swiglu"  # or "gelu"
    dtype: Dtype = jnp.float32
    lora_rank: int = 0
    lora_alpha: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [B, T, D] -> [B, T, D]
        d = x.shape[-1]
        kw = dict(dtype=self.dtype, lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        if self.kind == "swiglu":
            gate = Dense(self.d_ff, (axes.EMBED, axes.MLP), name="wi_gate", **kw)(x)
            up = Dense(self.d_ff, (axes.EMBED, axes.MLP), name="wi_up", **kw)(x)
            h = jax.nn.silu(gate) * up  # [B, T, F]
        elif self.kind == "gelu":
            h = jax.nn.gelu(Dense(self.d_ff, (axes.EMBED, axes.MLP), name="wi", **kw)(x))
        else:
            raise ValueError(f"model.mlp={self.kind!r}: expected 'swiglu' or 'gelu'")
        return Dense(d, (axes.MLP, axes.EMBED), name="wo", **kw)(h)


@flax.struct.dataclass
class LayerCache:
    """Key/value buffer of one attention layer: k, v [B, S, N, H]."""

    k: jax.Array
    v: jax.Array


def write_rows(buf: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
    """buf [B, S, ...] with new [B, C, ...] written at slots start[b] .. start[b] + C - 1."""

    def one(b, n, s):
        return jax.lax.dynamic_update_slice_in_dim(b, n.astype(b.dtype), s, axis=0)

    return jax.vmap(one)(buf, new, start)


def attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax attention. q [B, T, N, H], k/v [B, S, N, H], mask bool [B, T, S] -> [B, T, N, H].

    Rows whose mask is all False (padding queries) return zeros, never NaN.
    """
    h = q.shape[-1]
    logits = jnp.einsum("BTNH,BSNH->BNTS", q, k).astype(jnp.float32) / jnp.sqrt(h)
    logits = jnp.where(mask[:, None], logits, NEG_INF)
    probs = jax.nn.softmax(logits, axis=-1)
    probs = jnp.where(mask[:, None], probs, 0.0)
    return jnp.einsum("BNTS,BSNH->BTNH", probs.astype(v.dtype), v)


class Attention(nn.Module):
    num_heads: int
    head_dim: int
    dtype: Dtype = jnp.float32
    rope_theta: float = 10_000.0
    lora_rank: int = 0
    lora_alpha: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, positions: jax.Array, mask: jax.Array,
                 cache: LayerCache | None = None, write_start: jax.Array | None = None
                 ) -> tuple[jax.Array, LayerCache | None]:  # fmt: skip
        """x [B, T, D], positions [B, T] (RoPE; ignored when rope_theta == 0), mask bool
        [B, T, S].

        cache None: keys are the T positions of x (S == T). Else the new keys/values are
        written into the cache at slots write_start[b] .. + T - 1 and attention runs over the
        whole buffer (S = cache length); returns the updated cache.
        """
        d = x.shape[-1]
        nh = (self.num_heads, self.head_dim)
        kw = dict(dtype=self.dtype, lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        names = (axes.EMBED, axes.HEADS, axes.KV)
        q = Dense(nh, names, name="q", **kw)(x)  # [B, T, N, H]
        k = Dense(nh, names, name="k", **kw)(x)
        v = Dense(nh, names, name="v", **kw)(x)
        if self.rope_theta:  # 0 = no rotary embedding (e.g. the conformer ASR)
            q = apply_rope(q, positions, self.rope_theta)
            k = apply_rope(k, positions, self.rope_theta)
        if cache is not None:
            cache = LayerCache(k=write_rows(cache.k, k, write_start),
                               v=write_rows(cache.v, v, write_start))  # fmt: skip
            k, v = cache.k.astype(q.dtype), cache.v.astype(q.dtype)
        out = attend(q, k, v, mask)  # [B, T, N, H]
        out = Dense(d, (axes.HEADS, axes.KV, axes.EMBED), in_axes=2, name="o", **kw)(out)
        return out, cache


class Block(nn.Module):
    num_heads: int
    head_dim: int
    d_ff: int
    mlp: str = "swiglu"
    dropout: float = 0.0
    dtype: Dtype = jnp.float32
    rope_theta: float = 10_000.0
    lora_rank: int = 0
    lora_alpha: float = 0.0

    @nn.compact
    def __call__(self, x, positions, mask, cache=None, write_start=None, *, train=False):
        lora = dict(lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        h, cache = Attention(self.num_heads, self.head_dim, self.dtype, self.rope_theta,
                             name="attn", **lora)(RMSNorm(name="attn_norm")(x), positions, mask,
                                                  cache, write_start)  # fmt: skip
        x = x + nn.Dropout(self.dropout, deterministic=not train)(h.astype(jnp.float32))
        h = MLP(self.d_ff, self.mlp, self.dtype, name="mlp", **lora)(RMSNorm(name="mlp_norm")(x))
        x = x + nn.Dropout(self.dropout, deterministic=not train)(h.astype(jnp.float32))
        return x, cache


class TransformerStack(nn.Module):
    """`num_layers` pre-norm blocks + final RMSNorm over input embeddings [B, T, D]."""

    num_layers: int
    num_heads: int
    head_dim: int
    d_ff: int
    mlp: str = "swiglu"
    dropout: float = 0.0
    dtype: Dtype = jnp.float32
    rope_theta: float = 10_000.0
    lora_rank: int = 0
    lora_alpha: float = 0.0

    @nn.compact
    def __call__(
        self, x: jax.Array, positions: jax.Array, mask: jax.Array,
        caches: Sequence[LayerCache] | None = None, write_start: jax.Array | None = None,
        *, train: bool = False,
    ) -> tuple[jax.Array, tuple[LayerCache, ...] | None]:
        """x [B, T, D] float32 -> (hidden [B, T, D] after the final norm, updated caches)."""
        new_caches = []
        for i in range(self.num_layers):
            x, c = Block(self.num_heads, self.head_dim, self.d_ff, self.mlp, self.dropout,
                         self.dtype, self.rope_theta, self.lora_rank, self.lora_alpha,
                         name=f"layer_{i}")(x, positions, mask,
                                            None if caches is None else caches[i], write_start,
                                            train=train)  # fmt: skip
            new_caches.append(c)
        return RMSNorm(name="final_norm")(x), (None if caches is None else tuple(new_caches))

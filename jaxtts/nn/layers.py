"""Dense (+ LoRA), norms, rotary embeddings and the MLP: the parameterised building blocks
every model family shares (functional Flax linen).

- `Dense`: einsum dense layer whose kernel carries logical axis names (for the mesh rules) and
  an optional LoRA adapter (`lora_rank > 0`: `W x + (alpha / r) B A x`, B zero-initialised, so
  an adapted model starts exactly at the frozen one). Freezing is the trainer's job
  (`config.train.trainable`, see `jaxtts.train.state`) or the optimizer's
  (`jaxtts.train.optim.make_optimizer(trainable=...)`), e.g. `lora_only` below.
- `RMSNorm`, rotary position embeddings (`apply_rope`), `MLP` (SwiGLU or GELU).
- `conv.py` holds the masked 1-D convolution / LayerNorm / bias-Dense helpers of the conformer
  ASR and the speaker encoder; `attention.py` the attention over an explicit KV buffer;
  `masks.py` every visibility mask; `transformer.py` the configurable block stack.

All softmax / norm arithmetic is float32; matmuls run in `dtype` (bf16 optional) with float32
parameters. Axis letters (see `jaxtts.nn.axes`): B batch, T query length, S key length,
D model width, N heads, H head dim, F MLP width, L layers, R LoRA rank.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.nn import axes

Dtype = Any


def _dtype(name: str | Dtype) -> Dtype:
    return jnp.dtype(name) if isinstance(name, str) else name


def param_with_axes(
    module: nn.Module,
    name: str,
    init: Callable,
    shape: Sequence[int],
    names: tuple,
    dtype=jnp.float32,
):
    """`module.param` with logical axis names attached (for `nn.get_partition_spec`)."""
    return module.param(name, nn.with_logical_partitioning(init, names), tuple(shape), dtype)


def matmul(eq: str, x: jax.Array, kernel: jax.Array, dtype: Dtype) -> jax.Array:
    """`jnp.einsum(eq, x, kernel)` with both operands in `dtype` (x [..., *in], kernel
    [*in, *out], `eq` of the form "...<in>,<in><out>->...<out>").

    float32: a plain float32 einsum. A lower precision (bfloat16): the operands in `dtype`,
    products accumulated and returned in float32 (a bfloat16 output costs 7x on XLA's CPU
    backend: 17 vs 2.1 ms for a 12-layer, 3-row forward). On the CPU backend one row
    (x of one vector) is padded to two: XLA's CPU bfloat16 dot has no fast one-row path (15
    vs 2.2 ms a 12-layer forward), while from two rows up it runs at the memory's speed,
    2.1-2.4 ms for 2 to 8 rows against float32's 2.0 (1 row) to 4.9 ms (8 rows): RESULTS
    precision.
    """
    dt = _dtype(dtype)
    if dt == jnp.float32:
        return jnp.einsum(eq, x.astype(dt), kernel.astype(dt))
    n_in = len(eq.split(",")[0].replace("...", ""))
    rows = math.prod(x.shape[: x.ndim - n_in])
    if rows == 1 and jax.default_backend() == "cpu":
        flat = x.reshape((1, *x.shape[x.ndim - n_in :]))
        two = jnp.concatenate([flat, flat], axis=0).astype(dt)  # [2, *in]
        y = jnp.einsum(eq, two, kernel.astype(dt), preferred_element_type=jnp.float32)[:1]
        return y.reshape((*x.shape[: x.ndim - n_in], *y.shape[1:]))
    return jnp.einsum(eq, x.astype(dt), kernel.astype(dt), preferred_element_type=jnp.float32)


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
                1.0,
                "fan_in",
                "truncated_normal",
                in_axis=tuple(range(self.in_axes)),
                out_axis=out_axis,
            )
        kernel = param_with_axes(self, "kernel", init, (*in_shape, *feats), self.names)
        letters = "abcdefgh"
        xi = letters[: self.in_axes]
        fo = "wxyz"[: len(feats)]
        eq = f"...{xi},{xi}{fo}->...{fo}"
        dt = _dtype(self.dtype)
        y = matmul(eq, x, kernel, dt)
        if self.lora_rank > 0:
            a = param_with_axes(
                self,
                "lora_a",
                nn.initializers.normal(1.0 / fan_in**0.5),
                (*in_shape, self.lora_rank),
                (*self.names[: self.in_axes], None),
            )
            b = param_with_axes(
                self,
                "lora_b",
                nn.initializers.zeros,
                (self.lora_rank, *feats),
                (None, *self.names[self.in_axes :]),
            )
            scale = (self.lora_alpha or self.lora_rank) / self.lora_rank
            low = matmul(f"...{xi},{xi}r->...r", x, a, dt)
            y = y + scale * matmul(f"...r,r{fo}->...{fo}", low, b, dt)
        if self.use_bias:
            bias = param_with_axes(
                self, "bias", nn.initializers.zeros, feats, self.names[self.in_axes :]
            )
            y = y + bias.astype(y.dtype)
        return y


class Kernel(nn.Module):
    """A bare kernel parameter `kernel` of `shape` (logical axes `names`), returned as it is:
    for layers that slice or stack their weights themselves (the fused projections of
    `fuse_projections`). Initialised lecun-normal over the first axis (fan-in)."""

    shape: tuple[int, ...]
    names: tuple

    @nn.compact
    def __call__(self) -> jax.Array:
        init = nn.initializers.variance_scaling(
            1.0, "fan_in", "truncated_normal", in_axis=0, out_axis=tuple(range(1, len(self.shape)))
        )
        return param_with_axes(self, "kernel", init, self.shape, self.names)


# (fused name, stacked names): the projections that read the same input, stacked on a new
# axis 1 of one kernel by `fuse_projections`
FUSED_PROJECTIONS = (("qkv", ("q", "k", "v")), ("wi_fused", ("wi_gate", "wi_up")))


def fuse_projections(params: Any) -> Any:
    """The parameters of the same stack built with `StackConfig(fused=True)`: in every block
    the q / k / v kernels [D, N, H] stacked into `qkv` [D, 3, N, H] and the SwiGLU gate / up
    kernels [D, F] into `wi_fused` [D, 2, F]. A decoding layout, built once at load
    (`jaxtts.decode.precision.at_precision`): one matmul instead of three or two, which on
    XLA's CPU backend saves a dot's fixed cost (~15-20 us) five times a layer and step (RESULTS
    fused-layout: FAR -7 %, the multi-token rows -2 % a call). The same function: each output
    element is the same dot product. Nodes with LoRA adapters are left as they are (merge them
    first: `merge_lora`)."""

    def walk(node):
        if not isinstance(node, Mapping):
            return node
        out = {k: walk(v) for k, v in node.items()}
        for fused, parts in FUSED_PROJECTIONS:
            subs = [node.get(n) for n in parts]
            if all(isinstance(x, Mapping) and set(x) == {"kernel"} for x in subs):
                for n in parts:
                    del out[n]
                out[fused] = {"kernel": jnp.stack([x["kernel"] for x in subs], axis=1)}
        return out

    return walk(params)


def lora_only(params: Any) -> Any:
    """`trainable` predicate for the optimizer: True for LoRA leaves only."""

    def leaf(path, _):
        return any(getattr(k, "key", None) in ("lora_a", "lora_b") for k in path)

    return jax.tree_util.tree_map_with_path(leaf, params)


def merge_lora(params: Any, lora_rank: int, lora_alpha: float = 0.0) -> Any:
    """Fold every LoRA adapter into its kernel, W' = W + (alpha / r) A B, and drop the adapter
    leaves: the parameters of the same model built with `lora_rank=0`. Decoding does this once
    at load (TLDR's adapted backbone): the adapters' two extra matmuls per projection are
    14 small ops per layer, 0.3-0.8 ms of a 12-layer batch-1 step on 2 CPU cores (RESULTS
    tldr-step). Equal to the adapted forward up to float32 rounding."""
    if lora_rank <= 0:
        return params
    scale = (lora_alpha or lora_rank) / lora_rank

    def walk(node):
        if not isinstance(node, Mapping):
            return node
        out = {k: walk(v) for k, v in node.items() if k not in ("lora_a", "lora_b")}
        if "lora_a" in node and "lora_b" in node:
            a, b = node["lora_a"], node["lora_b"]  # [*in, R], [R, *out]
            out["kernel"] = node["kernel"] + scale * jnp.tensordot(a, b, axes=1)
        return out

    return walk(params)


class RMSNorm(nn.Module):
    eps: float = 1e-6

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [..., D] -> [..., D] float32
        scale = param_with_axes(self, "scale", nn.initializers.ones, (x.shape[-1],), (axes.EMBED,))
        x = x.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return x * scale


@flax.struct.dataclass
class RopeTable:
    """cos and sin of the rotary angles of positions [B, T]: [B, T, 1, H/2] each.

    A `TransformerStack` computes it once per forward and hands it to every layer in place of
    the positions. `lookup` reads it from a table of every position below a static bound,
    computed once when the function is traced: the cos / sin of traced angles are fused by
    XLA into every layer's query and key fusions and evaluated again for every head and
    element there (4 ms of a 23 ms 12-layer prefill of 141 rows on 2 CPU cores, RESULTS
    rope-table). Indexing slices positions like an array: `table[:, -n:]`."""

    cos: jax.Array
    sin: jax.Array

    @classmethod
    def of(cls, positions: jax.Array, head_dim: int, theta: float = 10_000.0) -> RopeTable:
        """The table of traced positions, computed in the graph."""
        freq = theta ** (-jnp.arange(0, head_dim // 2, dtype=jnp.float32) * 2.0 / head_dim)
        ang = positions.astype(jnp.float32)[..., None] * freq  # [B, T, H/2]
        return cls(jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :])

    @classmethod
    def lookup(
        cls, positions: jax.Array, bound: int, head_dim: int, theta: float = 10_000.0
    ) -> RopeTable:
        """The table of positions [B, T] in [0, bound), gathered from constant cos / sin rows
        of 0 .. bound - 1 (the same float32 values as `of`); positions outside are clipped
        (callers pass a bound above every position they can produce)."""
        cos, sin = _rope_rows(int(bound), int(head_dim), float(theta))  # [bound, H/2]
        idx = jnp.clip(positions, 0, bound - 1)
        return cls(jnp.take(cos, idx, axis=0)[:, :, None], jnp.take(sin, idx, axis=0)[:, :, None])

    def __getitem__(self, index) -> RopeTable:
        return RopeTable(self.cos[index], self.sin[index])


@functools.lru_cache(maxsize=64)
def _rope_rows(bound: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos / sin [bound, H/2] of positions 0 .. bound - 1, evaluated now by the same XLA ops
    as `RopeTable.of` (so the values equal the in-graph ones) and kept as numpy constants."""
    with jax.ensure_compile_time_eval():
        t = RopeTable.of(jnp.arange(bound, dtype=jnp.int32)[None], head_dim, theta)
        return np.asarray(t.cos[0, :, 0]), np.asarray(t.sin[0, :, 0])


def apply_rope(x: jax.Array, positions: jax.Array | RopeTable, theta: float = 10_000.0):
    """Rotary embedding (half-split convention). x [B, T, N, H], positions int [B, T] or their
    `RopeTable` (then `theta` is unused)."""
    if not isinstance(positions, RopeTable):
        positions = RopeTable.of(positions, x.shape[-1], theta)
    cos, sin = positions.cos, positions.sin  # [B, T, 1, H/2]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def sinusoidal(positions: jax.Array, d: int) -> jax.Array:
    """Sinusoidal features [..., D] of (integer or continuous) positions [...]: sin on the first
    half of the features, cos after, frequencies 10000^(-i / (D/2 - 1))."""
    half = d // 2
    freq = jnp.exp(-math.log(10_000.0) * jnp.arange(half, dtype=jnp.float32) / max(half - 1, 1))
    ang = jnp.asarray(positions, jnp.float32)[..., None] * freq  # [..., D/2]
    table = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], axis=-1)
    return jnp.pad(table, [(0, 0)] * (table.ndim - 1) + [(0, d - 2 * half)])


class MLP(nn.Module):
    d_ff: int
    kind: str = "swiglu"  # or "gelu"
    dtype: Dtype = jnp.float32
    lora_rank: int = 0
    lora_alpha: float = 0.0
    # SwiGLU's gate/up stacked as one `wi_fused` [D, 2, F] (`fuse_projections`); a GELU MLP has
    # one input kernel and ignores it
    fused: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:  # [B, T, D] -> [B, T, D]
        d = x.shape[-1]
        kw = dict(dtype=self.dtype, lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        if self.fused and self.lora_rank:
            raise ValueError("MLP(fused=True): an MLP without LoRA only (merge it first)")
        if self.fused and self.kind == "swiglu":
            w = Kernel((d, 2, self.d_ff), (axes.EMBED, None, axes.MLP), name="wi_fused")()
            with jax.named_scope("wi_fused"):  # profiles name the fused dot as the kernel's
                gu = matmul("...d,dcf->...cf", x, w, jnp.dtype(self.dtype))  # [B, T, 2, F]
            gate, up = jnp.unstack(gu, axis=-2)
            h = jax.nn.silu(gate) * up  # [B, T, F]
        elif self.kind == "swiglu":
            gate = Dense(self.d_ff, (axes.EMBED, axes.MLP), name="wi_gate", **kw)(x)
            up = Dense(self.d_ff, (axes.EMBED, axes.MLP), name="wi_up", **kw)(x)
            h = jax.nn.silu(gate) * up  # [B, T, F]
        elif self.kind == "gelu":
            h = jax.nn.gelu(Dense(self.d_ff, (axes.EMBED, axes.MLP), name="wi", **kw)(x))
        else:
            raise ValueError(f"model.mlp={self.kind!r}: expected 'swiglu' or 'gelu'")
        return Dense(d, (axes.MLP, axes.EMBED), name="wo", **kw)(h)

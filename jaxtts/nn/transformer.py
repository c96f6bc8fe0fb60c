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
import numpy as np

from jaxtts.nn.attention import Attention, LayerCache, take_rows
from jaxtts.nn.layers import MLP, RMSNorm, RopeTable


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
    # decoding's parameter layout: each block's q/k/v and gate/up kernels stacked into one
    # (`jaxtts.nn.layers.fuse_projections`; set by `jaxtts.decode.precision.at_precision`)
    fused: bool = False

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
    def __call__(
        self,
        x,
        positions,
        mask,
        cache=None,
        write_start=None,
        *,
        train=False,
        bias=None,
        capture=False,
        defer_write=False,
        queries=0,
        prefix=0,
        rows=None,
    ):
        """queries > 0: only the last `queries` positions of x are computed (their attention
        over all of x, their MLP): [B, queries, D], those rows of the full output. rows int32
        [B, R]: only those positions are computed (`Attention`'s rows; keys of all)."""
        c = self.cfg
        lora = dict(lora_rank=c.lora_rank, lora_alpha=c.lora_alpha)
        dtype = jnp.dtype(c.dtype)
        h, cache = Attention(
            c.num_heads, c.head_dim, dtype, c.rope_theta, fused=c.fused, name="attn", **lora
        )(
            RMSNorm(name="attn_norm")(x),
            positions,
            mask,
            cache,
            write_start,
            bias,
            capture,
            defer_write=defer_write,
            queries=queries,
            prefix=prefix,
            rows=rows,
        )
        if queries:
            x = x[:, -queries:]
        if rows is not None:
            x = take_rows(x, rows)
        x = x + nn.Dropout(c.dropout, deterministic=not train)(h.astype(jnp.float32))
        h = MLP(c.d_ff, c.mlp, dtype, fused=c.fused, name="mlp", **lora)(
            RMSNorm(name="mlp_norm")(x)
        )
        x = x + nn.Dropout(c.dropout, deterministic=not train)(h.astype(jnp.float32))
        return x, cache


class TransformerStack(nn.Module):
    """Pre-norm blocks `layer_<i>` + a final RMSNorm over input embeddings [B, T, D]."""

    cfg: StackConfig

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        mask: jax.Array | Sequence[jax.Array],
        caches: Sequence[LayerCache] | None = None,
        write_start: jax.Array | None = None,
        *,
        layers: Sequence[int] | None = None,
        train: bool = False,
        attn_bias: jax.Array | None = None,
        bias_layers: Sequence[int] = (),
        defer_write: bool = False,
        prefix: int | Sequence[int] = 0,
        out_rows: jax.Array | None = None,
    ) -> tuple[jax.Array, tuple[LayerCache, ...] | None]:
        """x [B, T, D] float32 -> (hidden [B, T, D] after the final norm, updated caches).

        mask, write_start, prefix: one for every block, or a tuple of one per block run (in
        `layers` order: `TTSLM`'s `text_layers`, where some blocks do not see the text and
        cache no text slots). prefix: `Attention`'s (a prefill that does not cache the first
        `prefix` positions).
        layers: which blocks run, in order (default all); caches[j] belongs to layers[j].
        attn_bias [B, N, T, S]: added to the attention logits of the blocks in `bias_layers`,
        which also sow their logits (`intermediates/layer_<i>/attn/attn_logits`): the
        alignment prior and loss of `jaxtts.train.align` (training only).
        defer_write: the caches are read, not written; the returned tuple holds each layer's
        new keys/values [B, N, T, H] instead (`jaxtts.nn.attention`).
        out_rows int32 [B, R]: only these positions' hidden states are returned, [B, R, D]; the
        last block then computes its queries, attention output and MLP at them alone (its
        keys/values at every position: the cache is filled as without it). A prefill that
        reads one hidden state per row saves most of a block (RESULTS deep-call).
        """
        run = self.cfg.check_layers(layers)
        self.cfg.check_layers(bias_layers or None)
        if caches is not None and len(caches) != len(run):
            raise ValueError(f"{len(caches)} layer caches for {len(run)} layers")

        def per_layer(name, arg):
            out = tuple(arg) if isinstance(arg, (tuple, list)) else (arg,) * len(run)
            if len(out) != len(run):
                raise ValueError(f"{len(out)} values of {name} for {len(run)} layers")
            return out

        masks, starts = per_layer("mask", mask), per_layer("write_start", write_start)
        prefixes = per_layer("prefix", prefix)
        if self.cfg.rope_theta and not isinstance(positions, RopeTable):
            positions = RopeTable.of(positions, self.cfg.head_dim, self.cfg.rope_theta)
        new_caches = []
        for j, i in enumerate(run):
            x, c = Block(self.cfg, name=f"layer_{i}")(
                x,
                positions,
                masks[j],
                None if caches is None else caches[j],
                starts[j],
                train=train,
                bias=attn_bias if i in bias_layers else None,
                capture=i in bias_layers,
                defer_write=defer_write,
                prefix=prefixes[j],
                rows=out_rows if j == len(run) - 1 else None,
            )
            new_caches.append(c)
        return RMSNorm(name="final_norm")(x), (None if caches is None else tuple(new_caches))


# Parameters of a block whose output is added to the residual stream: zeroing them makes the
# block the identity (pre-norm: x + o(attn(norm x)) + wo(mlp(norm x)) = x).
OUTPUT_PROJECTIONS = (("attn", "o"), ("mlp", "wo"))


def check_layer_map(layer_map: Sequence[int], src_layers: int, num_layers: int) -> tuple[int, ...]:
    """The new index of each old layer (strictly increasing, in [0, num_layers)); a bad map is
    a ValueError naming both depths."""
    m = tuple(int(i) for i in layer_map)
    where = f"layer_map={','.join(map(str, m))} (a {src_layers}-layer stack into {num_layers})"
    if num_layers < src_layers:
        raise ValueError(f"{where}: the new depth must be >= the old one")
    if len(m) != src_layers:
        raise ValueError(f"{where}: expected one new index per old layer ({src_layers})")
    if any(b <= a for a, b in zip(m[:-1], m[1:], strict=True)) or m[0] < 0 or m[-1] >= num_layers:
        raise ValueError(f"{where}: expected strictly increasing indices in [0, {num_layers})")
    return m


def identity_copy(layer: dict) -> dict:
    """A copy of one block's parameters with its output projections (`OUTPUT_PROJECTIONS`,
    LoRA factors included) at zero: the block then adds nothing to the residual stream."""

    def leaf(path, x):
        keys = tuple(str(getattr(k, "key", k)) for k in path)
        return np.zeros_like(x) if keys[:2] in OUTPUT_PROJECTIONS else np.array(x)

    return jax.tree_util.tree_map_with_path(leaf, layer)


def expand_layers(stack: dict, num_layers: int, layer_map: Sequence[int]) -> dict:
    """Function-preserving block expansion of a `TransformerStack`'s parameter dict.

    Old `layer_i` becomes `layer_{layer_map[i]}` unchanged; every other new layer is an
    `identity_copy` of the next old layer above it (the last old layer when none is), so the
    expanded stack computes exactly what the old one did (LLaMA-Pro style: the copy gives the
    new layer trained query/key/MLP features to start from, the zeros keep the function).
    `final_norm` and anything else that is not a layer are kept as they are.
    """
    src = sorted(int(k.split("_")[1]) for k in stack if k.startswith("layer_"))
    if src != list(range(len(src))):
        raise ValueError(f"stack layers {src}: expected layer_0..layer_{len(src) - 1}")
    m = check_layer_map(layer_map, len(src), num_layers)
    out = {k: v for k, v in stack.items() if not k.startswith("layer_")}
    for new in range(num_layers):
        if new in m:
            out[f"layer_{new}"] = stack[f"layer_{m.index(new)}"]
        else:
            above = [i for i, j in enumerate(m) if j > new]
            out[f"layer_{new}"] = identity_copy(stack[f"layer_{above[0] if above else len(m) - 1}"])
    return out

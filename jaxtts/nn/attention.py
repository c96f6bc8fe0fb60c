"""Multi-head attention over an explicit key/value buffer.

Without a cache the keys are the block itself (training); with a `LayerCache` the block's
keys/values are first written into the buffer at a per-row slot offset (`write_rows`), then the
queries attend over the whole buffer (decoding loops grow the buffer in steps, so its size
follows the valid length: `jaxtts.decode.driver`). The visibility mask is an argument
(`jaxtts.nn.masks`): layers never decide causality themselves.

`defer_write=True` attends the same keys without writing: the buffer's slots that this block
would fill are masked and the block's own keys/values are attended beside the buffer; the layer
returns the block (`LayerCache` of [B, N, T, H]) for the caller to write later. A write inside
a `lax.cond` / `lax.switch` branch copies the whole buffer on XLA (the conditional cannot update
its operand in place: 7 ms a step for a 12-layer batch-8 cache on 2 CPU cores), so a decode step
that branches on its size runs the branch deferred and writes after it
(`jaxtts.methods.lm.strategies.dynamic_chunk_step`).

The cache holds keys/values head-major, `[B, N, S, H]`: the attention contractions then read
it in place (the `[B, S, N, H]` layout cost a transpose of the whole cache per layer and step:
4x slower attention on CPU at batch 32, benchmarks/RESULTS.md section 10).

A decode whose steps attend with several query rows (CAR, VADUSA, DCAR) holds its keys
transposed, `LayerCache(keys_t=True)`: k [B, N, H, S]. On XLA's CPU backend the logits of 2-6
queries against [S, H] keys contract the minor axis of both operands, a slow path (83 us for 3
queries over 512 slots); against [H, S] keys they are a row-major matmul (35 us). One-row
steps keep [B, N, S, H]: their logits are fused without a matmul, and a one-slot write of a
transposed key is a strided column (RESULTS keys-t). A prefill (8 or more queries) reads a
head-major buffer through `k.swapaxes(2, 3)` for the same reason (docs/history/deep.md §deep-call).

Axis letters: B batch, T query length, S key length, D width, N heads, H head dim.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.nn import axes
from jaxtts.nn.layers import Dense, Kernel, RopeTable, apply_rope, matmul

Dtype = Any
NEG_INF = -1e30


@flax.struct.dataclass
class LayerCache:
    """Key/value buffer of one attention layer: k, v [B, N, S, H] (head-major); with
    `keys_t`, k is held transposed, [B, N, H, S] (module docstring: decoding steps of several
    query rows)."""

    k: jax.Array
    v: jax.Array
    keys_t: bool = flax.struct.field(pytree_node=False, default=False)

    @property
    def slots(self) -> int:
        return self.v.shape[2]

    def write(self, k: jax.Array, v: jax.Array, start: jax.Array) -> LayerCache:
        """k, v [B, N, T, H] written at slots start[b] .. + T - 1 of row b."""
        if self.keys_t:
            kt = k.transpose(0, 1, 3, 2)  # [B, N, H, T]
            return self.replace(
                k=write_rows(self.k, kt, start, axis=3), v=write_rows(self.v, v, start, axis=2)
            )
        return self.replace(
            k=write_rows(self.k, k, start, axis=2), v=write_rows(self.v, v, start, axis=2)
        )

    def insert_slots(self, at: int, extra: int) -> LayerCache:
        """`extra` zero slots inserted before slot `at` (slots at.. move up by `extra`)."""
        return self.replace(
            k=_insert_zeros(self.k, at, extra, 3 if self.keys_t else 2),
            v=_insert_zeros(self.v, at, extra, 2),
        )

    def grow(self, extra: int) -> LayerCache:
        """`extra` more slots (zeros) at the end."""
        pad_v = ((0, 0), (0, 0), (0, extra), (0, 0))
        pad_k = ((0, 0), (0, 0), (0, 0), (0, extra)) if self.keys_t else pad_v
        return self.replace(k=jnp.pad(self.k, pad_k), v=jnp.pad(self.v, pad_v))


def _insert_zeros(x: jax.Array, at: int, extra: int, axis: int) -> jax.Array:
    shape = list(x.shape)
    shape[axis] = extra
    head, tail = jnp.split(x, [at], axis=axis)
    return jnp.concatenate([head, jnp.zeros(shape, x.dtype), tail], axis=axis)


def write_rows(buf: jax.Array, new: jax.Array, start: jax.Array, axis: int = 1) -> jax.Array:
    """buf [B, ..., S, ...] with new [B, ..., C, ...] written at slots start[b] .. + C - 1 of
    `axis` (1: token buffers [B, N]; 2: head-major KV buffers [B, N, S, H]; 3: transposed
    keys [B, N, H, S])."""

    if buf.shape[0] == 1 and axis == 2 and new.shape[2] == 1:
        return _write_one_slot(buf, new.astype(buf.dtype), start[0])

    def one(b, n, s):
        return jax.lax.dynamic_update_slice_in_dim(b, n.astype(b.dtype), s, axis=axis - 1)

    return jax.vmap(one)(buf, new, start)


def _write_one_slot(buf: jax.Array, new: jax.Array, start: jax.Array) -> jax.Array:
    """`write_rows` of one token into a one-row head-major buffer: buf [1, N, S, H] <- new
    [1, N, 1, H] at slot `start` (clamped into the buffer), as a scatter that writes the slot
    twice with the same values. XLA turns a one-index scatter (and a `vmap`ped one-row
    update) into a dynamic-update-slice, and that update of a loop-carried buffer is not done
    in place on CPU when a dot then reads the buffer: every batch-1 FAR step copied each
    layer's cache (24 buffers of [1, 4, 384, 64] in a loop: 2.5 vs 0.6 ms a step; `car_deep`
    FAR at batch 1, 150 tokens: 732-814 vs 549-617 ms). A scatter of two indices is updated
    in place. Several tokens (C > 1) or rows are updated in place already (tested in
    `test_decode_loop_writes_the_cache_in_place`)."""
    at = jnp.stack([jnp.zeros((), jnp.int32), start.astype(jnp.int32)])  # (row, slot)
    dims = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(1, 2),  # N, H
        inserted_window_dims=(0, 2),
        scatter_dims_to_operand_dims=(0, 2),
    )
    upd = new[0, :, 0][None].repeat(2, 0)  # [2, N, H]
    return jax.lax.scatter(buf, jnp.stack([at, at]), upd, dims, mode=jax.lax.GatherScatterMode.CLIP)


def take_rows(x, rows: jax.Array):
    """x [B, T, ...] (an array or a `RopeTable`) at positions rows int32 [B, R] -> [B, R, ...]."""
    if isinstance(x, RopeTable):
        return RopeTable(take_rows(x.cos, rows), take_rows(x.sin, rows))
    idx = rows.reshape(rows.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, idx.astype(jnp.int32), axis=1)


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    mask: jax.Array,
    bias: jax.Array | None = None,
    block: tuple[jax.Array, jax.Array, jax.Array] | None = None,
    keys_t: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Softmax attention. q [B, T, N, H], k/v [B, N, S, H], mask bool [B, T, S], bias float
    [B, N, T, S] or None (added to the logits of visible keys: an alignment prior) ->
    (out [B, T, N, H], logits float32 [B, N, T, S] after the bias, NEG_INF where masked).

    block (k2, v2 [B, N, R, H], mask2 bool [B, T, R]): R more keys attended in the same
    softmax as the buffer's (a deferred write's own keys); the logits are then [B, N, T, S + R].

    Rows whose mask is all False (padding queries) return zeros, never NaN. Batch and heads
    are folded into one batch axis (free for head-major k/v): XLA's CPU batched matmul is then
    4-5x faster for the few-query steps of decoding than with two batch axes. Callers that do
    not use the logits leave them to dead-code elimination.
    """
    b, t, n, h = q.shape
    s = v.shape[2]
    qf = q.transpose(0, 2, 1, 3).reshape(b * n, t, h)  # [BN, T, H]
    vf = v.reshape(b * n, s, h)  # [BN, S, H]
    if keys_t:
        kf = k.reshape(b * n, h, s)  # [BN, H, S]
        logits = jnp.einsum("ZTH,ZHS->ZTS", qf, kf)
    else:
        kf = k.reshape(b * n, s, h)  # [BN, S, H]
        logits = jnp.einsum("ZTH,ZSH->ZTS", qf, kf)
    logits = logits.astype(jnp.float32) / jnp.sqrt(h)
    if bias is not None:
        logits = logits + jnp.broadcast_to(bias, (b, n, t, s)).reshape(b * n, t, s)
    m = jnp.broadcast_to(mask[:, None], (b, n, t, s)).reshape(b * n, t, s)  # [BN, T, S]
    if block is not None:
        k2, v2, mask2 = block
        r = k2.shape[2]
        k2f, v2f = k2.reshape(b * n, r, h), v2.reshape(b * n, r, h)  # [BN, R, H]
        l2 = jnp.einsum("ZTH,ZRH->ZTR", qf, k2f).astype(jnp.float32) / jnp.sqrt(h)
        m2 = jnp.broadcast_to(mask2[:, None], (b, n, t, r)).reshape(b * n, t, r)
        logits, m, s = jnp.concatenate([logits, l2], -1), jnp.concatenate([m, m2], -1), s + r
    logits = jnp.where(m, logits, NEG_INF)
    probs = jnp.where(m, jax.nn.softmax(logits, axis=-1), 0.0)
    if block is None:
        out = jnp.einsum("ZTS,ZSH->ZTH", probs.astype(vf.dtype), vf)  # [BN, T, H]
    else:
        p1, p2 = probs[..., : s - r].astype(vf.dtype), probs[..., s - r :].astype(v2f.dtype)
        out = jnp.einsum("ZTS,ZSH->ZTH", p1, vf) + jnp.einsum("ZTR,ZRH->ZTH", p2, v2f)
    return out.reshape(b, n, t, h).transpose(0, 2, 1, 3), logits.reshape(b, n, t, s)


# From this many query rows on, a cached attention contracts against transposed keys (above).
_KEYS_T_QUERIES = 8


class Attention(nn.Module):
    num_heads: int
    head_dim: int
    dtype: Dtype = jnp.float32
    rope_theta: float = 10_000.0
    lora_rank: int = 0
    lora_alpha: float = 0.0
    fused: bool = False  # q/k/v kernels stacked as one `qkv` [D, 3, N, H] (`fuse_projections`)

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        mask: jax.Array,
        cache: LayerCache | None = None,
        write_start: jax.Array | None = None,
        bias: jax.Array | None = None,
        capture: bool = False,
        context: jax.Array | None = None,
        defer_write: bool = False,
        queries: int = 0,
        prefix: int = 0,
        rows: jax.Array | None = None,
    ) -> tuple[jax.Array, LayerCache | None]:
        """x [B, T, D], positions [B, T] or their `RopeTable` (RoPE; ignored when
        rope_theta == 0), mask bool
        [B, T, S] (with `queries`: [B, queries, S]); bias [B, N, T, S] added to the attention
        logits (None: none); capture: sow the logits [B, N, T, S] (after the bias) as
        `intermediates/.../attn_logits` (the alignment loss reads them;
        `apply(..., mutable=['intermediates'])`).

        context [B, S, D]: keys/values from another sequence (cross-attention: TLDR's
        compressor and extractor; use rope_theta=0, positions then go unused).
        cache None: keys are the T positions of x (S == T). Else the new keys/values are
        written into the cache at slots write_start[b] .. + T - 1 and attention runs over the
        whole buffer (S = cache length); returns the updated cache. defer_write: the same
        attention without writing (module docstring); returns this block's keys/values
        `LayerCache` [B, N, T, H] (in the buffer's dtype) instead of the cache.
        queries > 0 (self-attention without a cache): only the last `queries` positions of x
        query (keys: all T); returns [B, queries, D], equal to those rows of the full output.
        prefix > 0 (with a cache that was empty: a prefill): the cache does not store the first
        `prefix` positions of x; the block attends to its own keys (mask [B, T, T]) and writes
        positions prefix.. at write_start (a layer that caches no text, `TTSLM.text_layers`).
        rows int32 [B, R]: only these positions of x query (mask [B, T, S] is read at them);
        the keys/values of every position are computed, cached and attended as without it;
        returns [B, R, D], equal to those rows of the full output up to float rounding (a
        stack's last block in a prefill: the other rows' outputs are never read).
        """
        d = x.shape[-1]
        nh = (self.num_heads, self.head_dim)
        kw = dict(dtype=self.dtype, lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        names = (axes.EMBED, axes.HEADS, axes.KV)
        if queries and (cache is not None or context is not None):
            raise ValueError("Attention(queries=...): self-attention without a cache only")
        if rows is not None and (queries or bias is not None or capture):
            raise ValueError("Attention(rows=...): not with queries, bias or capture")
        xq, pq = (x[:, -queries:], positions[:, -queries:]) if queries else (x, positions)
        if rows is not None:
            xq, pq, mask = take_rows(x, rows), take_rows(positions, rows), take_rows(mask, rows)
        kv_in = x if context is None else context
        if self.fused:
            if context is not None or self.lora_rank:
                raise ValueError("Attention(fused=True): self-attention without LoRA only")
            w = Kernel((d, 3, *nh), (axes.EMBED, None, axes.HEADS, axes.KV), name="qkv")()
            dt = jnp.dtype(self.dtype)
            with jax.named_scope("qkv"):  # profiles name the fused dot as the kernel's
                if xq is x:  # one [D, 3NH] matmul for all three
                    q, k, v = jnp.unstack(matmul("...d,dcnh->...cnh", x, w, dt), axis=-3)
                else:  # queries at some rows only: q apart, k/v fused
                    q = matmul("...d,dnh->...nh", xq, w[:, 0], dt)
                    k, v = jnp.unstack(matmul("...d,dcnh->...cnh", x, w[:, 1:], dt), axis=-3)
        else:
            q = Dense(nh, names, name="q", **kw)(xq)  # [B, T, N, H]
            k = Dense(nh, names, name="k", **kw)(kv_in)
            v = Dense(nh, names, name="v", **kw)(kv_in)
        if self.rope_theta and context is None:  # 0 = no rotary embedding (e.g. the conformer ASR)
            q = apply_rope(q, pq, self.rope_theta)
            k = apply_rope(k, positions, self.rope_theta)
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, N, T, H]
        block = None
        if cache is not None and defer_write:
            t, s = x.shape[1], cache.slots
            kb, vb = k.astype(cache.k.dtype), v.astype(cache.v.dtype)  # as the buffer holds them
            slot = jnp.arange(s)[None]  # [1, S]
            fresh = (slot >= write_start[:, None]) & (slot < write_start[:, None] + t)  # [B, S]
            own = write_start[:, None, None] + jnp.arange(t)[None, None]  # [B, 1, T]
            mask_own = jnp.take_along_axis(mask, jnp.broadcast_to(own, mask.shape[:2] + (t,)), 2)
            block = (kb.astype(q.dtype), vb.astype(q.dtype), mask_own)  # [B, N, T, H], [B, T, T]
            mask = mask & ~fresh[:, None]  # the buffer's stale copies of this block's slots
            keys_t = cache.keys_t
            k, v = cache.k.astype(q.dtype), cache.v.astype(q.dtype)
            cache = LayerCache(kb, vb)
        elif cache is not None and prefix:
            cache = cache.write(k[:, :, prefix:], v[:, :, prefix:], write_start)
            keys_t = False  # the block's own keys [B, N, T, H]
        elif cache is not None:
            cache = cache.write(k, v, write_start)
            keys_t = cache.keys_t
            k, v = cache.k.astype(q.dtype), cache.v.astype(q.dtype)  # [B, N, S, H] (or k^T)
        else:
            keys_t = False
        if cache is not None and not keys_t and block is None and q.shape[1] >= _KEYS_T_QUERIES:
            # A prefill's many queries against head-major keys: their logits are faster as a
            # row-major matmul against k^T (one transpose of the keys, -4-5 % a 12-layer
            # prefill on 2 CPU cores, the same values: docs/history/deep.md §deep-call).
            k, keys_t = k.swapaxes(2, 3), True  # [B, N, H, S]
        out, logits = attend(q, k, v, mask, bias, block, keys_t)  # [B, T, N, H], [B, N, T, S]
        if capture:
            self.sow("intermediates", "attn_logits", logits)
        out = Dense(d, (axes.HEADS, axes.KV, axes.EMBED), in_axes=2, name="o", **kw)(out)
        return out, cache

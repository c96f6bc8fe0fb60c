"""Decoder-only TTS language model with multi-token prediction heads (FAR / CAR / DCAR backbone).

Sequence (docs/methods/car_dcar.md): `[text prompt + target text] [BOS] [speech prompt] [speech]`.
It is held as two padded segments, so rows of different lengths never need re-packing:
  text   int32 [B, Lx]  symbol ids, valid where index < text_len (0 = PAD)
  speech int32 [B, Ly]  [BOS, speech prompt tokens, target tokens], valid where index < speech_len
Slot s of the concatenated sequence is text position s (s < Lx) or speech position s - Lx.
RoPE positions are per-row *logical* positions (text i -> i, speech j -> text_len + j), so the
padding between the segments is invisible: a row gives the same outputs in any batch
(batch-N == batch-1). Attention is a prefix-LM mask (`prefix_lm_mask`): text queries see every
valid text key (bidirectional), speech queries see all valid text keys and the speech keys at or
before them (causal).

Vocabularies: speech inputs `K_tok + 3` ids (tokens 0..K_tok-1, EOS = K_tok, BOS = K_tok + 1,
PAD = K_tok + 2); outputs `K_tok + 1` (tokens + EOS). Embedding tables and output layers are
padded to a multiple of `vocab_multiple` (128) rows/columns so the vocab axis shards evenly
over `tensor`; padded rows are never indexed and padded logits are sliced off in `heads`.

Heads (the CAR paper): the base head is a linear layer predicting y_{t+1} from h_t; each of the
K-1 additional heads is `mtp_blocks` residual blocks `h <- h + SiLU(W h + b)` then a bias-free
linear layer, predicting y_{t+k}. `apply(..., method='heads')` maps hidden states [.., D] to
logits [.., K, V].

Pieces callable apart (`apply(..., method=...)`): `embed_text`, `embed_speech` (token ids ->
vectors), `heads` (hidden -> logits of every head), and the stack over any input vectors, so
TLDR can feed patch vectors and a DCAR policy can read hidden states.

Decoding API (used by the strategies in `jaxtts.methods.lm.strategies`): `prefill` runs text +
BOS + speech prompt in one forward and fills a fixed-size `KVCache`; `extend` appends C tokens
per row at the row's own offset (`extend_embedded` appends C vectors). `KVCache.speech_len` is
per row, so a row is rolled back (speculative decoding, per-row dynamic chunks) by lowering it:
entries past it are masked and later overwritten. Every decoding method takes `layers` (a
subset of the stack's layer indices, same parameters): an SSD draft made of the target's own
layers is `layers=(0, 1, L-6, ..., L-1)` with a cache of that many layers.

`LMConfig.text_layers` (TLDR's `tldr.text_layers`; default all): only the listed layers let the
speech attend to the text; the others' caches hold the speech slots only (`KVCache.no_text`).

Axis letters: B batch, T speech positions, X text positions, S cache slots, D width, K heads,
V output vocabulary, C appended tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError
from jaxtts.nn import axes
from jaxtts.nn.attention import LayerCache
from jaxtts.nn.layers import Dense, RopeTable, param_with_axes
from jaxtts.nn.masks import prefix_lm_mask
from jaxtts.nn.transformer import StackConfig, TransformerStack

# Keys that older run folders' config.json still carry but no code ever read; ignored when a
# saved run loads, rejected in new configs (they are gone from configs/car.py).
RETIRED_MODEL_KEYS = frozenset({"max_len", "param_dtype"})


# LMConfig fields that choose a parameter layout for decoding, not a model: never config keys
LAYOUT_FIELDS = ("fused_projections",)


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """Static model hyper-parameters (from `config.model`; every key is a field)."""

    num_text_symbols: int
    num_speech_tokens: int  # K_tok: tokenizer vocabulary (without EOS/BOS/PAD)
    d_model: int = 256
    num_layers: int = 6
    num_heads: int = 4
    head_dim: int = 64
    d_ff: int = 1024
    num_mtp_heads: int = 4  # K: base head + K-1 additional heads
    mtp_blocks: int = 4
    mlp: str = "swiglu"
    dropout: float = 0.0
    dtype: str = "float32"
    rope_theta: float = 10_000.0
    lora_rank: int = 0
    lora_alpha: float = 0.0
    vocab_multiple: int = 128  # tables / output layers padded so the vocab axis shards evenly
    # the layers whose speech queries see the text prefix; () = every layer. In the others the
    # speech attends to speech only, so their caches need no text slots (TLDR's
    # `tldr.text_layers`, not in any paper: a smaller global KV)
    text_layers: tuple[int, ...] = ()
    # decoding's parameter layout (`StackConfig.fused`), set by `at_precision`: not a config key
    fused_projections: bool = False

    @property
    def eos(self) -> int:
        return self.num_speech_tokens

    @property
    def bos(self) -> int:
        return self.num_speech_tokens + 1

    @property
    def pad(self) -> int:
        return self.num_speech_tokens + 2

    @property
    def out_vocab(self) -> int:
        return self.num_speech_tokens + 1

    @property
    def stack(self) -> StackConfig:
        return StackConfig(
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            d_ff=self.d_ff,
            mlp=self.mlp,
            dropout=self.dropout,
            dtype=self.dtype,
            rope_theta=self.rope_theta,
            lora_rank=self.lora_rank,
            lora_alpha=self.lora_alpha,
            fused=self.fused_projections,
        )

    def padded(self, n: int) -> int:
        m = max(1, self.vocab_multiple)
        return -(-n // m) * m

    def kv_bytes_per_token(self, num_layers: int | None = None) -> int:
        """Bytes of K and V stored per sequence position (all layers, or `num_layers`)."""
        per_layer = 2 * self.num_heads * self.head_dim * jnp.dtype(self.dtype).itemsize
        return per_layer * (self.num_layers if num_layers is None else num_layers)

    @classmethod
    def from_config(cls, model_cfg, *, saved: bool = False) -> LMConfig:
        """From `config.model`. An unknown key is a ConfigError naming it; `saved=True` (a run
        folder's config.json) also accepts the retired keys older runs carry."""
        fields = {f.name for f in dataclasses.fields(cls)} - set(LAYOUT_FIELDS)
        d = dict(model_cfg)
        unknown = sorted(set(d) - fields - (RETIRED_MODEL_KEYS if saved else set()))
        if unknown:
            raise ConfigError(f"model.{unknown[0]}: unknown key, expected one of {sorted(fields)}")
        d = {k: v for k, v in d.items() if k in fields}
        for key in ("num_text_symbols", "num_speech_tokens"):
            if int(d.get(key, -1)) < 1:
                raise ConfigError(
                    f"model.{key}={d.get(key)}: expected a positive size (filled "
                    "from the data by the trainer)"
                )
        if d.get("num_mtp_heads", 1) < 1:
            raise ConfigError(f"model.num_mtp_heads={d['num_mtp_heads']}: expected >= 1")
        return cls(**d)


@flax.struct.dataclass
class KVCache:
    """Per-layer key/value buffers plus the per-row lengths that say which slots are valid.

    layers[l].k / .v [B, N, X + S, H] (head-major): slots 0..X-1 hold the text (valid <
    text_len), slots X + j speech position j (valid j < speech_len). One entry per layer *run*
    (all layers, or the subset a draft runs).
    """

    layers: tuple[LayerCache, ...]
    text_len: jax.Array  # int32 [B]
    speech_len: jax.Array  # int32 [B] valid speech slots (BOS + prompt + generated)
    text_slots: int = flax.struct.field(pytree_node=False)
    # text slot k holds text positions text_stride * k ...: 1 = one slot per symbol; TLDR's
    # compressed text (`tldr.text_patch`) holds one slot per Q symbols, text_len stays the
    # symbol count (so the speech positions text_len + ... do not move)
    text_stride: int = flax.struct.field(pytree_node=False, default=1)
    # indices into `layers` whose buffers hold the speech slots only ([B, N, S - X, H]: the
    # layers outside `LMConfig.text_layers`, where the speech does not see the text)
    no_text: tuple[int, ...] = flax.struct.field(pytree_node=False, default=())

    def offset(self, j: int) -> int:
        """Slot of layer j's buffer where the speech segment starts: X, or 0 without text."""
        return 0 if j in self.no_text else self.text_slots

    @property
    def num_slots(self) -> int:
        """Slots of the full layout [text | speech] (a layer with text holds all of them)."""
        return self.text_slots + self.speech_slots

    @property
    def speech_slots(self) -> int:
        return self.layers[0].slots - self.offset(0)

    def rollback(self, speech_len: jax.Array) -> KVCache:
        """Per-row rollback: keep only the first `speech_len[b]` speech slots of row b."""
        return self.replace(speech_len=jnp.minimum(self.speech_len, speech_len))

    def append(self, blocks: tuple[LayerCache, ...], count: jax.Array | None = None) -> KVCache:
        """Write each layer's new keys/values blocks[l] [B, N, C, H] at every row's speech_len
        (`TTSLM.extend_deferred`) and keep count[b] of them (default all C): slots past the
        count hold the rest of the block but stay invalid, as after `rollback`."""
        c = blocks[0].k.shape[2]
        layers = tuple(
            old.write(new.k, new.v, self.offset(j) + self.speech_len)
            for j, (old, new) in enumerate(zip(self.layers, blocks, strict=True))
        )
        n = jnp.full_like(self.speech_len, c) if count is None else count.astype(jnp.int32)
        return self.replace(layers=layers, speech_len=self.speech_len + n)

    def resize(self, speech_slots: int) -> KVCache:
        """The same cache with room for `speech_slots` speech slots (grown with zeros at the
        end; decoding grows the buffer window by window so attention follows the valid
        length)."""
        extra = self.text_slots + speech_slots - self.num_slots
        if extra < 0:
            raise ValueError(f"KVCache.resize({speech_slots}): holds {self.speech_slots} slots")
        if extra == 0:
            return self
        return self.replace(layers=tuple(c.grow(extra) for c in self.layers))

    def widen_text(self, text_width: int) -> KVCache:
        """The same cache laid out for `text_width` text symbols (ceil(text_width /
        text_stride) text slots): zero slots inserted after the text segment. They are
        invalid (a text slot is valid while its position is < text_len), so decoding from
        this cache attends to the same keys as from the prefill's; the driver's split prefill
        (`jaxtts.decode.driver.decode`)."""
        slots = -(-text_width // self.text_stride)
        extra = slots - self.text_slots
        if extra < 0:
            raise ValueError(
                f"KVCache.widen_text({text_width}): holds {self.text_slots} text slots already"
            )
        if extra == 0:
            return self
        layers = tuple(
            c if j in self.no_text else c.insert_slots(self.text_slots, extra)
            for j, c in enumerate(self.layers)
        )
        return self.replace(layers=layers, text_slots=slots)

    def key_segments(self, speech_len: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(is_speech, index in segment, valid) of every cache slot [B, S], with `speech_len`
        [B] valid speech slots: the key side of `prefix_lm_mask` for prefill and extend."""
        n, x_len = self.num_slots, self.text_slots
        b = speech_len.shape[0]
        slot = jnp.arange(n)[None]  # [1, S]
        k_speech = slot >= x_len
        k_idx = jnp.where(k_speech, slot - x_len, slot)
        text_valid = k_idx * self.text_stride < self.text_len[:, None]
        k_valid = jnp.where(k_speech, k_idx < speech_len[:, None], text_valid)
        return k_speech.repeat(b, 0), k_idx.repeat(b, 0), k_valid


def with_bos(
    speech: jax.Array, speech_len: jax.Array, cfg: LMConfig
) -> tuple[jax.Array, jax.Array]:
    """The model's speech input `[BOS, tokens..., PAD...]` int32 [B, T + 1] and its length
    speech_len + 1 [B], from raw tokens speech [B, T] (a prompt or a training target)."""
    speech, speech_len = jnp.asarray(speech), jnp.asarray(speech_len)
    b, t = speech.shape
    x = jnp.concatenate([jnp.full((b, 1), cfg.bos, jnp.int32), speech.astype(jnp.int32)], 1)
    x = jnp.where(jnp.arange(t + 1)[None] <= speech_len[:, None], x, cfg.pad)
    return x, (speech_len + 1).astype(jnp.int32)


class MTPHead(nn.Module):
    """Additional head k >= 2: `blocks` x (h + SiLU(W h + b)), then a bias-free linear to V."""

    vocab: int
    blocks: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, h: jax.Array) -> jax.Array:  # [..., D] -> [..., V]
        d = h.shape[-1]
        for i in range(self.blocks):
            z = Dense(
                d,
                (axes.EMBED, None),
                use_bias=True,
                dtype=self.dtype,
                name=f"res_{i}",
                kernel_init=nn.initializers.normal(0.02 / d**0.5),
            )(h)
            h = h + jax.nn.silu(z.astype(jnp.float32))
        return Dense(self.vocab, (axes.EMBED, axes.VOCAB), dtype=self.dtype, name="out")(h)


class TTSLM(nn.Module):
    """The TTS LM. Methods: `__call__` (training forward), `hidden_embedded`, `embed_text`,
    `embed_speech`, `heads`, `init_cache`, `prefill`, `prefill_embedded`, `extend`,
    `extend_embedded`. See the module docstring."""

    cfg: LMConfig

    def setup(self):
        c = self.cfg
        emb_init = nn.initializers.normal(1.0)
        self.text_embed = param_with_axes(
            self,
            "text_embed",
            emb_init,
            (c.padded(c.num_text_symbols), c.d_model),
            (axes.VOCAB, axes.EMBED),
        )
        self.speech_embed = param_with_axes(
            self,
            "speech_embed",
            emb_init,
            (c.padded(c.num_speech_tokens + 3), c.d_model),
            (axes.VOCAB, axes.EMBED),
        )
        self.stack = TransformerStack(c.stack)
        v = c.padded(c.out_vocab)
        self.base_head = Dense(v, (axes.EMBED, axes.VOCAB), use_bias=True, dtype=jnp.dtype(c.dtype))
        self.mtp_heads = [
            MTPHead(v, c.mtp_blocks, jnp.dtype(c.dtype), name=f"head_{k}")
            for k in range(2, c.num_mtp_heads + 1)
        ]

    # -- pieces
    def embed_text(self, text: jax.Array) -> jax.Array:
        """text ids [B, X] -> [B, X, D]."""
        return jnp.take(self.text_embed, text, axis=0)

    def embed_speech(self, speech: jax.Array) -> jax.Array:
        """speech input ids [B, T] (tokens, EOS, BOS, PAD) -> [B, T, D]."""
        return jnp.take(self.speech_embed, speech, axis=0)

    def heads(self, hidden: jax.Array, num: int | None = None) -> jax.Array:
        """hidden [..., D] -> logits float32 [..., K, V] (head k predicts k tokens ahead).
        num: compute only heads 1..num (static; a step that keeps c tokens needs c heads)."""
        num = self.cfg.num_mtp_heads if num is None else int(num)
        if not 1 <= num <= self.cfg.num_mtp_heads:
            raise ValueError(f"heads(num={num}): expected 1..{self.cfg.num_mtp_heads}")
        outs = [self.base_head(hidden)] + [h(hidden) for h in self.mtp_heads[: num - 1]]
        return jnp.stack(outs, axis=-2)[..., : self.cfg.out_vocab].astype(jnp.float32)

    def base_logits(self, hidden: jax.Array) -> jax.Array:
        """hidden [..., D] -> the base head's logits float32 [..., V] (next token only)."""
        return self.base_head(hidden)[..., : self.cfg.out_vocab].astype(jnp.float32)

    def _rope(self, pos: jax.Array, bound: int):
        """The rotary table of positions pos [B, T], every one < bound (`RopeTable.lookup`:
        read from constant rows, not computed per layer), or pos when there is no RoPE."""
        c = self.cfg.stack
        return RopeTable.lookup(pos, bound, c.head_dim, c.rope_theta) if c.rope_theta else pos

    @staticmethod
    def _segments(text_len, speech_len, x: int, t: int, stride: int = 1, text_stride: int = 1):
        """Per-slot (is_speech, index, valid, position) for [text X | speech T] slots; text
        slot k sits at position text_stride * k (valid while that is < text_len), speech slot j
        at text_len + stride * j."""
        b = text_len.shape[0]
        idx = jnp.concatenate([jnp.arange(x), jnp.arange(t)])[None].repeat(b, 0)  # [B, X+T]
        is_speech = jnp.concatenate([jnp.zeros(x, bool), jnp.ones(t, bool)])[None].repeat(b, 0)
        text_pos = text_stride * idx
        valid = jnp.where(is_speech, idx < speech_len[:, None], text_pos < text_len[:, None])
        pos = jnp.where(is_speech, text_len[:, None] + stride * idx, text_pos)  # [B, X+T]
        return is_speech, idx, valid, pos

    def _per_layer(
        self, mask, q_speech, k_speech, start=None, layers=None, cache=None, prefill=False
    ):
        """The stack's (mask, write_start, prefix) arguments. Without `cfg.text_layers`: the
        same for every layer. With it, one per layer run: outside text_layers the speech
        queries' text keys are hidden (q_speech [B, T], k_speech [B, S] of the full layout),
        and a cache layer without text slots (`KVCache.no_text`) takes its mask and write
        offset shifted past the X text slots; in the prefill it attends to the block itself
        and stores the block's speech positions only (`Attention`'s `prefix`)."""
        keep = self.cfg.text_layers
        if not keep:
            return mask, start, 0
        no_text = mask & ~(q_speech[:, :, None] & ~k_speech[:, None, :])  # [B, T, S]
        run = self.cfg.stack.check_layers(layers)
        if cache is None:
            return tuple(mask if i in keep else no_text for i in run), start, 0
        x, t = cache.text_slots, mask.shape[1]
        args = []
        for j in range(len(run)):
            if j not in cache.no_text:
                args.append((mask, start, 0))
            elif prefill:  # the cache was empty: the block's own keys are all there is
                args.append((no_text[:, :, :t], start, x))
            else:
                args.append((no_text[:, :, x:], start - x, 0))
        masks, starts, prefixes = zip(*args, strict=True)
        return masks, starts, prefixes

    def _text_input(self, text: jax.Array) -> jax.Array:
        """text ids [B, X] -> their embeddings [B, X, D]; text vectors [B, X, D] (TLDR's
        compressed text) pass through."""
        return self.embed_text(text) if text.ndim == 2 else text.astype(jnp.float32)

    # -- training forward
    def __call__(
        self,
        text: jax.Array,
        text_len: jax.Array,
        speech: jax.Array,
        speech_len: jax.Array,
        *,
        train: bool = False,
        attn_bias: jax.Array | None = None,
        bias_layers: Sequence[int] = (),
    ) -> tuple[jax.Array, jax.Array]:
        """text [B, X], speech [B, T] ([BOS, tokens...]) -> (logits [B, T, K, V], hidden [B, T, D]).

        Position t of `speech` yields hidden h_t and logits whose head k predicts the speech
        token k positions after it. attn_bias [B, N, X+T, X+T] / bias_layers: the training-only
        alignment prior and captured attention logits (`TransformerStack`, `LMTask`).
        """
        hidden = self.hidden_embedded(
            text,
            text_len,
            self.embed_speech(speech),
            speech_len,
            train=train,
            attn_bias=attn_bias,
            bias_layers=bias_layers,
        )  # [B, T, D]
        return self.heads(hidden), hidden

    def hidden_embedded(
        self,
        text: jax.Array,
        text_len: jax.Array,
        speech_emb: jax.Array,
        speech_len: jax.Array,
        *,
        train: bool = False,
        attn_bias: jax.Array | None = None,
        bias_layers: Sequence[int] = (),
        stride: int = 1,
        text_stride: int = 1,
    ) -> jax.Array:
        """The training forward over input vectors in the speech segment: text [B, X] +
        speech_emb [B, T, D] (token embeddings, or TLDR's patch vectors) -> hidden [B, T, D].
        stride: RoPE positions advance `stride` per speech slot (TLDR's patches: P, so that a
        patch sits where its first token sat at the token rate). text may also be vectors
        [B, X, D], one per `text_stride` symbols (TLDR's compressed text; text_len counts
        symbols)."""
        x_len, t_len = text.shape[1], speech_emb.shape[1]
        is_speech, idx, valid, pos = self._segments(
            text_len, speech_len, x_len, t_len, stride, text_stride
        )
        mask = prefix_lm_mask(is_speech, idx, is_speech, idx, valid)  # [B, X+T, X+T]
        mask, _, _ = self._per_layer(mask, is_speech, is_speech)
        emb = jnp.concatenate([self._text_input(text), speech_emb.astype(jnp.float32)], axis=1)
        rope = self._rope(pos, text_stride * x_len + stride * t_len)
        h, _ = self.stack(
            emb, rope, mask, train=train, attn_bias=attn_bias, bias_layers=tuple(bias_layers)
        )
        return h[:, x_len:]  # [B, T, D]

    # -- decoding
    def init_cache(
        self,
        batch: int,
        text_slots: int,
        speech_slots: int,
        dtype: Any = None,
        layers: Sequence[int] | None = None,
        keys_t: bool = False,
        text_stride: int = 1,
    ) -> KVCache:
        """Zero buffers for every layer (or one per index of `layers`); keys_t: keys held
        transposed (`LayerCache`); text_stride: text symbols per text slot (`KVCache`). With
        `cfg.text_layers`, the other layers' buffers hold the speech slots only."""
        c = self.cfg
        dt = jnp.dtype(dtype or jnp.float32)
        run = c.stack.check_layers(layers)
        no_text = tuple(j for j, i in enumerate(run) if c.text_layers and i not in c.text_layers)

        def buffers(j: int) -> LayerCache:
            s = speech_slots + (0 if j in no_text else text_slots)
            shape = (batch, c.num_heads, s, c.head_dim)  # [B, N, S, H]
            kshape = (batch, c.num_heads, c.head_dim, s) if keys_t else shape
            return LayerCache(jnp.zeros(kshape, dt), jnp.zeros(shape, dt), keys_t)

        zeros = jnp.zeros((batch,), jnp.int32)
        return KVCache(
            tuple(buffers(j) for j in range(len(run))),
            zeros,
            zeros,
            text_slots,
            text_stride,
            no_text,
        )

    def prefill(
        self,
        text: jax.Array,
        text_len: jax.Array,
        speech: jax.Array,
        speech_len: jax.Array,
        cache: KVCache,
        layers: Sequence[int] | None = None,
        rows: jax.Array | None = None,
    ) -> tuple[jax.Array, KVCache]:
        """One forward over text [B, X] + speech [B, P] ([BOS, prompt]); X must equal
        cache.text_slots. Returns (hidden [B, P, D], cache with text_len / speech_len set);
        rows int32 [B, R] (speech positions): hidden [B, R, D] of those alone, the last
        layer computed at them only (`TransformerStack`'s out_rows; the same cache)."""
        return self.prefill_embedded(
            text, text_len, self.embed_speech(speech), speech_len, cache, layers, rows=rows
        )

    def prefill_embedded(
        self,
        text: jax.Array,
        text_len: jax.Array,
        speech_emb: jax.Array,
        speech_len: jax.Array,
        cache: KVCache,
        layers: Sequence[int] | None = None,
        stride: int = 1,
        rows: jax.Array | None = None,
    ) -> tuple[jax.Array, KVCache]:
        """`prefill` over input vectors speech_emb [B, P, D] in the speech segment (positions
        advancing `stride` per slot, as in `hidden_embedded`); text ids [B, X] or vectors
        [B, X, D], one per `cache.text_stride` symbols. rows: as in `prefill`."""
        x_len, p_len, ts = text.shape[1], speech_emb.shape[1], cache.text_stride
        if x_len != cache.text_slots:
            raise ValueError(f"prefill: text width {x_len} != cache.text_slots {cache.text_slots}")
        is_speech, idx, _, pos = self._segments(text_len, speech_len, x_len, p_len, stride, ts)
        cache = cache.replace(text_len=text_len.astype(jnp.int32))
        k_segments = cache.key_segments(speech_len)
        mask = prefix_lm_mask(is_speech, idx, *k_segments)  # [B, X+P, S]
        emb = jnp.concatenate([self._text_input(text), speech_emb.astype(jnp.float32)], axis=1)
        start = jnp.zeros((text.shape[0],), jnp.int32)
        mask, start, prefix = self._per_layer(
            mask, is_speech, k_segments[0], start, layers, cache, prefill=True
        )
        rope = self._rope(pos, ts * x_len + stride * p_len)
        out_rows = None if rows is None else rows + x_len  # [B, R] in [text | speech]
        h, caches = self.stack(
            emb, rope, mask, cache.layers, start, layers=layers, prefix=prefix, out_rows=out_rows
        )
        cache = cache.replace(layers=caches, speech_len=speech_len.astype(jnp.int32))
        return (h if rows is not None else h[:, x_len:]), cache

    def extend(
        self, tokens: jax.Array, cache: KVCache, layers: Sequence[int] | None = None
    ) -> tuple[jax.Array, KVCache]:
        """Append tokens [B, C] at each row's speech_len; -> (hidden [B, C, D], cache)."""
        return self.extend_embedded(self.embed_speech(tokens), cache, layers)

    def extend_embedded(
        self, emb: jax.Array, cache: KVCache, layers: Sequence[int] | None = None, stride: int = 1
    ) -> tuple[jax.Array, KVCache]:
        """Append input vectors emb [B, C, D] at each row's speech_len (a token's embedding,
        or any other vector in its place); -> (hidden [B, C, D], cache). Every row's
        speech_len + C must fit the cache."""
        b, c = emb.shape[:2]
        q_idx = cache.speech_len[:, None] + jnp.arange(c)[None]  # [B, C]
        pos = cache.text_len[:, None] + stride * q_idx
        new_len = cache.speech_len + c
        k_segments = cache.key_segments(new_len)
        q_speech = jnp.ones((b, c), bool)
        mask = prefix_lm_mask(q_speech, q_idx, *k_segments)  # [B, C, S]
        mask, start, _ = self._per_layer(
            mask, q_speech, k_segments[0], cache.text_slots + cache.speech_len, layers, cache
        )
        rope = self._rope(pos, cache.text_stride * cache.text_slots + stride * cache.speech_slots)
        h, caches = self.stack(emb, rope, mask, cache.layers, start, layers=layers)
        return h, cache.replace(layers=caches, speech_len=new_len.astype(jnp.int32))

    def extend_deferred(
        self, emb: jax.Array, cache: KVCache, layers: Sequence[int] | None = None, stride: int = 1
    ) -> tuple[jax.Array, tuple[LayerCache, ...]]:
        """`extend_embedded` without writing the cache: -> (hidden [B, C, D], each layer's new
        keys/values [B, N, C, H]) for `KVCache.append`, which may run later (outside a
        `lax.switch`: `jaxtts.nn.attention`). The same keys and the same attention as
        `extend_embedded`, summed in another order (the block's keys after the buffer's), so
        the hidden states agree to float rounding, not bit for bit. `extend_embedded` keeps the
        write-then-attend order: there XLA updates the cache in place, while a write after
        the reads of the same buffer in one computation costs a copy of it."""
        b, c = emb.shape[:2]
        q_idx = cache.speech_len[:, None] + jnp.arange(c)[None]  # [B, C]
        pos = cache.text_len[:, None] + stride * q_idx
        if cache.no_text:
            raise ValueError(
                "extend_deferred: a cache without text slots in some layers "
                "(LMConfig.text_layers) is not supported"
            )
        mask = prefix_lm_mask(
            jnp.ones((b, c), bool), q_idx, *cache.key_segments(cache.speech_len + c)
        )  # [B, C, S]
        start = cache.text_slots + cache.speech_len
        rope = self._rope(pos, cache.text_stride * cache.text_slots + stride * cache.speech_slots)
        return self.stack(emb, rope, mask, cache.layers, start, layers=layers, defer_write=True)

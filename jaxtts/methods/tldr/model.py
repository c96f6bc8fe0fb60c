"""TLDR (docs/methods/tldr.md): patch-level autoregression on a frozen TTS LM with LoRA, a
token-to-patch compressor and a speaker-conditioned patch-to-token extractor.

Patches. The speech stream of a row is its prompt tokens, then its target tokens + EOS. Each
segment is cut into patches of P tokens, the last one of each segment padded; patch j of a row
is a prompt patch when j < Jp = ceil(prompt_len / P), else target patch j - Jp. `patch_grid`
lays a batch out as tokens [B, J, P] + a validity mask: the same layout in training, in the
prompt's prefill and (one patch at a time) in decoding.

  compressor   token embeddings (the backbone's own table) -> one local transformer layer
               over the flattened grid (causal self-attention within a window of W grid
               positions, RoPE, SwiGLU), then each patch's query, RMSNorm(mean of its token
               embeddings), cross-attends to its own tokens' states (+ FFN, final RMSNorm: the
               patch vector is at the scale of a token embedding). `compressor='mean'` keeps
               only RMSNorm(mean) (the paper's ablation).
  backbone     the shipped `TTSLM`, frozen, LoRA on every projection (`lora_rank`), run over
               [text | BOS, z_0, z_1, ...]: its hidden state at slot j, g_j, has seen BOS and
               the patches before j only; g_j is the global context of patch j (the shift).
               Slot j's RoPE position is text_len + P j (`token_rate_positions`), where the
               token-level backbone had the first token of patch j: the text-speech geometry
               it learned carries over (an implementation choice the paper does not state).
  extractor    c_j = [g_j ; W_s s] (s: the speaker embedding of the prompt, see below); each of
               its layers projects c_j into S cross-attention slots, then: token states attend
               to the slots, causal self-attention within the patch, FFN. Input at position i
               is the embedding of the patch's token i - 1 (START at 0): it generates the P
               tokens of a patch autoregressively; EOS ends the utterance.
               `ext_prev` = K > 0 (not in the paper, default 0): input 0 also carries the
               K speech tokens just before the patch (prompt or generated), each through a
               table of its own per relative position that starts at zero (so a model
               trained with K = 0 computes the same at K > 0 until it trains): the
               extractor then sees the local context a token-level LM sees, which g_j holds
               only through the compressor and the patch-rate backbone.

Compressed text (`text_patch` Q > 1; not in the paper, default Q = 1). The paper's text prefix
is BPE, short next to the speech; ours is phonemes, ~15 symbols per second of speech next to
25 speech tokens, so at P = 4 the uncompressed text is over half the global KV cache. With Q > 1
a second compressor of the same shape (`text_compressor`, bidirectional local layer: the text
is a bidirectional prefix) turns each Q symbols' embeddings into one vector; backbone text slot
k sits at RoPE position Q k (its first symbol's), the speech slots stay at text_len + P j
(text_len counts symbols; `KVCache.text_stride`), so the backbone caches ceil(X / Q) text
slots. The backbone then reads the text only through LoRA and these vectors: a warm start from
a Q = 1 model is not the same function at step 0 (unlike `ext_prev`). Measured at Q = 4
(docs/history/deep.md#deep-tldr-text): KV 0.25x FAR's at 12 s but WER 26.8 %; a slot's vector
is nearly order-free inside the slot (mean query, position-free cross-attention, bidirectional
local layer), the likely cause. `text_slot_order` (default True) gives the slot its order: a
learned position-in-slot table before the local layer and an order-aware linear map of the Q
embeddings added to the query's mean, both zero at init (a warm start from an order-free Q > 1
run computes the same at step 0). Measured at Q = 4 from that run (`deep_text_order`): WER
26.8 -> 16.6 %; at Q = 3 (`deep_text3`) 12.4 %; the Q = 1 model 9.6 % (RESULTS).

`ext_text` = M > 0 (Q > 1, or Q = 1 with `text_layers`; not in the paper, default 0): the
extractor reads the symbols themselves. The text compressor's per-symbol states (its local
layer's output; at Q = 1, where there is no text compressor, the `TextReader`'s: one
bidirectional layer over the frozen text embeddings) become a text memory of keys and values
of width M per symbol (`TextMemory`, computed once per utterance in the prefill and kept in the
decode carry), and the extractor's first layer cross-attends to it after its slots (queries
from every token state of the patch; output projection zero at init, so a warm start from a
run without it is the same function). Where the backbone reads a slot of
Q symbols as one vector, the extractor can find the phonemes of the current patch in the text
itself. The memory is part of the global KV (`engine.global_kv_bytes`): M = 64 adds 128 values
per symbol next to the backbone's 2 x 256 x 12 = 6144 per slot (Q = 3, P = 4 at 12 s: 0.28x ->
0.29x FAR's). Measured at Q = 3 (`deep_text3_read`, from `deep_text3`): WER 11.7 %, 11.4 %
after 1200 more steps (RESULTS).

Text in a few layers (`tldr.text_layers`, a backbone setting: `LMConfig.text_layers`; not in
the paper, default all layers): another way to shrink the text's share of the global KV. The
text stays one slot per symbol, but only the listed backbone layers let the patches attend to
it; in the others patches attend to patches only, so their caches hold no text slots
(`KVCache.no_text`; in the prefill those layers still run the text positions, for the text
layers above them, and store only the speech). 4 of 12 layers cache the text bytes of Q = 3.
Layer 0 must keep it: without it the frozen backbone loses the text entirely (teacher-forced
CE 8.0, the wrong transcript's), while most sets of 4 that include it start at 2.7-2.9
(0, 5, 9, 10: 2.66, the shipped Q = 1 model 1.16) and LoRA retrains from there
(`configs/tldr.py:deep_text_layers`: dev CE 1.161 and WER 11.4 % after 1100 steps, the same
WER as Q = 3 with `ext_text`; 1.120 and 10.5 % after 2400, FAR 8.8 %; RESULTS#deep-tldr-text).
With `ext_text` on top (`deep_text_layers_read`, 1200 steps from there): 11.3 %.

Speaker embedding: the shipped JAX speaker encoder (`jaxtts.methods.speaker_encoder`) applied to
the prompt *as the model sees it*: its tokens decoded to log-mel by the tokenizer's centroid
table (`mel_table`, a frozen parameter). This runs inside the jitted graph, identically in
training and decoding, with no extra data; a prompt shorter than `min_reference_frames` mel
frames gets s = 0 in training, and is a one-line error at synthesis. `speaker=False` drops s
(the ablation).

Parameters: {backbone (frozen, LoRA leaves trained), compressor, extractor (and
text_compressor with Q > 1; trained),
speaker_encoder, mel_table (frozen)}.

Axis letters: B batch, X text, J patches, P tokens per patch, T tokens, D backbone width,
E extractor width, S slots, V output vocabulary (tokens + EOS), M mel bins.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError
from jaxtts.methods.lm import TTSLM, KVCache, LMConfig
from jaxtts.nn import axes
from jaxtts.nn.attention import Attention, LayerCache, attend
from jaxtts.nn.layers import MLP, Dense, RMSNorm, param_with_axes
from jaxtts.nn.transformer import Block, StackConfig


@dataclasses.dataclass(frozen=True)
class TLDRConfig:
    """Static hyper-parameters (`config.tldr` + the backbone's `LMConfig`)."""

    backbone: LMConfig  # the frozen TTS LM, with lora_rank / lora_alpha set
    patch: int = 4  # P
    compressor: str = "attention"  # or "mean"
    window: int = 16  # W: local attention window of the compressor (grid positions)
    comp_heads: int = 4
    comp_ff: int = 768
    ext_layers: int = 4
    ext_width: int = 256  # E
    ext_heads: int = 4
    ext_ff: int = 768
    slots: int = 4  # S
    ext_prev: int = 0  # K: speech tokens before the patch the extractor's input 0 sees
    speaker: bool = True
    speaker_proj: int = 128  # d_s
    speaker_dim: int = 192  # the speaker encoder's embedding size
    token_frames: int = 2  # mel frames per speech token (the tokenizer's)
    n_mels: int = 80
    min_reference_frames: int = 50  # shortest prompt (mel frames) the speaker encoder reads
    # backbone RoPE positions advance P per patch (a patch sits where its first token sat at
    # the token rate, so the backbone's learned text-speech geometry carries over); False:
    # one position per patch
    token_rate_positions: bool = True
    # Q text symbols per backbone text slot: 1 = one slot per symbol (the paper, whose BPE
    # text prefix is short); Q > 1 compresses the phoneme prefix too (`text_compressor`)
    text_patch: int = 1
    # Q > 1: the text compressor sees each symbol's place in its slot (a learned
    # position-in-slot table added before its local layer, and an order-aware linear map of the
    # slot's Q embeddings added to the query's mean; both start at zero); False: the order-free
    # slot of `configs/tldr.py:deep_text`
    text_slot_order: bool = True
    # Q > 1 or `text_layers`: the extractor's first layer also cross-attends to the text's
    # symbols (the text compressor's per-symbol states; at Q = 1 the `TextReader`'s), through
    # keys and values of this width per symbol,
    # computed once per utterance (a memory counted in the global KV); 0 = none. Its output
    # projection starts at zero (a warm start from a run without it is the same function)
    ext_text: int = 0
    # residual dropout in the compressors', the text reader's and the extractor's layers while
    # training (not in the paper): active only where `apply` gets a 'dropout' rng
    # (`TLDRTask.loss` with train=True), so decoding and evaluation never drop
    dropout: float = 0.0

    def __post_init__(self):
        if self.patch < 1:
            raise ConfigError(f"tldr.patch={self.patch}: expected P >= 1 tokens per patch")
        if self.text_patch < 1:
            raise ConfigError(
                f"tldr.text_patch={self.text_patch}: expected Q >= 1 text symbols per slot"
            )
        if self.compressor not in ("attention", "mean"):
            raise ConfigError(
                f"tldr.compressor={self.compressor!r}: expected 'attention' or 'mean'"
            )
        if self.window < 1 or self.slots < 1 or self.ext_layers < 1:
            raise ConfigError("tldr.window, tldr.slots, tldr.ext_layers: expected >= 1")
        if self.ext_text < 0 or (
            self.ext_text and self.text_patch == 1 and not self.backbone.text_layers
        ):
            raise ConfigError(
                f"tldr.ext_text={self.ext_text}: expected 0, or > 0 with tldr.text_patch > 1 "
                "or tldr.text_layers set (with one text slot per symbol in every layer the "
                "backbone reads every symbol already)"
            )
        if self.ext_text % self.text_heads:
            raise ConfigError(
                f"tldr.ext_text={self.ext_text}: expected a multiple of {self.text_heads} "
                "(heads of width 32)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"tldr.dropout={self.dropout}: expected 0 <= rate < 1")
        if not 0 <= self.ext_prev <= self.patch:
            raise ConfigError(
                f"tldr.ext_prev={self.ext_prev}: expected 0 <= K <= tldr.patch={self.patch}"
            )

    def local_stack(self, width: int) -> StackConfig:
        """The one-layer stack of the compressors' local layer (and the `TextReader`'s)."""
        return StackConfig(
            num_layers=1,
            num_heads=self.comp_heads,
            head_dim=width // self.comp_heads,
            d_ff=self.comp_ff,
            dropout=self.dropout,
            rope_theta=self.backbone.rope_theta,
        )

    @property
    def text_heads(self) -> int:
        """Heads of the extractor's text attention (`ext_text`): width 32 each, at least 1."""
        return max(1, self.ext_text // 32)

    @property
    def eos(self) -> int:
        return self.backbone.eos

    @property
    def start(self) -> int:  # the extractor's start-of-patch input id
        return self.backbone.num_speech_tokens + 1

    @property
    def pad(self) -> int:  # an invalid grid cell (the backbone's PAD id)
        return self.backbone.pad

    @property
    def stride(self) -> int:
        return self.patch if self.token_rate_positions else 1

    @property
    def window_patches(self) -> int:
        """Previous patches the compressor's window reaches from a patch's first token."""
        return -(-(self.window - 1) // self.patch)

    def text_slots(self, text_width: int) -> int:
        """Backbone text slots for text rows of width X: ceil(X / Q)."""
        return -(-text_width // self.text_patch)

    def num_patches(self, speech_width: int) -> int:
        """Grid width J for speech rows of width T (prompt + target): both segments padded
        and the target's EOS."""
        return -(-(speech_width + 1) // self.patch) + 1


def patch_grid(
    speech: jax.Array,
    speech_len: jax.Array,
    prompt_len: jax.Array,
    cfg: TLDRConfig,
    num_patches: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """speech int [B, T] = prompt tokens then target tokens (valid < speech_len), prompt_len
    [B] -> (tokens int32 [B, J, P], valid bool [B, J, P], target bool [B, J, P]: the cells the
    loss scores, i.e. target tokens and the EOS after them). Invalid cells hold PAD."""
    p = cfg.patch
    j = jnp.arange(num_patches)[None, :, None]
    i = jnp.arange(p)[None, None, :]
    plen, tlen = prompt_len[:, None, None], (speech_len - prompt_len)[:, None, None]
    jp = -(-plen // p)  # prompt patches
    in_prompt = j < jp
    pidx, tidx = j * p + i, (j - jp) * p + i
    valid = jnp.where(in_prompt, pidx < plen, (tidx >= 0) & (tidx <= tlen))
    src = jnp.clip(jnp.where(in_prompt, pidx, plen + tidx), 0, speech.shape[1] - 1)
    tok = jax.vmap(lambda s, ix: s[ix])(speech, src.reshape(src.shape[0], -1)).reshape(src.shape)
    tok = jnp.where(in_prompt | (tidx < tlen), tok, cfg.eos)
    tok = jnp.where(valid, tok, cfg.pad).astype(jnp.int32)
    return tok, valid, valid & ~in_prompt


def previous_tokens(
    speech: jax.Array, prompt_len: jax.Array, cfg: TLDRConfig, num_patches: int
) -> jax.Array:
    """speech int [B, T] (prompt then target tokens), prompt_len [B] -> int32 [B, J, K]: for
    each target patch j the K = `ext_prev` stream tokens before its first one (the last prompt
    tokens for the first target patch), PAD where the stream has none; PAD for prompt patches
    (the loss does not score them)."""
    p, k = cfg.patch, cfg.ext_prev
    j = jnp.arange(num_patches)[None, :, None]
    plen = prompt_len[:, None, None]
    jp = -(-plen // p)
    first = plen + (j - jp) * p  # the stream index of target patch j's first token
    src = first - k + jnp.arange(k)[None, None, :]  # [B, J, K]
    ok = (j >= jp) & (src >= 0)
    flat = jnp.clip(src, 0, speech.shape[1] - 1).reshape(src.shape[0], -1)
    tok = jax.vmap(lambda s, ix: s[ix])(speech, flat).reshape(src.shape)
    return jnp.where(ok, tok, cfg.pad).astype(jnp.int32)


def prompt_tail(prompt: jax.Array, prompt_len: jax.Array, cfg: TLDRConfig) -> jax.Array:
    """Decoding: the last K = `ext_prev` prompt tokens of each row, int32 [B, K] (PAD where the
    prompt is shorter): what `previous_tokens` gives the first target patch."""
    if prompt.shape[1] == 0:
        return jnp.full((prompt.shape[0], cfg.ext_prev), cfg.pad, jnp.int32)
    src = prompt_len[:, None] - cfg.ext_prev + jnp.arange(cfg.ext_prev)[None]  # [B, K]
    tok = jnp.take_along_axis(prompt, jnp.clip(src, 0, prompt.shape[1] - 1), axis=1)
    return jnp.where(src >= 0, tok, cfg.pad).astype(jnp.int32)


class Compressor(nn.Module):
    """Token embeddings [B, J, P, D] + valid -> patch vectors [B, J, D] (module docstring).
    causal=False (the text compressor): the local layer attends to every valid position of the
    grid, both sides (the text is a bidirectional prefix); `window` does not apply; with
    `text_slot_order` the query and the local layer also see each symbol's place in its slot."""

    cfg: TLDRConfig
    causal: bool = True

    @nn.compact
    def __call__(
        self, emb: jax.Array, valid: jax.Array, last: bool = False, states: bool = False
    ) -> jax.Array | tuple[jax.Array, jax.Array]:
        """last: only the last patch's vector [B, 1, D] (decoding: the window's earlier patches
        are keys of the local layer only); equal to the last row of the full output.
        states: also return the per-position states [B, J P, D] the patch queries read (the
        local layer's normalised output; the embeddings for `compressor='mean'`)."""
        c = self.cfg
        b, nj, p, d = emb.shape
        w = valid.astype(jnp.float32)[..., None]  # [B, J, P, 1]
        mean = (emb * w).sum(2) / jnp.maximum(w.sum(2), 1.0)  # [B, J, D]
        if not self.causal and c.text_slot_order:  # the text: each symbol's place in its slot
            order = Dense(d, (None, axes.EMBED), kernel_init=nn.initializers.zeros, name="order")
            mean = mean + order((emb * w).reshape(b, nj, p * d))  # [B, J, D]
            slot_pos = param_with_axes(
                self, "slot_pos", nn.initializers.zeros, (p, d), (None, axes.EMBED)
            )
            emb = emb + slot_pos  # [B, J, P, D] what the local layer reads
        if last:
            mean = mean[:, -1:]
        query = RMSNorm(name="init_norm")(mean)  # [B, J', D], J' = 1 if last else J
        if c.compressor == "mean":
            return (query, emb.reshape(b, nj * p, d)) if states else query
        # local layer over the flattened grid: causal within W grid positions, valid keys
        n = nj * p
        x = emb.reshape(b, n, d)
        kv = valid.reshape(b, n)
        pos = jnp.arange(n)
        dist = pos[:, None] - pos[None, :]  # [T, T] query - key
        if self.causal:
            near = (dist >= 0) & (dist < c.window)
        else:
            near = jnp.ones_like(dist, bool)
        mask = near[None] & kv[:, None, :]  # [B, T, T]
        stack = c.local_stack(d)
        nq = p if last else n  # the query positions: the last patch's tokens, or all
        h, _ = Block(stack, name="local")(
            x,
            jnp.broadcast_to(pos, (b, n)),
            mask[:, n - nq :],
            queries=nq if last else 0,
            train=self.has_rng("dropout"),
        )
        nj = nq // p
        valid = valid[:, -nj:]
        h = RMSNorm(name="token_norm")(h).reshape(b * nj, p, d)  # [BJ', P, D]
        # masked patch -> token cross-attention: each patch sees only its own valid tokens
        q = query.reshape(b * nj, 1, d)
        cmask = valid.reshape(b * nj, 1, p)  # [BJ', 1, P]
        att, _ = Attention(c.comp_heads, d // c.comp_heads, rope_theta=0.0, name="cross")(
            RMSNorm(name="cross_norm")(q), jnp.zeros((b * nj, 1), jnp.int32), cmask, context=h
        )
        z = q + _drop(self, c.dropout, att)
        z = z + _drop(self, c.dropout, MLP(c.comp_ff, name="mlp")(RMSNorm(name="mlp_norm")(z)))
        z = RMSNorm(name="out_norm")(z).reshape(b, nj, d)
        return (z, h.reshape(b, nj * p, d)) if states else z


def _drop(module: nn.Module, rate: float, x: jax.Array) -> jax.Array:
    """Residual dropout inside `module` (`TLDRConfig.dropout`): only when its `apply` was given
    a 'dropout' rng (training), identity otherwise."""
    if rate <= 0.0 or not module.has_rng("dropout"):
        return x
    return nn.Dropout(rate, deterministic=False)(x)


class TextReader(nn.Module):
    """Q = 1 with `ext_text` (and `text_layers`): the per-symbol states the extractor's text
    memory is made from, where there is no text compressor. The backbone's frozen text
    embeddings [B, X, D] through one bidirectional layer over the valid symbols (the text
    compressor's local layer without the slots) -> [B, X, D] (normalised)."""

    cfg: TLDRConfig

    @nn.compact
    def __call__(self, emb: jax.Array, valid: jax.Array) -> jax.Array:
        c = self.cfg
        b, x, d = emb.shape
        stack = c.local_stack(d)
        mask = jnp.broadcast_to(valid[:, None, :], (b, x, x))  # [B, X, X] valid keys
        pos = jnp.broadcast_to(jnp.arange(x), (b, x))
        h, _ = Block(stack, name="local")(emb, pos, mask, train=self.has_rng("dropout"))
        return RMSNorm(name="token_norm")(h)  # [B, X, D]


@flax.struct.dataclass
class TextMemory:
    """The extractor's text memory (`ext_text`): keys / values of every text symbol, k, v
    [B, N_t, X, H_t] (computed once per utterance), and which symbols are valid [B, X]."""

    k: jax.Array
    v: jax.Array
    valid: jax.Array

    def widen_text(self, text_width: int) -> TextMemory:
        """The memory padded to `text_width` symbols (invalid ones; the driver's split
        prefill)."""
        extra = text_width - self.valid.shape[1]
        if extra < 0:
            raise ValueError(f"TextMemory.widen_text({text_width}): holds {self.valid.shape[1]}")
        pad = ((0, 0), (0, 0), (0, extra), (0, 0))
        return TextMemory(
            jnp.pad(self.k, pad), jnp.pad(self.v, pad), jnp.pad(self.valid, ((0, 0), (0, extra)))
        )


class ExtractorLayer(nn.Module):
    cfg: TLDRConfig
    reads_text: bool = False  # `ext_text`: cross-attention to the text memory after the slots'

    @nn.compact
    def __call__(
        self,
        x: jax.Array | None,
        cond: jax.Array | None = None,
        slots: jax.Array | None = None,
        cache: LayerCache | None = None,
        index: int = 0,
        text: TextMemory | None = None,
    ):
        """x [N, P, E] token states, cond [N, C] conditioning vectors (or their `slots` [N, S,
        E], computed once per patch in decoding) -> [N, P, E]. x None: the slots only.
        With `reads_text`, `text` is the memory of the N = B J rows' B utterances (row n
        reads utterance n // J).

        Decoding one input at a time: x [N, 1, E] is the patch's input `index`, `cache` the
        self-attention's keys / values of the inputs before it ([N, H, P, E/H]); returns
        (x [N, 1, E], the cache with this input's written at slot `index`)."""
        c = self.cfg
        if slots is None:
            slots = Dense((c.slots, c.ext_width), (axes.EMBED, None, None), name="slots")(cond)
            slots = RMSNorm(name="slot_norm")(slots)  # [N, S, E]
        if x is None:
            return slots
        n, p, e = x.shape
        hd = e // c.ext_heads
        zeros = jnp.zeros((n, p), jnp.int32)
        att, _ = Attention(c.ext_heads, hd, rope_theta=0.0, name="cross")(
            RMSNorm(name="cross_norm")(x), zeros, jnp.ones((n, p, c.slots), bool), context=slots
        )
        x = x + _drop(self, c.dropout, att)
        if self.reads_text:
            x = x + _drop(self, c.dropout, self._read_text(RMSNorm(name="text_norm")(x), text))
        self_att = Attention(c.ext_heads, hd, rope_theta=c.backbone.rope_theta, name="self")
        if cache is None:
            causal = jnp.broadcast_to(jnp.tril(jnp.ones((p, p), bool)), (n, p, p))
            pos = jnp.broadcast_to(jnp.arange(p), (n, p))
            att, _ = self_att(RMSNorm(name="self_norm")(x), pos, causal)
        else:  # one input: its keys join the cache, it attends to slots 0..index
            slots_p = cache.k.shape[2]
            seen = jnp.broadcast_to(jnp.arange(slots_p) <= index, (n, 1, slots_p))
            at = jnp.full((n,), index, jnp.int32)
            att, cache = self_att(RMSNorm(name="self_norm")(x), at[:, None], seen, cache, at)
        x = x + _drop(self, c.dropout, att)
        x = x + _drop(self, c.dropout, MLP(c.ext_ff, name="mlp")(RMSNorm(name="mlp_norm")(x)))
        return x if cache is None else (x, cache)

    def _read_text(self, x: jax.Array, text: TextMemory) -> jax.Array:
        """x [N, P, E] (normalised) -> its attention over the valid text symbols [N, P, E];
        the output projection starts at zero."""
        c = self.cfg
        n, p, e = x.shape
        b = text.k.shape[0]
        nh, hd = c.text_heads, c.ext_text // c.text_heads
        xb = x.reshape(b, (n // b) * p, e)  # [B, J P, E]: a row's patches share its text
        q = Dense((nh, hd), (axes.EMBED, axes.HEADS, axes.KV), name="text_q")(xb)
        mask = jnp.broadcast_to(text.valid[:, None], (b, xb.shape[1], text.valid.shape[1]))
        out, _ = attend(q, text.k.astype(q.dtype), text.v.astype(q.dtype), mask)
        out = Dense(
            e,
            (axes.HEADS, axes.KV, axes.EMBED),
            in_axes=2,
            kernel_init=nn.initializers.zeros,
            name="text_o",
        )(out)  # [B, J P, E]
        return out.reshape(n, p, e)


class Extractor(nn.Module):
    """(global contexts g [N, D], speaker embeddings s [N, E_s] or None, inputs [N, P'] ids:
    START then the patch's tokens shifted by one, P' <= P; with `ext_prev` = K > 0 also
    `prev` [N, K], the stream tokens before the patch, PAD where none) -> logits float32
    [N, P', V].

    Decoding calls it twice per patch: `inputs=None` returns every layer's slots [N, L, S, E]
    from (g, s); then each of the P inner steps passes those `slots`, its one input [N, 1]
    (`index` i) and every layer's self-attention cache of the inputs before it (`caches`), and
    gets (logits [N, 1, V], the caches with input i added): the same logits as the full patch
    (causal)."""

    cfg: TLDRConfig

    @nn.compact
    def __call__(
        self,
        g: jax.Array | None,
        s: jax.Array | None,
        inputs: jax.Array | None,
        slots: jax.Array | None = None,
        caches: tuple[LayerCache, ...] | None = None,
        index: int = 0,
        prev: jax.Array | None = None,
        text: TextMemory | None = None,
        text_states: jax.Array | None = None,
        text_len: jax.Array | None = None,
    ):
        c = self.cfg
        bb = c.backbone
        if text_states is not None:  # the text memory from the symbols' states [B, X, D]
            return self._text_memory(text_states, text_len)
        layers = [
            ExtractorLayer(c, reads_text=bool(c.ext_text) and i == 0, name=f"layer_{i}")
            for i in range(c.ext_layers)
        ]
        if c.ext_text and text is None and inputs is not None:
            raise ValueError("tldr.ext_text > 0: the extractor needs the text memory")
        if slots is None:
            cond = g
            if c.speaker:
                sp = Dense(c.speaker_proj, (None, axes.EMBED), name="speaker_proj")(s)
                cond = jnp.concatenate([g, sp], axis=-1)  # [N, D + d_s]
            slots = jnp.stack([layer(None, cond) for layer in layers], axis=1)  # [N, L, S, E]
        if inputs is None:
            return slots
        table = param_with_axes(
            self,
            "embed",
            nn.initializers.normal(1.0),
            (bb.padded(bb.num_speech_tokens + 2), c.ext_width),
            (axes.VOCAB, axes.EMBED),
        )
        x = jnp.take(table, inputs, axis=0)  # [N, P, E]
        pos = param_with_axes(
            self,
            "pos_embed",
            nn.initializers.normal(0.02),
            (c.patch, c.ext_width),
            (None, axes.EMBED),
        )
        if c.ext_prev and (caches is None or index == 0):
            x = x.at[:, 0].add(self._previous(prev))
        if caches is None:
            x = x + pos[None, : inputs.shape[1]]
            for i, layer in enumerate(layers):
                x = layer(x, slots=slots[:, i], text=text)
        else:  # decoding input `index` alone
            x = x + pos[None, index : index + 1]
            new = []
            for i, layer in enumerate(layers):
                x, cache = layer(x, slots=slots[:, i], cache=caches[i], index=index, text=text)
                new.append(cache)
            caches = tuple(new)
        x = RMSNorm(name="final_norm")(x)
        v = bb.padded(bb.out_vocab)
        logits = Dense(v, (axes.EMBED, axes.VOCAB), use_bias=True, name="out")(x)
        logits = logits[..., : bb.out_vocab].astype(jnp.float32)
        return logits if caches is None else (logits, caches)

    def _text_memory(self, states: jax.Array, text_len: jax.Array) -> TextMemory:
        """states [B, X, D] (the text compressor's, per symbol), text_len [B] -> TextMemory."""
        c = self.cfg
        nh, hd = c.text_heads, c.ext_text // c.text_heads
        x = RMSNorm(name="text_memory_norm")(states)
        names = (axes.EMBED, axes.HEADS, axes.KV)
        k = Dense((nh, hd), names, name="text_k")(x).transpose(0, 2, 1, 3)  # [B, N_t, X, H_t]
        v = Dense((nh, hd), names, name="text_v")(x).transpose(0, 2, 1, 3)
        valid = jnp.arange(states.shape[1])[None] < text_len[:, None]  # [B, X]
        return TextMemory(k, v, valid)

    def _previous(self, prev: jax.Array) -> jax.Array:
        """prev int [N, K] -> [N, E]: the sum of each valid token's row of its position's
        table (zero-initialised: `ext_prev` > 0 starts as the same function as 0)."""
        c, bb = self.cfg, self.cfg.backbone
        if prev is None:
            raise ValueError("tldr.ext_prev > 0: the extractor needs the previous tokens")
        tables = param_with_axes(
            self,
            "prev_embed",
            nn.initializers.zeros,
            (c.ext_prev, bb.padded(bb.num_speech_tokens + 2), c.ext_width),
            (None, axes.VOCAB, axes.EMBED),
        )  # [K, V', E]
        ok = prev < bb.num_speech_tokens  # [N, K] speech tokens only (PAD: none)
        ids = jnp.where(ok, prev, 0)
        rows = jax.vmap(lambda t, i: jnp.take(t, i, axis=0), in_axes=(0, 1), out_axes=1)(
            tables, ids
        )  # [N, K, E]
        return jnp.sum(rows * ok[..., None], axis=1)


class TLDRModel(nn.Module):
    """The whole TLDR model; `speaker_encoder` is the frozen `SpeakerEncoderModel` (None when
    `cfg.speaker` is False). Methods: `__call__` (teacher-forced training forward),
    `speaker_embedding`, `compress`, `extract`, `prefill`, `extend`, `init_cache`."""

    cfg: TLDRConfig
    speaker_encoder: Any = None

    def setup(self):
        c = self.cfg
        self.backbone = TTSLM(c.backbone)
        self.compressor = Compressor(c)
        if c.text_patch > 1:
            self.text_compressor = Compressor(c, causal=False)
        elif c.ext_text:
            self.text_reader = TextReader(c)
        self.extractor = Extractor(c)
        if c.speaker:
            self.mel_table = self.param(
                "mel_table",
                nn.initializers.zeros,
                (c.backbone.num_speech_tokens, c.token_frames, c.n_mels),
            )

    # -- pieces
    def speaker_embedding(self, prompt: jax.Array, prompt_len: jax.Array) -> jax.Array | None:
        """Prompt tokens [B, P'] -> speaker embedding [B, E_s] of their centroid log-mel (zero
        for prompts shorter than `min_reference_frames`); None without speaker conditioning."""
        c = self.cfg
        if not c.speaker:
            return None
        b = prompt.shape[0]
        ids = jnp.clip(prompt, 0, c.backbone.num_speech_tokens - 1)
        mel = jnp.take(self.mel_table, ids, axis=0).reshape(b, -1, c.n_mels)  # [B, P' f, M]
        frames = prompt_len * c.token_frames
        s = self.speaker_encoder(mel, frames)  # [B, E_s]
        s = jnp.where((frames >= c.min_reference_frames)[:, None], s, 0.0)
        return jax.lax.stop_gradient(s)

    def text_input(
        self, text: jax.Array, text_len: jax.Array, memory: bool = False
    ) -> jax.Array | tuple[jax.Array, TextMemory | None]:
        """The backbone's text segment: the ids [B, X] as they are (Q = 1), or with
        `text_patch` Q > 1 one vector per Q symbols [B, ceil(X / Q), D]: the symbols'
        embeddings (the backbone's frozen table) through the text compressor (bidirectional
        local layer, then each slot's query cross-attends to its own Q symbols).
        memory: also return the extractor's text memory (`ext_text`; None without it; at
        Q = 1 from the `TextReader`'s states)."""
        q = self.cfg.text_patch
        if q == 1:
            if not (memory and self.cfg.ext_text):
                return (text, None) if memory else text
            valid = jnp.arange(text.shape[1])[None] < text_len[:, None]  # [B, X]
            states = self.text_reader(self.backbone.embed_text(text), valid)  # [B, X, D]
            return text, self.extractor(None, None, None, text_states=states, text_len=text_len)
        b, x = text.shape
        nx = self.cfg.text_slots(x)
        ids = jnp.pad(text, ((0, 0), (0, nx * q - x)))  # [B, X' Q]
        valid = (jnp.arange(nx * q)[None] < text_len[:, None]).reshape(b, nx, q)
        emb = self.backbone.embed_text(ids).reshape(b, nx, q, -1)  # [B, X', Q, D]
        if not (memory and self.cfg.ext_text):
            z = self.text_compressor(emb, valid)  # [B, X', D]
            return (z, None) if memory else z
        z, states = self.text_compressor(emb, valid, states=True)  # [B, X', D], [B, X' Q, D]
        return z, self.extractor(None, None, None, text_states=states, text_len=text_len)

    def compress(self, tokens: jax.Array, valid: jax.Array, last: bool = False) -> jax.Array:
        """Grid tokens [B, J, P] + valid -> patch vectors [B, J, D] (last: [B, 1, D], the last
        patch's only)."""
        emb = self.backbone.embed_speech(tokens)  # [B, J, P, D]
        return self.compressor(emb, valid, last)

    def extract(
        self,
        g: jax.Array,
        s: jax.Array | None,
        inputs: jax.Array,
        prev: jax.Array | None = None,
        text: TextMemory | None = None,
    ) -> jax.Array:
        """g [B, J, D], s [B, E_s] or None, inputs [B, J, P], prev [B, J, K] or None, the text
        memory (`ext_text`) -> logits [B, J, P, V]."""
        b, nj, p = inputs.shape
        flat_s = None if s is None else jnp.repeat(s, nj, axis=0)  # [B J, E_s]
        flat_prev = None if prev is None else prev.reshape(b * nj, -1)
        logits = self.extractor(
            g.reshape(b * nj, -1), flat_s, inputs.reshape(b * nj, p), prev=flat_prev, text=text
        )
        return logits.reshape(b, nj, p, -1)

    def extract_slots(self, g: jax.Array, s: jax.Array | None) -> jax.Array:
        """Decoding: g [B, D], s [B, E_s] or None -> every extractor layer's slots [B, L, S, E]."""
        return self.extractor(g, s, None)

    def extract_caches(self, b: int) -> tuple[LayerCache, ...]:
        """Decoding: empty self-attention caches of the extractor's layers, one patch long
        ([B, H, P, E/H] each), for `extract_step`."""
        c = self.cfg
        shape = (b, c.ext_heads, c.patch, c.ext_width // c.ext_heads)
        return tuple(
            LayerCache(jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))
            for _ in range(c.ext_layers)
        )

    def extract_step(
        self, slots: jax.Array, inputs: jax.Array, caches, index: int, prev=None, text=None
    ):
        """Decoding: slots [B, L, S, E], the patch's input `index` [B, 1] (START or the
        previous token), the caches of the inputs before it (and `prev` [B, K], the stream
        tokens before the patch, with `ext_prev`; the text memory with `ext_text`) -> (the
        logits of its token `index` [B, V], the caches with this input added)."""
        logits, caches = self.extractor(
            None, None, inputs, slots=slots, caches=caches, index=index, prev=prev, text=text
        )
        return logits[:, 0], caches

    def shifted_inputs(self, tokens: jax.Array) -> jax.Array:
        """Grid tokens [..., P] -> the extractor's teacher-forced inputs [START, t_0..t_{P-2}]."""
        start = jnp.full(tokens.shape[:-1] + (1,), self.cfg.start, jnp.int32)
        return jnp.concatenate([start, tokens[..., :-1]], axis=-1)

    def bos_vector(self, b: int) -> jax.Array:
        bos = jnp.full((b, 1), self.cfg.backbone.bos, jnp.int32)
        return self.backbone.embed_speech(bos)  # [B, 1, D]

    # -- training
    def __call__(self, text, text_len, speech, speech_len, prompt_len):
        """Teacher-forced forward. text [B, X], speech [B, T] (prompt then target tokens, no
        BOS), lengths [B] -> (logits [B, J, P, V], targets int32 [B, J, P], loss mask [B, J, P])."""
        c = self.cfg
        b = text.shape[0]
        nj = c.num_patches(speech.shape[1])
        tokens, valid, target = patch_grid(speech, speech_len, prompt_len, c, nj)
        z = self.compress(tokens, valid)  # [B, J, D]
        n_patches = valid.any(-1).sum(-1).astype(jnp.int32)  # [B] prompt + target patches
        emb = jnp.concatenate([self.bos_vector(b), z[:, :-1]], axis=1)  # [B, J, D]: shift
        text_in, memory = self.text_input(text, text_len, memory=True)
        g = self.backbone.hidden_embedded(
            text_in,
            text_len,
            emb,
            n_patches,
            stride=c.stride,
            text_stride=c.text_patch,
        )  # [B, J, D]
        s = self.speaker_embedding(speech, prompt_len)
        prev = previous_tokens(speech, prompt_len, c, nj) if c.ext_prev else None
        logits = self.extract(g, s, self.shifted_inputs(tokens), prev, memory)
        return logits, tokens, target

    # -- decoding (the backbone's cache grows by one slot per patch)
    def init_cache(self, batch: int, text_width: int, patch_slots: int) -> KVCache:
        """The backbone's cache for text rows of width X (ceil(X / Q) text slots)."""
        c = self.cfg
        return self.backbone.init_cache(
            batch, c.text_slots(text_width), patch_slots, text_stride=c.text_patch
        )

    def prefill(self, text, text_len, prompt, prompt_len, cache: KVCache):
        """text [B, X] + prompt tokens [B, P'] -> (g of the first target patch [B, D], cache
        holding [text | BOS, prompt patches], speaker embedding [B, E_s] or None, the last
        `window_patches` prompt patches (tokens [B, NW, P], valid [B, NW, P]) for the
        compressor's window, the extractor's text memory (`ext_text`) or None)."""
        c = self.cfg
        b = text.shape[0]
        nj = -(-prompt.shape[1] // c.patch)
        tokens, valid, eos = patch_grid(prompt, prompt_len, prompt_len, c, nj + 1)
        valid = (valid & ~eos)[:, :nj]  # without the (empty) target's EOS patch
        tokens = jnp.where(valid, tokens[:, :nj], c.pad)
        z = self.compress(tokens, valid) if nj else jnp.zeros((b, 0, c.backbone.d_model))
        jp = (-(-prompt_len // c.patch)).astype(jnp.int32)  # [B]
        emb = jnp.concatenate([self.bos_vector(b), z], axis=1)  # [B, 1 + Jp, D]
        text_in, memory = self.text_input(text, text_len, memory=True)
        h, cache = self.backbone.prefill_embedded(
            text_in, text_len, emb, jp + 1, cache, stride=c.stride, rows=jp[:, None]
        )
        g = h[:, 0]  # [B, D] at the last prompt patch
        nw = c.window_patches
        pad_t = jnp.full((b, nw, c.patch), c.pad, jnp.int32)
        all_t = jnp.concatenate([pad_t, tokens], axis=1)  # [B, NW + Jp', P]
        all_v = jnp.concatenate([jnp.zeros((b, nw, c.patch), bool), valid], axis=1)
        idx = jp[:, None] + jnp.arange(nw)[None]  # the NW patches before patch jp
        win_t = jnp.take_along_axis(all_t, idx[:, :, None], axis=1)
        win_v = jnp.take_along_axis(all_v, idx[:, :, None], axis=1)
        return g, cache, self.speaker_embedding(prompt, prompt_len), win_t, win_v, memory

    def extend(self, win_tokens, win_valid, tokens, cache: KVCache):
        """Compress the new patch tokens [B, P] (after the window's NW patches) and append it
        to the backbone's cache -> (g of the next patch [B, D], cache)."""
        grid = jnp.concatenate([win_tokens, tokens[:, None]], axis=1)  # [B, NW + 1, P]
        valid = jnp.concatenate([win_valid, jnp.ones_like(tokens[:, None], bool)], axis=1)
        z = self.compress(grid, valid, last=True)  # [B, 1, D]
        h, cache = self.backbone.extend_embedded(z, cache, stride=self.cfg.stride)
        return h[:, 0], cache

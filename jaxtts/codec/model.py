"""The learned speech tokenizer: a convolutional mel autoencoder with a finite scalar quantiser.

    log-mel [B, T, M] --encoder--> z [B, S, Q] --FSQ--> codes [B, S] --decoder--> log-mel [B, T, M]

S = T / stride tokens (25 Hz at stride 2 over the 50 Hz mel). Encoder: a conv embedding and
ConvNeXt blocks at the frame rate, `stride` frames folded into one vector and projected, ConvNeXt
blocks at the token rate, a projection to Q = len(levels) scalars. FSQ (Mentzer et al., "Finite
Scalar Quantization", 2023): each scalar is bounded by a tanh to `levels[i]` values and rounded
(straight-through gradient); the code is the mixed-radix number of the Q digits, so the vocabulary
is prod(levels) (1000 for (8, 5, 5, 5)) and there is no codebook to collapse. Decoder: the mirror
image (token-rate blocks, one vector unfolded into `stride` frames, frame-rate blocks, a
projection to M bins).

With `cond`, the codes are asked to carry less of the voice: the encoder reads the log-mel
minus its utterance's per-bin mean, and the decoder is told the voice as a vector, the per-bin
mean and log standard deviation of a reference log-mel (`voice`: the utterance itself in
training; a prompt of the same speaker, or nothing = the corpus average, at inference), added
to its features at both rates.

Training adds a CTC head on the quantised latent that reads the utterance's phonemes (no stress
marks, no word gaps): the gradient through the straight-through rounding pushes phonetic content
into the codes, which the mel reconstruction alone spends on timbre and loudness (the k-means
tokenizer's failure on held-out voices). The head is dropped at export.

Every convolution sees its padded frames zeroed (ConvNeXtBlock masks its input), so a row of a
padded batch decodes as it would alone. Axis letters: B batch, T frames, S tokens, M mel bins,
D channels, Q quantised scalars, P phoneme classes.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.nn.conv import ConvNeXtBlock

__all__ = ["MelCodec", "decoder_reach", "fsq_latent", "fsq_quantize", "voice"]


def _fsq_consts(levels):
    lv = np.asarray(levels, np.float32)  # [Q]
    half = (lv - 1.0) * (1.0 - 1e-3) / 2.0
    offset = np.where(lv % 2 == 0, 0.5, 0.0).astype(np.float32)
    shift = np.arctanh(offset / half).astype(np.float32)
    width = np.floor(lv / 2.0).astype(np.float32)  # digits d - width in [-width, L - 1 - width]
    basis = np.concatenate([[1], np.cumprod(np.asarray(levels[:-1], np.int64))]).astype(np.int32)
    return lv, half, offset, shift, width, basis


def fsq_quantize(z: jax.Array, levels: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """z [..., Q] -> (the quantised latent in [-1, 1] [..., Q], with a straight-through
    gradient; the codes int32 [...] in [0, prod(levels)))."""
    _, half, offset, shift, width, basis = _fsq_consts(levels)
    bounded = jnp.tanh(z + shift) * half - offset  # in (-width - 0.5, L - width - 0.5)
    rounded = jnp.round(bounded)
    q = bounded + jax.lax.stop_gradient(rounded - bounded)
    digits = (rounded + width).astype(jnp.int32)  # [..., Q] in [0, L)
    return q / width, jnp.sum(digits * basis, axis=-1)


def fsq_latent(codes: jax.Array, levels: tuple[int, ...]) -> jax.Array:
    """codes int [...] -> the quantised latent [..., Q] (`fsq_quantize`'s first output)."""
    lv, _, _, _, width, basis = _fsq_consts(levels)
    digits = (codes[..., None] // basis) % lv.astype(np.int32)  # [..., Q]
    return (digits.astype(jnp.float32) - width) / width


def decoder_reach(kernel: int, dec_layers: tuple[int, int], stride: int) -> int:
    """How many tokens on each side a decoded frame depends on: the token-rate blocks reach
    kernel // 2 tokens each, the frame-rate blocks kernel // 2 frames each."""
    half = kernel // 2
    return dec_layers[0] * half + math.ceil(dec_layers[1] * half / stride)


def voice(mel: jax.Array, mask: jax.Array) -> jax.Array:
    """Standardised log-mel [B, T, M], mask [B, T] -> the voice vector [B, 2M]: the per-bin
    mean and log standard deviation over the valid frames (zeros: the corpus average)."""
    n = jnp.maximum(mask.sum(1), 1.0)[:, None]  # [B, 1]
    mu = jnp.einsum("btm,bt->bm", mel, mask) / n
    var = jnp.einsum("btm,bt->bm", jnp.square(mel - mu[:, None]), mask) / n
    return jnp.concatenate([mu, 0.5 * jnp.log(jnp.maximum(var, 1e-4))], axis=-1)


class MelCodec(nn.Module):
    n_mels: int = 80
    dim: int = 256
    mlp_dim: int = 768
    enc_layers: tuple[int, int] = (2, 3)  # ConvNeXt blocks at the frame rate, the token rate
    dec_layers: tuple[int, int] = (3, 2)  # at the token rate, the frame rate
    levels: tuple[int, ...] = (8, 5, 5, 5)
    stride: int = 2
    kernel: int = 7
    num_phones: int = 0  # the training-only CTC head's classes (0: no head)
    cond: bool = False  # the decoder told the voice (see the module docstring)

    @property
    def vocab_size(self) -> int:
        return int(np.prod(self.levels))

    def setup(self):
        d, m, k = self.dim, self.mlp_dim, self.kernel
        self.embed = nn.Conv(d, (k,), padding=[(k // 2, k // 2)])
        self.enc_hi = [ConvNeXtBlock(d, m, k) for _ in range(self.enc_layers[0])]
        self.down = nn.Dense(d)
        self.enc_lo = [ConvNeXtBlock(d, m, k) for _ in range(self.enc_layers[1])]
        self.enc_norm = nn.LayerNorm(epsilon=1e-6)
        self.to_latent = nn.Dense(len(self.levels))
        self.from_latent = nn.Dense(d)
        self.dec_lo = [ConvNeXtBlock(d, m, k) for _ in range(self.dec_layers[0])]
        self.up = nn.Dense(self.stride * d)
        self.dec_hi = [ConvNeXtBlock(d, m, k) for _ in range(self.dec_layers[1])]
        self.dec_norm = nn.LayerNorm(epsilon=1e-6)
        self.head = nn.Dense(self.n_mels)
        if self.cond:
            self.voice_lo = nn.Dense(d)
            self.voice_hi = nn.Dense(d)
        if self.num_phones:
            self.ctc_in = nn.Dense(d)
            self.ctc_blocks = [ConvNeXtBlock(d, m, k) for _ in range(2)]
            self.ctc_out = nn.Dense(self.num_phones)

    def encode(self, mel: jax.Array, mask: jax.Array) -> jax.Array:
        """Standardised log-mel [B, T, M] (T a multiple of stride), frame mask [B, T] ->
        the unquantised latent [B, S, Q]."""
        b, t, _ = mel.shape
        if self.cond:  # the utterance's per-bin mean removed
            mel = mel - voice(mel, mask)[:, None, : self.n_mels]
        x = self.embed(mel * mask[..., None])  # [B, T, D]
        for blk in self.enc_hi:
            x = blk(x, mask)
        x = self.down((x * mask[..., None]).reshape(b, t // self.stride, -1))  # [B, S, D]
        tmask = mask[:, :: self.stride]  # [B, S]
        for blk in self.enc_lo:
            x = blk(x, tmask)
        return self.to_latent(self.enc_norm(x))  # [B, S, Q]

    def encode_codes(self, mel: jax.Array, mask: jax.Array) -> jax.Array:
        """Standardised log-mel [B, T, M], mask [B, T] -> codes int32 [B, S]."""
        return self.quantize(self.encode(mel, mask))[1]

    def quantize(self, z: jax.Array) -> tuple[jax.Array, jax.Array]:
        return fsq_quantize(z, self.levels)

    def decode(self, q: jax.Array, tmask: jax.Array, cond: jax.Array | None = None) -> jax.Array:
        """Quantised latent [B, S, Q], token mask [B, S], voice [B, 2M] (with `cond`; None:
        the corpus average) -> standardised log-mel [B, T, M]."""
        b, s, _ = q.shape
        x = self.from_latent(q)  # [B, S, D]
        if self.cond:
            cond = jnp.zeros((b, 2 * self.n_mels), x.dtype) if cond is None else cond
            x = x + self.voice_lo(cond)[:, None]
        for blk in self.dec_lo:
            x = blk(x, tmask)
        x = self.up(x).reshape(b, s * self.stride, self.dim)  # [B, T, D]
        if self.cond:
            x = x + self.voice_hi(cond)[:, None]
        mask = jnp.repeat(tmask, self.stride, axis=1)  # [B, T]
        for blk in self.dec_hi:
            x = blk(x, mask)
        return self.head(self.dec_norm(x))  # [B, T, M]

    def decode_codes(self, codes: jax.Array, tmask: jax.Array, cond=None) -> jax.Array:
        return self.decode(fsq_latent(codes, self.levels), tmask, cond)

    def ctc_logits(self, q: jax.Array, tmask: jax.Array) -> jax.Array:
        """[B, S, Q] -> phoneme logits [B, S, P] (class 0 is CTC's blank)."""
        x = self.ctc_in(q)
        for blk in self.ctc_blocks:
            x = blk(x, tmask)
        return self.ctc_out(x)

    def __call__(self, mel: jax.Array, mask: jax.Array, mel_in: jax.Array | None = None):
        """-> (reconstruction [B, T, M], codes [B, S], CTC logits [B, S, P] or None).
        `mel_in`: what the encoder reads instead of `mel` (a masked copy in training: the codes
        must be inferred from what is left; the decoder is told the voice of `mel`)."""
        q, codes = self.quantize(self.encode(mel if mel_in is None else mel_in, mask))
        tmask = mask[:, :: self.stride]
        logits = self.ctc_logits(q, tmask) if self.num_phones else None
        cond = voice(mel, mask) if self.cond else None
        return self.decode(q, tmask, cond), codes, logits

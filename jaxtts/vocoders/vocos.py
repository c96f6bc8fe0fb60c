"""A Vocos-style neural vocoder: log-mel -> ConvNeXt blocks at the frame rate -> STFT magnitude
and phase -> inverse STFT (Siuzdak, "Vocos", 2023). Written here in Flax; no code copied.

Why Vocos and not HiFi-GAN: every layer runs at the mel frame rate (50 Hz here) instead of
upsampling to 16 kHz through transposed convolutions, so one audio second costs ~0.4 GFLOP at
the `small` size (2 x 3.7 M parameters x 50 frames), where HiFi-GAN V1's upsampling
convolutions run tens of GFLOP at 16-22 kHz: the 2-CPU-core budget (<= 20 ms per audio second
at batch 1) rules the upsampling generator out before any listening test.

    gen = VocosGenerator(dim=256, mlp_dim=768, layers=8, n_fft=1280, hop=320)
    audio = gen.apply({"params": p}, mel_norm, mel_len)   # [B, (T - 1) * hop]

Shapes: B batch, T mel frames, M mel bins, D channels, F = n_fft // 2 + 1 STFT bins, N samples.
The generator takes the globally standardised log-mel (`(mel - mean) / std`, the stats saved
with the model) and its valid lengths: frames past a row's length are zeroed before every
convolution (as "SAME" zero padding would for that row alone), so a row of a padded batch
gives the samples it gives alone (batch-N == batch-1 per row, up to float rounding).

The inverse STFT is "same"-padded: T frames at hop H make (T - 1) H samples, the frame t
centred on sample t H, as `jaxtts.data.audio.stft` analyses them. Its overlap-add is n_fft / H
shifted adds (4 here), and the Hann-squared window envelope of the row's valid frames is
divided out where it is above 1e-11.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.data.audio import MelConfig, mel_filterbank
from jaxtts.nn.conv import ConvNeXtBlock
from jaxtts.nn.masks import length_mask

__all__ = ["VocosGenerator", "istft", "jax_log_mel", "stft_mag"]


@functools.lru_cache(maxsize=8)
def _hann(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)  # periodic


def istft(spec: jax.Array, n_fft: int, hop: int, mask: jax.Array | None = None) -> jax.Array:
    """Complex STFT [B, T, F] -> audio [B, (T - 1) hop] ("same" padding, Hann window).

    `mask` [B, T] (1 valid, 0 padding): padded frames add nothing to the overlap-add nor to the
    window envelope, so a padded row ends as it would alone."""
    if n_fft % hop:
        raise ValueError(f"istft: n_fft={n_fft} must be a multiple of hop={hop}")
    b, t, _ = spec.shape
    w = jnp.asarray(_hann(n_fft))
    frames = jnp.fft.irfft(spec, n=n_fft, axis=-1) * w  # [B, T, n_fft]
    if mask is None:
        mask = jnp.ones((b, t), frames.dtype)
    k = n_fft // hop
    parts = (frames * mask[..., None]).reshape(b, t, k, hop)  # [B, T, K, H]
    w2 = jnp.asarray((_hann(n_fft) ** 2).reshape(k, hop))  # [K, H]
    envs = mask[:, :, None, None] * w2  # [B, T, K, H]
    out = jnp.zeros((b, (t + k - 1) * hop), frames.dtype)
    env = jnp.zeros((b, (t + k - 1) * hop), frames.dtype)
    for j in range(k):  # frame t's j-th hop lands on samples [(t + j) H, (t + j + 1) H)
        out = out.at[:, j * hop : (j + t) * hop].add(parts[:, :, j].reshape(b, t * hop))
        env = env.at[:, j * hop : (j + t) * hop].add(envs[:, :, j].reshape(b, t * hop))
    out = out / jnp.where(env > 1e-11, env, 1.0)
    pad = n_fft // 2  # frame 0 is centred on sample 0
    return out[:, pad : pad + (t - 1) * hop]


@functools.lru_cache(maxsize=16)
def _dft_kernel(n_fft: int, win: int) -> np.ndarray:
    """Windowed real-DFT basis as a conv kernel [n_fft, 1, 2F] (cos | -sin)."""
    w = np.zeros(n_fft, np.float64)
    off = (n_fft - win) // 2
    w[off : off + win] = _hann(win)
    f = np.arange(n_fft // 2 + 1)
    ang = 2 * np.pi * np.outer(np.arange(n_fft), f) / n_fft  # [n_fft, F]
    k = np.concatenate([np.cos(ang), -np.sin(ang)], axis=1) * w[:, None]
    return k[:, None, :].astype(np.float32)


def stft_mag(x: jax.Array, n_fft: int, hop: int, win: int | None = None) -> jax.Array:
    """|STFT| of audio [B, N] (centred frames, zero padding, Hann) -> [B, T, n_fft//2 + 1].

    A strided convolution with the windowed DFT basis: no gather, so its gradient is a
    convolution too (a framing gather's gradient is a scatter, slow on CPUs)."""
    win = win or n_fft
    x = jnp.pad(x, ((0, 0), (n_fft // 2, n_fft // 2)))  # zeros, as jaxtts.data.audio.stft
    y = jax.lax.conv_general_dilated(
        x[:, :, None],
        jnp.asarray(_dft_kernel(n_fft, win)),
        (hop,),
        "VALID",
        dimension_numbers=("NWC", "WIO", "NWC"),
        precision=jax.lax.Precision.HIGHEST,
    )  # [B, T, 2F]
    f = n_fft // 2 + 1
    return jnp.sqrt(y[..., :f] ** 2 + y[..., f:] ** 2 + 1e-12)


def jax_log_mel(x: jax.Array, cfg: MelConfig) -> jax.Array:
    """`jaxtts.data.audio.log_mel` in JAX for a batch of audio [B, N] -> [B, T, M]."""
    mag = stft_mag(x, cfg.n_fft, cfg.hop_length, cfg.win_length)  # [B, T, F]
    mel = jnp.einsum("btf,mf->btm", mag, jnp.asarray(mel_filterbank(cfg)))
    return jnp.log(jnp.maximum(mel, cfg.log_floor))


class VocosGenerator(nn.Module):
    dim: int = 256
    mlp_dim: int = 768
    layers: int = 8
    n_fft: int = 1280
    hop: int = 320
    n_mels: int = 80

    @nn.compact
    def __call__(self, mel: jax.Array, mel_len: jax.Array) -> jax.Array:
        """Standardised log-mel [B, T, M], lengths [B] -> audio [B, (T - 1) hop]; samples past
        a row's (len - 1) hop are not defined (the caller trims them)."""
        mask = length_mask(mel_len.astype(jnp.int32), mel.shape[1]).astype(mel.dtype)  # [B, T]
        x = mel * mask[..., None]
        x = nn.Conv(self.dim, (7,), padding=[(3, 3)], name="embed")(x)  # [B, T, D]
        x = nn.LayerNorm(epsilon=1e-6, name="embed_norm")(x)
        for i in range(self.layers):
            x = ConvNeXtBlock(self.dim, self.mlp_dim, name=f"block_{i}")(x, mask)
        x = nn.LayerNorm(epsilon=1e-6, name="final_norm")(x)
        f = self.n_fft // 2 + 1
        y = nn.Dense(2 * f, name="head")(x)  # [B, T, 2F]
        log_mag, phase = y[..., :f], y[..., f:]
        mag = jnp.exp(jnp.minimum(log_mag, 7.0))  # [B, T, F]
        spec = mag * jnp.cos(phase) + 1j * (mag * jnp.sin(phase))
        return istft(spec.astype(jnp.complex64), self.n_fft, self.hop, mask)

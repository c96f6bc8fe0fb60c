"""MDM's acoustic model (docs/methods/mdm.md): a Grad-TTS-style text encoder with a per-phone
mel prior and a duration predictor, and the masked-diffusion decoder over quantised mels.

  encoder    phone ids [B, X] (+ a speaker embedding) -> a bidirectional transformer (RoPE,
             padding mask) -> h [B, X, D]; the per-phone prior mu_x = W h [B, X, M] in the
             normalised mel space; log-durations logw [B, X] from a 2-conv predictor on
             stop_gradient(h) (Grad-TTS).
  alignment  training only: monotonic alignment search (`mas.py`) of the normalised mel under
             N(mu_x, I) gives each phone its frames; mu [B, T, M] is mu_x upsampled by the
             durations (inference: the predicted durations).
  decoder    a bidirectional transformer over frames: input = W_mu mu_t + W_x x_t (+ a learned
             vector for masked frames) + the speaker; output per frame and bin a discretised
             mixture of K logistics (`dmol.py`) over the Q quantisation levels.
  score      with `score_layers > 0`, the Grad-TTS baseline's score network on the same
             encoder: a bidirectional transformer over frames (input W_mu mu + W_x X_t + an
             MLP of sinusoidal features of 1000 t + the speaker) predicting the noise
             [B, T, M]; its diffusion (loss, sampler) is `gradtts.py`.

Mel normalisation: a log-mel value y maps to [-1, 1] by the quantiser's range,
y_n = 2 (clip(y, lo, hi) - lo) / (hi - lo) - 1, where level v of Q sits at -1 + 2 v / (Q - 1)
(`LinearMelQuantizer` and `dmol` agree on this grid). The prior and mu live in that space.

Speaker: the corpus has several voices; every model call takes a speaker embedding s [B, E]
(the shipped JAX speaker encoder's, of a reference utterance; zeros = none), added to the
encoder's and the decoder's inputs through learned projections.

Axis letters: B batch, X phones, T frames, M mel bins, D width, K mixture components,
Q levels, E speaker embedding.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError
from jaxtts.nn import axes
from jaxtts.nn.conv import masked_conv1d
from jaxtts.nn.layers import Dense, RMSNorm, param_with_axes, sinusoidal
from jaxtts.nn.masks import length_mask, padding_mask
from jaxtts.nn.transformer import StackConfig, TransformerStack


@dataclasses.dataclass(frozen=True)
class MDMConfig:
    num_text_symbols: int
    n_mels: int = 80
    levels: int = 100  # Q
    mel_lo: float = -11.5  # the quantiser's range (filled from the data)
    mel_hi: float = 2.0
    d_model: int = 192
    enc_layers: int = 4
    enc_heads: int = 2
    enc_ff: int = 768
    dur_channels: int = 256
    dec_layers: int = 6
    dec_width: int = 256
    dec_heads: int = 4
    dec_ff: int = 1024
    mixtures: int = 5  # K
    speaker_dim: int = 192  # 0 = no speaker input
    rope_theta: float = 10_000.0
    score_layers: int = 0  # > 0: also the Grad-TTS baseline's score decoder (`gradtts.py`)
    beta_min: float = 0.05  # Grad-TTS's noise schedule beta_t = beta_min + (max - min) t
    beta_max: float = 20.0
    # the Grad-TTS diffusion runs on s * y (y the [-1, 1]-normalised mels): (mel_hi - mel_lo) / 2
    # is Grad-TTS's own unscaled log-mel space (configs/mdm.py fills it); 1.0, the default, is
    # what runs saved before this key trained with (noise ~6x larger relative to the speech)
    score_scale: float = 1.0

    def __post_init__(self):
        if self.levels < 2:
            raise ConfigError(f"model.levels={self.levels}: expected Q >= 2")
        if not self.score_scale > 0:
            raise ConfigError(f"model.score_scale={self.score_scale}: expected > 0")
        if self.score_layers < 0:
            raise ConfigError(f"model.score_layers={self.score_layers}: expected >= 0")
        if not self.mel_hi > self.mel_lo:
            raise ConfigError(
                f"model.mel_lo={self.mel_lo}, model.mel_hi={self.mel_hi}: expected hi > lo"
            )

    def stack(self, layers: int, width: int, heads: int, ff: int) -> StackConfig:
        return StackConfig(
            num_layers=layers,
            num_heads=heads,
            head_dim=width // heads,
            d_ff=ff,
            rope_theta=self.rope_theta,
        )

    # -- the mel grid
    def normalize(self, mel: jax.Array) -> jax.Array:
        """log-mel [..., M] -> [-1, 1]."""
        y = (jnp.clip(mel, self.mel_lo, self.mel_hi) - self.mel_lo) / (self.mel_hi - self.mel_lo)
        return 2.0 * y - 1.0

    def denormalize(self, y: jax.Array) -> jax.Array:
        return self.mel_lo + (y + 1.0) / 2.0 * (self.mel_hi - self.mel_lo)

    def quantize(self, mel: jax.Array) -> jax.Array:
        """log-mel -> level int32 [..., M] (the nearest of Q)."""
        return jnp.round((self.normalize(mel) + 1.0) / 2.0 * (self.levels - 1)).astype(jnp.int32)

    def level_value(self, q: jax.Array) -> jax.Array:
        """level -> its centre in [-1, 1]."""
        return -1.0 + 2.0 * q.astype(jnp.float32) / (self.levels - 1)


class TextEncoder(nn.Module):
    cfg: MDMConfig

    @nn.compact
    def __call__(self, text, text_len, speaker):
        """text [B, X], text_len [B], speaker [B, E] or None -> (h [B, X, D], mu_x [B, X, M],
        logw [B, X])."""
        c = self.cfg
        table = param_with_axes(
            self,
            "embed",
            nn.initializers.normal(1.0),
            (c.num_text_symbols, c.d_model),
            (axes.VOCAB, axes.EMBED),
        )
        x = jnp.take(table, text, axis=0)  # [B, X, D]
        if c.speaker_dim and speaker is not None:
            x = x + Dense(c.d_model, (None, axes.EMBED), name="speaker")(speaker)[:, None]
        valid = length_mask(text_len, text.shape[1])  # [B, X]
        pos = jnp.broadcast_to(jnp.arange(text.shape[1]), text.shape)
        h, _ = TransformerStack(
            c.stack(c.enc_layers, c.d_model, c.enc_heads, c.enc_ff), name="stack"
        )(x, pos, padding_mask(valid))
        h = h * valid[..., None]
        mu_x = Dense(c.n_mels, (axes.EMBED, None), use_bias=True, name="prior")(h)
        d = jax.lax.stop_gradient(h)
        for i in range(2):
            d = masked_conv1d(d, valid, c.dur_channels, 3, name=f"dur_conv{i}")
            d = RMSNorm(name=f"dur_norm{i}")(jax.nn.relu(d))
        logw = Dense(1, (axes.EMBED, None), use_bias=True, name="dur_out")(d)[..., 0]
        return h, mu_x, logw * valid


class MDMDecoder(nn.Module):
    cfg: MDMConfig

    @nn.compact
    def __call__(self, mu, x, visible, frame_len, speaker):
        """mu [B, T, M] prior, x [B, T, M] normalised visible values (anything where not
        visible), visible bool [B, T], frame_len [B], speaker [B, E] or None -> mixture
        parameters [B, T, M, 3K]."""
        c = self.cfg
        w = c.dec_width
        x = jnp.where(visible[..., None], x, 0.0)
        h = Dense(w, (None, axes.EMBED), use_bias=True, name="in_mu")(mu)
        h = h + Dense(w, (None, axes.EMBED), name="in_x")(x)
        masked_vec = param_with_axes(
            self, "mask_embed", nn.initializers.normal(1.0), (w,), (axes.EMBED,)
        )
        h = h + jnp.where(visible[..., None], 0.0, masked_vec)
        if c.speaker_dim and speaker is not None:
            h = h + Dense(w, (None, axes.EMBED), name="speaker")(speaker)[:, None]
        valid = length_mask(frame_len, mu.shape[1])
        pos = jnp.broadcast_to(jnp.arange(mu.shape[1]), valid.shape)
        h, _ = TransformerStack(c.stack(c.dec_layers, w, c.dec_heads, c.dec_ff), name="stack")(
            h, pos, padding_mask(valid)
        )
        out = Dense(
            (c.n_mels, 3 * c.mixtures), (axes.EMBED, None, None), use_bias=True, name="out"
        )(h)  # [B, T, M, 3K]
        return out.astype(jnp.float32)


class ScoreDecoder(nn.Module):
    """eps_theta(X_t, mu, t): [B, T, M] noise prediction (score = -eps / sqrt(lambda_t))."""

    cfg: MDMConfig

    @nn.compact
    def __call__(self, xt, mu, t, frame_len, speaker):
        """xt, mu [B, T, M]; t [B] in [0, 1]; frame_len [B]; speaker [B, E] or None."""
        c = self.cfg
        w = c.dec_width
        h = Dense(w, (None, axes.EMBED), use_bias=True, name="in_mu")(mu)
        h = h + Dense(w, (None, axes.EMBED), name="in_x")(xt)
        temb = sinusoidal(1000.0 * t, w)  # [B, D]
        temb = Dense(4 * w, (None, axes.MLP), use_bias=True, name="time_in")(temb)
        temb = Dense(w, (axes.MLP, axes.EMBED), use_bias=True, name="time_out")(jax.nn.silu(temb))
        h = h + temb[:, None]
        if c.speaker_dim and speaker is not None:
            h = h + Dense(w, (None, axes.EMBED), name="speaker")(speaker)[:, None]
        valid = length_mask(frame_len, mu.shape[1])  # [B, T]
        pos = jnp.broadcast_to(jnp.arange(mu.shape[1]), valid.shape)
        h, _ = TransformerStack(c.stack(c.score_layers, w, c.dec_heads, c.dec_ff), name="stack")(
            h, pos, padding_mask(valid)
        )
        out = Dense(c.n_mels, (axes.EMBED, None), use_bias=True, name="out")(h)
        return out.astype(jnp.float32) * valid[..., None]


def upsample(mu_x: jax.Array, durations: jax.Array, frames: int) -> jax.Array:
    """mu_x [B, X, M] repeated by integer durations [B, X] -> [B, T, M] (zeros past the last
    phone's frames)."""
    ends = jnp.cumsum(durations, axis=1)  # [B, X]
    t = jnp.arange(frames)[None, :, None]
    seg = jnp.sum(t >= ends[:, None, :], axis=-1)  # [B, T] phone of each frame
    inside = seg < durations.shape[1]
    mu = jnp.take_along_axis(mu_x, jnp.minimum(seg, durations.shape[1] - 1)[..., None], axis=1)
    return jnp.where(inside[..., None], mu, 0.0)


class AcousticModel(nn.Module):
    """Encoder + MDM decoder (+ the Grad-TTS score decoder when `score_layers > 0`). Methods:
    `encode`, `decode_params`, `score`; `__call__` runs them all (init)."""

    cfg: MDMConfig

    def setup(self):
        self.encoder = TextEncoder(self.cfg)
        self.decoder = MDMDecoder(self.cfg)
        self.score_decoder = ScoreDecoder(self.cfg) if self.cfg.score_layers else None

    def encode(self, text, text_len, speaker=None):
        return self.encoder(text, text_len, speaker)

    def decode_params(self, mu, x, visible, frame_len, speaker=None):
        return self.decoder(mu, x, visible, frame_len, speaker)

    def score(self, xt, mu, t, frame_len, speaker=None):
        """Grad-TTS noise prediction [B, T, M] (`gradtts.py`)."""
        if self.score_decoder is None:
            raise ConfigError("this model has no Grad-TTS decoder (model.score_layers=0)")
        return self.score_decoder(xt, mu, t, frame_len, speaker)

    def __call__(self, text, text_len, mel, mel_len, speaker=None):
        """Shapes for init: text [B, X], mel [B, T, M] -> mixture parameters [B, T, M, 3K]."""
        _, mu_x, _ = self.encode(text, text_len, speaker)
        mu = mu_x[:, :1].repeat(mel.shape[1], axis=1)
        y = self.cfg.normalize(mel)
        out = self.decode_params(mu, y, length_mask(mel_len, mel.shape[1]), mel_len, speaker)
        if self.score_decoder is not None:
            self.score(y, mu, jnp.full(mel.shape[:1], 0.5), mel_len, speaker)
        return out


def prior_logp(y: jax.Array, mu_x: jax.Array) -> jax.Array:
    """log N(y_t; mu_x, I) up to a constant, for every (phone, frame): y [B, T, M], mu_x
    [B, X, M] -> [B, X, T] (the MAS input)."""
    yy = jnp.sum(y * y, -1)[:, None, :]  # [B, 1, T]
    mm = jnp.sum(mu_x * mu_x, -1)[:, :, None]  # [B, X, 1]
    return -0.5 * (yy - 2.0 * jnp.einsum("BXM,BTM->BXT", mu_x, y) + mm)

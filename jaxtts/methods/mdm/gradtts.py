"""The Grad-TTS baseline (Popov et al. 2021; MDM's comparison in docs/methods/mdm.md): a
score-based diffusion decoder on the SAME text encoder, durations and prior as the MDM decoder.

Diffusion (y, mu below stand for s * y, s * mu: the normalised mels of `model.py` times the
scale s of the paragraph further down; terminal distribution N(mu, I), the prior upsampled by
the durations):

  forward SDE   dX_t = 1/2 beta_t (mu - X_t) dt + sqrt(beta_t) dW_t,  t in [0, 1],
                beta_t = beta_0 + (beta_1 - beta_0) t  (0.05, 20 as Grad-TTS)
  marginal      X_t | y ~ N(rho_t y + (1 - rho_t) mu, lambda_t I),
                rho_t = exp(-1/2 int_0^t beta),  lambda_t = 1 - exp(-int_0^t beta)
  loss          E_t,xi || eps_theta(X_t, mu, t) - xi ||^2,  X_t = mean + sqrt(lambda_t) xi,
                i.e. Grad-TTS's lambda_t-weighted score matching with the network predicting
                xi = -sqrt(lambda_t) * score (mean over the valid frames and bins)
  sampling      X_1 = mu + z / tau (Grad-TTS's temperature tau, 1.5 in the paper; greedy: z = 0),
                then N Euler steps of the probability-flow ODE backwards in time:
                X_{t-h} = X_t - h/2 beta_t (mu - X_t - score(X_t, mu, t)),  t = 1 - (i + 1/2) h.

Steps: `gradtts:<N>` a fixed N per utterance (the paper's baseline: 100), `gradtts:length`
N = the utterance's frame count (what a one-frame-per-step MDM order spends), per row.

**Deviation, on purpose:** the score network (`model.ScoreDecoder`) is a bidirectional
transformer over frames of the same shape as the MDM decoder (input W_mu mu + W_x X_t + an MLP
of the sinusoidal features of 1000 t, + the speaker; output eps [B, T, M]) instead of
Grad-TTS's 2-D convolutional U-Net,
so the two decoders differ in the diffusion, not in the network. Both decoders are trained in
one run on one encoder (`model.score_layers > 0`; both losses train the encoder), so the
comparison is on literally the same durations and prior.

**The diffusion's scale** (`model.score_scale`, s): the process runs on s * y and s * mu, where
y is the [-1, 1]-normalised mel of `model.py`; the score network still sees x / s and mu (inputs
of unit range). `configs/mdm.py` fills s = (mel_hi - mel_lo) / 2 (~6), i.e. Grad-TTS's own
unscaled log-mels, where a unit of noise is a nat of log-mel. Runs saved before the key have
s = 1 (the diffusion on the normalised mels: the same terminal N(mu, I) is ~6x more noise
relative to the speech than the paper's, the likely cause of `pretrained/mdm`'s Grad-TTS rows
at 75 % WER, RESULTS.md 16f).

Axis letters: B batch, T frames, M mel bins, D width.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp

from jaxtts.errors import ConfigError
from jaxtts.methods.mdm.decode import predicted_durations
from jaxtts.methods.mdm.model import upsample
from jaxtts.nn.masks import length_mask

T_EPS = 1e-5  # training times t ~ U[T_EPS, 1 - T_EPS] (lambda_t > 0)


@dataclasses.dataclass(frozen=True)
class GradTTS:
    """The `gradtts[:<steps>|:length]` strategy (`jaxtts.decode.registry`): the Grad-TTS
    score decoder of an MDM run; steps 0 = the row's frame count."""

    steps: int

    @property
    def name(self) -> str:
        return f"gradtts:{self.steps or 'length'}"


def strategy(name: str, arg: str | None) -> GradTTS:
    """Registry factory: 'gradtts', 'gradtts:<N>', 'gradtts:length' -> GradTTS."""
    return GradTTS(parse_steps(f"{name}:{arg}" if arg else name))


def parse_steps(spec: str) -> int:
    """'gradtts' -> 100, 'gradtts:<N>' -> N, 'gradtts:length' -> 0 (= the row's frame count)."""
    name, _, arg = str(spec).partition(":")
    if name != "gradtts":
        raise ConfigError(f"strategy {spec!r}: expected gradtts, gradtts:<steps> or gradtts:length")
    if not arg:
        return 100
    if arg == "length":
        return 0
    try:
        n = int(arg)
    except ValueError:
        raise ConfigError(
            f"strategy {spec!r}: expected gradtts:<steps> (an integer >= 1) or gradtts:length"
        ) from None
    if n < 1:
        raise ConfigError(f"strategy {spec!r}: steps must be >= 1")
    return n


def cumulative_beta(cfg, t: jax.Array) -> jax.Array:
    """int_0^t beta_s ds for the linear schedule."""
    return cfg.beta_min * t + 0.5 * (cfg.beta_max - cfg.beta_min) * t * t


def beta(cfg, t: jax.Array) -> jax.Array:
    return cfg.beta_min + (cfg.beta_max - cfg.beta_min) * t


def score_loss(model, params, y, mu, frame_weight, frame_len, speaker, rng):
    """Grad-TTS's diffusion loss: y, mu [B, T, M] (normalised), frame_weight [B, T] (1 on the
    frames that count) -> mean squared noise error per valid frame and bin."""
    cfg = model.cfg
    sc = cfg.score_scale
    b = y.shape[0]
    kt, kx = jax.random.split(rng)
    t = jax.random.uniform(kt, (b,), minval=T_EPS, maxval=1.0 - T_EPS)  # [B]
    cum = cumulative_beta(cfg, t)[:, None, None]  # [B, 1, 1]
    rho, lam = jnp.exp(-0.5 * cum), -jnp.expm1(-cum)
    xi = jax.random.normal(kx, y.shape)  # [B, T, M]
    xt = sc * (rho * y + (1.0 - rho) * mu) + jnp.sqrt(lam) * xi  # [B, T, M], scaled space
    eps = model.apply({"params": params}, xt / sc, mu, t, frame_len, speaker, method="score")
    err = jnp.sum((eps - xi) ** 2, -1) * frame_weight  # [B, T]
    return jnp.sum(err) / (jnp.maximum(frame_weight.sum(), 1.0) * cfg.n_mels)


@flax.struct.dataclass
class GradTTSOutput:
    mel: jax.Array  # float32 [B, T, M] log-mel (0 on padded frames)
    frames: jax.Array  # int32 [B]
    steps: jax.Array  # int32 [B] score-network forwards of each row


@functools.partial(
    jax.jit, static_argnames=("model", "steps", "frames", "greedy", "temperature", "length_scale")
)
def gradtts_decode(
    model,
    params,
    text,
    text_len,
    speaker,
    keys,
    *,
    steps: int,
    frames: int,
    greedy: bool = False,
    temperature: float = 1.5,
    length_scale: float = 1.0,
) -> GradTTSOutput:
    """text [B, X], text_len [B], speaker [B, E] or None, keys [B] per-row PRNG keys; `steps`
    per row (0 = the row's frame count); `frames` the static buffer length."""
    cfg = model.cfg
    p = {"params": params}
    _, mu_x, logw = model.apply(p, text, text_len, speaker, method="encode")
    dur = predicted_durations(logw, text_len, length_scale)  # [B, X]
    t_len = jnp.minimum(jnp.sum(dur, axis=1), frames).astype(jnp.int32)  # [B]
    mu = upsample(mu_x, dur, frames)  # [B, T, M]
    valid = length_mask(t_len, frames)[..., None]  # [B, T, 1]
    n = jnp.where(text_len > 0, t_len if steps == 0 else steps, 0).astype(jnp.int32)  # [B]
    sc = cfg.score_scale
    z = jax.vmap(lambda k: jax.random.normal(k, mu.shape[1:]))(keys)  # [B, T, M]
    x = sc * mu + (0.0 if greedy else z / temperature)  # [B, T, M], the scaled space
    x = jnp.where(valid, x, 0.0)
    eps_fn = lambda x, t: model.apply(p, x / sc, mu, t, t_len, speaker, method="score")  # noqa: E731
    x = reverse_ode(cfg, eps_fn, x, sc * mu, n, valid) / sc
    mel = jnp.where(valid, cfg.denormalize(jnp.clip(x, -1.0, 1.0)), 0.0)
    return GradTTSOutput(mel, t_len, n)


def reverse_ode(cfg, eps_fn, x, mu, n, valid):
    """Euler steps of the probability-flow ODE from t = 1 to 0: x, mu [B, T, M], n [B] steps
    per row (a row with n = 0 stays), valid [B, T, 1]; eps_fn(x [B, T, M], t [B]) -> eps."""
    h = 1.0 / jnp.maximum(n, 1).astype(jnp.float32)  # [B]

    def body(carry):
        i, x = carry
        active = i < n  # [B]
        t = jnp.clip(1.0 - (i + 0.5) * h, 0.0, 1.0)  # [B]
        lam = -jnp.expm1(-cumulative_beta(cfg, t))  # [B]
        score = -eps_fn(x, t) / jnp.sqrt(lam)[:, None, None]
        dx = 0.5 * (beta(cfg, t) * h)[:, None, None] * (mu - x - score)
        return i + 1, jnp.where(active[:, None, None] & valid, x - dx, x)

    _, x = jax.lax.while_loop(lambda c: c[0] < jnp.max(n), body, (jnp.int32(0), x))
    return x

"""Training the Vocos-style vocoder (`jaxtts.vocoders`): discriminators, losses, crops, `train`.

    python train.py --config configs/vocoder.py:small --workdir runs/vocoder
    python -m jaxtts.vocoders export runs/vocoder pretrained/vocoder   # the generator alone

One `jaxtts.train.loop` Task whose parameters are {'gen', 'mpd', 'mrd'} under ONE optax
optimiser: the GAN is trained by simultaneous gradient steps. The loss is the sum of the
generator's loss, computed with the discriminators' parameters behind `stop_gradient`, and the
discriminators' loss, computed on `stop_gradient` of the generated audio; so the generator's
gradient is exactly that of its own loss and each discriminator's that of its own (Adam is
per-parameter: one AdamW over the union is an AdamW per network with the same settings). It
rides the generic trainer unchanged: sharded over the mesh, resumable, evaluated, checkpointed.

Losses (Vocos / HiFi-GAN recipe, weights in `config.loss`):
- reconstruction: L1 of the log-mel of the output against the input log-mel (`mel`), plus a
  multi-resolution STFT loss (spectral convergence + log-magnitude L1 at 3 resolutions, `stft`);
- adversarial, hinge: D: relu(1 - D(x)) + relu(1 + D(G(m))); G: relu(1 - D(G(m))) (`adv`),
  from `loss.gan_start` on (before it the generator learns the reconstruction alone);
- feature matching: L1 between the discriminators' hidden maps of real and generated audio
  (`fm`), with the adversarial term.
Discriminators: multi-period (periods 2, 3, 5, 7, 11; 2-D convs over [N / p, p]) and
multi-resolution (log-magnitude spectrograms at 3 STFT sizes; 2-D convs over [T, F]).
Axis letters: B batch, N samples, T frames, F bins, C channels.
"""

from __future__ import annotations

import logging
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from jaxtts.data.audio import MelConfig, global_mel_stats, load_audio, log_mel, utterance_mels
from jaxtts.data.corpus import resolve_corpus_dir
from jaxtts.data.manifest import read_split
from jaxtts.errors import ConfigError, DataError
from jaxtts.train import loop
from jaxtts.vocoders import generator_from_config
from jaxtts.vocoders.vocos import jax_log_mel, stft_mag

log = logging.getLogger("jaxtts.vocoder")

__all__ = ["CropSource", "MultiPeriodD", "MultiResolutionD", "VocoderTask", "train"]

STFT_RESOLUTIONS = ((512, 128), (1024, 256), (256, 64))  # (n_fft, hop) of the losses and MRD


class PeriodD(nn.Module):
    period: int
    channels: tuple[int, ...] = (8, 32, 64, 64)  # HiFi-GAN: 32..1024; a 2-core budget

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, list[jax.Array]]:  # x [B, N]
        b, n = x.shape
        pad = (-n) % self.period
        x = jnp.pad(x, ((0, 0), (0, pad)), mode="reflect")
        h = x.reshape(b, -1, self.period, 1)  # [B, N/p, p, 1]
        feats = []
        for i, c in enumerate(self.channels):
            h = nn.Conv(c, (5, 1), strides=(3, 1), padding=[(2, 2), (0, 0)], name=f"conv_{i}")(h)
            h = nn.leaky_relu(h, 0.1)
            feats.append(h)
        h = nn.Conv(c, (5, 1), padding=[(2, 2), (0, 0)], name="conv_last")(h)
        feats.append(h := nn.leaky_relu(h, 0.1))
        out = nn.Conv(1, (3, 1), padding=[(1, 1), (0, 0)], name="out")(h)
        return out.reshape(b, -1), feats


class MultiPeriodD(nn.Module):
    periods: tuple[int, ...] = (2, 3, 5, 7, 11)

    @nn.compact
    def __call__(self, x):
        return [PeriodD(p, name=f"p{p}")(x) for p in self.periods]


class ResolutionD(nn.Module):
    n_fft: int
    hop: int
    channels: int = 32

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, list[jax.Array]]:
        mag = stft_mag(x, self.n_fft, self.hop)  # [B, T, F]
        h = jnp.log(jnp.maximum(mag, 1e-5))[..., None]  # [B, T, F, 1]
        feats = []
        layers = (((7, 5), (1, 2)), ((5, 3), (1, 2)), ((5, 3), (1, 2)), ((3, 3), (1, 1)))
        for i, (k, s) in enumerate(layers):  # (kernel, stride) over (T, F)
            pad = [(k[0] // 2, k[0] // 2), (k[1] // 2, k[1] // 2)]
            h = nn.leaky_relu(
                nn.Conv(self.channels, k, strides=s, padding=pad, name=f"conv_{i}")(h), 0.1
            )
            feats.append(h)
        out = nn.Conv(1, (3, 3), padding=[(1, 1), (1, 1)], name="out")(h)
        return out.reshape(x.shape[0], -1), feats


class MultiResolutionD(nn.Module):
    resolutions: tuple[tuple[int, int], ...] = STFT_RESOLUTIONS

    @nn.compact
    def __call__(self, x):
        return [ResolutionD(n, h, name=f"r{n}")(x) for n, h in self.resolutions]


def _mrstft_loss(y: jax.Array, x: jax.Array) -> jax.Array:
    """Multi-resolution STFT loss: spectral convergence + log-magnitude L1, averaged."""
    total = 0.0
    for n_fft, hop in STFT_RESOLUTIONS:
        a, b = stft_mag(y, n_fft, hop), stft_mag(x, n_fft, hop)  # [B, T, F]
        sc = jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-7)
        lm = jnp.mean(jnp.abs(jnp.log(jnp.maximum(a, 1e-5)) - jnp.log(jnp.maximum(b, 1e-5))))
        total = total + sc + lm
    return total / len(STFT_RESOLUTIONS)


class VocoderTask:
    """`jaxtts.train.loop.Task`. Batches: {'audio': f32 [B, N], 'mel': f32 [B, T, M]} with
    N = (T - 1) hop (the crop and its log-mel)."""

    def __init__(self, config):
        self.cfg = config
        self.gen = generator_from_config(config.model)
        self.mpd, self.mrd = MultiPeriodD(), MultiResolutionD()
        self.mel_cfg = MelConfig(**dict(config.model.mel))
        self.mean, self.std = float(config.model.mel_mean), float(config.model.mel_std)
        self.loss_cfg = config.loss

    def generate(self, gen_params, mel: jax.Array) -> jax.Array:
        lens = jnp.full((mel.shape[0],), mel.shape[1], jnp.int32)
        return self.gen.apply({"params": gen_params}, (mel - self.mean) / self.std, lens)

    def init(self, rng, batch):
        r1, r2, r3 = jax.random.split(rng, 3)
        mel = jnp.asarray(batch["mel"])[:1]
        lens = jnp.full((1,), mel.shape[1], jnp.int32)
        audio = jnp.asarray(batch["audio"])[:1]
        return {
            "gen": self.gen.init(r1, mel, lens)["params"],
            "mpd": self.mpd.init(r2, audio)["params"],
            "mrd": self.mrd.init(r3, audio)["params"],
        }

    def _disc(self, params, x):
        return self.mpd.apply({"params": params["mpd"]}, x) + self.mrd.apply(
            {"params": params["mrd"]}, x
        )

    def loss(self, params, batch, rng, *, train: bool, step=None):
        c = self.loss_cfg
        x = batch["audio"]  # [B, N]
        mel = batch["mel"]  # [B, T, M]
        y = self.generate(params["gen"], mel)[:, : x.shape[1]]  # [B, N]
        mel_l1 = jnp.mean(jnp.abs(jax_log_mel(y, self.mel_cfg)[:, : mel.shape[1]] - mel))
        loss = c.mel * mel_l1
        metrics = {"mel_l1": mel_l1}
        if c.stft > 0:  # (0: not computed; the tests' tiny overfit)
            metrics["stft"] = stft = _mrstft_loss(y, x)
            loss = loss + c.stft * stft
        if c.adv > 0:
            on = (
                jnp.asarray(1.0) if step is None else (step >= int(c.gan_start)).astype(jnp.float32)
            )
            frozen = jax.lax.stop_gradient({"mpd": params["mpd"], "mrd": params["mrd"]})
            real = self._disc(params, x)
            fake_d = self._disc(params, jax.lax.stop_gradient(y))
            fake_g = self._disc(frozen, y)
            d_loss = sum(
                jnp.mean(nn.relu(1 - r[0])) + jnp.mean(nn.relu(1 + f[0]))
                for r, f in zip(real, fake_d, strict=True)
            ) / len(real)
            g_adv = sum(jnp.mean(nn.relu(1 - f[0])) for f in fake_g) / len(fake_g)
            fm = sum(
                jnp.mean(jnp.abs(jax.lax.stop_gradient(a) - b))
                for r, f in zip(real, fake_g, strict=True)
                for a, b in zip(r[1], f[1], strict=True)
            ) / len(real)
            loss = loss + on * (c.adv * (g_adv + d_loss) + c.fm * fm)
            metrics.update(d_loss=d_loss, g_adv=g_adv, fm=fm)
        metrics["loss"] = loss
        return loss, metrics


class CropSource:
    """Random crops of `crop_frames` mel frames ((crop_frames - 1) hop samples) of the training
    audio; the batch of step s is a pure function of (seed, s). Audio is read per batch."""

    def __init__(self, utts, batch: int, crop_frames: int, mel_cfg: MelConfig, seed: int = 0):
        hop = mel_cfg.hop_length
        self.n = (crop_frames - 1) * hop
        self.utts = [u for u in utts if u.duration * mel_cfg.sample_rate > self.n]
        if not self.utts:
            raise DataError(f"vocoder crops: no utterance longer than {self.n} samples")
        self.batch, self.mel_cfg, self.seed, self.hop = int(batch), mel_cfg, int(seed), hop

    def get_batch(self, step: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, int(step)])
        audio, mels = [], []
        for i in rng.integers(0, len(self.utts), self.batch):
            x = load_audio(self.utts[i].path, self.mel_cfg.sample_rate)
            start = int(rng.integers(0, max(1, (len(x) - self.n) // self.hop))) * self.hop
            seg = x[start : start + self.n]
            seg = np.pad(seg, (0, self.n - len(seg)))
            audio.append(seg)
            mels.append(log_mel(seg, self.mel_cfg))
        return {"audio": np.stack(audio), "mel": np.stack(mels)}


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    """Train the vocoder on the corpus's training audio (all voices); fills the mel statistics
    of `config.model` from the data when unset. Returns the trainer's `TrainResult`."""

    config = mlc.ConfigDict(config.to_dict())
    if config.get("task") != "vocoder":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'vocoder'")
    corpus = resolve_corpus_dir(config.data)
    d = config.data
    tr = read_split(corpus, "train", int(d.get("limit_train", 0)))
    dev = read_split(corpus, "dev", int(d.get("limit_dev", 0)))
    mel_cfg = MelConfig(**dict(config.model.mel))
    if config.model.get("mel_mean") is None or config.model.get("mel_std") is None:
        t0 = time.perf_counter()
        mels = utterance_mels(tr[:: max(1, len(tr) // 300)], mel_cfg, progress, "log-mel stats")
        config.model.mel_mean, config.model.mel_std = global_mel_stats(mels)
        log.info("mel statistics from %d utterances in %.1fs", len(mels), time.perf_counter() - t0)
    task = VocoderTask(config)
    source = CropSource(tr, d.batch_size, d.crop_frames, mel_cfg, seed=d.seed)
    dev_source = CropSource(dev, d.batch_size, d.crop_frames, mel_cfg, seed=d.seed + 1)
    n_eval = int(d.eval_batches)
    return loop.train_and_evaluate(
        config,
        workdir,
        task,
        source,
        lambda: (dev_source.get_batch(s) for s in range(n_eval)),
        mesh=mesh,
        progress=progress,
    )

"""MDM's training objective (METHODS.md section 3): Grad-TTS's encoder losses + the
order-agnostic ELBO of the masked-diffusion decoder, in one loss.

For a batch of (phones, log-mel, speaker embedding):
1. encoder -> mu_x [B, X, M], logw [B, X];
2. MAS of the normalised mel y under N(mu_x, I) (no gradient) -> the phone of every frame,
   durations d [B, X]; mu = mu_x upsampled [B, T, M];
3. prior loss: mean over valid frames and bins of 0.5 (y - mu)^2 (+ 0.5 log 2 pi);
   duration loss: mean over phones of (logw - log d)^2;
4. ELBO (`orders.elbo_masks`): per row a step t ~ U{1..T_b} and a random order, the first
   t - 1 frames visible; the decoder sees mu and the visible frames' quantised values and is
   scored on every masked frame at once: T_b / (T_b - t + 1) * sum of the masked frames'
   NLL (`dmol.nll`), divided by the batch's valid frame-bins (nats per bin).

loss = elbo + prior + duration. Metrics: each term, `nll_per_bin` of the masked frames, and
`weight` (valid frames) for microbatch accumulation.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxtts.methods.mdm import dmol
from jaxtts.methods.mdm.mas import monotonic_alignment
from jaxtts.methods.mdm.model import AcousticModel, MDMConfig, prior_logp
from jaxtts.methods.mdm.orders import elbo_masks
from jaxtts.nn.masks import length_mask


def mdm_loss(model: AcousticModel, params, batch, rng: jax.Array):
    """-> (loss, metrics). batch: text [B, X], text_len, mel [B, T, M], mel_len, and
    optionally speaker [B, E]."""
    cfg: MDMConfig = model.cfg
    text, text_len = jnp.asarray(batch["text"]), jnp.asarray(batch["text_len"])
    mel, mel_len = jnp.asarray(batch["mel"]), jnp.asarray(batch["mel_len"])
    speaker = batch.get("speaker")
    speaker = None if speaker is None else jnp.asarray(speaker)
    p = {"params": params}
    b, t = mel.shape[:2]
    fvalid = length_mask(mel_len, t)  # [B, T]
    tvalid = length_mask(text_len, text.shape[1])  # [B, X]
    ok = (mel_len >= text_len) & (text_len > 0)  # MAS needs a frame per phone
    y = cfg.normalize(mel)  # [B, T, M]

    _, mu_x, logw = model.apply(p, text, text_len, speaker, method="encode")
    path = monotonic_alignment(jax.lax.stop_gradient(prior_logp(y, mu_x)), text_len,
                               jnp.where(ok, mel_len, 0))  # [B, X, T]  # fmt: skip
    path = path.astype(jnp.float32)
    dur = path.sum(-1)  # [B, X]
    mu = jnp.einsum("BXT,BXM->BTM", path, mu_x)  # [B, T, M]

    fw = (fvalid & ok[:, None]).astype(jnp.float32)  # [B, T]
    n_frames = jnp.maximum(fw.sum(), 1.0)
    prior = jnp.sum(0.5 * jnp.sum((y - mu) ** 2, -1) * fw) / (n_frames * cfg.n_mels)
    prior = prior + 0.5 * math.log(2 * math.pi)
    tw = (tvalid & ok[:, None]).astype(jnp.float32)
    dur_loss = jnp.sum((logw - jnp.log(jnp.maximum(dur, 1.0))) ** 2 * tw) / jnp.maximum(
        tw.sum(), 1.0)  # fmt: skip

    masked, weight = elbo_masks(rng, jnp.where(ok, mel_len, 0), t)  # [B, T], [B]
    q = cfg.quantize(mel)  # [B, T, M]
    visible = fvalid & ~masked
    out = model.apply(p, mu, cfg.level_value(q), visible, mel_len, speaker,
                      method="decode_params")  # [B, T, M, 3K]
    nll = jnp.sum(dmol.nll(out, q, cfg.levels), -1)  # [B, T] nats per frame
    mw = masked.astype(jnp.float32)
    elbo = jnp.sum(weight[:, None] * nll * mw) / (n_frames * cfg.n_mels)
    nll_bin = jnp.sum(nll * mw) / jnp.maximum(mw.sum() * cfg.n_mels, 1.0)
    loss = elbo + prior + dur_loss
    return loss, {"loss": loss, "elbo": elbo, "prior": prior, "duration": dur_loss,
                  "nll_per_bin": nll_bin, "weight": n_frames,
                  "dropped_rows": jnp.sum((text_len > 0) & ~ok).astype(jnp.float32)}


class MDMTask:
    """`jaxtts.train.loop.Task` for the acoustic model + MDM decoder."""

    def __init__(self, cfg: MDMConfig):
        self.cfg = cfg
        self.model = AcousticModel(cfg)

    def init(self, rng, batch):
        spk = batch.get("speaker")
        return self.model.init(rng, jnp.asarray(batch["text"]), jnp.asarray(batch["text_len"]),
                               jnp.asarray(batch["mel"]), jnp.asarray(batch["mel_len"]),
                               None if spk is None else jnp.asarray(spk))["params"]

    def loss(self, params, batch, rng, *, train: bool, step=None):
        rng = rng if rng is not None else jax.random.key(0)
        return mdm_loss(self.model, params, batch, rng)

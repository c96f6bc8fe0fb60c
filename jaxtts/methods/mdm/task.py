"""MDM's training objective (docs/methods/mdm.md): Grad-TTS's encoder losses + the
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

With the Grad-TTS baseline decoder (`model.score_layers > 0`) its diffusion loss
(`gradtts.score_loss`, on the same mu and frames) is added: loss = elbo + prior + duration +
score. Metrics: each term, `nll_per_bin` of the masked frames, and
`weight` (valid frames) for microbatch accumulation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from jaxtts.data.audio import utterance_mels
from jaxtts.data.manifest import read_split
from jaxtts.data.pipeline import MelLoader, make_buckets, make_mel_records
from jaxtts.data.text import TextFrontend
from jaxtts.data.tokenizers import LinearMelQuantizer
from jaxtts.errors import ConfigError
from jaxtts.methods.mdm import dmol
from jaxtts.methods.mdm.gradtts import score_loss
from jaxtts.methods.mdm.mas import monotonic_alignment
from jaxtts.methods.mdm.model import AcousticModel, MDMConfig, prior_logp
from jaxtts.methods.mdm.orders import elbo_masks
from jaxtts.methods.speaker_encoder import JaxSpeakerEncoder
from jaxtts.nn.masks import length_mask
from jaxtts.run_folder import RunFolder, find_run
from jaxtts.train.prepare import ensure_builtin_corpus


def mdm_loss(model: AcousticModel, params, batch, rng: jax.Array, crop: int = 0):
    """-> (loss, metrics). batch: text [B, X], text_len, mel [B, T, M], mel_len, and
    optionally speaker [B, E]; `crop` > 0: the decoders train on a random window of that many
    frames per row (`mdm.train_crop`)."""
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
    path = monotonic_alignment(
        jax.lax.stop_gradient(prior_logp(y, mu_x)), text_len, jnp.where(ok, mel_len, 0)
    )  # [B, X, T]
    path = path.astype(jnp.float32)
    dur = path.sum(-1)  # [B, X]
    mu = jnp.einsum("BXT,BXM->BTM", path, mu_x)  # [B, T, M]

    fw = (fvalid & ok[:, None]).astype(jnp.float32)  # [B, T]
    n_frames = jnp.maximum(fw.sum(), 1.0)
    prior = jnp.sum(0.5 * jnp.sum((y - mu) ** 2, -1) * fw) / (n_frames * cfg.n_mels)
    prior = prior + 0.5 * math.log(2 * math.pi)
    tw = (tvalid & ok[:, None]).astype(jnp.float32)
    dur_loss = jnp.sum((logw - jnp.log(jnp.maximum(dur, 1.0))) ** 2 * tw) / jnp.maximum(
        tw.sum(), 1.0
    )

    # the decoders see the whole utterance, or (crop > 0) a random window of `crop` frames per
    # row, as Grad-TTS trains its decoder on 2 s segments (the encoder losses above see it all)
    q = cfg.quantize(mel)  # [B, T, M]
    d_len = jnp.where(ok, mel_len, 0)
    if crop and crop < t:
        room = jnp.maximum(d_len - crop, 0)
        start = jax.random.randint(jax.random.fold_in(rng, 2), (b,), 0, room + 1)
        window = jax.vmap(lambda a, s0: jax.lax.dynamic_slice_in_dim(a, s0, crop, axis=0))
        mu, y, q = window(mu, start), window(y, start), window(q, start)
        d_len = jnp.minimum(d_len, crop)
    td = mu.shape[1]
    dvalid = length_mask(d_len, td)  # [B, Td]
    d_frames = jnp.maximum(dvalid.sum(), 1)

    masked, weight = elbo_masks(rng, d_len, td)  # [B, Td], [B]
    visible = dvalid & ~masked
    out = model.apply(
        p, mu, cfg.level_value(q), visible, d_len, speaker, method="decode_params"
    )  # [B, Td, M, 3K]
    nll = jnp.sum(dmol.nll(out, q, cfg.levels), -1)  # [B, Td] nats per frame
    mw = masked.astype(jnp.float32)
    elbo = jnp.sum(weight[:, None] * nll * mw) / (d_frames * cfg.n_mels)
    nll_bin = jnp.sum(nll * mw) / jnp.maximum(mw.sum() * cfg.n_mels, 1.0)
    loss = elbo + prior + dur_loss
    metrics = {
        "elbo": elbo,
        "prior": prior,
        "duration": dur_loss,
        "nll_per_bin": nll_bin,
        "weight": n_frames,
        "dropped_rows": jnp.sum((text_len > 0) & ~ok).astype(jnp.float32),
    }
    if cfg.score_layers:
        metrics["score"] = score_loss(
            model,
            params,
            y,
            mu,
            dvalid.astype(jnp.float32),
            d_len,
            speaker,
            jax.random.fold_in(rng, 1),
        )
        loss = loss + metrics["score"]
    return loss, {"loss": loss, **metrics}


class MDMTask:
    """`jaxtts.train.loop.Task` for the acoustic model + MDM decoder (+ Grad-TTS's)."""

    def __init__(self, cfg: MDMConfig, crop: int = 0):
        self.cfg, self.crop = cfg, int(crop)
        self.model = AcousticModel(cfg)

    def init(self, rng, batch):
        spk = batch.get("speaker")
        return self.model.init(
            rng,
            jnp.asarray(batch["text"]),
            jnp.asarray(batch["text_len"]),
            jnp.asarray(batch["mel"]),
            jnp.asarray(batch["mel_len"]),
            None if spk is None else jnp.asarray(spk),
        )["params"]

    def loss(self, params, batch, rng, *, train: bool, step=None):
        rng = rng if rng is not None else jax.random.key(0)
        return mdm_loss(self.model, params, batch, rng, self.crop if train else 0)


# ----------------------------------------------------------------------------- training


def model_config(model_cfg) -> MDMConfig:
    """MDMConfig from `config.model` (filled); an unknown key is a ConfigError naming it."""
    fields = {f.name for f in dataclasses.fields(MDMConfig)}
    d = dict(model_cfg)
    unknown = sorted(set(d) - fields)
    if unknown:
        raise ConfigError(f"model.{unknown[0]}: unknown key, expected one of {sorted(fields)}")
    for key in ("num_text_symbols", "mel_lo", "mel_hi", "speaker_dim"):
        if d.get(key) is None or d.get(key) == -1:
            raise ConfigError(f"model.{key}: not filled (the trainer fills it from the data)")
    return MDMConfig(**d)


def init_params(cfg: MDMConfig):
    """Parameters of a fresh model (shapes only matter: `jax.eval_shape` for loading)."""
    model = AcousticModel(cfg)
    text = jnp.ones((1, 4), jnp.int32)
    mel = jnp.zeros((1, 8, cfg.n_mels))
    spk = jnp.zeros((1, cfg.speaker_dim)) if cfg.speaker_dim else None
    return nn.unbox(
        model.init(jax.random.key(0), text, jnp.array([4]), mel, jnp.array([8]), spk)["params"]
    )


def load_speaker_encoder(config, *bases):
    """The JaxSpeakerEncoder of `config.mdm.speaker_encoder` (a run folder)."""
    path = str(config.mdm.speaker_encoder)
    found = find_run(path, *bases)
    if found is None:
        raise ConfigError(
            f"mdm.speaker_encoder={path!r}: no run folder there; expected e.g. "
            "pretrained/speaker_encoder (or '' for no speaker input)"
        )
    return JaxSpeakerEncoder(found)


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    """Train the acoustic model + MDM decoder on the corpus's train split (all voices, each
    utterance conditioned on the speaker encoder's embedding of its own audio)."""
    from jaxtts.train import loop  # start-up: 320 ms; MDM decoding loads this module

    log = logging.getLogger("jaxtts.mdm")
    if config.get("task") != "mdm":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'mdm'")
    config = mlc.ConfigDict(config.to_dict())
    d = config.data
    corpus = ensure_builtin_corpus(d, progress)
    splits = {s: read_split(corpus, s) for s in ("train", "dev")}
    run = RunFolder(workdir)
    run.path.mkdir(parents=True, exist_ok=True)
    if (run.text_frontend_dir / "text_frontend.json").is_file():
        frontend = TextFrontend.load(run.text_frontend_dir)
    else:
        frontend = TextFrontend.from_utterances(
            splits["train"], backend=d.get("text_backend", "espeak")
        )
        frontend.save(run.text_frontend_dir)
    mels = {s: utterance_mels(u, progress=progress, desc=f"log-mel {s}") for s, u in splits.items()}
    m = config.model
    m.num_text_symbols = int(frontend.vocab_size)
    if m.get("mel_lo") is None or m.get("mel_hi") is None:
        quant = LinearMelQuantizer(int(m.levels)).fit(mels["train"])
        m.mel_lo, m.mel_hi = quant.lo, quant.hi
    if run.config_path.is_file() and "score_scale" not in json.loads(
        run.config_path.read_text()
    ).get("model", {}):  # a run saved before the key resumes as it was trained (s = 1)
        del m["score_scale"]
    if float(m.get("score_scale", 1.0)) == -1:  # Grad-TTS's unscaled log-mels (gradtts.py)
        m.score_scale = (float(m.mel_hi) - float(m.mel_lo)) / 2.0
    # the run's quantiser as its tokenizer folder (exported with it): `evaluate --rows
    # tokenizer:<run>/tokenizer` is the quantised-then-vocoded ground truth, every order's ceiling
    LinearMelQuantizer(int(m.levels), lo=float(m.mel_lo), hi=float(m.mel_hi)).save(
        run.tokenizer_dir
    )
    speaker = load_speaker_encoder(config) if config.mdm.get("speaker_encoder") else None
    m.speaker_dim = int(speaker.embed_dim) if speaker is not None else 0
    cfg = model_config(m)
    emb = {}
    if speaker is not None:
        for s, utts in splits.items():
            e = speaker.embed_mels(mels[s])
            emb.update({u.id: e[i] for i, u in enumerate(utts)})

    def loader(split, train):
        recs = make_mel_records(
            splits[split],
            dict(zip([u.id for u in splits[split]], mels[split], strict=True)),
            frontend,
        )
        return MelLoader(
            recs,
            int(d.batch_size),
            make_buckets(int(d.max_mel_len), int(d.bucket_step)),
            make_buckets(int(d.max_text_len), int(d.text_bucket_step)),
            speaker_emb=emb or None,
            seed=int(d.seed),
            shuffle=train,
            drop_remainder=train,
            num_epochs=None if train else 1,
        )

    train_loader, dev_loader = loader("train", True), loader("dev", False)
    run.write_data_info(
        {
            "corpus_dir": str(corpus),
            "frame_rate": 50.0,
            "train_records": len(train_loader.records),
            "train_hours": float(sum(x.shape[0] for x in mels["train"]) / 50 / 3600),
            "levels": cfg.levels,
            "mel_lo": cfg.mel_lo,
            "mel_hi": cfg.mel_hi,
        }
    )
    log.info(
        "MDM: %d training utterances, Q=%d levels on [%.2f, %.2f]",
        len(train_loader.records),
        cfg.levels,
        cfg.mel_lo,
        cfg.mel_hi,
    )
    task = MDMTask(cfg, int(config.mdm.get("train_crop", 0)))

    def eval_batches():
        return (dev_loader.get_batch(s) for s in range(len(dev_loader)))

    return loop.train_and_evaluate(
        config, workdir, task, train_loader, eval_batches, mesh=mesh, progress=progress
    )


# ----------------------------------------------------------------------------- diagnostics


def text_information(engine, utts, batch_size: int = 8, seed: int = 0) -> dict:
    """How much the trained acoustic model uses the text: the teacher-forced scores of
    `mdm_loss` (one fixed key, so both passes draw the same ELBO steps and orders) on `utts`
    with each row's own transcript vs the next row's (rolled by one in the batch).

    -> {"prior_right", "prior_wrong"}: the encoder prior's NLL per bin of the normalised mel
    under N(mu, I) after MAS; {"nll_right", "nll_wrong"}: the MDM decoder's NLL per masked bin
    (nats); "frames": frames scored. Untrained, both pairs are equal (and the NLL is ~ln Q); a
    model that reads its text has wrong > right."""
    mels = utterance_mels(utts, progress=False)
    recs = make_mel_records(
        utts, dict(zip([u.id for u in utts], mels, strict=True)), engine.frontend
    )
    emb = None
    if engine.speaker is not None:
        e = engine.speaker.embed_mels(mels)
        emb = {u.id: e[i] for i, u in enumerate(utts)}
    loader = MelLoader(
        recs,
        batch_size,
        make_buckets(1024, 128),
        make_buckets(256, 64),
        speaker_emb=emb,
        seed=seed,
        shuffle=False,
        drop_remainder=False,
        num_epochs=1,
    )
    model = engine.model
    score = jax.jit(lambda p, b, k: mdm_loss(model, p, b, k)[1])
    sums = {k: 0.0 for k in ("prior_right", "prior_wrong", "nll_right", "nll_wrong")}
    frames = 0.0
    for s in range(len(loader)):
        batch = loader.get_batch(s)
        key = jax.random.fold_in(jax.random.key(seed), s)
        wrong = dict(
            batch,
            text=np.roll(batch["text"], 1, axis=0),
            text_len=np.roll(batch["text_len"], 1, axis=0),
        )
        ok = (np.asarray(batch["mel_len"]) >= np.asarray(wrong["text_len"])) & (
            np.asarray(wrong["text_len"]) > 0
        )  # rows both passes score
        if not ok.any():
            continue
        keep = {k: np.asarray(v)[ok] for k, v in batch.items()}
        keep_w = {k: np.asarray(v)[ok] for k, v in wrong.items()}
        m_r, m_w = score(engine.params, keep, key), score(engine.params, keep_w, key)
        n = float(m_r["weight"])
        frames += n
        for name, m in (("right", m_r), ("wrong", m_w)):
            sums[f"prior_{name}"] += float(m["prior"]) * n
            sums[f"nll_{name}"] += float(m["nll_per_bin"]) * n
    out = {k: v / max(frames, 1.0) for k, v in sums.items()}
    out["frames"] = int(frames)
    return out

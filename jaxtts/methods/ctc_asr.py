"""Fast CTC reward ASR: log-mel in, characters out (the papers' NeMo role; DCPO's reward).

It is a separate model from the pocketsphinx evaluator (`jaxtts.eval.asr`) on purpose: a policy
optimised against this reward is still judged by a recogniser it never saw.

Model (`configs/ctc_asr.py`):
  mel [B, T, 80] -> (mel - mel_mean) / mel_std -> conv subsampling x2 (stride-2 conv, 3 taps,
  1-frame padding on both sides, so output frame t covers input frames 2t-1..2t+1 however much
  the row is padded) -> L conformer blocks (FFN/2, MHSA, GLU + depthwise conv, FFN/2; pre-norm)
  -> dense -> logits [B, T/2, V] over `VOCAB` (id 0 = the CTC blank).
  Padded frames are zeroed before every convolution and masked as attention keys, so the
  logits of a row do not depend on the padding around it (batch-N == batch-1).
Training: `optax.ctc_loss` averaged per target character, SpecAugment (time and frequency
masks), through the shared trainer `jaxtts.train.loop.train_and_evaluate`.
Decoding: greedy (argmax per frame, collapse repeats, drop blanks).

Axis letters: B batch, T frames, M mel bins, D model width, V vocabulary (characters).

  python -m jaxtts.methods.ctc_asr train --config configs/ctc_asr.py:small --workdir runs/ctc_asr
  python -m jaxtts.methods.ctc_asr eval --workdir runs/ctc_asr --split test
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np
import optax
from absl import app, flags
from ml_collections import config_flags

from jaxtts import cli
from jaxtts.checkpoint import abstract_params
from jaxtts.data.audio import global_mel_stats, utterance_mels, wav_to_mel
from jaxtts.data.corpus import default_corpus_dir, resolve_corpus_dir
from jaxtts.data.manifest import read_split
from jaxtts.data.pipeline import MelLoader, MelRecord, inference_mel_batches, make_buckets
from jaxtts.errors import ConfigError
from jaxtts.eval.metrics import normalize_for_wer, wer
from jaxtts.nn import axes
from jaxtts.nn.attention import Attention
from jaxtts.nn.conv import dense as _dense
from jaxtts.nn.conv import layer_norm as _norm
from jaxtts.nn.conv import masked_conv1d, mel_input, mel_stats
from jaxtts.nn.masks import length_mask, padding_mask
from jaxtts.run_folder import RunFolder
from jaxtts.train import loop

log = logging.getLogger("jaxtts.ctc_asr")

# ------------------------------------------------------------------------------------------
# Characters
# ------------------------------------------------------------------------------------------

BLANK = 0
VOCAB: tuple[str, ...] = ("<blank>", " ", "'") + tuple("abcdefghijklmnopqrstuvwxyz")
VOCAB_SIZE = len(VOCAB)  # 29
_CHAR_TO_ID = {c: i for i, c in enumerate(VOCAB) if i != BLANK}


def normalize_transcript(text: str) -> str:
    """The text the ASR is trained to output (and compared against): `normalize_for_wer`."""
    return normalize_for_wer(text)


def text_to_ids(text: str) -> np.ndarray:
    """Normalised text -> int32 [L] character ids (1..V-1); characters outside VOCAB dropped."""
    s = normalize_transcript(text)
    return np.array([_CHAR_TO_ID[c] for c in s if c in _CHAR_TO_ID], np.int32)


def ids_to_text(ids: Sequence[int]) -> str:
    """Character ids (blanks ignored) -> string."""
    return "".join(VOCAB[int(i)] for i in ids if int(i) != BLANK)


def greedy_ids(logits: jax.Array, lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Greedy CTC on device: (best id per frame [B, T], keep mask [B, T]).

    A frame is kept when it is inside the row's length, not blank, and differs from the
    previous frame's best id (so 'a a <b> a' -> 'aa').
    """
    best = jnp.argmax(logits, axis=-1).astype(jnp.int32)  # [B, T]
    prev = jnp.pad(best[:, :-1], ((0, 0), (1, 0)), constant_values=-1)  # [B, T]
    valid = jnp.arange(best.shape[1])[None, :] < lengths[:, None]  # [B, T]
    keep = valid & (best != BLANK) & (best != prev)  # [B, T]
    return best, keep


def greedy_decode(logits: np.ndarray | jax.Array, lengths: np.ndarray | jax.Array) -> list[str]:
    """Greedy CTC decoding of logits [B, T, V] with valid lengths [B] -> B strings."""
    best, keep = greedy_ids(jnp.asarray(logits), jnp.asarray(lengths))
    best, keep = np.asarray(best), np.asarray(keep)
    return [_collapse_row(b, k) for b, k in zip(best, keep, strict=True)]


def _collapse_row(best: np.ndarray, keep: np.ndarray) -> str:
    return " ".join(ids_to_text(best[keep]).split())


def error_rates(refs: Sequence[str], hyps: Sequence[str]) -> dict[str, float]:
    """Corpus CER and WER (fractions) of hypotheses against references, both normalised."""
    import jiwer  # optional: not in the GPU bundle

    if len(refs) != len(hyps):
        raise ValueError(f"error_rates: {len(refs)} references but {len(hyps)} hypotheses")
    r = [normalize_transcript(x) for x in refs]
    h = [normalize_transcript(x) for x in hyps]
    pairs = [(a, b) for a, b in zip(r, h, strict=True) if a]
    chars = sum(len(a) for a, _ in pairs)
    if pairs:
        out = jiwer.process_characters([a for a, _ in pairs], [b for _, b in pairs])
        cer = (out.substitutions + out.deletions + out.insertions) / max(chars, 1)
    else:
        cer = 0.0
    return {"cer": float(cer), "wer": float(wer(list(refs), list(hyps)))}


# ------------------------------------------------------------------------------------------
# Layers
# ------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    d_model: int
    d_ff: int
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:  # [B, T, D] -> [B, T, D]
        h = nn.silu(_dense(self.d_ff, (axes.EMBED, axes.MLP), "wi")(x))  # [B, T, F]
        h = nn.Dropout(self.dropout, deterministic=not train)(h)
        return _dense(self.d_model, (axes.MLP, axes.EMBED), "wo")(h)  # [B, T, D]


class ConformerBlock(nn.Module):
    """Pre-norm conformer block (Gulati et al. 2020) with LayerNorm in the conv module."""

    d_model: int
    num_heads: int
    d_ff: int
    conv_kernel: int = 15
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array, *, train: bool) -> jax.Array:
        # x [B, T, D], mask bool [B, T]
        drop = nn.Dropout(self.dropout, deterministic=not train)
        d = self.d_model
        x = x + 0.5 * drop(
            FeedForward(d, self.d_ff, self.dropout, name="ff1")(_norm("ff1_norm")(x), train=train)
        )
        h = _norm("attn_norm")(x)  # [B, T, D]
        keys = padding_mask(mask)  # [B, T, T]
        h, _ = Attention(self.num_heads, d // self.num_heads, rope_theta=0.0, name="attn")(
            h, jnp.zeros(mask.shape, jnp.int32), keys
        )  # bidirectional, no positions
        x = x + drop(h)
        h = _norm("conv_norm")(x)
        h = nn.glu(_dense(2 * d, (axes.EMBED, axes.MLP), "conv_in")(h))  # [B, T, D]
        h = masked_conv1d(
            h, mask, d, self.conv_kernel, groups=d, names=(None, None, axes.EMBED), name="dwconv"
        )
        h = nn.silu(_norm("dw_norm")(h))
        x = x + drop(_dense(d, (axes.MLP, axes.EMBED), "conv_out")(h))
        x = x + 0.5 * drop(
            FeedForward(d, self.d_ff, self.dropout, name="ff2")(_norm("ff2_norm")(x), train=train)
        )
        return _norm("out_norm")(x)


class CTCModel(nn.Module):
    """log-mel [B, T, M] + lengths [B] -> (logits [B, ceil(T/2), V], output lengths [B])."""

    d_model: int = 144
    num_layers: int = 4
    num_heads: int = 4
    d_ff: int = 576
    conv_kernel: int = 15
    dropout: float = 0.1
    n_mels: int = 80
    vocab_size: int = VOCAB_SIZE
    mel_mean: float = 0.0
    mel_std: float = 1.0

    @nn.compact
    def __call__(
        self, mel: jax.Array, mel_len: jax.Array, *, train: bool = False
    ) -> tuple[jax.Array, jax.Array]:
        x, mask, mel_len = mel_input(
            mel, mel_len, self.n_mels, self.mel_mean, self.mel_std, "CTCModel"
        )  # [B, T, M], [B, T], [B]
        x = masked_conv1d(
            x, mask, self.d_model, 3, stride=2, names=(None, None, axes.EMBED), name="subsample"
        )
        out_len = (mel_len + 1) // 2  # [B]
        mask = length_mask(out_len, x.shape[1])  # [B, T']
        x = masked_conv1d(
            nn.gelu(x), mask, self.d_model, 3, names=(None, axes.EMBED, axes.MLP), name="subsample2"
        )
        x = nn.gelu(x)  # [B, T', D]
        for i in range(self.num_layers):
            x = ConformerBlock(
                self.d_model,
                self.num_heads,
                self.d_ff,
                self.conv_kernel,
                self.dropout,
                name=f"block{i}",
            )(x, mask, train=train)
        # the head is padded to 128 outputs so the vocab axis shards evenly over `tensor`
        padded = -(-self.vocab_size // 128) * 128
        logits = _dense(padded, (axes.EMBED, axes.VOCAB), "head")(x)[..., : self.vocab_size]
        return logits, out_len


def model_from_config(model_cfg) -> CTCModel:
    m = dict(model_cfg)
    mean, std = mel_stats(m)
    return CTCModel(
        d_model=int(m["d_model"]),
        num_layers=int(m["num_layers"]),
        num_heads=int(m["num_heads"]),
        d_ff=int(m["d_ff"]),
        conv_kernel=int(m["conv_kernel"]),
        dropout=float(m["dropout"]),
        n_mels=int(m["n_mels"]),
        vocab_size=VOCAB_SIZE,
        mel_mean=mean,
        mel_std=std,
    )


# ------------------------------------------------------------------------------------------
# SpecAugment and the training task
# ------------------------------------------------------------------------------------------


def spec_augment(
    rng: jax.Array,
    mel: jax.Array,
    mel_len: jax.Array,
    fill: float,
    *,
    freq_masks: int = 2,
    freq_width: int = 10,
    time_masks: int = 2,
    time_width: int = 20,
    max_time_fraction: float = 0.2,
) -> jax.Array:
    """Replace random mel-bin bands and frame spans of mel [B, T, M] by `fill` (SpecAugment,
    Park et al. 2019, without time warping). Time spans are capped at max_time_fraction of the
    row's length."""
    b, t, m = mel.shape
    kf, kf0, kt, kt0 = jax.random.split(rng, 4)
    fw = jax.random.randint(kf, (b, freq_masks), 0, freq_width + 1)  # [B, n_f]
    f0 = (jax.random.uniform(kf0, (b, freq_masks)) * (m - fw)).astype(jnp.int32)  # [B, n_f]
    bins = jnp.arange(m)[None, None, :]  # [1, 1, M]
    fmask = ((bins >= f0[..., None]) & (bins < (f0 + fw)[..., None])).any(1)  # [B, M]
    cap = jnp.floor(mel_len.astype(jnp.float32) * max_time_fraction).astype(jnp.int32)  # [B]
    tw = jnp.minimum(jax.random.randint(kt, (b, time_masks), 0, time_width + 1), cap[:, None])
    t0 = (jax.random.uniform(kt0, (b, time_masks)) * jnp.maximum(mel_len[:, None] - tw, 0)).astype(
        jnp.int32
    )  # [B, n_t]
    frames = jnp.arange(t)[None, None, :]  # [1, 1, T]
    tmask = ((frames >= t0[..., None]) & (frames < (t0 + tw)[..., None])).any(1)  # [B, T]
    masked = fmask[:, None, :] | tmask[:, :, None]  # [B, T, M]
    return jnp.where(masked, jnp.asarray(fill, mel.dtype), mel)


def ctc_loss(
    logits: jax.Array, out_len: jax.Array, labels: jax.Array, label_len: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """CTC loss per target character over rows that can be aligned (T' >= L + repeats).

    logits [B, T', V], out_len [B], labels [B, L] (0-padded), label_len [B].
    Returns (loss, metrics with 'weight' = number of target characters counted).
    """
    t, l = logits.shape[1], labels.shape[1]
    logit_pad = (~length_mask(out_len, t)).astype(jnp.float32)  # [B, T']
    lab_valid = length_mask(label_len, l)  # [B, L]
    per_row = optax.ctc_loss(
        logits.astype(jnp.float32),
        logit_pad,
        labels,
        (~lab_valid).astype(jnp.float32),
        blank_id=BLANK,
    )  # [B]
    repeats = ((labels[:, 1:] == labels[:, :-1]) & lab_valid[:, 1:]).sum(1)  # [B]
    ok = (label_len > 0) & (out_len >= label_len + repeats)  # [B]
    n = jnp.where(ok, label_len, 0).sum().astype(jnp.float32)
    loss = jnp.where(ok, per_row, 0.0).sum() / jnp.maximum(n, 1.0)
    skipped = ((label_len > 0) & ~ok).sum().astype(jnp.float32)
    return loss, {"weight": n, "ctc_per_char": loss, "skipped_rows": skipped}


class CTCTask:
    """`jaxtts.train.loop.Task` of the CTC ASR: batches of the `MelLoader` format
    (`mel [B, T, M]`, `mel_len`, `text [B, L]` character ids, `text_len`)."""

    def __init__(self, model: CTCModel, specaug: Any = None):
        self.model = model
        self.specaug = dict(specaug or {})

    def init(self, rng: jax.Array, batch) -> Any:
        mel = jnp.asarray(batch["mel"])  # [B, T, M]
        return self.model.init(rng, mel, jnp.asarray(batch["mel_len"]))["params"]

    def loss(self, params, batch, rng, *, train: bool, step=None):
        mel = batch["mel"]  # [B, T, M]
        r_aug, r_drop = jax.random.split(rng)
        if train and self.specaug.get("enabled", True) and self.specaug:
            kw = {k: v for k, v in self.specaug.items() if k != "enabled"}
            mel = spec_augment(r_aug, mel, batch["mel_len"], self.model.mel_mean, **kw)
        logits, out_len = self.model.apply(
            {"params": params}, mel, batch["mel_len"], train=train, rngs={"dropout": r_drop}
        )  # [B, T', V], [B]
        return ctc_loss(logits, out_len, batch["text"], batch["text_len"])


# ------------------------------------------------------------------------------------------
# Inference
# ------------------------------------------------------------------------------------------


class CTCASR:
    """A trained CTC ASR: `transcribe(wavs, sr)` and `transcribe_mels(mels, lens)`.

    Batches are sorted by length, padded to multiples of `frame_bucket` frames and to a power
    of two rows (so few shapes are compiled); the forward pass and the greedy argmax run jitted.
    """

    name = "ctc_asr"

    def __init__(self, model_cfg, params: Any, *, batch_size: int = 32, frame_bucket: int = 64):
        self.model_cfg = mlc.ConfigDict(dict(model_cfg))
        self.model = model_from_config(self.model_cfg)
        self.params = params
        self.batch_size = int(batch_size)
        self.frame_bucket = int(frame_bucket)

        def forward(p, mel, lens):  # [B, T, M], [B] -> best ids [B, T'], keep [B, T']
            logits, out_len = self.model.apply({"params": p}, mel, lens)
            return greedy_ids(logits, out_len)

        self._forward = jax.jit(forward)
        self._logits = jax.jit(lambda p, mel, lens: self.model.apply({"params": p}, mel, lens))

    @classmethod
    def load(cls, workdir: str | os.PathLike, step: int | None = None, **kw) -> CTCASR:
        """From a training workdir: `config.json` + the latest (or `step`) checkpoint."""
        config = RunFolder(workdir).read_config("ctc_asr")
        model = model_from_config(config.model)
        like = abstract_params(
            model.init, jnp.zeros((1, 8, model.n_mels)), jnp.ones((1,), jnp.int32)
        )
        params, _ = RunFolder(workdir).load_params(like, step)
        return cls(config.model, params, **kw)

    def logits(self, mels: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw forward: mels [B, T, M], lens [B] -> (logits [B, T', V], lengths [B])."""
        lg, ol = self._logits(self.params, jnp.asarray(mels, jnp.float32), jnp.asarray(lens))
        return np.asarray(lg), np.asarray(ol)

    def transcribe_mels(
        self,
        mels: Sequence[np.ndarray] | np.ndarray,
        lens: Sequence[int] | np.ndarray | None = None,
    ) -> list[str]:
        """Transcripts of log-mels: a list of [T_i, M], or a padded [B, T, M] with lens [B]."""
        n, batches = inference_mel_batches(
            mels, lens, self.model.n_mels, self.batch_size, self.frame_bucket, "transcribe_mels"
        )
        out: list[str] = [""] * n
        for idx, batch, blens in batches:
            best, keep = self._forward(self.params, jnp.asarray(batch), jnp.asarray(blens))
            best, keep = np.asarray(best), np.asarray(keep)
            for j, i in enumerate(idx):
                out[i] = _collapse_row(best[j], keep[j])
        return out

    def transcribe(self, wavs: Sequence[np.ndarray], sr: int) -> list[str]:
        """Transcripts of waveforms (float32 [N] each, at `sr` Hz; resampled as needed)."""
        return self.transcribe_mels([wav_to_mel(w, sr) for w in wavs])


# ------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------


def make_records(utts: Sequence, mels: Sequence[np.ndarray]) -> list:
    """`MelRecord`s with character ids of the normalised text (empty transcripts dropped)."""
    out = []
    for u, m in zip(utts, mels, strict=True):
        ids = text_to_ids(u.normalized_text or u.text)
        if ids.size:
            out.append(MelRecord(u.id, u.speaker, m, ids))
    return out


def make_loader(records: Sequence, data_cfg, *, train: bool):
    return MelLoader(
        records,
        int(data_cfg.batch_size if train else data_cfg.eval_batch_size),
        mel_buckets=make_buckets(int(data_cfg.max_mel_len), int(data_cfg.bucket_step)),
        text_buckets=make_buckets(int(data_cfg.max_text_len), int(data_cfg.text_bucket_step)),
        seed=int(data_cfg.seed),
        shuffle=train,
        drop_remainder=train,
        num_epochs=None if train else 1,
    )


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    """Train the CTC ASR on `config.data.corpus_dir` (train split; dev CER/WER at each eval).

    Fills `config.model.mel_mean/mel_std` from the training mels when unset. Returns the
    trainer's `TrainResult`.
    """
    config = mlc.ConfigDict(config.to_dict())  # a private, unlocked copy
    if config.get("task") != "ctc_asr":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'ctc_asr'")
    corpus = resolve_corpus_dir(config.data)
    t0 = time.perf_counter()
    tr_utts = read_split(corpus, "train", int(config.data.get("limit_train", 0)))
    dev_utts = read_split(corpus, "dev", int(config.data.get("limit_dev", 0)))
    tr_mels = utterance_mels(tr_utts, progress=progress, desc="log-mel train")
    dev_mels = utterance_mels(dev_utts, progress=progress, desc="log-mel dev")
    log.info(
        "features of %d + %d utterances in %.1fs",
        len(tr_mels),
        len(dev_mels),
        time.perf_counter() - t0,
    )
    if config.model.get("mel_mean") is None or config.model.get("mel_std") is None:
        config.model.mel_mean, config.model.mel_std = global_mel_stats(tr_mels)

    model = model_from_config(config.model)
    task = CTCTask(model, config.get("specaug"))
    source = make_loader(make_records(tr_utts, tr_mels), config.data, train=True)
    dev_loader = make_loader(make_records(dev_utts, dev_mels), config.data, train=False)
    dev_refs = [u.normalized_text or u.text for u in dev_utts]

    def eval_batches():
        return (dev_loader.get_batch(s) for s in range(len(dev_loader)))

    def on_eval(step, state):
        asr = CTCASR(config.model, state.full_params, batch_size=int(config.data.eval_batch_size))
        hyps = asr.transcribe_mels(dev_mels)
        return {f"dev/{k}": v for k, v in error_rates(dev_refs, hyps).items()}

    return loop.train_and_evaluate(
        config, workdir, task, source, eval_batches, mesh=mesh, progress=progress, on_eval=on_eval
    )


def evaluate_split(
    asr: CTCASR, corpus: str | os.PathLike | None, split: str, limit: int = 0, progress: bool = True
) -> dict[str, Any]:
    """CER/WER of `asr` on a corpus split's ground-truth audio, plus timing.

    Returns {'cer', 'wer', 'n', 'audio_s', 'feature_s', 'asr_s', 'refs', 'hyps', 'utts'}.
    """
    utts = read_split(Path(corpus) if corpus else default_corpus_dir(), split, limit)
    t0 = time.perf_counter()
    mels = utterance_mels(utts, progress=progress, desc=f"log-mel {split}")
    t1 = time.perf_counter()
    hyps = asr.transcribe_mels(mels)
    t2 = time.perf_counter()
    refs = [u.normalized_text or u.text for u in utts]
    return dict(
        error_rates(refs, hyps),
        n=len(utts),
        audio_s=sum(m.shape[0] for m in mels) / 50,
        feature_s=t1 - t0,
        asr_s=t2 - t1,
        refs=refs,
        hyps=hyps,
        utts=utts,
    )


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------


def main() -> None:
    """`train --config configs/ctc_asr.py:small --workdir runs/ctc_asr` | `eval --workdir ...`."""
    config_flag = config_flags.DEFINE_config_file(
        "config", None, "Config file, e.g. configs/ctc_asr.py:small", lock_config=True
    )
    workdir = flags.DEFINE_string("workdir", "runs/ctc_asr", "Run directory.")
    split = flags.DEFINE_string("split", "test", "eval: corpus split.")
    corpus = flags.DEFINE_string("corpus", "", "eval: corpus folder (default data/builtin).")

    def run(argv):
        if len(argv) != 2 or argv[1] not in ("train", "eval"):
            raise app.UsageError("usage: python -m jaxtts.methods.ctc_asr {train,eval} [flags]")
        if argv[1] == "train":
            if config_flag.value is None:
                raise app.UsageError("train needs --config, e.g. configs/ctc_asr.py:small")
            logging.basicConfig(level=logging.INFO)
            train(config_flag.value, workdir.value)
            return
        asr = CTCASR.load(workdir.value)
        r = evaluate_split(asr, corpus.value or None, split.value)
        print(
            f"{split.value}: n={r['n']} CER {100 * r['cer']:.2f}% WER {100 * r['wer']:.2f}% "
            f"({r['audio_s'] / r['asr_s']:.0f}x real time on mels)"
        )

    cli.run(run)


if __name__ == "__main__":
    main()

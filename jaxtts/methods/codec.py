"""Training the learned speech tokenizer (`jaxtts.codec`): data, loss, `train`.

    python train.py --config configs/codec.py:small --workdir runs/codec
    python -m jaxtts.codec export runs/codec pretrained/codec   # encoder + decoder alone

One `jaxtts.train.loop` Task on the generic trainer (sharded over the mesh, resumable,
evaluated, checkpointed). Loss, over the valid frames / tokens of each row:
    l1 |x_hat - x| + l2 (x_hat - x)^2        x: the per-bin standardised log-mel
  + ctc  CTC(phonemes | head(q)) per phoneme  q: the quantised latent (straight-through)
The phoneme targets are the manifest's espeak phonemes without stress marks and word gaps.
Batches come from length buckets (`config.data.buckets`, (frames, rows)): each step draws a
bucket (in proportion to its utterances) and its rows, a pure function of (seed, step); an
utterance longer than the last bucket is cropped at random and its CTC term skipped.
`data.vtlp` > 0 warps each training utterance's mel axis by a factor drawn in [1 - vtlp,
1 + vtlp] (`warp_mel_axis`; a speaker augmentation against the few training voices), and
`data.spec_mask` = (n_freq, max_freq, n_time, max_time) masks bands and stretches of what the
encoder reads (`mask_spans`, SpecAugment's masks) while the reconstruction target stays whole.
Axis letters: B batch, T frames, S tokens, M mel bins, L phonemes, P phoneme classes.
"""

from __future__ import annotations

import bisect
import logging
import time

import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from jaxtts.codec import codec_from_config
from jaxtts.data.audio import MelConfig, MelStats, load_audio, log_mel, utterance_mels
from jaxtts.data.corpus import resolve_corpus_dir
from jaxtts.data.manifest import read_split
from jaxtts.data.text import STRESS_MARKS, SymbolTable
from jaxtts.errors import ConfigError, DataError
from jaxtts.methods.ctc_asr import ctc_loss
from jaxtts.train import loop

log = logging.getLogger("jaxtts.codec")

__all__ = ["BucketSource", "CodecTask", "ctc_phones", "mask_spans", "train", "warp_mel_axis"]


def ctc_phones(phonemes) -> list[str]:
    """A manifest's phoneme symbols without stress marks and word gaps (the CTC targets)."""
    return [p for p in phonemes if p not in STRESS_MARKS and p.strip()]


def mask_spans(mel: np.ndarray, rng: np.random.Generator, spec) -> np.ndarray:
    """A copy of a standardised log-mel [T, M] with `spec` = (n_freq, max_freq, n_time,
    max_time) spans set to 0 (the corpus mean): n_freq bands of 0..max_freq bins and n_time
    stretches of 0..max_time frames, each drawn uniformly (SpecAugment's masks). The encoder
    reads it; the reconstruction target stays whole."""
    n_f, w_f, n_t, w_t = (int(v) for v in spec)
    out = mel.copy()
    t, m = out.shape
    for _ in range(n_f):
        w = int(rng.integers(0, w_f + 1))
        f0 = int(rng.integers(0, max(1, m - w + 1)))
        out[:, f0 : f0 + w] = 0.0
    for _ in range(n_t):
        w = int(rng.integers(0, min(w_t, t) + 1))
        t0 = int(rng.integers(0, max(1, t - w + 1)))
        out[t0 : t0 + w] = 0.0
    return out


def warp_mel_axis(mel: np.ndarray, alpha: float) -> np.ndarray:
    """Vocal-tract-length perturbation on a log-mel [T, M]: bin j reads bin j * alpha of the
    input (linear interpolation, clipped at the top bin); alpha 1 is the identity. A speaker
    augmentation: alpha > 1 moves the spectral envelope down, < 1 up."""
    m = mel.shape[1]
    src = np.clip(np.arange(m) * float(alpha), 0.0, m - 1.0)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, m - 1)
    w = (src - lo).astype(mel.dtype)
    return mel[:, lo] * (1 - w) + mel[:, hi] * w


class CodecTask:
    """`jaxtts.train.loop.Task`. Batches: {'mel': f32 [B, T, M] standardised, 'mask': f32
    [B, T], 'phones': int32 [B, L] (0-padded), 'phones_len': int32 [B] (0: no CTC term)}."""

    def __init__(self, config):
        self.cfg = config
        self.model = codec_from_config(config.model, with_ctc=bool(config.loss.ctc))
        self.stride = int(config.model.stride)

    def init(self, rng, batch):
        return self.model.init(rng, jnp.asarray(batch["mel"])[:1], jnp.asarray(batch["mask"])[:1])[
            "params"
        ]

    def loss(self, params, batch, rng, *, train: bool, step=None):
        c = self.cfg.loss
        x, mask = batch["mel"], batch["mask"]  # [B, T, M], [B, T]
        y, codes, logits = self.model.apply({"params": params}, x, mask, batch.get("mel_in"))
        n = jnp.maximum(mask.sum() * x.shape[-1], 1.0)
        err = (y - x) * mask[..., None]
        l1 = jnp.abs(err).sum() / n
        l2 = jnp.square(err).sum() / n
        loss = c.l1 * l1 + c.l2 * l2
        tmask = mask[:, :: self.stride]  # [B, S]
        hist = jnp.zeros((self.model.vocab_size,)).at[codes.reshape(-1)].add(tmask.reshape(-1))
        p = hist / jnp.maximum(hist.sum(), 1.0)
        perplexity = jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(p), 0.0)))
        metrics = {"l1": l1, "l2": l2, "code_perplexity": perplexity}
        if logits is not None:
            out_len = tmask.sum(1).astype(jnp.int32)
            ctc, m = ctc_loss(logits, out_len, batch["phones"], batch["phones_len"])
            loss = loss + c.ctc * ctc
            metrics.update(ctc=ctc, ctc_skipped_rows=m["skipped_rows"])
        metrics["loss"] = loss
        return loss, metrics


class BucketSource:
    """Length-bucketed batches of whole utterances (see the module docstring)."""

    def __init__(
        self,
        utts,
        buckets,
        mel_cfg: MelConfig,
        stats: MelStats,
        table,
        stride,
        seed,
        vtlp=0.0,
        spec_mask=None,
    ):
        self.buckets = [(int(t), int(b)) for t, b in buckets]
        if any(t % stride for t, _ in self.buckets):
            raise ConfigError(f"data.buckets={buckets}: frame counts must be multiples of {stride}")
        self.mel_cfg, self.stats, self.table, self.seed = mel_cfg, stats, table, int(seed)
        self.vtlp = float(vtlp)  # warp factors drawn in [1 - vtlp, 1 + vtlp] (0: none)
        # (n_freq, max_freq, n_time, max_time) masks of the encoder's input (`mask_spans`)
        self.spec_mask = tuple(int(v) for v in spec_mask) if spec_mask else None
        if self.spec_mask is not None and (len(self.spec_mask) != 4 or min(self.spec_mask) < 0):
            raise ConfigError(
                f"data.spec_mask={spec_mask}: expected (n_freq, max_freq, n_time, max_time) >= 0"
            )
        edges = [t for t, _ in self.buckets]
        self.members: list[list] = [[] for _ in self.buckets]
        for u in utts:
            frames = int(u.duration * mel_cfg.frame_rate) + 1
            self.members[min(bisect.bisect_left(edges, frames), len(edges) - 1)].append(u)
        sizes = np.array([len(m) for m in self.members], np.float64)
        if sizes.sum() == 0:
            raise DataError("codec training: no utterances")
        self.p = sizes / sizes.sum()
        self.max_phones = max(t for t, _ in self.buckets) // stride

    def get_batch(self, step: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, int(step)])
        k = int(rng.choice(len(self.buckets), p=self.p))
        t, b = self.buckets[k]
        m = self.mel_cfg.n_mels
        mel = np.zeros((b, t, m), np.float32)
        mask = np.zeros((b, t), np.float32)
        phones = np.zeros((b, self.max_phones), np.int32)
        phones_len = np.zeros((b,), np.int32)
        mel_in = np.zeros_like(mel) if self.spec_mask else None
        for i, j in enumerate(rng.integers(0, len(self.members[k]), b)):
            u = self.members[k][j]
            x = log_mel(load_audio(u.path, self.mel_cfg.sample_rate), self.mel_cfg)
            if self.vtlp:
                x = warp_mel_axis(x, rng.uniform(1 - self.vtlp, 1 + self.vtlp))
            x = self.stats.normalize(x)
            whole = len(x) <= t
            if not whole:
                start = int(rng.integers(0, len(x) - t + 1))
                x = x[start : start + t]
            mel[i, : len(x)], mask[i, : len(x)] = x, 1.0
            if mel_in is not None:
                mel_in[i, : len(x)] = mask_spans(x, rng, self.spec_mask)
            ids = self.table.encode(ctc_phones(u.phonemes), unknown="drop") if whole else []
            ids = ids[: self.max_phones]
            phones[i, : len(ids)], phones_len[i] = ids, len(ids)
        out = {"mel": mel, "mask": mask, "phones": phones, "phones_len": phones_len}
        if mel_in is not None:
            out["mel_in"] = mel_in
        return out


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    """Train the codec on the corpus's training utterances (all voices); fills the per-bin
    mel statistics and the phoneme-class count of `config.model` from the data when unset."""
    config = mlc.ConfigDict(config.to_dict())
    if config.get("task") != "codec":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'codec'")
    corpus = resolve_corpus_dir(config.data)
    d = config.data
    tr = read_split(corpus, "train", int(d.get("limit_train", 0)))
    dev = read_split(corpus, "dev", int(d.get("limit_dev", 0)))
    mel_cfg = MelConfig(**dict(config.model.mel))
    table = SymbolTable.build(ctc_phones(u.phonemes) for u in tr)
    if config.model.get("num_phones") is None:
        config.model.num_phones = len(table)
    elif int(config.model.num_phones) != len(table):
        raise ConfigError(
            f"config.model.num_phones={config.model.num_phones}: the corpus {corpus} has "
            f"{len(table)} phoneme classes"
        )
    if config.model.get("mel_stats") is None:
        t0 = time.perf_counter()
        mels = utterance_mels(tr[:: max(1, len(tr) // 300)], mel_cfg, progress, "log-mel stats")
        st = MelStats.fit(mels)
        config.model.mel_stats = {
            "mean": [round(float(v), 4) for v in st.mean],
            "std": [round(float(v), 4) for v in st.std],
        }
        log.info("mel statistics from %d utterances in %.1fs", len(mels), time.perf_counter() - t0)
    s = config.model.mel_stats
    stats = MelStats(np.asarray(s["mean"], np.float32), np.asarray(s["std"], np.float32))
    task = CodecTask(config)
    stride = int(config.model.stride)
    source = BucketSource(
        tr,
        d.buckets,
        mel_cfg,
        stats,
        table,
        stride,
        d.seed,
        vtlp=float(d.get("vtlp", 0.0)),
        spec_mask=d.get("spec_mask"),
    )
    dev_source = BucketSource(dev, d.buckets, mel_cfg, stats, table, stride, d.seed + 1)
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

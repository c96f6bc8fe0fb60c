"""Speaker encoders behind `jaxtts.eval.speaker.SpeakerEncoder` (`embed(wavs, sr) -> [B, E]`).

* `ResemblyzerEncoder`: the DCAR paper's SIM evaluator (GE2E d-vector, 256-d; PyPI
  `resemblyzer` ships its weights in the wheel and needs torch). Optional: imported lazily,
  `MissingDependencyError` when absent, so the evaluator disables the SIM column with a warning.
* `JaxSpeakerEncoder`: our own encoder trained in JAX on the corpus speakers with an
  additive-angular-margin softmax (AAM / ArcFace, Deng et al. 2019) over speaker ids. The
  fallback SIM evaluator and TLDR's speaker conditioning; `embed_mels(mels, lens)` is also
  exposed as a pure function of the parameters (`JaxSpeakerEncoder.embed_fn`).

Model (`configs/speaker_encoder.py`): log-mel [B, T, 80] -> (mel - mel_mean) / mel_std ->
conv 5 taps -> residual dilated convs (TDNN, x-vector style) -> attentive statistics pooling
(masked softmax over frames; weighted mean and std, Okabe et al. 2018) -> dense -> L2-normalised
embedding [B, E]. Padded frames are zeroed before every convolution and excluded from pooling, so
an embedding does not depend on the padding (batch-N == batch-1). Training batches are random
crops of 1-3 s of train utterances (a pure function of (seed, step)).

Axis letters: B batch, T frames, M mel bins, C channels, E embedding, S speakers.

  python -m jaxtts.methods.speaker_encoder train --config configs/speaker_encoder.py:small \
      --workdir runs/speaker_encoder
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from jaxtts import cli
from jaxtts.checkpoint import abstract_params
from jaxtts.data.audio import global_mel_stats, utterance_mels, wav_to_mel
from jaxtts.data.corpus import resolve_corpus_dir
from jaxtts.data.manifest import read_split
from jaxtts.data.pipeline import inference_mel_batches, pad_batch
from jaxtts.errors import ConfigError, DataError, MissingDependencyError
from jaxtts.nn import axes
from jaxtts.nn.conv import dense as _dense
from jaxtts.nn.conv import layer_norm as _norm
from jaxtts.nn.conv import masked_conv1d, mel_input, mel_stats
from jaxtts.run_folder import RunFolder

log = logging.getLogger("jaxtts.speaker_encoders")

DEFAULT_WORKDIR = "runs/speaker_encoder"
SHIPPED_WORKDIR = Path(__file__).resolve().parents[2] / "pretrained" / "speaker_encoder"


def default_workdir() -> Path:
    """`runs/speaker_encoder` (your own training) when it exists, else the shipped model."""
    own = Path(DEFAULT_WORKDIR)
    return own if (own / "config.json").is_file() else SHIPPED_WORKDIR


# ------------------------------------------------------------------------------------------
# Resemblyzer (optional, torch)
# ------------------------------------------------------------------------------------------


class ResemblyzerEncoder:
    """Resemblyzer's GE2E voice encoder (256-d, unit norm), on CPU unless `device` says."""

    name = "resemblyzer"
    sample_rate = 16_000

    def __init__(self, device: str = "cpu"):
        try:
            with warnings.catch_warnings():  # webrtcvad imports the deprecated pkg_resources
                warnings.simplefilter("ignore")
                from resemblyzer import VoiceEncoder, preprocess_wav  # optional: eval extra (torch)
        except ImportError as e:
            raise MissingDependencyError(
                f"resemblyzer: not importable ({e}); pip install resemblyzer (needs torch)"
            ) from None
        self._preprocess = preprocess_wav
        self._encoder = VoiceEncoder(device, verbose=False)

    def embed(self, wavs: list[np.ndarray], sr: int) -> np.ndarray:
        """One 256-d embedding per clip -> float32 [B, 256] (zeros for an empty clip)."""
        out = np.zeros((len(wavs), 256), np.float32)  # [B, E]
        for i, w in enumerate(wavs):
            w = np.asarray(w, np.float32)
            if w.size == 0:
                continue
            p = self._preprocess(w, source_sr=sr)  # 16 kHz, loudness-normalised, VAD-trimmed
            if p.size < self.sample_rate // 10:  # VAD removed (almost) everything: use all
                p = self._preprocess(w, source_sr=sr, trim_silence=False)
            if p.size == 0 or not np.any(p):
                continue
            out[i] = self._encoder.embed_utterance(p)
        return out


# ------------------------------------------------------------------------------------------
# JAX encoder
# ------------------------------------------------------------------------------------------


class SpeakerEncoderModel(nn.Module):
    """log-mel [B, T, M] + lengths [B] -> unit-norm speaker embedding [B, E]."""

    channels: int = 192
    num_blocks: int = 3
    embed_dim: int = 192
    attention_dim: int = 64
    n_mels: int = 80
    mel_mean: float = 0.0
    mel_std: float = 1.0

    @nn.compact
    def __call__(self, mel: jax.Array, mel_len: jax.Array) -> jax.Array:
        x, mask, _ = mel_input(
            mel, mel_len, self.n_mels, self.mel_mean, self.mel_std, "SpeakerEncoderModel"
        )  # [B, T, M], [B, T]
        x = masked_conv1d(x, mask, self.channels, 5, names=(None, None, axes.EMBED), name="conv_in")
        x = _norm("norm_in")(nn.relu(x))  # [B, T, C]
        feats = [x]
        for i in range(self.num_blocks):
            h = masked_conv1d(
                x,
                mask,
                self.channels,
                3,
                dilation=i + 2,
                names=(None, axes.EMBED, axes.MLP),
                name=f"conv{i}",
            )
            x = x + _norm(f"norm{i}")(nn.relu(h))  # [B, T, C]
            feats.append(x)
        h = jnp.concatenate(feats, axis=-1)  # [B, T, (n+1) C]
        h = nn.relu(_dense(self.channels * 2, (axes.MLP, axes.EMBED), "aggregate")(h))  # [B,T,2C]
        # Attentive statistics pooling over valid frames.
        a = jnp.tanh(_dense(self.attention_dim, (axes.EMBED, axes.MLP), "att_hidden")(h))
        a = _dense(1, (axes.MLP, None), "att_score")(a)[..., 0]  # [B, T]
        a = jnp.where(mask, a, -1e9)
        w = jax.nn.softmax(a, axis=-1) * mask  # [B, T]
        w = w / jnp.maximum(w.sum(-1, keepdims=True), 1e-9)
        mean = jnp.einsum("BT,BTC->BC", w, h)  # [B, 2C]
        var = jnp.einsum("BT,BTC->BC", w, jnp.square(h)) - jnp.square(mean)
        std = jnp.sqrt(jnp.maximum(var, 1e-6))  # [B, 2C]
        e = _dense(self.embed_dim, (axes.MLP, axes.EMBED), "embed")(
            jnp.concatenate([mean, std], axis=-1)
        )  # [B, E]
        return e / jnp.maximum(jnp.linalg.norm(e, axis=-1, keepdims=True), 1e-9)


def model_from_config(model_cfg) -> SpeakerEncoderModel:
    m = dict(model_cfg)
    mean, std = mel_stats(m)
    return SpeakerEncoderModel(
        channels=int(m["channels"]),
        num_blocks=int(m["num_blocks"]),
        embed_dim=int(m["embed_dim"]),
        attention_dim=int(m["attention_dim"]),
        n_mels=int(m["n_mels"]),
        mel_mean=mean,
        mel_std=std,
    )


def aam_softmax_loss(
    emb: jax.Array,
    class_w: jax.Array,
    labels: jax.Array,
    valid: jax.Array,
    *,
    scale: float = 30.0,
    margin: float = 0.2,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """ArcFace loss: softmax over s * cos(theta_j), the target's angle widened by `margin`.

    emb [B, E] unit norm, class_w [E, S], labels [B], valid bool [B].
    """
    w = class_w / jnp.maximum(jnp.linalg.norm(class_w, axis=0, keepdims=True), 1e-9)  # [E, S]
    cos = jnp.clip(jnp.einsum("BE,ES->BS", emb, w), -1.0, 1.0)  # [B, S]
    sin = jnp.sqrt(jnp.clip(1.0 - jnp.square(cos), 0.0, 1.0))
    phi = cos * math.cos(margin) - sin * math.sin(margin)  # cos(theta + m)
    # Beyond theta = pi - m, cos(theta + m) stops decreasing; use the linear extension.
    linear = cos - math.sin(math.pi - margin) * margin
    phi = jnp.where(cos > math.cos(math.pi - margin), phi, linear)
    onehot = jax.nn.one_hot(labels, cos.shape[1], dtype=cos.dtype)  # [B, S]
    logits = scale * jnp.where(onehot > 0, phi, cos)  # [B, S]
    nll = -jnp.sum(onehot * jax.nn.log_softmax(logits, axis=-1), axis=-1)  # [B]
    n = valid.sum().astype(jnp.float32)
    v = valid.astype(jnp.float32)
    loss = jnp.sum(nll * v) / jnp.maximum(n, 1.0)
    acc = jnp.sum((jnp.argmax(cos, -1) == labels) * v) / jnp.maximum(n, 1.0)
    return loss, {"weight": n, "accuracy": acc}


class SpeakerTask:
    """`jaxtts.train.loop.Task`: params {'encoder': ..., 'classes': w [E, S]}; batches
    `mel [B, T, M]`, `mel_len [B]` (0 = padding row), `speaker [B]` int ids."""

    def __init__(
        self,
        model: SpeakerEncoderModel,
        num_speakers: int,
        scale: float = 30.0,
        margin: float = 0.2,
    ):
        self.model = model
        self.num_speakers = int(num_speakers)
        self.scale, self.margin = float(scale), float(margin)

    def init(self, rng: jax.Array, batch) -> Any:
        r_enc, r_cls = jax.random.split(rng)
        enc = self.model.init(r_enc, jnp.asarray(batch["mel"]), jnp.asarray(batch["mel_len"]))
        init = nn.with_logical_partitioning(nn.initializers.normal(1.0), (axes.EMBED, None))
        return {
            "encoder": enc["params"],
            "classes": init(r_cls, (self.model.embed_dim, self.num_speakers)),
        }

    def loss(self, params, batch, rng, *, train: bool, step=None):
        emb = self.model.apply({"params": params["encoder"]}, batch["mel"], batch["mel_len"])
        return aam_softmax_loss(
            emb,
            params["classes"],
            batch["speaker"],
            batch["mel_len"] > 0,
            scale=self.scale,
            margin=self.margin,
        )


class CropSource:
    """Random crops of utterances with speaker ids; batch `step` is a pure function of
    (seed, step). Every row: a uniformly drawn utterance, a crop of `min_frames..max_frames`
    frames (fewer when the utterance is shorter) at a uniform offset, padded to `max_frames`."""

    def __init__(
        self,
        mels: Sequence[np.ndarray],
        speakers: Sequence[int],
        batch_size: int,
        min_frames: int,
        max_frames: int,
        seed: int = 0,
        shard_index: int | None = None,
        shard_count: int | None = None,
    ):
        if not mels or len(mels) != len(speakers):
            raise DataError(f"CropSource: {len(mels)} mels and {len(speakers)} speaker ids")
        if not 1 <= min_frames <= max_frames:
            raise ConfigError(f"crop frames {min_frames}..{max_frames}: expected 1 <= min <= max")
        self.mels, self.speakers = list(mels), np.asarray(speakers, np.int32)
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.min_frames, self.max_frames = int(min_frames), int(max_frames)
        self.shard_index = jax.process_index() if shard_index is None else shard_index
        self.shard_count = jax.process_count() if shard_count is None else shard_count
        if self.batch_size % self.shard_count:
            raise ConfigError(f"batch_size={batch_size} not divisible by {self.shard_count} hosts")

    def get_batch(self, step: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, int(step)])
        b = self.batch_size
        idx = rng.integers(0, len(self.mels), size=b)  # [B]
        want = rng.integers(self.min_frames, self.max_frames + 1, size=b)  # [B]
        u = rng.uniform(size=b)  # [B]
        crops = []
        for i, n, r in zip(idx, want, u, strict=True):
            m = self.mels[i]
            n = min(int(n), m.shape[0])
            start = int(r * (m.shape[0] - n + 1))
            crops.append(m[start : start + n])
        mel, lens = pad_batch(crops, self.max_frames)
        lo = self.shard_index * (b // self.shard_count)
        hi = lo + b // self.shard_count
        return {"mel": mel[lo:hi], "mel_len": lens[lo:hi], "speaker": self.speakers[idx][lo:hi]}


class JaxSpeakerEncoder:
    """A trained `SpeakerEncoderModel`: `embed(wavs, sr)`, `embed_mels(mels, lens)`.

    `JaxSpeakerEncoder()` loads `default_workdir()`: `runs/speaker_encoder` if you trained
    one, else `pretrained/speaker_encoder` (the `KNOWN_ENCODERS` factory form).
    """

    name = "jax_speaker_encoder"

    def __init__(
        self,
        workdir: str | os.PathLike | None = None,
        *,
        model_cfg=None,
        params: Any = None,
        batch_size: int = 32,
        frame_bucket: int = 64,
        step: int | None = None,
    ):
        if params is None:
            model_cfg, params = load_params(workdir or default_workdir(), step)
        self.model_cfg = mlc.ConfigDict(dict(model_cfg))
        self.model = model_from_config(self.model_cfg)
        self.params = params
        self.batch_size, self.frame_bucket = int(batch_size), int(frame_bucket)
        self._embed = jax.jit(self.embed_fn)

    @property
    def embed_dim(self) -> int:
        return self.model.embed_dim

    def embed_fn(self, params: Any, mels: jax.Array, lens: jax.Array) -> jax.Array:
        """Pure, jittable, differentiable: (encoder params, mels [B, T, 80], lens [B]) -> [B, E]."""
        return self.model.apply({"params": params}, mels, lens)

    def embed_mels(
        self,
        mels: Sequence[np.ndarray] | np.ndarray,
        lens: Sequence[int] | np.ndarray | None = None,
    ) -> np.ndarray:
        """Embeddings of log-mels: a list of [T_i, 80] or a padded [B, T, 80] with lens [B]
        -> float32 [B, E] (unit norm). Batched by length; padding does not change results."""
        n, batches = inference_mel_batches(
            mels, lens, self.model.n_mels, self.batch_size, self.frame_bucket, "embed_mels"
        )
        out = np.zeros((n, self.embed_dim), np.float32)  # [B, E]
        for idx, batch, blens in batches:
            e = np.asarray(self._embed(self.params, jnp.asarray(batch), jnp.asarray(blens)))
            out[idx] = e[: len(idx)]
        return out

    def embed(self, wavs: list[np.ndarray], sr: int) -> np.ndarray:
        """`SpeakerEncoder` protocol: float32 [N] clips at `sr` -> float32 [B, E]."""
        return self.embed_mels([wav_to_mel(w, sr) for w in wavs])


def load_params(workdir: str | os.PathLike, step: int | None = None) -> tuple[dict, Any]:
    """(model config dict, encoder params) from a speaker-encoder training workdir."""
    run = RunFolder(workdir)
    config = run.read_config("speaker_encoder").to_dict()
    model = model_from_config(config["model"])
    enc = abstract_params(model.init, jnp.zeros((1, 8, model.n_mels)), jnp.ones((1,), jnp.int32))
    num = int(config["model"]["num_speakers"])
    cls = jax.ShapeDtypeStruct(
        (model.embed_dim, num),
        jnp.float32,
        sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]),
    )
    params, _ = run.load_params({"encoder": enc, "classes": cls}, step)
    return config["model"], params["encoder"]


# ------------------------------------------------------------------------------------------
# Separation metrics (used in training evals, tests and benchmarks/diagnostics/sim_separation.py)
# ------------------------------------------------------------------------------------------


def separation_stats(emb: np.ndarray, speakers: Sequence[str]) -> dict[str, float]:
    """Same- vs different-speaker cosine statistics of unit-norm embeddings [N, E].

    Returns same/diff mean and std over all unordered pairs, `gap` = same_mean - diff_mean,
    `eer` (equal error rate of the cosine threshold test over those pairs) and `id_acc`
    (leave-one-out nearest-centroid speaker identification among the speakers present).
    """
    emb = np.asarray(emb, np.float64)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    spk = np.asarray(speakers)
    n = len(spk)
    cos = emb @ emb.T  # [N, N]
    iu = np.triu_indices(n, 1)
    same = (spk[:, None] == spk[None, :])[iu]
    scores = cos[iu]
    s, d = scores[same], scores[~same]
    out = {
        "same_mean": float(s.mean()) if s.size else float("nan"),
        "same_std": float(s.std()) if s.size else float("nan"),
        "diff_mean": float(d.mean()) if d.size else float("nan"),
        "diff_std": float(d.std()) if d.size else float("nan"),
    }
    out["gap"] = out["same_mean"] - out["diff_mean"]
    out["eer"] = equal_error_rate(s, d) if s.size and d.size else float("nan")
    pred = nearest_centroid(emb, spk)
    out["id_acc"] = float(np.mean(pred == spk)) if n else float("nan")
    return out


def nearest_centroid(emb: np.ndarray, speakers: Sequence[str]) -> np.ndarray:
    """Leave-one-out nearest-centroid speaker of every embedding [N, E] -> [N] names: each
    utterance against the normalised mean of every speaker's other utterances."""
    emb = np.asarray(emb, np.float64)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    spk = np.asarray(speakers)
    names = np.array(sorted(set(spk.tolist())))
    onehot = (spk[:, None] == names[None, :]).astype(np.float64)  # [N, S]
    sums = onehot.T @ emb  # [S, E]
    counts = onehot.sum(0)  # [S]
    loo = sums[None, :, :] - onehot[:, :, None] * emb[:, None, :]  # [N, S, E]
    loo_n = counts[None, :] - onehot  # [N, S]
    loo = loo / np.maximum(np.linalg.norm(loo, axis=-1, keepdims=True), 1e-12)
    score = np.einsum("NSE,NE->NS", loo, emb)  # [N, S]
    score = np.where(loo_n > 0, score, -np.inf)
    return names[np.argmax(score, axis=1)]


def equal_error_rate(same: np.ndarray, diff: np.ndarray) -> float:
    """EER of the test "score >= t means same speaker": min over thresholds t of
    max(FRR(t), FAR(t)) (the crossing point of the two error curves; exact with ties)."""
    same, diff = np.asarray(same, np.float64), np.asarray(diff, np.float64)
    t = np.concatenate([np.unique(np.concatenate([same, diff])), [np.inf]])  # [K]
    frr = (same[None, :] < t[:, None]).mean(1)  # [K] targets rejected
    far = (diff[None, :] >= t[:, None]).mean(1)  # [K] impostors accepted
    return float(np.min(np.maximum(frr, far)))


# ------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    """Train the JAX speaker encoder on the train split's speakers (AAM softmax over ids).

    Fills `config.model.mel_mean/mel_std` and `num_speakers` from the data when unset; at each
    eval logs dev loss/accuracy and `dev/sim_gap`, `dev/eer`, `dev/id_acc` on whole dev
    utterances. Returns the trainer's `TrainResult`.
    """
    from jaxtts.train import loop  # start-up: 86 ms; decoders load this module

    config = mlc.ConfigDict(config.to_dict())  # a private, unlocked copy
    if config.get("task") != "speaker_encoder":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'speaker_encoder'")
    corpus = resolve_corpus_dir(config.data)
    t0 = time.perf_counter()
    tr_utts = read_split(corpus, "train", int(config.data.get("limit_train", 0)))
    dev_utts = read_split(corpus, "dev", int(config.data.get("limit_dev", 0)))
    names = sorted({u.speaker for u in tr_utts})
    sid = {s: i for i, s in enumerate(names)}
    dev_utts = [u for u in dev_utts if u.speaker in sid]
    if len(names) < 2:
        raise DataError(f"{corpus}/train.jsonl: {len(names)} speaker(s), expected >= 2")
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
    if int(config.model.get("num_speakers") or 0) <= 0:
        config.model.num_speakers = len(names)
    if int(config.model.num_speakers) != len(names):
        raise ConfigError(
            f"model.num_speakers={config.model.num_speakers}: the train split "
            f"has {len(names)} speakers"
        )
    config.model.speakers = names

    model = model_from_config(config.model)
    task = SpeakerTask(model, len(names), config.loss.scale, config.loss.margin)
    d = config.data
    source = CropSource(
        tr_mels,
        [sid[u.speaker] for u in tr_utts],
        d.batch_size,
        d.min_crop_frames,
        d.max_crop_frames,
        seed=d.seed,
    )
    dev_source = CropSource(
        dev_mels,
        [sid[u.speaker] for u in dev_utts],
        d.batch_size,
        d.min_crop_frames,
        d.max_crop_frames,
        seed=d.seed + 1,
    )
    n_eval = int(d.eval_batches)

    def eval_batches():
        return (dev_source.get_batch(s) for s in range(n_eval))

    def on_eval(step, state):
        enc = JaxSpeakerEncoder(model_cfg=config.model, params=state.full_params["encoder"])
        st = separation_stats(enc.embed_mels(dev_mels), [u.speaker for u in dev_utts])
        return {"dev/sim_gap": st["gap"], "dev/eer": st["eer"], "dev/id_acc": st["id_acc"]}

    return loop.train_and_evaluate(
        config, workdir, task, source, eval_batches, mesh=mesh, progress=progress, on_eval=on_eval
    )


def main() -> None:
    """`train --config configs/speaker_encoder.py:small --workdir runs/speaker_encoder`."""
    config_flag = config_flags.DEFINE_config_file(
        "config", None, "Config file, e.g. configs/speaker_encoder.py:small", lock_config=True
    )
    workdir = flags.DEFINE_string("workdir", DEFAULT_WORKDIR, "Run directory.")

    def run(argv):
        if len(argv) != 2 or argv[1] != "train" or config_flag.value is None:
            raise app.UsageError(
                "usage: python -m jaxtts.methods.speaker_encoder train "
                "--config configs/speaker_encoder.py:small --workdir DIR"
            )
        logging.basicConfig(level=logging.INFO)
        train(config_flag.value, workdir.value)

    cli.run(run)


if __name__ == "__main__":
    main()

"""Vocoders by name: Griffin-Lim (`jaxtts.data.vocoder`) and the neural Vocos-style vocoder.

    voc = make_vocoder("vocos", mel_cfg)                 # pretrained/vocoder
    voc = make_vocoder("runs/vocoder", mel_cfg)          # any vocoder run folder
    voc = make_vocoder("griffin_lim", mel_cfg, n_iter=32)
    wav = voc.mel_to_audio(mel)                          # log-mel [T, M] -> float32 [N]
    wavs = voc.batch_mel_to_audio([mel_a, mel_b])        # one jitted call, rows as alone

`NeuralVocoder` runs the generator jitted on length buckets (multiples of BUCKET frames, so a
handful of programs serve every length) with padded rows masked (`VocosGenerator`), and trims
each row to (T - 1) hop samples. A vocoder folder whose mel analysis differs from the model's
(sample rate, hop, FFT, bins, range) is refused in one line naming both sides.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from jaxtts.data.audio import MelConfig
from jaxtts.data.vocoder import VOCODERS, Vocoder
from jaxtts.data.vocoder import make_vocoder as make_classic
from jaxtts.errors import ConfigError

__all__ = [
    "DEFAULT_VOCODER",
    "DEFAULT_VOCODER_DIR",
    "NeuralVocoder",
    "export",
    "generator_from_config",
    "load_generator",
    "make_vocoder",
]

DEFAULT_VOCODER_DIR = Path(__file__).resolve().parents[2] / "pretrained" / "vocoder"
# what infer.py, jaxtts.evaluate's model and tokenizer rows, --stream and the server use
DEFAULT_VOCODER = "griffin_lim"
BUCKET = 64  # frames


def generator_from_config(model_cfg):
    """The `VocosGenerator` of a vocoder config's `model` section."""
    from jaxtts.vocoders.vocos import VocosGenerator

    m = model_cfg
    return VocosGenerator(
        dim=int(m.dim),
        mlp_dim=int(m.mlp_dim),
        layers=int(m.layers),
        n_fft=int(m.n_fft),
        hop=int(m.hop),
        n_mels=int(m.n_mels),
    )


def load_generator(workdir):
    """(generator, its parameters, the run's config) of a vocoder run folder: a training run
    (its latest checkpoint, the discriminators dropped) or a shipped one (the generator alone)."""
    from jaxtts.run_folder import RunFolder

    run = RunFolder(workdir)
    config = run.read_config("vocoder")
    gen = generator_from_config(config.model)
    if run.params_file.is_file() and not run.checkpoints_dir.is_dir():
        import jax

        from jaxtts import checkpoint as ckpt_lib

        n = int(config.model.n_mels)
        like = {
            "gen": jax.eval_shape(
                gen.init, jax.random.PRNGKey(0), np.zeros((1, 9, n)), np.full((1,), 9, np.int32)
            )["params"]
        }
        return gen, ckpt_lib.read_params_file(run.params_file, like)["gen"], config
    return gen, run.saved_params()["gen"], config


def export(src: str | os.PathLike, dest: str | os.PathLike, dtype: str = "float16") -> int:
    """Ships a vocoder run: its config and the generator's parameters alone (one params file,
    `dtype`) in `dest`; returns the file's size in bytes."""
    import shutil

    from jaxtts import checkpoint as ckpt_lib
    from jaxtts.run_folder import RunFolder

    _, params, config = load_generator(src)
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(RunFolder(src).config_path, out / "config.json")
    return ckpt_lib.write_params_file(out / "params.msgpack", {"gen": params}, dtype)


class NeuralVocoder(Vocoder):
    """The Vocos-style generator of a vocoder run folder (`configs/vocoder.py`)."""

    def __init__(self, workdir: str | os.PathLike, mel_cfg: MelConfig | None = None):
        import jax

        self.workdir = Path(workdir)
        if not (self.workdir / "config.json").is_file():
            raise ConfigError(
                f"vocoder {self.workdir}: no config.json there, expected a vocoder run folder "
                "(python train.py --config configs/vocoder.py:small --workdir <dir>)"
            )
        gen, params, config = load_generator(self.workdir)
        own = MelConfig(**dict(config.model.mel))
        if mel_cfg is not None and mel_cfg != own:
            diff = {
                k: (getattr(mel_cfg, k), getattr(own, k))
                for k in own.to_dict()
                if getattr(mel_cfg, k) != getattr(own, k)
            }
            raise ConfigError(
                f"vocoder {self.workdir}: its mels differ from the model's: "
                + ", ".join(f"{k} {a} (model) vs {b} (vocoder)" for k, (a, b) in diff.items())
            )
        self.mel_cfg, self.sample_rate = own, own.sample_rate
        self.hop = own.hop_length
        self.mean, self.std = float(config.model.mel_mean), float(config.model.mel_std)
        self._params = params
        self._fn = jax.jit(lambda p, m, n: gen.apply({"params": p}, m, n))

    def batch_mel_to_audio(self, mels) -> list[np.ndarray]:
        mels = [self._check(m) for m in mels]
        if not mels:
            return []
        lens = np.array([len(m) for m in mels], np.int32)
        t = max(BUCKET, -(-int(lens.max()) // BUCKET) * BUCKET)
        x = np.zeros((len(mels), t, self.mel_cfg.n_mels), np.float32)  # [B, T, M]
        for i, m in enumerate(mels):
            x[i, : len(m)] = (m - self.mean) / self.std
        y = np.asarray(self._fn(self._params, x, lens))  # [B, (T - 1) hop]
        return [y[i, : max(0, (n - 1) * self.hop)].astype(np.float32) for i, n in enumerate(lens)]

    def mel_to_audio(self, mel: np.ndarray) -> np.ndarray:
        return self.batch_mel_to_audio([mel])[0]


def make_vocoder(kind: str = "griffin_lim", mel_cfg: MelConfig | None = None, **kw) -> Vocoder:
    """'griffin_lim' (kw: n_iter, ...), 'vocos' (pretrained/vocoder) or a vocoder run folder."""
    if kind in VOCODERS:
        return make_classic(kind, mel_cfg, **kw)
    if kind == "vocos":
        if not (DEFAULT_VOCODER_DIR / "config.json").is_file():
            raise ConfigError(
                f"vocoder 'vocos': {DEFAULT_VOCODER_DIR} is not there (a fresh clone ships it); "
                "pass --vocoder griffin_lim or a vocoder run folder"
            )
        return NeuralVocoder(DEFAULT_VOCODER_DIR, mel_cfg)
    if Path(kind).is_dir():
        return NeuralVocoder(kind, mel_cfg)
    raise ConfigError(
        f"vocoder {kind!r}: expected one of {sorted(VOCODERS) + ['vocos']} or a vocoder run folder"
    )

"""Mel-to-audio vocoders behind one interface, so a neural vocoder can replace Griffin-Lim later
without touching callers: `vocoder.mel_to_audio(mel [T, n_mels]) -> float32 [N]` at
`vocoder.sample_rate`; `make_vocoder(kind, mel_cfg)` builds one by name.

`GriffinLim` (the default) is fast by construction, because the RTF counts the vocoder:
1. mel -> linear magnitude: non-negative least squares `min ||fb @ S - mel||, S >= 0` solved
   approximately by a few multiplicative updates (Lee & Seung) from the clipped
   pseudo-inverse, all as [F, M] x [M, T] matrix products. librosa's `mel_to_audio` solves the
   same problem with a per-frame L-BFGS NNLS, ~70% of its run time.
2. phase: the fast Griffin-Lim algorithm (Perraudin, Balazs & Sondergaard 2013, momentum
   0.99) for `n_iter` iterations from a seeded random phase (deterministic output), with the
   numpy `stft` / `istft` pair of `jaxtts.data.audio`.
Measured cost and WER of the round trip: benchmarks/RESULTS.md (tokenizer section).
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Sequence

import numpy as np

from jaxtts.data.audio import MelConfig, istft, mel_filterbank, stft
from jaxtts.errors import AudioError, ConfigError

__all__ = ["GriffinLim", "Vocoder", "make_vocoder", "VOCODERS"]


class Vocoder(abc.ABC):
    """Interface: `mel_to_audio(mel float [T, n_mels]) -> float32 [N]`, `sample_rate`."""

    sample_rate: int
    mel_cfg: MelConfig

    @abc.abstractmethod
    def mel_to_audio(self, mel: np.ndarray) -> np.ndarray:
        """log-mel float [T, n_mels] -> float32 [N] at `sample_rate`."""

    def batch_mel_to_audio(self, mels: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [self.mel_to_audio(m) for m in mels]

    def _check(self, mel: np.ndarray) -> np.ndarray:
        mel = np.asarray(mel, np.float32)
        if mel.ndim != 2 or mel.shape[1] != self.mel_cfg.n_mels:
            raise AudioError(
                f"{type(self).__name__}: mel of shape {mel.shape}, expected "
                f"[T, {self.mel_cfg.n_mels}]"
            )
        if not np.all(np.isfinite(mel)):
            raise AudioError(f"{type(self).__name__}: mel has NaN/inf values")
        return mel


@functools.lru_cache(maxsize=4)
def _pinv(cfg: MelConfig) -> np.ndarray:
    return np.linalg.pinv(mel_filterbank(cfg)).astype(np.float32)  # [F, M]


class GriffinLim(Vocoder):
    """Log-mel -> audio by NNLS mel inversion + fast Griffin-Lim (see module docstring)."""

    def __init__(
        self,
        mel_cfg: MelConfig = MelConfig(),
        n_iter: int = 32,
        momentum: float = 0.99,
        nnls_iter: int = 8,
        power: float = 1.0,
        seed: int = 0,
    ):
        if n_iter < 1 or not 0 <= momentum < 1:
            raise ConfigError(
                f"GriffinLim: n_iter={n_iter} (>= 1), momentum={momentum} ([0, 1)) expected"
            )
        self.mel_cfg = mel_cfg
        self.sample_rate = mel_cfg.sample_rate
        self.n_iter, self.momentum, self.nnls_iter = int(n_iter), float(momentum), int(nnls_iter)
        self.power = float(power)  # > 1 sharpens harmonics but biases levels (measured: 1.0)
        self.seed = int(seed)

    def linear_magnitude(self, mel: np.ndarray) -> np.ndarray:
        """log-mel [T, M] -> linear magnitude spectrogram float32 [T, F] (NNLS, see above)."""
        mel = self._check(mel)
        target = np.exp(mel).T  # [M, T]
        fb = mel_filterbank(self.mel_cfg)  # [M, F]
        s = np.maximum(_pinv(self.mel_cfg) @ target, 1e-8)  # [F, T]
        fbt_target = fb.T @ target  # [F, T]
        for _ in range(self.nnls_iter):
            s *= fbt_target / np.maximum(fb.T @ (fb @ s), 1e-10)
        return s.T.astype(np.float32)  # [T, F]

    def mel_to_audio(self, mel: np.ndarray) -> np.ndarray:
        mag = self.linear_magnitude(mel) ** self.power  # [T, F]
        if mag.shape[0] == 0:
            return np.zeros((0,), np.float32)
        wav, _ = self.phase_retrieval(mag)
        peak = float(np.abs(wav).max())
        return (wav / peak * 0.9 if peak > 0.9 else wav).astype(np.float32)  # [N]

    def phase_retrieval(
        self, mag: np.ndarray, init: np.ndarray | None = None, seed=None, n_iter: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fast Griffin-Lim on a magnitude spectrogram [..., T, F] -> (audio float32
        [..., (T - 1) hop], unit phases complex64 [..., T, F]). `init` [..., T0, F] (T0 <= T)
        starts the first T0 frames from known phases instead of random ones (the streaming
        vocoder, `jaxtts.stream`, continues the previous window's phases). Leading axes are
        independent rows (the batched streaming vocoder), each with its own random start:
        `seed` is an int, or one per row; a row's result is the one it gets alone. `n_iter`:
        the vocoder's unless given."""
        cfg = self.mel_cfg
        mag = np.asarray(mag, np.float32)
        t, f = mag.shape[-2:]
        length = (t - 1) * cfg.hop_length
        lead = mag.shape[:-2]
        seeds = np.broadcast_to(np.asarray(self.seed if seed is None else seed), lead)
        t0 = 0 if init is None else init.shape[-2]  # frames with known phases
        angles = np.empty(mag.shape, np.complex64)  # [..., T, F]
        angles[..., :t0, :] = init if t0 else 0
        for idx in np.ndindex(*lead):  # random unit phases for the other frames, per row
            rng = np.random.default_rng(int(seeds[idx]))
            ph = rng.random((t - t0, f), dtype=np.float32) * np.float32(2 * np.pi)
            row = angles[idx][t0:]
            row.real, row.imag = np.cos(ph), np.sin(ph)
        # fast Griffin-Lim; the update in place (numpy's temporaries were most of its time)
        keep = np.float32(self.momentum / (1 + self.momentum))
        prev = np.zeros_like(angles)
        norm = np.empty(mag.shape, np.float32)
        for _ in range(self.n_iter if n_iter is None else n_iter):
            rebuilt = stft(istft(mag * angles, cfg, length), cfg)  # [..., T, F]
            prev *= -keep
            prev += rebuilt  # the accelerated estimate
            np.abs(prev, out=norm)
            np.maximum(norm, 1e-8, out=norm)
            np.divide(prev, norm, out=angles)
            prev = rebuilt
        return istft(mag * angles, cfg, length), angles


VOCODERS = {"griffin_lim": GriffinLim}


def make_vocoder(kind: str = "griffin_lim", mel_cfg: MelConfig | None = None, **kw) -> Vocoder:
    """Vocoder by name (`VOCODERS`)."""
    if kind not in VOCODERS:
        raise ConfigError(f"vocoder {kind!r}: expected one of {sorted(VOCODERS)}")
    return VOCODERS[kind](mel_cfg or MelConfig(), **kw)

"""Audio front-end: load / resample / normalise audio files, STFT, log-mel, dataset statistics.

Everything here is numpy (FFT via `numpy.fft`, resampling via `scipy.signal.resample_poly`):
librosa is used only for its mel filterbank matrix, which is plain numpy, so nothing pays
numba's first-call compile time.

Log-mel definition (`MelConfig`, defaults 16 kHz, n_fft 1024, Hann window 1024, hop 320 ->
50 frames/s, 80 Slaney mel bands 0-8 kHz): frames are centred (zero padding of n_fft // 2, as
librosa),
`T = 1 + N // hop`, magnitude (not power) spectrum, `log(max(mel_fb @ |X|, 1e-5))`. The same
`stft` / `istft` pair is used by the Griffin-Lim vocoder (`jaxtts.data.vocoder`).

Axis letters: N samples, T frames, F frequency bins (n_fft // 2 + 1), M mel bands.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import librosa
import numpy as np
import scipy.fft
import soundfile as sf

from jaxtts.errors import AudioError, DataError

__all__ = [
    "MelConfig",
    "MelStats",
    "global_mel_stats",
    "istft",
    "load_audio",
    "log_mel",
    "mel_filterbank",
    "resample",
    "save_audio",
    "stft",
    "utterance_mels",
    "wav_to_mel",
]


@dataclasses.dataclass(frozen=True)
class MelConfig:
    """Log-mel analysis parameters (saved with every tokenizer / model that uses them)."""

    sample_rate: int = 16000
    n_fft: int = 1024
    win_length: int = 1024
    hop_length: int = 320
    n_mels: int = 80
    fmin: float = 0.0
    fmax: float = 8000.0
    log_floor: float = 1e-5

    def __post_init__(self):
        if self.win_length > self.n_fft:
            raise DataError(f"MelConfig: win_length={self.win_length} > n_fft={self.n_fft}")
        if not 0 <= self.fmin < self.fmax <= self.sample_rate / 2:
            raise DataError(
                f"MelConfig: expected 0 <= fmin < fmax <= sample_rate/2, got "
                f"fmin={self.fmin} fmax={self.fmax} sample_rate={self.sample_rate}"
            )

    @property
    def frame_rate(self) -> float:
        """Frames per second (50.0 by default)."""
        return self.sample_rate / self.hop_length

    @property
    def n_freqs(self) -> int:
        return self.n_fft // 2 + 1

    def num_frames(self, num_samples: int) -> int:
        return 1 + num_samples // self.hop_length

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> MelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise DataError(f"MelConfig: unknown keys {sorted(unknown)}, expected {sorted(known)}")
        return cls(**d)


# ----------------------------------------------------------------------------- loading


def resample(wav: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Polyphase resampling (float32 [N] -> float32 [N * target / orig])."""
    if orig_sr == target_sr or wav.size == 0:
        return np.asarray(wav, np.float32)
    from scipy.signal import resample_poly  # start-up: scipy.signal 1.5 s, only to resample

    g = math.gcd(int(orig_sr), int(target_sr))
    return resample_poly(wav, int(target_sr) // g, int(orig_sr) // g).astype(np.float32)


def load_audio(
    path: str | os.PathLike,
    sample_rate: int | None = 16000,
    *,
    resample_to_rate: bool = True,
    peak_normalize: float | None = None,
) -> np.ndarray:
    """Reads any wav/flac/ogg file -> mono float32 [N] in [-1, 1] at `sample_rate`.

    Multi-channel audio is averaged to mono. With `resample_to_rate=False` a file at another
    rate raises AudioError (naming the file and both rates) instead of being resampled.
    `peak_normalize=0.95` scales the clip so its peak is 0.95. `sample_rate=None` keeps the
    file's rate. Unreadable, corrupt, empty or non-finite audio raises AudioError naming the
    file.
    """
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"{path}: audio file not found")
    try:
        wav, sr = sf.read(path, dtype="float32", always_2d=True)  # [N, C]
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        msg = str(e).strip().splitlines()
        raise AudioError(
            f"{path}: unreadable or corrupt audio ({msg[0] if msg else type(e).__name__})"
        ) from None
    if wav.shape[0] == 0:
        raise AudioError(f"{path}: audio has no samples")
    wav = wav.mean(axis=1) if wav.shape[1] > 1 else wav[:, 0]  # [N]
    if not np.all(np.isfinite(wav)):
        raise AudioError(f"{path}: audio has NaN/inf samples")
    if sample_rate is not None and sr != sample_rate:
        if not resample_to_rate:
            raise AudioError(f"{path}: sample rate {sr} Hz, expected {sample_rate} Hz")
        wav = resample(wav, sr, sample_rate)
    if peak_normalize is not None:
        peak = float(np.abs(wav).max())
        if peak > 0:
            wav = wav * (peak_normalize / peak)
    return np.ascontiguousarray(wav, dtype=np.float32)


def save_audio(path: str | os.PathLike, wav: np.ndarray, sample_rate: int = 16000) -> Path:
    """Writes float audio as 16-bit PCM wav (clipped to [-1, 1]), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    wav = np.asarray(wav, np.float32).reshape(-1)
    if not np.all(np.isfinite(wav)):
        raise AudioError(f"{path}: refusing to write audio with NaN/inf samples")
    tmp = path.with_name(path.name + ".tmp")
    sf.write(tmp, np.clip(wav, -1.0, 1.0), int(sample_rate), subtype="PCM_16", format="WAV")
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------- STFT


@functools.lru_cache(maxsize=8)
def _window(win_length: int, n_fft: int) -> np.ndarray:
    """Periodic Hann window of `win_length`, zero-padded (centred) to `n_fft`. float64 [n_fft]."""
    w = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win_length) / win_length)
    left = (n_fft - win_length) // 2
    return np.pad(w, (left, n_fft - win_length - left))


def stft(wav: np.ndarray, cfg: MelConfig) -> np.ndarray:
    """Centred STFT: float [..., N] -> complex64 [..., T, F], T = 1 + N // hop (zero padding).
    Leading axes are rows transformed independently (the batched streaming vocoder)."""
    x = np.asarray(wav, np.float32)
    pad = cfg.n_fft // 2
    x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)])  # zeros, as librosa >= 0.10
    frames = np.lib.stride_tricks.sliding_window_view(x, cfg.n_fft, axis=-1)[
        ..., :: cfg.hop_length, :
    ]  # [..., T, n_fft]
    win = _window(cfg.win_length, cfg.n_fft).astype(np.float32)
    # scipy's real FFT: numpy 2.4's float32 rfft took 5x longer at these sizes (1.86 vs 0.35
    # ms for [8, 34, 1024]; the same values to float32 rounding), and Griffin-Lim runs one
    # per iteration
    return scipy.fft.rfft(frames * win, axis=-1).astype(np.complex64, copy=False)  # [..., T, F]


def _overlap_add(frames: np.ndarray, hop: int) -> np.ndarray:
    """Sum frames [..., T, L] placed every `hop` samples -> [..., L + hop * (T - 1)] in the
    frames' dtype.

    Vectorised: each frame is cut into ceil(L / hop) hop-long segments; segment k of frame t
    lands on output block t + k, so the sum is ceil(L / hop) shifted array additions.
    """
    *lead, t, length = frames.shape
    k = -(-length // hop)
    out = np.zeros((*lead, t + k - 1, hop), frames.dtype)
    for j in range(k):
        w = min(hop, length - j * hop)  # the last segment may be short
        out[..., j : j + t, :w] += frames[..., j * hop : j * hop + w]
    return out.reshape(*lead, -1)[..., : length + hop * (t - 1)]


@functools.lru_cache(maxsize=64)
def _window_sum(cfg: MelConfig, t: int) -> np.ndarray:
    """1 / (the overlap-added squared window) float32 [n_fft + hop (T - 1)] (1 where ~0)."""
    win2 = np.broadcast_to(_window(cfg.win_length, cfg.n_fft) ** 2, (t, cfg.n_fft))
    norm = _overlap_add(win2, cfg.hop_length)
    return (1.0 / np.where(norm > 1e-8, norm, 1.0)).astype(np.float32)


def istft(spec: np.ndarray, cfg: MelConfig, length: int | None = None) -> np.ndarray:
    """Inverse of `stft` (weighted overlap-add): complex [..., T, F] -> float32 [..., N].
    float32 throughout (scipy's real FFT keeps single precision; Griffin-Lim runs one per
    iteration)."""
    t = spec.shape[-2]
    win = _window(cfg.win_length, cfg.n_fft).astype(np.float32)
    spec = np.asarray(spec, np.complex64)
    frames = scipy.fft.irfft(spec, n=cfg.n_fft, axis=-1)  # float32 [..., T, n_fft]
    frames *= win
    out = _overlap_add(frames, cfg.hop_length)
    out *= _window_sum(cfg, t)
    length = (t - 1) * cfg.hop_length if length is None else length
    pad = cfg.n_fft // 2
    if out.shape[-1] - pad >= length:
        return out[..., pad : pad + length]
    out = out[..., pad:]
    return np.pad(out, [(0, 0)] * (out.ndim - 1) + [(0, length - out.shape[-1])])


@functools.lru_cache(maxsize=8)
def _mel_fb(cfg: MelConfig) -> np.ndarray:
    fb = librosa.filters.mel(
        sr=cfg.sample_rate,
        n_fft=cfg.n_fft,
        n_mels=cfg.n_mels,
        fmin=cfg.fmin,
        fmax=cfg.fmax,
        norm="slaney",
        htk=False,
    )
    return fb.astype(np.float32)  # [M, F]


def mel_filterbank(cfg: MelConfig) -> np.ndarray:
    """Slaney mel filterbank float32 [M, F] (a copy; cached internally)."""
    return _mel_fb(cfg).copy()


def log_mel(wav: np.ndarray, cfg: MelConfig = MelConfig()) -> np.ndarray:
    """float [N] at cfg.sample_rate -> log-mel float32 [T, n_mels] (see module docstring)."""
    wav = np.asarray(wav, np.float32)
    if wav.ndim != 1:
        raise AudioError(f"log_mel: waveform has shape {wav.shape}, expected mono [N]")
    mag = np.abs(stft(wav, cfg))  # [T, F]
    mel = mag @ _mel_fb(cfg).T  # [T, M]
    return np.log(np.maximum(mel, cfg.log_floor)).astype(np.float32)


def wav_to_mel(wav: np.ndarray, sr: int, cfg: MelConfig | None = None) -> np.ndarray:
    """float32 [N] at `sr` -> log-mel [T, n_mels] at cfg's rate; empty audio -> one silent
    frame (so failed syntheses still score instead of crashing a table)."""
    cfg = cfg or MelConfig()
    wav = np.asarray(wav, np.float32)
    if wav.ndim != 1:
        raise AudioError(f"wav_to_mel: waveform has shape {wav.shape}, expected [N]")
    wav = resample(wav, sr, cfg.sample_rate)
    if wav.size == 0:
        return log_mel(np.zeros(cfg.hop_length * 2, np.float32), cfg)[:1]
    return log_mel(wav, cfg)


def utterance_mels(
    utts, cfg: MelConfig | None = None, progress: bool = True, desc: str = "log-mel"
) -> list[np.ndarray]:
    """Log-mels (float32 [T, n_mels]) of `Utterance`s, read from their audio files."""
    from tqdm.auto import tqdm  # start-up: tqdm.auto 60 ms, only for this bar

    cfg = cfg or MelConfig()
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:  # FFTs release the GIL
        it = pool.map(lambda u: log_mel(load_audio(u.path, cfg.sample_rate), cfg), utts)
        return list(tqdm(it, total=len(utts), desc=desc, disable=not progress, leave=False))


# ----------------------------------------------------------------------------- statistics


@dataclasses.dataclass(frozen=True)
class MelStats:
    """Per-bin mean / std of log-mel frames of a dataset (for normalisation)."""

    mean: np.ndarray  # float32 [M]
    std: np.ndarray  # float32 [M]

    @classmethod
    def fit(cls, mels: Iterable[np.ndarray], min_std: float = 1e-3) -> MelStats:
        """Exact streaming mean / std over all frames of `mels` ([T_i, M] each)."""
        n, s, ss = 0, None, None
        for m in mels:
            m = np.asarray(m, np.float64)
            s = m.sum(0) if s is None else s + m.sum(0)
            ss = (m**2).sum(0) if ss is None else ss + (m**2).sum(0)
            n += m.shape[0]
        if n == 0:
            raise DataError("MelStats.fit: no frames")
        mean = s / n
        std = np.sqrt(np.maximum(ss / n - mean**2, 0.0))
        return cls(mean.astype(np.float32), np.maximum(std, min_std).astype(np.float32))

    def normalize(self, mel: np.ndarray) -> np.ndarray:
        return ((mel - self.mean) / self.std).astype(np.float32)

    def denormalize(self, mel: np.ndarray) -> np.ndarray:
        return (mel * self.std + self.mean).astype(np.float32)

    def to_dict(self) -> dict:
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> MelStats:
        return cls(np.asarray(d["mean"], np.float32), np.asarray(d["std"], np.float32))

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | os.PathLike) -> MelStats:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: mel statistics file not found")
        return cls.from_dict(json.loads(path.read_text()))


def global_mel_stats(mels: Iterable[np.ndarray]) -> tuple[float, float]:
    """Global scalar mean / std of all frames and bins (rounded, so config.json is stable);
    the conformer ASR and the speaker encoder normalise their input with it."""
    mels = list(mels)
    total = sum(float(m.sum(dtype=np.float64)) for m in mels)
    count = sum(m.size for m in mels)
    mean = total / count
    var = sum(float(np.square(m - mean, dtype=np.float64).sum()) for m in mels) / count
    return round(mean, 4), round(max(float(np.sqrt(var)), 1e-3), 4)

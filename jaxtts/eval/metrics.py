"""Objective metrics: WER (jiwer), mel-cepstral distortion and log-F0 RMSE (both DTW-aligned).

Definitions (all documented here so numbers in tables are reproducible):

* **WER**: both reference and hypothesis go through `normalize_for_wer` (the corpus text
  normaliser `jaxtts.data.text.normalize_text`, then lower case, punctuation removed,
  accents folded to ASCII). Corpus WER = total word edits / total reference words (jiwer).
  An empty hypothesis (silence, failed synthesis) scores 1.0; an empty reference scores 0.0
  with an empty hypothesis and 1.0 otherwise (its insertions still count in the corpus sum).
* **MCD** (dB): both signals are trimmed of leading/trailing silence (40 dB below peak),
  analysed with 25 ms Hann windows every 5 ms (n_fft 1024 at 16 kHz, scaled with the rate),
  80-band mel filterbank (Slaney). Mel-cepstrum of the natural-log amplitude:
  `c_d = (1/M) sum_m ln A_m cos(pi d (m + 1/2) / M)`, i.e. the cepstrum of a mel-warped
  log-amplitude spectrum `ln A(w) = c_0 + 2 sum_d c_d cos(d w)` (the scale SPTK's `mcep`
  uses). Frames are DTW-aligned on the Euclidean distance of c_1..c_24 and
  `MCD = mean over the DTW path of 10/ln(10) * sqrt(2 * sum_{d=1..24} (c_d - c'_d)^2)`.
* **logF0 RMSE** (natural log, i.e. 0.01 ~ 17 cents): F0 by our own vectorised YIN
  (difference function, cumulative-mean normalisation, absolute threshold 0.2, parabolic
  interpolation; 50-500 Hz; frames voiced when the YIN dip is below the threshold and the
  frame RMS is within 40 dB of the loudest frame). Frames are paired along the same
  mel-cepstral DTW path; RMSE of `ln F0_ref - ln F0_syn` over pairs voiced in both.
  librosa.pyin is avoided because it is ~100x slower.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

import librosa
import numpy as np

from jaxtts.data.text import normalize_text  # the same normaliser the corpus uses
from jaxtts.errors import AudioError

MCD_K = 10.0 / math.log(10.0)  # dB per neper

# ------------------------------------------------------------------------------------------
# WER
# ------------------------------------------------------------------------------------------

_NON_WORD = re.compile(r"[^a-z0-9' ]+")
_EDGE_APOS = re.compile(r"(?<![a-z0-9])'|'(?![a-z0-9])")


def normalize_for_wer(text: str) -> str:
    """Normalise text for WER scoring: corpus normaliser + lower case, no punctuation."""
    text = normalize_text(text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = text.lower().replace("\u2019", "'")
    text = _NON_WORD.sub(" ", text)
    text = _EDGE_APOS.sub(" ", text)
    return " ".join(text.split())


@dataclass(frozen=True)
class WerDetail:
    """Per-utterance alignment counts (on normalised text)."""

    ref: str
    hyp: str
    num_ref_words: int
    hits: int
    substitutions: int
    deletions: int
    insertions: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        if self.num_ref_words == 0:
            return 0.0 if not self.hyp else 1.0
        return self.errors / self.num_ref_words


def wer_details(refs: list[str], hyps: list[str], normalize: bool = True) -> list[WerDetail]:
    """Per-utterance WER details; texts are normalised with `normalize_for_wer` by default."""
    if len(refs) != len(hyps):
        raise ValueError(f"wer: {len(refs)} references but {len(hyps)} hypotheses, expected equal")
    out = []
    for ref, hyp in zip(refs, hyps, strict=False):
        if normalize:
            ref, hyp = normalize_for_wer(ref), normalize_for_wer(hyp)
        else:
            ref, hyp = " ".join(ref.split()), " ".join(hyp.split())
        n_ref, n_hyp = len(ref.split()), len(hyp.split())
        if n_ref == 0 or n_hyp == 0:  # jiwer needs a non-empty side; the counts are trivial
            out.append(WerDetail(ref, hyp, n_ref, 0, 0, n_ref, n_hyp))
            continue
        import jiwer  # (imported on use: decoding benchmarks import this module without it)

        o = jiwer.process_words(ref, hyp)
        out.append(WerDetail(ref, hyp, n_ref, o.hits, o.substitutions, o.deletions, o.insertions))
    return out


def sentence_cer(refs: list[str], hyps: list[str]) -> np.ndarray:
    """Per-utterance character error rate float64 [N] on `normalize_for_wer` text (spaces
    count as characters). An empty side: 0 when both are empty, else 1 (all deleted or all
    inserted)."""
    if len(refs) != len(hyps):
        raise ValueError(f"cer: {len(refs)} references but {len(hyps)} hypotheses, expected equal")
    out = np.zeros((len(refs),), np.float64)
    for i, (ref, hyp) in enumerate(zip(refs, hyps, strict=True)):
        ref, hyp = normalize_for_wer(ref), normalize_for_wer(hyp)
        if not ref or not hyp:
            out[i] = 0.0 if ref == hyp else 1.0
            continue
        import jiwer  # optional: not in the GPU bundle

        o = jiwer.process_characters(ref, hyp)
        out[i] = (o.substitutions + o.deletions + o.insertions) / len(ref)
    return out


def corpus_wer(details: list[WerDetail]) -> float:
    """Total edits / total reference words (0.0 for an empty list)."""
    errors = sum(d.errors for d in details)
    words = sum(d.num_ref_words for d in details)
    if words == 0:
        return 0.0 if errors == 0 else 1.0
    return errors / words


def wer(refs: list[str], hyps: list[str], normalize: bool = True) -> float:
    """Corpus-level word error rate (fraction, 0.25 = 25%)."""
    return corpus_wer(wer_details(refs, hyps, normalize=normalize))


@dataclass(frozen=True)
class PairedWer:
    """Two systems' seed-averaged corpus WERs on the same utterances, their difference
    `a - b` and a paired bootstrap interval of it (fractions)."""

    wer_a: float
    wer_b: float
    diff: float
    lo: float
    hi: float
    prob_diff_above: float  # share of bootstrap resamples with a - b > `margin`


def paired_wer(
    errors_a: np.ndarray,
    errors_b: np.ndarray,
    words: np.ndarray,
    *,
    margin: float = 0.0,
    level: float = 0.95,
    num_resamples: int = 10_000,
    seed: int = 0,
) -> PairedWer:
    """Compare two systems' WER on the same test utterances, each decoded with several seeds.

    `errors_a` [Sa, U] and `errors_b` [Sb, U]: word edits per seed and utterance (the seeds of
    one system need not match the other's in number); `words` [U]: reference words. A system's
    WER is the mean over its seeds of the corpus WER, i.e. `sum_u mean_s errors[s, u] /
    sum_u words[u]`. The interval resamples utterances with replacement, the same draw for
    both systems (paired: an utterance that is hard for one is hard for the other), so it
    covers the sampling noise of decoding and the choice of test sentences together;
    percentile interval at `level`. `prob_diff_above`: the share of resamples in which
    WER_a - WER_b exceeds `margin` (e.g. 0.01 for "more than 1 pp worse").
    """
    ea = np.asarray(errors_a, np.float64)  # [Sa, U]
    eb = np.asarray(errors_b, np.float64)  # [Sb, U]
    w = np.asarray(words, np.float64)  # [U]
    if ea.ndim != 2 or eb.ndim != 2 or w.ndim != 1:
        raise ValueError("paired_wer: expected errors_a [Sa, U], errors_b [Sb, U], words [U]")
    if not (ea.shape[1] == eb.shape[1] == w.shape[0]) or w.shape[0] == 0:
        raise ValueError(
            f"paired_wer: {ea.shape[1]} / {eb.shape[1]} utterances against {w.shape[0]} "
            "reference lengths, expected the same non-zero number"
        )
    if w.sum() <= 0:
        raise ValueError("paired_wer: the references hold no words")
    ua, ub = ea.mean(0), eb.mean(0)  # [U] seed-averaged edits
    wer_a, wer_b = ua.sum() / w.sum(), ub.sum() / w.sum()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, w.shape[0], size=(num_resamples, w.shape[0]))  # [R, U]
    tot = np.maximum(w[idx].sum(1), 1e-12)  # [R]
    d = (ua[idx].sum(1) - ub[idx].sum(1)) / tot  # [R]
    lo, hi = np.quantile(d, [(1 - level) / 2, (1 + level) / 2])
    return PairedWer(
        wer_a=float(wer_a),
        wer_b=float(wer_b),
        diff=float(wer_a - wer_b),
        lo=float(lo),
        hi=float(hi),
        prob_diff_above=float((d > margin).mean()),
    )


# ------------------------------------------------------------------------------------------
# Spectral metrics
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalysisConfig:
    """Frame analysis shared by MCD and logF0 (times in seconds)."""

    win_s: float = 0.025
    hop_s: float = 0.005
    n_mels: int = 80
    n_cep: int = 24  # coefficients 1..n_cep enter the MCD (c_0, the energy, is excluded)
    trim_db: float = 40.0
    fmin_f0: float = 50.0
    fmax_f0: float = 500.0
    yin_threshold: float = 0.2
    voicing_db: float = 40.0
    power_floor: float = 1e-10


def _check_wav(wav: np.ndarray, name: str) -> np.ndarray:
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim != 1:
        raise AudioError(f"{name}: audio of shape {wav.shape}, expected mono float32[N]")
    if not np.all(np.isfinite(wav)):
        raise AudioError(f"{name}: audio has NaN/inf samples, expected finite values")
    if wav.size == 0 or not np.any(wav):
        raise AudioError(f"{name}: audio is empty or silent, expected speech")
    return wav


def _trim(wav: np.ndarray, top_db: float, hop: int) -> np.ndarray:
    if top_db <= 0:
        return wav
    trimmed, _ = librosa.effects.trim(wav, top_db=top_db, frame_length=4 * hop, hop_length=hop)
    return trimmed if trimmed.size >= 4 * hop else wav


def _frame_params(sr: int, cfg: AnalysisConfig) -> tuple[int, int, int]:
    win = int(round(cfg.win_s * sr))
    hop = int(round(cfg.hop_s * sr))
    n_fft = 1 << (int(math.ceil(math.log2(max(win, 1)))) + 1)  # 2x zero padding (1024 @ 16 kHz)
    return win, hop, n_fft


def mel_cepstrum(wav: np.ndarray, sr: int, cfg: AnalysisConfig = AnalysisConfig()) -> np.ndarray:
    """Mel-cepstra c_0..c_{n_cep} of the log amplitude (see module docstring). -> float64[T, C]."""
    win, hop, n_fft = _frame_params(sr, cfg)
    power = librosa.feature.melspectrogram(
        y=wav.astype(np.float32),
        sr=sr,
        n_fft=n_fft,
        hop_length=hop,
        win_length=win,
        window="hann",
        center=True,
        power=2.0,
        n_mels=cfg.n_mels,
        fmin=0.0,
        fmax=sr / 2,
    ).T.astype(np.float64)  # [T, M]
    log_amp = 0.5 * np.log(np.maximum(power, cfg.power_floor))  # [T, M]
    m = np.arange(cfg.n_mels)
    d = np.arange(cfg.n_cep + 1)
    basis = np.cos(np.pi * d[:, None] * (m[None, :] + 0.5) / cfg.n_mels) / cfg.n_mels  # [C, M]
    return log_amp @ basis.T  # [T, C]


def yin_f0(
    wav: np.ndarray, sr: int, cfg: AnalysisConfig = AnalysisConfig()
) -> tuple[np.ndarray, np.ndarray]:
    """F0 in Hz and voicing per frame (same frame grid as `mel_cepstrum`). -> ([T], bool[T])."""
    _, hop, _ = _frame_params(sr, cfg)
    tau_min = max(2, int(math.floor(sr / cfg.fmax_f0)))
    tau_max = int(math.ceil(sr / cfg.fmin_f0))
    w = tau_max  # integration window
    frame_len = w + tau_max + 1
    n_frames = 1 + len(wav) // hop
    pad = np.pad(wav.astype(np.float64), (frame_len // 2, frame_len))
    idx = np.arange(n_frames)[:, None] * hop + np.arange(frame_len)[None, :]
    frames = pad[idx]  # [T, L]
    frames = frames - frames.mean(axis=1, keepdims=True)
    n = 1 << int(math.ceil(math.log2(2 * frame_len)))
    spec_full = np.fft.rfft(frames, n)
    spec_head = np.fft.rfft(frames[:, :w], n)
    r = np.fft.irfft(np.conj(spec_head) * spec_full, n)[:, : tau_max + 1]  # [T, tau]
    sq = np.concatenate([np.zeros((n_frames, 1)), np.cumsum(frames**2, axis=1)], axis=1)
    e0 = sq[:, w]  # [T]
    taus = np.arange(tau_max + 1)
    e_tau = sq[:, taus + w] - sq[:, taus]  # [T, tau]
    diff = np.maximum(e0[:, None] + e_tau - 2.0 * r, 0.0)  # [T, tau]
    cum = np.cumsum(diff[:, 1:], axis=1)
    cmnd = np.ones_like(diff)
    cmnd[:, 1:] = diff[:, 1:] * taus[None, 1:] / np.maximum(cum, 1e-12)
    band = cmnd[:, tau_min : tau_max + 1]  # [T, K]
    below = band < cfg.yin_threshold
    has = below.any(axis=1)
    first = np.argmax(below, axis=1)
    k = np.arange(band.shape[1])[None, :]
    stop = (k >= first[:, None]) & ~below
    end = np.where(stop.any(axis=1), np.argmax(stop, axis=1), band.shape[1])
    region = (k >= first[:, None]) & (k < end[:, None])
    best = np.argmin(np.where(region, band, np.inf), axis=1)  # [T]
    # parabolic interpolation of the dip
    tau = best + tau_min
    lo = cmnd[np.arange(n_frames), np.clip(tau - 1, 1, tau_max)]
    mid = cmnd[np.arange(n_frames), tau]
    hi = cmnd[np.arange(n_frames), np.clip(tau + 1, 1, tau_max)]
    denom = lo - 2 * mid + hi
    shift = np.where(np.abs(denom) > 1e-12, 0.5 * (lo - hi) / np.where(denom == 0, 1, denom), 0)
    tau_f = tau + np.clip(shift, -1.0, 1.0)
    f0 = sr / tau_f
    rms = np.sqrt(e0 / w)
    loud = rms > rms.max() * 10 ** (-cfg.voicing_db / 20) if rms.max() > 0 else np.zeros_like(has)
    voiced = has & loud
    return np.where(voiced, f0, 0.0), voiced


def _dtw_path(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """DTW path (symmetric steps, Euclidean cost) between [Ta, C] and [Tb, C]. -> int[P, 2]."""
    _, wp = librosa.sequence.dtw(X=a.T, Y=b.T, metric="euclidean")
    return np.asarray(wp[::-1])


def spectral_distortion(
    ref_wav: np.ndarray, syn_wav: np.ndarray, sr: int, cfg: AnalysisConfig = AnalysisConfig()
) -> dict[str, float]:
    """MCD (dB) and logF0 RMSE along one mel-cepstral DTW path.

    Returns {"mcd", "logf0_rmse" (nan when no frame pair is voiced in both), "voiced_pairs",
    "path_len"}. Raises AudioError for empty, silent, non-finite or multi-channel input.
    """
    ref = _check_wav(ref_wav, "ref_wav")
    syn = _check_wav(syn_wav, "syn_wav")
    _, hop, _ = _frame_params(sr, cfg)
    ref, syn = _trim(ref, cfg.trim_db, hop), _trim(syn, cfg.trim_db, hop)
    c_ref = mel_cepstrum(ref, sr, cfg)[:, 1:]  # [Tr, 24]
    c_syn = mel_cepstrum(syn, sr, cfg)[:, 1:]  # [Ts, 24]
    path = _dtw_path(c_ref, c_syn)  # [P, 2]
    diff = c_ref[path[:, 0]] - c_syn[path[:, 1]]  # [P, 24]
    mcd = float(np.mean(MCD_K * np.sqrt(2.0 * np.sum(diff**2, axis=1))))
    f_ref, v_ref = yin_f0(ref, sr, cfg)
    f_syn, v_syn = yin_f0(syn, sr, cfg)
    both = v_ref[path[:, 0]] & v_syn[path[:, 1]]
    if both.any():
        d = np.log(f_ref[path[both, 0]]) - np.log(f_syn[path[both, 1]])
        rmse = float(np.sqrt(np.mean(d**2)))
    else:
        rmse = float("nan")
    return {
        "mcd": mcd,
        "logf0_rmse": rmse,
        "voiced_pairs": int(both.sum()),
        "path_len": int(len(path)),
    }


def mel_cepstral_distortion(ref_wav: np.ndarray, syn_wav: np.ndarray, sr: int) -> float:
    """DTW-aligned mel-cepstral distortion in dB over c_1..c_24 (see module docstring)."""
    return spectral_distortion(ref_wav, syn_wav, sr)["mcd"]


def logf0_rmse(ref_wav: np.ndarray, syn_wav: np.ndarray, sr: int) -> float:
    """RMSE of natural-log F0 over DTW-paired frames voiced in both (nan if none)."""
    return spectral_distortion(ref_wav, syn_wav, sr)["logf0_rmse"]

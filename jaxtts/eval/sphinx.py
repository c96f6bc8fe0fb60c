"""Low-level PocketSphinx pieces shared by the evaluation ASR and acoustic-model adaptation.

Dependency order (one way): `jaxtts.eval.sphinx` <- `jaxtts.eval.am_adapt` <- `jaxtts.eval.asr`.

* `import_pocketsphinx`: the optional `pocketsphinx` package, imported on first use
  (MissingDependencyError without it);
* `default_cache_dir`: where built LMs, generated sentences and adapted models are cached;
* `prepare_pcm` and `ASR_SAMPLE_RATE`: float audio -> the 16 kHz int16 PCM the recogniser
  decodes and the adaptation recipe trains on.

The bytes of this file are part of the adapted acoustic models' cache key
(`jaxtts.eval.am_adapt._recipe_key`: "the audio preparation code"), so editing it rebuilds
those models (minutes each): keep only audio preparation and small helpers here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from jaxtts.errors import AudioError, MissingDependencyError

__all__ = ["ASR_SAMPLE_RATE", "default_cache_dir", "import_pocketsphinx", "prepare_pcm"]

ASR_SAMPLE_RATE = 16000


def import_pocketsphinx():
    try:
        import pocketsphinx  # optional: missing -> no WER columns
    except ImportError as e:  # pragma: no cover - exercised only without the package
        raise MissingDependencyError(
            f"pocketsphinx: not importable ({e}); pip install pocketsphinx to get WER columns"
        ) from None
    return pocketsphinx


def default_cache_dir() -> Path:
    """`$JAXTTS_CACHE_DIR/asr` or `~/.cache/jaxtts/asr`."""
    root = os.environ.get("JAXTTS_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "jaxtts"
    )
    return Path(root) / "asr"


def prepare_pcm(
    wav: np.ndarray, sample_rate: int, dither: float, seed: int, pad_s: float, name: str = "wav"
) -> np.ndarray:
    """float audio -> int16 PCM at 16 kHz with silence padding and seeded dither. -> int16[N]."""
    from scipy.signal import resample_poly  # start-up: scipy.signal 1.3 s, only to resample

    x = np.asarray(wav)
    if x.ndim != 1:
        raise AudioError(f"{name}: audio of shape {x.shape}, expected mono float32[N]")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise AudioError(f"{name}: audio has NaN/inf samples, expected finite values")
    if sample_rate <= 0:
        raise AudioError(f"{name}: sample rate {sample_rate} Hz, expected > 0")
    if sample_rate != ASR_SAMPLE_RATE and x.size:
        g = math.gcd(int(sample_rate), ASR_SAMPLE_RATE)
        x = resample_poly(x, ASR_SAMPLE_RATE // g, int(sample_rate) // g)
    pad = int(round(pad_s * ASR_SAMPLE_RATE))
    x = np.pad(np.clip(x, -1.0, 1.0) * 32767.0, (pad, pad))
    min_len = ASR_SAMPLE_RATE // 2  # pocketsphinx needs a few frames; pad very short input
    if x.size < min_len:
        x = np.pad(x, (0, min_len - x.size))
    if dither > 0:
        x = x + np.random.default_rng(seed).normal(0.0, dither, x.shape)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)

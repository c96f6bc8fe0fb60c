"""Speaker similarity (SIM / SECS): cosine of prompt vs output speaker embeddings.

Encoders implement `SpeakerEncoder` (the concrete ones live elsewhere and are loaded by
`load_speaker_encoder`). Without an encoder the SIM column is disabled with a warning.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable

import numpy as np

from jaxtts.errors import ConfigError, MissingDependencyError

# Short names -> "module:factory". Factories take no required arguments and return a
# SpeakerEncoder; import errors surface as MissingDependencyError.
KNOWN_ENCODERS: dict[str, str] = {
    "resemblyzer": "jaxtts.methods.speaker_encoder:ResemblyzerEncoder",  # the DCAR paper's
    "jax": "jaxtts.methods.speaker_encoder:JaxSpeakerEncoder",  # trained in runs/speaker_encoder
}


@runtime_checkable
class SpeakerEncoder(Protocol):
    """`embed(wavs: list[float32[N]], sr) -> float32[B, E]` (one embedding per clip)."""

    def embed(self, wavs: list[np.ndarray], sr: int) -> np.ndarray: ...


def cosine_similarity(a: np.ndarray, b: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """Row-wise cosine of a [B, E] and b [B, E]. -> float32[B]."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"cosine_similarity: shapes {a.shape} and {b.shape}, expected [B, E]")
    num = np.sum(a * b, axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (num / np.maximum(den, eps)).astype(np.float32)


def speaker_similarity(
    encoder: SpeakerEncoder, prompts: list[np.ndarray], outputs: list[np.ndarray], sr: int
) -> np.ndarray:
    """SIM per pair: cos(embed(prompt_i), embed(output_i)). -> float32[B]."""
    if len(prompts) != len(outputs):
        raise ValueError(f"speaker_similarity: {len(prompts)} prompts, {len(outputs)} outputs")
    if not prompts:
        return np.zeros((0,), np.float32)
    e_p = np.asarray(encoder.embed(list(prompts), sr))  # [B, E]
    e_o = np.asarray(encoder.embed(list(outputs), sr))  # [B, E]
    return cosine_similarity(e_p, e_o)


def load_speaker_encoder(spec: str) -> SpeakerEncoder:
    """Encoder from a short name in KNOWN_ENCODERS or "module:factory".

    Raises MissingDependencyError if the module/package is not importable, ConfigError if the
    spec is malformed or the object is not a SpeakerEncoder.
    """
    target = KNOWN_ENCODERS.get(spec, spec)
    if ":" not in target:
        raise ConfigError(
            f"speaker encoder {spec!r}: expected one of "
            f"{sorted(KNOWN_ENCODERS)} or 'module:factory'"
        )
    mod_name, attr = target.split(":", 1)
    try:
        mod = importlib.import_module(mod_name)
        factory = getattr(mod, attr)
    except (ImportError, AttributeError) as e:
        raise MissingDependencyError(
            f"speaker encoder {spec!r}: {target} unavailable ({e})"
        ) from None
    try:
        enc = factory()
    except ImportError as e:
        raise MissingDependencyError(f"speaker encoder {spec!r}: {e}") from None
    if not isinstance(enc, SpeakerEncoder):
        raise ConfigError(f"speaker encoder {spec!r}: {target} has no embed(wavs, sr)")
    return enc

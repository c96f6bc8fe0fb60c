"""A speaker prompt: an utterance of the target speaker (audio + its transcript), as every
engine and the synthesizer take it (its own module: the engines and `jaxtts.synthesize` both
use it, and neither imports the other for it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from jaxtts.data.audio import load_audio


@dataclasses.dataclass
class Prompt:
    """Speaker prompt: an utterance of the target speaker (audio + its transcript)."""

    id: str
    speaker: str
    text: str
    wav: np.ndarray  # float32 [N] at sample_rate
    sample_rate: int = 16000
    audio_path: str = ""

    @classmethod
    def from_file(cls, path: str | Path, text: str, sample_rate: int = 16000) -> Prompt:
        wav = load_audio(path, sample_rate)
        return cls(Path(path).stem, "", text, wav, sample_rate, str(path))

    @classmethod
    def from_utterance(cls, utt, sample_rate: int = 16000) -> Prompt:
        return cls(
            utt.id,
            utt.speaker,
            utt.text,
            load_audio(utt.path, sample_rate),
            sample_rate,
            str(utt.path),
        )

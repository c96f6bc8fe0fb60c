"""JSONL manifests: one `Utterance` per line.

Line format (keys in this order):
`{"id", "audio", "text", "normalized_text", "phonemes", "speaker", "duration"}` where `audio` is
the wav path relative to the manifest's folder (absolute paths are kept as they are),
`phonemes` a list of symbols (see `jaxtts.data.text`) and `duration` seconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from jaxtts.errors import DataError

__all__ = ["MANIFEST_FIELDS", "Utterance", "read_manifest", "read_split", "write_manifest"]

MANIFEST_FIELDS = ("id", "audio", "text", "normalized_text", "phonemes", "speaker", "duration")
_REQUIRED = ("id", "audio", "text")


@dataclasses.dataclass(frozen=True)
class Utterance:
    """One utterance. `root` (not serialised) is the manifest's folder; `path` = root / audio.

    `normalized_text` defaults to `normalize_text(text)`; `phonemes` is stored as a tuple.
    """

    id: str
    audio: str
    text: str
    normalized_text: str = ""
    phonemes: tuple[str, ...] = ()
    speaker: str = ""
    duration: float = 0.0
    root: str | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.phonemes, tuple):
            object.__setattr__(self, "phonemes", tuple(self.phonemes))
        if not self.normalized_text and self.text:
            from jaxtts.data.text import normalize_text  # start-up: numpy via data.text, 155 ms

            object.__setattr__(self, "normalized_text", normalize_text(self.text))
        object.__setattr__(self, "audio", os.fspath(self.audio))
        if self.root is not None:
            object.__setattr__(self, "root", os.fspath(self.root))

    @property
    def path(self) -> Path:
        """The audio file: `audio` resolved against the manifest folder (`root`)."""
        audio = Path(self.audio)
        if audio.is_absolute() or self.root is None:
            return audio
        return Path(self.root) / audio

    def to_json(self) -> dict:
        d = {f: getattr(self, f) for f in MANIFEST_FIELDS}
        d["phonemes"] = list(self.phonemes)
        return d

    @classmethod
    def from_json(cls, d: dict, root: str | os.PathLike | None = None) -> Utterance:
        return cls(**{f: d[f] for f in MANIFEST_FIELDS if f in d}, root=root)

    def replace(self, **changes) -> Utterance:
        return dataclasses.replace(self, **changes)


def _check_types(path: Path, lineno: int, d: dict) -> None:
    where = f"{path}:{lineno}"
    for key in _REQUIRED:
        if key not in d:
            raise DataError(f"{where}: missing field {key!r} (keys: {list(MANIFEST_FIELDS)})")
    for key in ("id", "audio", "text", "normalized_text", "speaker"):
        if key in d and not isinstance(d[key], str):
            raise DataError(f"{where}: field {key!r} must be a string, got {d[key]!r}")
    if "duration" in d:
        dur = d["duration"]
        if (
            isinstance(dur, bool)
            or not isinstance(dur, int | float)
            or not math.isfinite(dur)
            or dur < 0
        ):
            raise DataError(f"{where}: field 'duration' must be a number >= 0, got {dur!r}")
    if "phonemes" in d and not (
        isinstance(d["phonemes"], list) and all(isinstance(p, str) for p in d["phonemes"])
    ):
        raise DataError(f"{where}: field 'phonemes' must be a list of strings")


def read_manifest(path: str | os.PathLike, check_files: bool = True) -> list[Utterance]:
    """Reads a JSONL manifest; audio paths resolve relative to the manifest's folder.

    Raises DataError (naming the manifest line) on malformed JSON, missing/ill-typed fields,
    duplicate ids, or (with `check_files`) a missing audio file.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: manifest not found")
    root = os.fspath(path.parent)
    utts: list[Utterance] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(
                    f"{path}:{lineno}: malformed JSON ({e.msg} at column {e.colno})"
                ) from None
            if not isinstance(d, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(d).__name__}")
            _check_types(path, lineno, d)
            if d["id"] in seen:
                raise DataError(
                    f"{path}:{lineno}: duplicate id {d['id']!r} (first on line {seen[d['id']]})"
                )
            seen[d["id"]] = lineno
            utt = Utterance.from_json(d, root=root)
            if check_files and not utt.path.is_file():
                raise DataError(
                    f"{path}:{lineno}: audio file {utt.path} of {utt.id!r} does not exist"
                )
            utts.append(utt)
    return utts


def write_manifest(path: str | os.PathLike, utts: Iterable[Utterance]) -> Path:
    """Writes a JSONL manifest atomically (tmp + rename).

    Audio paths are written relative to the manifest's folder when the utterance has a `root`
    (its file is re-expressed relative to the new folder) or is relative already; absolute
    paths without root are kept absolute.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for u in utts:
        d = u.to_json()
        if u.root is not None and not Path(u.audio).is_absolute():
            d["audio"] = Path(
                os.path.relpath(os.path.abspath(u.path), os.path.abspath(path.parent))
            ).as_posix()
        lines.append(json.dumps(d, ensure_ascii=False))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)
    return path


def speakers_of(utts: Sequence[Utterance]) -> list[str]:
    """Sorted distinct speakers of `utts`."""
    return sorted({u.speaker for u in utts})


def read_split(
    corpus_dir: str | os.PathLike, split: str, limit: int = 0, check_files: bool = False
) -> list[Utterance]:
    """`<corpus_dir>/<split>.jsonl` (its first `limit` utterances when limit > 0)."""
    path = Path(corpus_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise DataError(
            f"{path}: manifest not found (build the built-in corpus with "
            "`python -m jaxtts.data.corpus`, or prepare a dataset)"
        )
    utts = read_manifest(path, check_files=check_files)
    return utts[:limit] if limit else utts

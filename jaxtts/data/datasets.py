"""Real datasets -> `Utterance`s and prepared corpus folders.

    python -m jaxtts.data.datasets --kind ljspeech --src /path/LJSpeech-1.1 --out data/ljspeech
    python -m jaxtts.data.datasets --kind libritts --src /path/LibriTTS --subsets train-clean-100
    python -m jaxtts.data.datasets --kind tfds_ljspeech --src ~/tensorflow_datasets --out ...

Readers (each returns `list[Utterance]` with `root` = the dataset folder and `audio` relative
to it, sorted by id, `duration` from the wav header):
- `read_ljspeech(src)`: `src/metadata.csv` (`id|text|normalized text`), `src/wavs/<id>.wav`
  (22050 Hz; `jaxtts.data.audio.load_audio` resamples on load), speaker "LJ".
- `read_libritts(src, subsets)`: `src/<subset>/<speaker>/<chapter>/<id>.wav` with
  `<id>.normalized.txt` / `<id>.original.txt` (24000 Hz); speaker = the folder name.
- `read_tfds(name, data_dir, cache_dir, split)`: the tensorflow-datasets `ljspeech` /
  `libritts` builders through `tfds.data_source` (random access, no TF graph, never downloads:
  the dataset must already be prepared in `data_dir` with `file_format='array_record'`). Audio
  arrays are written once to `cache_dir/<speaker>/<id>.wav` (native rate, PCM16) and the
  result is cached as `cache_dir/index-<split>.jsonl`, so a second call reads no audio.

Text fields: `text` is the dataset's original transcript; `normalized_text` is
`normalize_text` (the project's one normalisation) applied to the dataset's own normalised
transcript (LJSpeech column 3, LibriTTS `.normalized.txt`), whose number/abbreviation
expansions are hand-checked. Phonemes are computed from `normalized_text`.

`prepare_dataset(kind, source, out_dir, ...)` writes the corpus layout of docs/DESIGN.md:
`train.jsonl`, `dev.jsonl`, `test.jsonl` (audio paths relative to `out_dir`, pointing into the
source folder, or into `out_dir/wavs/<speaker>/<id>.wav` resampled to 16 kHz PCM16 with
`copy_audio=True`), `config.json` and `done` (holding the config hash; a second call with the
same arguments returns at once). Split (`split_utterances`): `heldout_speakers` speakers
(chosen by a hash of (seed, speaker)) go to test only (zero-shot); of the rest, utterances
ordered by a hash of (seed, id) give the first `dev_fraction` to dev, the next
`test_fraction` to test, the remainder to train -- deterministic and independent of file order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from jaxtts.data.audio import load_audio
from jaxtts.data.manifest import Utterance, read_manifest, write_manifest
from jaxtts.data.text import normalize_text
from jaxtts.data.text import phonemize as phonemize_texts
from jaxtts.errors import AudioError, ConfigError, DataError, MissingDependencyError

__all__ = [
    "KINDS",
    "LIBRITTS_SUBSETS",
    "LJSPEECH_SPEAKER",
    "TFDS_INSTALL_HINT",
    "main",
    "prepare_dataset",
    "read_libritts",
    "read_ljspeech",
    "read_tfds",
    "split_utterances",
]

LJSPEECH_SPEAKER = "LJ"
LIBRITTS_SUBSETS = (
    "train-clean-100",
    "train-clean-360",
    "train-other-500",
    "dev-clean",
    "dev-other",
    "test-clean",
    "test-other",
)
KINDS = ("ljspeech", "libritts", "tfds_ljspeech", "tfds_libritts")
TFDS_INSTALL_HINT = "pip install tensorflow-datasets==4.9.10 tensorflow-cpu==2.21.0"
PREPARE_VERSION = 1  # bump when prepare_dataset's output changes
_TFDS = {  # builder name -> (default split, native sample rate)
    "ljspeech": ("train", 22050),
    "libritts": ("train_clean100", 24000),
}
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")


def _duration(path: Path) -> float:
    try:
        info = sf.info(os.fspath(path))
    except Exception as e:  # soundfile raises several types
        raise AudioError(f"{path}: unreadable audio ({str(e).splitlines()[0]})") from None
    if info.samplerate <= 0 or info.frames <= 0:
        raise AudioError(f"{path}: empty audio, expected > 0 samples")
    return round(info.frames / info.samplerate, 4)


def _folder(src: str | os.PathLike, what: str) -> Path:
    src = Path(src).expanduser()
    if not src.is_dir():
        raise DataError(f"{src}: {what} folder not found")
    return src


# ----------------------------------------------------------------------------- LJSpeech


def read_ljspeech(src: str | os.PathLike, progress: bool = False) -> list[Utterance]:
    """LJSpeech-1.1 folder -> utterances of speaker "LJ" (see the module docstring)."""
    src = _folder(src, "LJSpeech")
    meta = src / "metadata.csv"
    if not meta.is_file():
        raise DataError(
            f"{meta}: not found, expected the LJSpeech-1.1 layout (metadata.csv + wavs/<id>.wav)"
        )
    utts: list[Utterance] = []
    seen: dict[str, int] = {}
    lines = meta.read_text(encoding="utf-8").splitlines()
    for lineno, line in enumerate(tqdm(lines, desc="ljspeech", disable=not progress), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) not in (2, 3) or not fields[0].strip() or not fields[1].strip():
            raise DataError(
                f"{meta}:{lineno}: expected 'id|text|normalized text', got "
                f"{len(fields)} field(s): {line[:60]!r}"
            )
        uid, text = fields[0].strip(), fields[1].strip()
        norm = fields[2].strip() if len(fields) == 3 and fields[2].strip() else text
        if uid in seen:
            raise DataError(f"{meta}:{lineno}: duplicate id {uid!r} (first on line {seen[uid]})")
        seen[uid] = lineno
        wav = src / "wavs" / f"{uid}.wav"
        if not wav.is_file():
            raise DataError(f"{wav}: audio of {meta.name}:{lineno} ({uid!r}) not found")
        utts.append(
            Utterance(
                id=uid,
                audio=f"wavs/{uid}.wav",
                text=text,
                normalized_text=normalize_text(norm),
                speaker=LJSPEECH_SPEAKER,
                duration=_duration(wav),
                root=os.fspath(src),
            )
        )
    if not utts:
        raise DataError(f"{meta}: no utterances")
    return sorted(utts, key=lambda u: u.id)


# ----------------------------------------------------------------------------- LibriTTS


def _read_transcript(path: Path) -> str | None:
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise DataError(f"{path}: empty transcript")
    return text


def read_libritts(
    src: str | os.PathLike, subsets: Sequence[str] | str | None = None, progress: bool = False
) -> list[Utterance]:
    """LibriTTS root folder -> utterances of the chosen subsets (default: every subset present).

    Subsets are folder names (`train-clean-100`, `dev-clean`, ...); speaker = the speaker folder.
    """
    src = _folder(src, "LibriTTS")
    if isinstance(subsets, str):
        subsets = [s for s in subsets.split(",") if s]
    if subsets is None:
        subsets = [s for s in LIBRITTS_SUBSETS if (src / s).is_dir()]
        if not subsets:
            raise DataError(
                f"{src}: no LibriTTS subset folder found, expected one of {list(LIBRITTS_SUBSETS)}"
            )
    wavs: list[tuple[str, Path]] = []
    for subset in subsets:
        folder = src / subset
        if not folder.is_dir():
            raise DataError(f"{folder}: LibriTTS subset {subset!r} not found")
        wavs.extend((subset, p) for p in sorted(folder.glob("*/*/*.wav")))
    if not wavs:
        raise DataError(f"{src}: no <subset>/<speaker>/<chapter>/<id>.wav files in {subsets}")
    utts: list[Utterance] = []
    seen: dict[str, Path] = {}
    for subset, wav in tqdm(wavs, desc="libritts", disable=not progress):
        uid, speaker, chapter = wav.stem, wav.parent.parent.name, wav.parent.name
        norm = _read_transcript(wav.with_name(f"{uid}.normalized.txt"))
        orig = _read_transcript(wav.with_name(f"{uid}.original.txt"))
        if norm is None and orig is None:
            raise DataError(f"{wav}: no transcript ({uid}.normalized.txt or {uid}.original.txt)")
        if uid in seen:
            raise DataError(f"{wav}: duplicate utterance id {uid!r} (also {seen[uid]})")
        seen[uid] = wav
        utts.append(
            Utterance(
                id=uid,
                audio=f"{subset}/{speaker}/{chapter}/{wav.name}",
                text=orig or norm,
                normalized_text=normalize_text(norm or orig),
                speaker=speaker,
                duration=_duration(wav),
                root=os.fspath(src),
            )
        )
    return sorted(utts, key=lambda u: u.id)


# ----------------------------------------------------------------------------- tfds


def _import_tfds():
    try:
        import tensorflow_datasets as tfds  # optional: the tfds extra
    except ImportError as e:
        raise MissingDependencyError(
            f"tensorflow_datasets: not installed ({e}); {TFDS_INSTALL_HINT}"
        ) from None
    return tfds


def _as_str(v) -> str:
    if isinstance(v, np.ndarray):
        v = v.item()
    if isinstance(v, bytes):
        v = v.decode("utf-8")
    return str(v).strip()


def _to_pcm16(speech: np.ndarray) -> np.ndarray:
    x = np.asarray(speech)
    if x.ndim == 2:  # [N, C] -> mono
        x = x.mean(axis=1)
    if np.issubdtype(x.dtype, np.integer):
        return np.clip(x, -32768, 32767).astype(np.int16)
    return np.clip(np.rint(x.astype(np.float64) * 32767), -32768, 32767).astype(np.int16)


def read_tfds(
    name: str,
    data_dir: str | os.PathLike,
    cache_dir: str | os.PathLike,
    split: str | None = None,
    progress: bool = False,
) -> list[Utterance]:
    """Prepared tfds `ljspeech` / `libritts` split -> utterances with wavs in `cache_dir`.

    `split`: a tfds split ('train', 'train_clean100', 'dev_clean', 'train[:100]', ...; default
    'train' / 'train_clean100'). See the module docstring for the cache.
    """
    if name not in _TFDS:
        raise ConfigError(f"tfds name={name!r}: expected one of {sorted(_TFDS)}")
    split = split or _TFDS[name][0]
    cache_dir = Path(cache_dir)
    index = cache_dir / f"index-{_SAFE_ID.sub('_', split)}.jsonl"
    tfds = _import_tfds()
    try:
        source = tfds.data_source(name, split=split, data_dir=os.fspath(data_dir), download=False)
    except Exception as e:  # tfds raises many types for "not prepared"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DataError(
            f"{data_dir}: no prepared tfds dataset {name!r} split {split!r} "
            f"readable by tfds.data_source ({first}); prepare it with "
            f"file_format='array_record'"
        ) from None
    n = len(source)
    if index.is_file():
        cached = read_manifest(index, check_files=True)
        if len(cached) == n:
            return cached
    try:
        rate = int(source.dataset_info.features["speech"].sample_rate)
    except (AttributeError, KeyError, TypeError):
        rate = _TFDS[name][1]
    utts: list[Utterance] = []
    seen: dict[str, int] = {}
    for i in tqdm(range(n), desc=f"tfds {name}", disable=not progress):
        ex = source[i]
        raw_id = _as_str(ex["id"])
        uid = _SAFE_ID.sub("_", raw_id)
        if not uid or uid in seen:
            raise DataError(
                f"tfds {name}[{split}] record {i}: id {raw_id!r} is empty or "
                f"repeats record {seen.get(uid)}"
            )
        seen[uid] = i
        if name == "ljspeech":
            speaker, text, norm = LJSPEECH_SPEAKER, ex["text"], ex["text_normalized"]
        else:
            speaker, text, norm = (
                str(int(ex["speaker_id"])),
                ex["text_original"],
                ex["text_normalized"],
            )
        text, norm = _as_str(text), _as_str(norm)
        if not (text or norm):
            raise DataError(f"tfds {name}[{split}] record {i} ({uid!r}): empty transcript")
        pcm = _to_pcm16(ex["speech"])  # [N]
        if pcm.size == 0:
            raise AudioError(f"tfds {name}[{split}] record {i} ({uid!r}): empty audio")
        rel = f"{speaker}/{uid}.wav"
        wav = cache_dir / rel
        if not wav.is_file():
            wav.parent.mkdir(parents=True, exist_ok=True)
            tmp = wav.with_name(wav.name + ".tmp")
            sf.write(os.fspath(tmp), pcm, rate, subtype="PCM_16", format="WAV")
            os.replace(tmp, wav)
        utts.append(
            Utterance(
                id=uid,
                audio=rel,
                text=text or norm,
                normalized_text=normalize_text(norm or text),
                speaker=speaker,
                duration=round(pcm.size / rate, 4),
                root=os.fspath(cache_dir),
            )
        )
    utts.sort(key=lambda u: u.id)
    write_manifest(index, utts)
    return read_manifest(index, check_files=False)


# ----------------------------------------------------------------------------- prepare


def _hash_key(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "big")


def _count(fraction: float, n: int) -> int:
    return 0 if fraction <= 0 or n == 0 else min(n, max(1, round(fraction * n)))


def split_utterances(
    utts: Sequence[Utterance],
    dev_fraction: float = 0.02,
    test_fraction: float = 0.02,
    heldout_speakers: int = 0,
    seed: int = 0,
) -> dict[str, list[Utterance]]:
    """{'train', 'dev', 'test'} (each sorted by id); see the module docstring.

    A positive fraction gives at least one utterance; train keeps at least one.
    """
    if dev_fraction < 0 or test_fraction < 0 or dev_fraction + test_fraction >= 1:
        raise ConfigError(
            f"dev_fraction={dev_fraction}, test_fraction={test_fraction}: expected "
            f">= 0 with a sum < 1"
        )
    speakers = sorted({u.speaker for u in utts})
    if not 0 <= heldout_speakers < len(speakers):
        raise ConfigError(
            f"heldout_speakers={heldout_speakers}: expected 0 <= n < "
            f"{len(speakers)} (the number of speakers)"
        )
    heldout = set(sorted(speakers, key=lambda s: _hash_key(seed, s))[:heldout_speakers])
    rest = [u for u in utts if u.speaker not in heldout]
    rest.sort(key=lambda u: _hash_key(seed, u.id))
    n_dev = _count(dev_fraction, len(rest))
    n_test = _count(test_fraction, len(rest) - n_dev)
    if n_dev + n_test >= len(rest):
        raise DataError(
            f"{len(rest)} utterances: too few for dev_fraction={dev_fraction}, "
            f"test_fraction={test_fraction} and a non-empty train split"
        )
    out = {
        "train": rest[n_dev + n_test :],
        "dev": rest[:n_dev],
        "test": rest[n_dev : n_dev + n_test] + [u for u in utts if u.speaker in heldout],
    }
    return {k: sorted(v, key=lambda u: u.id) for k, v in out.items()}


def _copy_resampled(utts: list[Utterance], out: Path, progress: bool) -> list[Utterance]:
    """16 kHz mono PCM16 copies in out/wavs/<speaker>/<id>.wav (existing ones are reused)."""
    rate = 16000
    copied = []
    for u in tqdm(utts, desc="resample", disable=not progress):
        rel = f"wavs/{u.speaker}/{u.id}.wav"
        dst = out / rel
        if not dst.is_file():
            wav = np.asarray(load_audio(u.path, rate), dtype=np.float32)  # [N]
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(dst.name + ".tmp")
            sf.write(os.fspath(tmp), wav, rate, subtype="PCM_16", format="WAV")
            os.replace(tmp, dst)
        copied.append(u.replace(audio=rel, root=os.fspath(out), duration=_duration(dst)))
    return copied


def prepare_dataset(
    kind: str,
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    subsets: Sequence[str] | str | None = None,
    split: str | None = None,
    dev_fraction: float = 0.02,
    test_fraction: float = 0.02,
    heldout_speakers: int = 0,
    seed: int = 0,
    phonemize: bool = True,
    copy_audio: bool = False,
    min_duration: float = 0.0,
    max_duration: float | None = None,
    progress: bool = True,
) -> Path:
    """Converts a dataset to the corpus layout in `out_dir`; returns `out_dir`.

    kind: 'ljspeech' | 'libritts' (source = the dataset folder) or 'tfds_ljspeech' |
    'tfds_libritts' (source = the tfds data_dir; `split` = tfds split, wavs cached in
    `out_dir/tfds/<name>`). subsets: LibriTTS subset folders. phonemize: espeak-ng phonemes
    (`jaxtts.data.text.phonemize`); False leaves `phonemes` empty. copy_audio: write 16 kHz
    copies under `out_dir/wavs` instead of pointing at the source files. Utterances outside
    [min_duration, max_duration] seconds are dropped (counted). See the module docstring.
    """
    if kind not in KINDS:
        raise ConfigError(f"kind={kind!r}: expected one of {list(KINDS)}")
    if isinstance(subsets, str):
        subsets = [s for s in subsets.split(",") if s]
    out = Path(out_dir)
    config = {
        "version": PREPARE_VERSION,
        "kind": kind,
        "source": os.path.abspath(source),
        "subsets": list(subsets) if subsets else None,
        "split": split,
        "dev_fraction": dev_fraction,
        "test_fraction": test_fraction,
        "heldout_speakers": heldout_speakers,
        "seed": seed,
        "phonemize": phonemize,
        "copy_audio": copy_audio,
        "min_duration": min_duration,
        "max_duration": max_duration,
    }
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    done = out / "done"
    if done.is_file() and done.read_text().strip() == digest:
        return out
    t0 = time.perf_counter()
    if kind == "ljspeech":
        utts = read_ljspeech(source, progress=progress)
    elif kind == "libritts":
        utts = read_libritts(source, subsets, progress=progress)
    else:
        name = kind.removeprefix("tfds_")
        utts = read_tfds(name, source, out / "tfds" / name, split=split, progress=progress)
    hi = math.inf if max_duration is None else max_duration
    kept = [u for u in utts if min_duration <= u.duration <= hi]
    n_short = len(utts) - len(kept)
    if not kept:
        raise DataError(f"{source}: no utterance within [{min_duration}, {hi}] s (of {len(utts)})")
    if phonemize:
        symbols = phonemize_texts([u.normalized_text for u in kept])
        kept = [u.replace(phonemes=tuple(p)) for u, p in zip(kept, symbols, strict=True)]
    out.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    if copy_audio:
        kept = _copy_resampled(kept, out, progress)
    splits = split_utterances(kept, dev_fraction, test_fraction, heldout_speakers, seed)
    for name, part in splits.items():
        write_manifest(out / f"{name}.jsonl", part)
    tmp = out / "config.json.tmp"
    tmp.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / "config.json")
    done.write_text(digest + "\n")
    if progress:
        hours = sum(u.duration for u in kept) / 3600
        counts = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
        print(
            f"[datasets] {out}: {len(kept)} utterances ({hours:.2f} h; {counts}) from {kind} "
            f"{source} in {time.perf_counter() - t0:.1f} s; dropped {n_short} outside "
            f"[{min_duration:g}, {hi:g}] s",
            file=sys.stderr,
        )
    return out


def main(argv: Sequence[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--src", required=True, help="dataset folder, or the tfds data_dir")
    p.add_argument("--out", required=True, help="output corpus folder")
    p.add_argument("--subsets", default=None, help="LibriTTS subsets, comma-separated")
    p.add_argument("--split", default=None, help="tfds split (e.g. train, train_clean100)")
    p.add_argument("--dev_fraction", type=float, default=0.02)
    p.add_argument("--test_fraction", type=float, default=0.02)
    p.add_argument("--heldout_speakers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no_phonemize", action="store_true")
    p.add_argument("--copy_audio", action="store_true", help="16 kHz copies in <out>/wavs")
    p.add_argument("--min_duration", type=float, default=0.0)
    p.add_argument("--max_duration", type=float, default=None)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    return prepare_dataset(
        a.kind,
        a.src,
        a.out,
        subsets=a.subsets,
        split=a.split,
        dev_fraction=a.dev_fraction,
        test_fraction=a.test_fraction,
        heldout_speakers=a.heldout_speakers,
        seed=a.seed,
        phonemize=not a.no_phonemize,
        copy_audio=a.copy_audio,
        min_duration=a.min_duration,
        max_duration=a.max_duration,
        progress=not a.quiet,
    )


if __name__ == "__main__":
    main()

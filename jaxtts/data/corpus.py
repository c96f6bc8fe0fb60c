"""Built-in multi-speaker corpus synthesised with espeak-ng.

    python -m jaxtts.data.corpus [--out data/builtin --num_utterances 2400 --seed 0]

Layout (see docs/DESIGN.md): `wavs/<speaker>/<id>.wav` (16 kHz mono PCM16), `train.jsonl`,
`dev.jsonl`, `test.jsonl`, `speakers.json`, `config.json` and a `done` marker.

How the build stays exact under interruption:
- Everything is decided from the config up front: the sentences (`generate_sentences`), the
  speaker and split of every slot, and for every (split, speaker) group an ordered list of
  candidate sentences (its quota plus spares). Utterance ids are `<speaker>_<candidate index>`.
- A group keeps the first `quota` candidates, in list order, whose audio lasts 1..10 s; too
  short/long candidates are deleted and the group's next spare is synthesised. espeak-ng is
  deterministic, so the outcome does not depend on the order work finished in.
- Each wav is written to a tmp file and renamed; a rerun reuses every finished wav (reading
  its duration from the header) and removes stray tmp files. Phonemes (one batched espeak-ng
  call) and the manifests are written at the end, then `done` holding the config hash.
- A second build with the same config returns after reading `done` (milliseconds). A
  different config in the same folder raises ConfigError unless `overwrite=True`, which
  deletes the old wavs/manifests (and the derived `tokens/` folder) first.

Speakers: espeak-ng Klatt variants (ASR-friendly) plus one formant voice, with distinct pitch
(-p) and rate (-s). Speaker `spk09` is held out: it only appears in the test split (zero-shot).
Splits: held-out speaker 5 % of the utterances, dev 5 %, seen-speaker test 5 %, train the rest
(each at least one utterance). A corpus LARGER than the default 2400 utterances keeps the
default corpus's dev and test splits exactly (same ids, sentences, speakers and audio: every
number measured on the test split stays comparable whatever corpus a model trained on) and puts
all extra utterances in train, with sentences that never occur in dev or test
(`--num_utterances 20000`: ~16 h of training speech, the `small` LM recipe). Smaller corpora
(tests, `tiny`) scale every split down.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly
from tqdm import tqdm

from jaxtts.data.manifest import Utterance, read_manifest, write_manifest
from jaxtts.data.text import expand_text, normalize_text, phonemize, require_espeak
from jaxtts.data.words import generate_sentences
from jaxtts.errors import AudioError, ConfigError, DataError, MissingDependencyError

__all__ = [
    "CORPUS_VERSION",
    "SAMPLE_RATE",
    "SPEAKERS",
    "SPLITS",
    "Speaker",
    "build_corpus",
    "builtin_corpus_dir",
    "corpus_stats",
    "default_corpus_dir",
    "ensure_corpus",
    "load_corpus",
    "main",
    "resolve_corpus_dir",
    "write_corpus",
]

DEFAULT_UTTERANCES = 2400
CORPUS_VERSION = 1  # bump when the generator, speakers or audio processing change
SAMPLE_RATE = 16000
ESPEAK_RATE = 22050
MIN_DURATION = 1.0  # seconds
MAX_DURATION = 10.0
SPLITS = ("train", "dev", "test")
HELDOUT_FRACTION = 0.05
DEV_FRACTION = 0.05
TEST_SEEN_FRACTION = 0.05
TRAILING_SILENCE = 0.15  # seconds kept after the last sample above -40 dB of the peak
DONE_FILE = "done"
LOCK_FILE = ".build.lock"
CONFIG_FILE = "config.json"


@dataclasses.dataclass(frozen=True)
class Speaker:
    """An espeak-ng voice: `espeak-ng -v voice -p pitch -s rate`. role: 'train' or 'heldout'."""

    name: str
    voice: str
    pitch: int  # 0..99, espeak-ng default 50
    rate: int  # words per minute, espeak-ng default 175
    role: str = "train"


SPEAKERS: tuple[Speaker, ...] = (
    Speaker("spk00", "en-us+klatt", 40, 160),
    Speaker("spk01", "en-us+klatt2", 55, 150),
    Speaker("spk02", "en-us+klatt3", 45, 172),
    Speaker("spk03", "en-us+klatt4", 75, 155),
    Speaker("spk04", "en-us+klatt5", 32, 178),
    Speaker("spk05", "en-us+klatt6", 62, 165),
    Speaker("spk06", "en-us+klatt", 25, 145),
    Speaker("spk07", "en-us+klatt5", 68, 185),
    Speaker("spk08", "en-us+f2", 60, 158),
    Speaker("spk09", "en-us+klatt4", 88, 150, role="heldout"),
)


def default_corpus_dir() -> Path:
    """`data/builtin` under the repo, or `$JAXTTS_DATA_DIR/builtin`."""
    root = os.environ.get("JAXTTS_DATA_DIR")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "data"
    return base / "builtin"


def builtin_corpus_dir(num_utterances: int = DEFAULT_UTTERANCES, seed: int = 0) -> Path:
    """Folder of a built-in corpus: `default_corpus_dir()` for the default size and seed,
    a sibling `builtin-n<N>-s<seed>` otherwise (so tiny test corpora never clash with it)."""
    base = default_corpus_dir()
    if (int(num_utterances), int(seed)) == (DEFAULT_UTTERANCES, 0):
        return base
    return base.with_name(f"{base.name}-n{int(num_utterances)}-s{int(seed)}")


def resolve_corpus_dir(data_cfg) -> Path:
    """`data.corpus_dir` of a config, or the built-in corpus folder of `data.corpus_utterances`
    / `data.corpus_seed` when it is empty."""
    get = data_cfg.get if hasattr(data_cfg, "get") else (lambda k, d=None: d)
    if get("corpus_dir"):
        return Path(get("corpus_dir"))
    return builtin_corpus_dir(get("corpus_utterances", DEFAULT_UTTERANCES), get("corpus_seed", 0))


# ----------------------------------------------------------------------------- planning


@dataclasses.dataclass
class _Group:
    split: str
    speaker: Speaker
    quota: int
    candidates: list[int]  # indices into the sentence list, in preference order


def _config(num_utterances: int, seed: int, speakers: Sequence[Speaker]) -> dict:
    extra = {"eval_splits_of": DEFAULT_UTTERANCES} if num_utterances > DEFAULT_UTTERANCES else {}
    return {
        **extra,
        "version": CORPUS_VERSION,
        "num_utterances": int(num_utterances),
        "seed": int(seed),
        "sample_rate": SAMPLE_RATE,
        "min_duration": MIN_DURATION,
        "max_duration": MAX_DURATION,
        "fractions": {
            "heldout": HELDOUT_FRACTION,
            "dev": DEV_FRACTION,
            "test_seen": TEST_SEEN_FRACTION,
        },
        "speakers": [dataclasses.asdict(s) for s in speakers],
    }


def _config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _plan(
    num_utterances: int, seed: int, speakers: Sequence[Speaker]
) -> tuple[list[_Group], list[str]]:
    """Groups (split, speaker, quota, candidates) and the sentence list, from the config only."""
    if num_utterances > DEFAULT_UTTERANCES:
        return _plan_larger(num_utterances, seed, speakers)
    seen = [s for s in speakers if s.role == "train"]
    heldout = [s for s in speakers if s.role == "heldout"]
    n = num_utterances
    n_held = max(1, round(HELDOUT_FRACTION * n)) if heldout else 0
    n_dev = max(1, round(DEV_FRACTION * n))
    n_test = max(1, round(TEST_SEEN_FRACTION * n))
    n_train = n - n_held - n_dev - n_test
    if n_train < len(seen):
        raise ConfigError(
            f"num_utterances={n}: too few for the splits, expected >= {n - n_train + len(seen)}"
        )
    quotas: dict[tuple[str, str], int] = {}
    speaker_by_name = {s.name: s for s in speakers}
    i = 0  # seen speakers take turns across dev, test and train
    for split, count in (("dev", n_dev), ("test", n_test), ("train", n_train)):
        for _ in range(count):
            key = (split, seen[i % len(seen)].name)
            quotas[key] = quotas.get(key, 0) + 1
            i += 1
    for j in range(n_held):
        key = ("test", heldout[j % len(heldout)].name)
        quotas[key] = quotas.get(key, 0) + 1
    order = sorted(quotas, key=lambda k: (SPLITS.index(k[0]), k[1]))
    spares = {k: quotas[k] // 5 + 3 for k in order}
    sentences = generate_sentences(n + sum(spares.values()), seed)
    groups, next_idx = [], 0
    for k in order:  # primary candidates first (ids 0..n-1), then the spares
        groups.append(
            _Group(
                k[0], speaker_by_name[k[1]], quotas[k], list(range(next_idx, next_idx + quotas[k]))
            )
        )
        next_idx += quotas[k]
    for g, k in zip(groups, order, strict=True):
        g.candidates += list(range(next_idx, next_idx + spares[k]))
        next_idx += spares[k]
    return groups, sentences


def _plan_larger(
    num_utterances: int, seed: int, speakers: Sequence[Speaker]
) -> tuple[list[_Group], list[str]]:
    """The default-size plan with more train utterances: its dev/test groups unchanged, each
    train group's quota raised (seen speakers take turns) with new sentences appended after the
    default plan's (`generate_sentences` is prefix-stable and never repeats a sentence)."""
    groups, base = _plan(DEFAULT_UTTERANCES, seed, speakers)
    train = [g for g in groups if g.split == "train"]
    extra = num_utterances - DEFAULT_UTTERANCES
    add = [extra // len(train) + (i < extra % len(train)) for i in range(len(train))]
    spares = [a // 5 + 3 for a in add]
    sentences = generate_sentences(len(base) + sum(add) + sum(spares), seed)
    if sentences[: len(base)] != base:  # the guarantee this plan rests on
        raise DataError("generate_sentences is not prefix-stable; the test split would change")
    nxt = len(base)
    for g, a in zip(train, add, strict=True):  # new primaries, then new spares, per group
        g.quota += a
        g.candidates += list(range(nxt, nxt + a))
        nxt += a
    for g, sp in zip(train, spares, strict=True):
        g.candidates += list(range(nxt, nxt + sp))
        nxt += sp
    return groups, sentences


def _utt_id(speaker: Speaker, index: int) -> str:
    return f"{speaker.name}_{index:05d}"


# ----------------------------------------------------------------------------- synthesis


def _parse_wav(data: bytes, what: str) -> tuple[np.ndarray, int]:
    """PCM16 mono WAV bytes from `espeak-ng --stdout` (sizes in its header are bogus)."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioError(f"{what}: espeak-ng output is not a WAV stream ({len(data)} bytes)")
    pos, rate, bits, channels = 12, None, None, None
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        if chunk == b"fmt ":
            _, channels, rate = struct.unpack("<HHI", data[pos + 8 : pos + 16])
            bits = struct.unpack("<H", data[pos + 22 : pos + 24])[0]
            pos += 8 + size
        elif chunk == b"data":
            if rate is None or bits != 16 or channels != 1:
                raise AudioError(
                    f"{what}: espeak-ng WAV is {bits} bit/{channels} ch, expected 16 bit/1 ch"
                )
            pcm = data[pos + 8 :]
            pcm = pcm[: len(pcm) // 2 * 2]
            return np.frombuffer(pcm, dtype="<i2"), rate  # [N]
        else:
            pos += 8 + size
    raise AudioError(f"{what}: espeak-ng WAV has no data chunk")


def _trim(x: np.ndarray, rate: int) -> np.ndarray:
    """Cut trailing silence to TRAILING_SILENCE seconds after the last sample > -40 dB."""
    if x.size == 0:
        return x
    loud = np.nonzero(np.abs(x) > 0.01 * np.abs(x).max())[0]
    if loud.size == 0:
        return x[:0]
    end = min(x.size, loud[-1] + 1 + int(TRAILING_SILENCE * rate))
    return x[:end]


def _synthesize(espeak: str, speaker: Speaker, text: str, path: Path) -> float:
    """Speak `expand_text(text)` into a 16 kHz PCM16 wav at `path` (atomic); returns seconds."""
    cmd = [
        espeak,
        "-v",
        speaker.voice,
        "-p",
        str(speaker.pitch),
        "-s",
        str(speaker.rate),
        "--stdout",
        "--stdin",
    ]
    proc = subprocess.run(cmd, input=expand_text(text).encode("utf-8"), capture_output=True)
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        raise MissingDependencyError(
            f"espeak-ng -v {speaker.voice}: exited with {proc.returncode}"
            f" ({msg[0] if msg else 'no message'})"
        )
    pcm, rate = _parse_wav(proc.stdout, f"{path.name}")
    x = pcm.astype(np.float32) / 32768.0  # [N22]
    if rate != SAMPLE_RATE:
        g = np.gcd(rate, SAMPLE_RATE)
        x = resample_poly(x, SAMPLE_RATE // g, rate // g).astype(np.float32)  # [N16]
    x = _trim(x, SAMPLE_RATE)
    y = np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)  # [N16]
    tmp = path.with_name(path.name + ".tmp")
    sf.write(tmp, y, SAMPLE_RATE, subtype="PCM_16", format="WAV")
    os.replace(tmp, path)
    return y.size / SAMPLE_RATE


def _existing_duration(path: Path) -> float | None:
    """Duration of a finished wav from its header, or None if absent/unreadable/wrong format."""
    try:
        info = sf.info(path)
    except (sf.LibsndfileError, RuntimeError, OSError):
        return None
    if info.samplerate != SAMPLE_RATE or info.channels != 1 or info.frames <= 0:
        return None
    return info.frames / SAMPLE_RATE


def _check_voices(espeak: str, speakers: Sequence[Speaker]) -> None:
    for voice in sorted({s.voice for s in speakers}):
        proc = subprocess.run([espeak, "-q", "-v", voice, "test"], capture_output=True)
        if proc.returncode != 0:
            raise MissingDependencyError(
                f"espeak-ng voice {voice!r}: not available (espeak-ng "
                "1.51 with its standard voice variants expected)"
            )


# ----------------------------------------------------------------------------- build


@contextlib.contextmanager
def _exclusive_lock(path: Path):
    """POSIX advisory lock held for the duration of a build (released even on kill -9)."""
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _clear(out: Path) -> None:
    """Remove what a build writes (and the derived tokens/), nothing else."""
    for name in ("wavs", "tokens"):
        shutil.rmtree(out / name, ignore_errors=True)
    for name in (DONE_FILE, CONFIG_FILE, "speakers.json", *(f"{s}.jsonl" for s in SPLITS)):
        (out / name).unlink(missing_ok=True)


def _describe(config: dict) -> str:
    keys = ("num_utterances", "seed", "version", "eval_splits_of")
    return ", ".join(f"{k}={config.get(k)}" for k in keys)


def _prepare_folder(out: Path, config: dict, digest: str, overwrite: bool) -> None:
    """Checks the folder's config (ConfigError on mismatch unless overwrite), writes ours."""
    cfg_path = out / CONFIG_FILE
    if cfg_path.is_file():
        try:
            old = json.loads(cfg_path.read_text())
        except json.JSONDecodeError:
            old = {}
        if _config_hash(old) != digest:
            if not overwrite:
                raise ConfigError(
                    f"{cfg_path}: folder holds a corpus with {_describe(old)}, requested "
                    f"{_describe(config)}; pass overwrite=True (--overwrite) or another out_dir"
                )
            _clear(out)
    elif overwrite or (out / "wavs").exists():
        _clear(out)  # wavs without a config.json cannot be trusted
    (out / DONE_FILE).unlink(missing_ok=True)
    tmp = cfg_path.with_name(CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(config, indent=1) + "\n")
    os.replace(tmp, cfg_path)


def _wav_path(out: Path, g: _Group, idx: int) -> Path:
    return out / "wavs" / g.speaker.name / f"{_utt_id(g.speaker, idx)}.wav"


def _synthesize_groups(
    out: Path,
    groups: list[_Group],
    sentences: list[str],
    espeak: str,
    workers: int,
    progress: bool,
) -> tuple[dict[int, list], int, int]:
    """Fills every group with the first `quota` candidates lasting 1..10 s.

    Returns ({id(group): [(sentence index, duration)]}, wavs reused, candidates rejected).
    """
    for speaker in {g.speaker.name for g in groups}:
        folder = out / "wavs" / speaker
        folder.mkdir(parents=True, exist_ok=True)
        for stray in folder.glob("*.tmp"):  # left by an interrupted build
            stray.unlink()

    def job(item: tuple[_Group, int]) -> tuple[float, bool]:
        g, idx = item
        path = _wav_path(out, g, idx)
        dur = _existing_duration(path)
        if dur is not None:
            return dur, True
        return _synthesize(espeak, g.speaker, sentences[idx], path), False

    accepted: dict[int, list[tuple[int, float]]] = {id(g): [] for g in groups}
    cursor = {id(g): 0 for g in groups}
    n_reused = n_rejected = 0
    ok = lambda dur: MIN_DURATION <= dur <= MAX_DURATION
    total = sum(g.quota for g in groups)
    with (
        tqdm(total=total, desc="corpus", unit="utt", disable=not progress) as bar,
        ThreadPoolExecutor(workers) as pool,
    ):
        while True:  # round 1: every group's quota; later rounds: spares for rejected ones
            batch = []
            for g in groups:
                need = g.quota - len(accepted[id(g)])
                take = g.candidates[cursor[id(g)] : cursor[id(g)] + need]
                cursor[id(g)] += len(take)
                batch += [(g, idx) for idx in take]
            if not batch:
                break
            results = []
            for item, (dur, reused) in zip(batch, pool.map(job, batch), strict=True):
                results.append((*item, dur))
                n_reused += reused
                bar.update(ok(dur))
            for g, idx, dur in results:  # in plan order: deterministic
                if ok(dur):
                    accepted[id(g)].append((idx, dur))
                else:
                    _wav_path(out, g, idx).unlink(missing_ok=True)
                    n_rejected += 1
    short = [(g.split, g.speaker.name) for g in groups if len(accepted[id(g)]) < g.quota]
    if short:
        raise DataError(
            f"{out}: ran out of spare sentences for groups {short} (durations "
            f"outside [{MIN_DURATION}, {MAX_DURATION}] s)"
        )
    return accepted, n_reused, n_rejected


def write_corpus(
    out: Path,
    rows: Sequence[tuple[str, str, str, str, float]],
    speakers: dict[str, dict],
    workers: int,
) -> dict[str, list[Utterance]]:
    """The files of a built corpus from its accepted utterances `rows` = (split, speaker, id,
    text, seconds), wavs at `wavs/<speaker>/<id>.wav`: phonemes (one batched espeak-ng pass),
    manifests sorted by id, and `speakers.json` = each speaker's `speakers[name]` fields plus
    its splits and utterance counts. Shared by the built-in and the natural-voice corpus."""
    phones = phonemize([text for _, _, _, text, _ in rows], workers=workers, strict=True)
    by_split: dict[str, list[Utterance]] = {s: [] for s in SPLITS}
    for (split, speaker, uid, text, dur), ph in zip(rows, phones, strict=True):
        by_split[split].append(
            Utterance(
                id=uid,
                audio=f"wavs/{speaker}/{uid}.wav",
                text=text,
                normalized_text=normalize_text(text),
                phonemes=tuple(ph),
                speaker=speaker,
                duration=round(dur, 4),
            )
        )
    for split, utts in by_split.items():
        write_manifest(out / f"{split}.jsonl", sorted(utts, key=lambda u: u.id))
    spk = {}
    for name, fields in speakers.items():
        counts = {split: sum(u.speaker == name for u in by_split[split]) for split in SPLITS}
        spk[name] = {
            **fields,
            "splits": [k for k, v in counts.items() if v],
            "utterances": counts,
        }
    tmp = out / "speakers.json.tmp"
    tmp.write_text(json.dumps(spk, indent=1) + "\n")
    os.replace(tmp, out / "speakers.json")
    return by_split


def _write_outputs(
    out: Path,
    groups: list[_Group],
    accepted: dict[int, list],
    sentences: list[str],
    speakers: Sequence[Speaker],
    workers: int,
) -> dict[str, list[Utterance]]:
    rows = [
        (g.split, g.speaker.name, _utt_id(g.speaker, idx), sentences[idx], dur)
        for g in groups
        for idx, dur in sorted(accepted[id(g)])
    ]
    info = {
        s.name: {"voice": s.voice, "pitch": s.pitch, "rate": s.rate, "role": s.role}
        for s in speakers
    }
    return write_corpus(out, rows, info, workers)


def build_corpus(
    out_dir: str | os.PathLike | None = None,
    num_utterances: int = DEFAULT_UTTERANCES,
    seed: int = 0,
    workers: int | None = None,
    progress: bool = True,
    overwrite: bool = False,
    speakers: Sequence[Speaker] = SPEAKERS,
) -> Path:
    """Builds (or finds cached, or resumes) the built-in corpus in `out_dir`; returns its path.

    workers: parallel espeak-ng processes (default: CPU count). See the module docstring for
    caching, resuming and the ConfigError raised when `out_dir` holds a different corpus.
    """
    out = Path(out_dir) if out_dir is not None else builtin_corpus_dir(num_utterances, seed)
    if num_utterances < 1:
        raise ConfigError(f"num_utterances={num_utterances}: expected a positive integer")
    if not any(s.role == "train" for s in speakers):
        raise ConfigError("speakers: expected at least one speaker with role 'train'")
    config = _config(num_utterances, seed, speakers)
    digest = _config_hash(config)
    done = out / DONE_FILE
    if done.is_file() and done.read_text().strip() == digest:
        return out  # cache hit
    out.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(out / LOCK_FILE):  # a concurrent builder waits, then hits the cache
        if done.is_file() and done.read_text().strip() == digest:
            return out
        espeak = require_espeak()
        _prepare_folder(out, config, digest, overwrite)
        _check_voices(espeak, speakers)
        t0 = time.perf_counter()
        workers = max(1, workers or os.cpu_count() or 1)
        groups, sentences = _plan(num_utterances, seed, speakers)
        accepted, n_reused, n_rejected = _synthesize_groups(
            out, groups, sentences, espeak, workers, progress
        )
        by_split = _write_outputs(out, groups, accepted, sentences, speakers, workers)
        done.write_text(digest + "\n")
    if progress:
        n = sum(len(v) for v in by_split.values())
        hours = sum(u.duration for v in by_split.values() for u in v) / 3600
        print(
            f"[corpus] {out}: {n} utterances ({hours:.2f} h) in "
            f"{time.perf_counter() - t0:.1f} s; reused {n_reused} wavs, "
            f"dropped {n_rejected} outside [{MIN_DURATION:g}, {MAX_DURATION:g}] s",
            file=sys.stderr,
        )
    return out


def ensure_corpus(out_dir: str | os.PathLike | None = None, **kw) -> Path:
    """The corpus folder, built first if needed (`build_corpus` arguments in `kw`)."""
    return build_corpus(out_dir, **kw)


def load_corpus(
    out_dir: str | os.PathLike | None = None, check_files: bool = False
) -> dict[str, list[Utterance]]:
    """{'train': [...], 'dev': [...], 'test': [...]} of a built corpus."""
    out = Path(out_dir) if out_dir is not None else default_corpus_dir()
    if not (out / DONE_FILE).is_file():
        raise DataError(
            f"{out}: no finished corpus here (missing {DONE_FILE}); run "
            f"`python -m jaxtts.data.corpus --out {out}`"
        )
    return {s: read_manifest(out / f"{s}.jsonl", check_files=check_files) for s in SPLITS}


def corpus_stats(out_dir: str | os.PathLike | None = None) -> dict:
    """Counts and hours per split and speaker of a built corpus."""
    splits = load_corpus(out_dir)
    stats: dict = {"splits": {}, "speakers": {}}
    for split, utts in splits.items():
        durs = np.array([u.duration for u in utts], dtype=np.float64)
        stats["splits"][split] = {
            "utterances": len(utts),
            "hours": float(durs.sum() / 3600),
            "min_s": float(durs.min()) if len(durs) else 0.0,
            "max_s": float(durs.max()) if len(durs) else 0.0,
            "speakers": sorted({u.speaker for u in utts}),
        }
        for u in utts:
            stats["speakers"][u.speaker] = stats["speakers"].get(u.speaker, 0) + 1
    stats["utterances"] = sum(v["utterances"] for v in stats["splits"].values())
    stats["hours"] = sum(v["hours"] for v in stats["splits"].values())
    return stats


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.data.corpus", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", default=None, help="corpus folder (default data/builtin)")
    ap.add_argument("--num_utterances", type=int, default=DEFAULT_UTTERANCES)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None, help="default: CPU count")
    ap.add_argument("--overwrite", action="store_true", help="rebuild a different config")
    ap.add_argument("--no_progress", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = build_corpus(
        args.out,
        num_utterances=args.num_utterances,
        seed=args.seed,
        workers=args.workers,
        progress=not args.no_progress,
        overwrite=args.overwrite,
    )
    stats = corpus_stats(out)
    parts = ", ".join(
        f"{k} {v['utterances']} ({v['hours']:.2f} h)" for k, v in stats["splits"].items()
    )
    print(
        f"{out}: {stats['utterances']} utterances, {stats['hours']:.2f} h [{parts}] "
        f"in {time.perf_counter() - t0:.2f} s"
    )


if __name__ == "__main__":
    main()

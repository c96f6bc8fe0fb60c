"""Streaming synthesis: audio chunk by chunk while the LM decodes (the step-wise families: far,
car, vadusa, dcar, ssd, tldr).

    synth = Synthesizer.from_workdir("pretrained/car_small")
    for chunk in synth.stream("Where did you put the keys?", prompt, strategy="car:3"):
        play(chunk.audio)  # float32 [n] at synth.sample_rate

Three incremental stages:
1. **Decode** (`jaxtts.decode.driver.start` / `advance`): `segment_steps` loop steps at a
   time, the KV cache donated between segments. A segment boundary does not change the tokens
   (tests/test_lm.py: segments == one call), so the streamed tokens are the offline ones.
2. **Tokens -> log-mel** (`MelStream`). The token decoder is non-causal: the context decoder
   reads W tokens on each side and the conv decoder L * (k // 2) more, so the frames of token
   t are final once token t + R exists, R = `tokenizer.lookahead_tokens` (5 tokens = 200 ms
   for the shipped 25 Hz tokenizer). A smaller `lookahead` emits earlier from a context cut
   at the last decoded token. The global-variance postfilter's mean is the mean of the frames
   decoded so far (offline: the whole utterance's). `push_mels` decodes the windows of
   several streams (a server's rows) as one batch.
3. **Log-mel -> audio** (`VocoderStream`): Griffin-Lim on a window made of the new frames and
   `context` frames before them. The window's known frames start from the phases the
   previous window found (continuing the phase, as RTISI does) instead of random ones. The
   samples of the last `hold` frames wait for the next window (their STFT frames are not
   complete yet), and the first `crossfade` samples of each window are blended with the
   previous window's held-back samples. Offline synthesis scales a clipping utterance to a
   0.9 peak; a stream cannot know its peak in advance and clips at +-1 instead.

What streaming costs in quality (MCD and WER of the streamed against the whole-utterance audio,
per lookahead) and its first-chunk latency: benchmarks/stream_quality.py, benchmarks/RESULTS.md
§streaming.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import jax
import numpy as np

from jaxtts.data.prompt import Prompt
from jaxtts.decode import driver
from jaxtts.errors import ConfigError

if TYPE_CHECKING:
    from jaxtts.engine import Plan

__all__ = [
    "MelStream",
    "NeuralVocoderStream",
    "StreamChunk",
    "VocoderStream",
    "make_vocoder_stream",
    "push_many",
    "push_mels",
    "stream",
]


def make_vocoder_stream(vocoder, min_frames: int = 1, n_iter: int | None = None, **kw):
    """The streaming wrapper of a vocoder: `NeuralVocoderStream` for the neural one,
    `VocoderStream` (windowed Griffin-Lim, `n_iter` iterations) otherwise."""
    if hasattr(vocoder, "batch_mel_to_audio") and hasattr(vocoder, "hop"):
        return NeuralVocoderStream(vocoder, min_frames=min_frames, **kw)
    return VocoderStream(vocoder, min_frames=min_frames, n_iter=n_iter, **kw)


@dataclasses.dataclass
class StreamChunk:
    audio: np.ndarray  # float32 [n] new samples (may be empty)
    tokens: int  # tokens decoded so far in this piece
    done: bool  # the last chunk of the text
    elapsed_s: float  # since the call started (the first chunk's: time to first audio)
    token_ids: np.ndarray | None = None  # the last chunk: the text's tokens (pieces joined)


class MelStream:
    """Tokens so far -> the log-mel frames that became final (see the module docstring)."""

    def __init__(self, engine, lookahead: int | None = None, ref: np.ndarray | None = None):
        tok = engine.tokenizer
        # `ref`: the prompt's log-mel, the voice a conditioned codec decodes in
        self.decode = functools.partial(engine.units_to_mel, ref=ref)
        self.frames_per_token = int(round(engine.mel_cfg.frame_rate / engine.frame_rate))
        self.lookahead = int(tok.lookahead_tokens if lookahead is None else lookahead)
        if self.lookahead < 0:
            raise ConfigError(f"lookahead={self.lookahead}: expected >= 0 tokens")
        self.n_mels = engine.mel_cfg.n_mels
        self.emitted = 0  # frames
        # a token's vector depends on the R tokens on each side (R = the tokenizer's lookahead):
        # a tokenizer that exposes its standardised vectors is decoded over a window of the
        # prefix; any other decodes the whole prefix each call
        self.tok = tok if hasattr(tok, "decode_standardised") and ref is None else None
        self.reach = int(tok.lookahead_tokens)
        # the postfilter's prefix mean: the sum of the final tokens' frames, and their count
        self.final_sum = np.zeros((self.n_mels,), np.float64)
        self.n_final = 0  # tokens

    def push(self, tokens: np.ndarray, final: bool) -> np.ndarray:
        """All tokens decoded so far int [n] -> new final frames float32 [m, n_mels]."""
        return push_mels([self], [tokens], [final])[0]

    def _plan(self, tokens: np.ndarray, final: bool):
        """-> None (no new frame yet), or the window to decode: (start, n, ready)."""
        n = int(tokens.size)
        f = self.frames_per_token
        ready = (n if final else max(0, n - self.lookahead)) * f
        if ready <= self.emitted:
            return None
        if self.tok is None:
            return 0, n, ready
        # the window: every token from which a frame is emitted or becomes final, plus R
        # tokens of left context; its rows from `start + R` on equal the whole prefix's
        first = self.emitted // f  # the first token to emit
        return max(0, min(first, self.n_final) - self.reach), n, ready

    def _take(self, plan, z: np.ndarray, final: bool) -> np.ndarray:
        """The decoded window (standardised vectors [n - start, f M], or the whole prefix's
        log-mel without a windowing tokenizer) -> the new final frames."""
        start, n, ready = plan
        if self.tok is None:
            out = z[self.emitted : ready]
            self.emitted = ready
            return out
        f = self.frames_per_token
        first = self.emitted // f
        done = n if final else max(self.n_final, n - self.reach)  # tokens final after this call
        if done > self.n_final:
            newly = z[self.n_final - start : done - start].reshape(-1, self.n_mels)
            self.final_sum += newly.sum(0, dtype=np.float64)
            self.n_final = done
        # the postfilter's mean: all frames decoded so far (the final ones and this call's tail)
        tail = z[done - start :].reshape(-1, self.n_mels)
        mean = (self.final_sum + tail.sum(0, dtype=np.float64)) / max(1, n * f)
        out = self.tok.from_standardised(
            z[first - start : ready // f - start], mean.astype(np.float32)
        )
        self.emitted = ready
        return np.asarray(out, np.float32)


def push_mels(streams, tokens, finals) -> list[np.ndarray]:
    """`[s.push(t, f) for s, t, f in zip(streams, tokens, finals)]` with the windows of the
    streams that share a tokenizer decoded as one batch (`decode_standardised_many`: a row's
    vectors are the ones it gets alone; a server's rows advance together)."""
    out = [np.zeros((0, s.n_mels), np.float32) for s in streams]
    groups: dict[int, list] = {}
    for i, (s, t, fin) in enumerate(zip(streams, tokens, finals, strict=True)):
        plan = s._plan(t, fin)
        if plan is None:
            continue
        if s.tok is None:  # the whole prefix through the engine's decoder
            out[i] = s._take(plan, np.asarray(s.decode(t), np.float32), fin)
        else:
            groups.setdefault(id(s.tok), []).append((i, plan))
    for items in groups.values():
        tok = streams[items[0][0]].tok
        windows = [np.asarray(tokens[i][start:n]) for i, (start, n, _) in items]
        for (i, plan), z in zip(items, tok.decode_standardised_many(windows), strict=True):
            out[i] = streams[i]._take(plan, z, finals[i])
    return out


class VocoderStream:
    """Log-mel frames -> audio samples, window by window (see the module docstring).

    `min_frames`: once the first audio is out, frames wait until at least that many new ones
    can be vocoded (or the utterance ends): fewer, longer windows, so less of the host's
    Griffin-Lim goes to the `context` frames every window recomputes (a server under load).
    `push_many` runs the windows of several streams as one batch."""

    def __init__(
        self,
        vocoder,
        context: int = 16,
        hold: int = 2,
        crossfade: int = 2,
        min_frames: int = 1,
        n_iter: int | None = None,
    ):
        if not hasattr(vocoder, "phase_retrieval"):
            raise ConfigError(
                f"streaming needs the Griffin-Lim vocoder, got {type(vocoder).__name__}"
            )
        if context < hold + 2 or hold < 1 or crossfade < 0 or crossfade > hold:
            raise ConfigError(
                f"VocoderStream: context={context}, hold={hold}, crossfade={crossfade}: "
                "expected context >= hold + 2, hold >= 1, 0 <= crossfade <= hold frames"
            )
        if min_frames < 1:
            raise ConfigError(f"VocoderStream: min_frames={min_frames}, expected >= 1")
        self.voc = vocoder
        self.hop = vocoder.mel_cfg.hop_length
        self.context, self.hold, self.crossfade = context, hold, crossfade
        self.min_frames = int(min_frames)
        self.n_iter = vocoder.n_iter if n_iter is None else int(n_iter)  # Griffin-Lim's
        if self.n_iter < 1:
            raise ConfigError(f"VocoderStream: n_iter={n_iter}, expected >= 1")
        self.mel = np.zeros((0, vocoder.mel_cfg.n_mels), np.float32)
        self.phases = np.zeros((0, vocoder.mel_cfg.n_fft // 2 + 1), np.complex64)
        self.emitted = 0  # samples
        self.tail = np.zeros((0,), np.float32)  # the last window's samples past `emitted`

    def push(self, mel: np.ndarray, final: bool) -> np.ndarray:
        """New frames float [m, n_mels] -> new samples float32 [k]."""
        return push_many([self], [mel], [final])[0]

    def _window(self, mel: np.ndarray, final: bool):
        """Take new frames; -> the window to vocode (first frame, magnitude [T, F], known
        phases [T0, F], end sample) or None (nothing to emit yet)."""
        self.mel = np.concatenate([self.mel, np.asarray(mel, np.float32)])
        t = self.mel.shape[0]
        end = (t - 1 if final else t - 1 - self.hold) * self.hop
        if t < 2 or end <= self.emitted:
            return None
        if not final and self.emitted and end - self.emitted < self.min_frames * self.hop:
            return None  # not enough new frames yet (the first audio never waits)
        s0 = max(0, self.emitted // self.hop - self.context)  # the window's first frame
        mag = self.voc.linear_magnitude(self.mel[s0:]) ** self.voc.power  # [t - s0, F]
        return s0, mag, self.phases[s0:], end  # phases the previous window found

    def _take(self, s0: int, end: int, wav: np.ndarray, ang: np.ndarray) -> np.ndarray:
        """The window's audio [(T - 1) hop] and phases [T, F] -> the new samples."""
        self.phases = np.concatenate([self.phases[:s0], ang])
        a, b = self.emitted - s0 * self.hop, end - s0 * self.hop  # in window samples
        out = wav[a:b].copy()
        x = min(self.crossfade * self.hop, self.tail.size, out.size)
        if x:
            ramp = np.linspace(0.0, 1.0, x, dtype=np.float32)
            out[:x] = self.tail[:x] * (1 - ramp) + out[:x] * ramp
        self.tail = wav[b:].astype(np.float32)
        self.emitted = end
        return np.clip(out, -1.0, 1.0).astype(np.float32)


class NeuralVocoderStream:
    """Log-mel frames -> audio through the neural vocoder (`jaxtts.vocoders.NeuralVocoder`),
    window by window: each window holds `context` frames before the new ones, and the samples of
    the last `lookahead` frames wait for the next window. The generator sees +-27 frames (its
    convolutions) and the inverse STFT +-2 more, so with `context` and `lookahead` >= 30 the
    joined stream equals the whole-utterance output to float rounding (tested); a smaller
    `lookahead` emits earlier and differs near each window's end (benchmarks/RESULTS.md
    §vocoder). `push_many` vocodes the windows of several streams in one batched call."""

    RECEPTIVE = 30  # frames each side that change a sample

    def __init__(self, vocoder, context: int = 30, lookahead: int = 30, min_frames: int = 1):
        if not hasattr(vocoder, "batch_mel_to_audio") or not hasattr(vocoder, "hop"):
            raise ConfigError(
                f"NeuralVocoderStream: {type(vocoder).__name__} is not a neural vocoder"
            )
        if context < 0 or lookahead < 0 or min_frames < 1:
            raise ConfigError(
                f"NeuralVocoderStream: context={context}, lookahead={lookahead}, "
                f"min_frames={min_frames}: expected >= 0, >= 0, >= 1"
            )
        self.voc, self.hop = vocoder, vocoder.hop
        self.context, self.lookahead, self.min_frames = int(context), int(lookahead), min_frames
        self.mel = np.zeros((0, vocoder.mel_cfg.n_mels), np.float32)
        self.emitted = 0  # samples

    def push(self, mel: np.ndarray, final: bool) -> np.ndarray:
        """New frames float [m, n_mels] -> new samples float32 [k]."""
        return push_many([self], [mel], [final])[0]

    def _window(self, mel: np.ndarray, final: bool):
        self.mel = np.concatenate([self.mel, np.asarray(mel, np.float32)])
        t = self.mel.shape[0]
        end = (t - 1 if final else t - 1 - self.lookahead) * self.hop
        if t < 2 or end <= self.emitted:
            return None
        if not final and self.emitted and end - self.emitted < self.min_frames * self.hop:
            return None
        s0 = max(0, self.emitted // self.hop - self.context)
        return s0, self.mel[s0:], end

    def _take(self, s0: int, end: int, wav: np.ndarray) -> np.ndarray:
        a, b = self.emitted - s0 * self.hop, end - s0 * self.hop
        self.emitted = end
        return np.clip(wav[a:b], -1.0, 1.0).astype(np.float32)


def push_many(streams, mels, finals) -> list[np.ndarray]:
    """`[s.push(m, f) for s, m, f in zip(streams, mels, finals)]` with the windows of equal
    shape (same frames, same known phases) phase-retrieved as one batch: the same samples,
    fewer numpy calls (a server's rows advance together, so their windows mostly match).
    Neural streams' windows, whatever their lengths, go through their vocoder in one call."""
    out = [np.zeros((0,), np.float32) for _ in streams]
    is_neural = [isinstance(s, NeuralVocoderStream) for s in streams]
    if any(is_neural):
        neural: dict[int, list] = {}
        for i, (s, m, f) in enumerate(zip(streams, mels, finals, strict=True)):
            w = s._window(m, f) if is_neural[i] else None
            if w is not None:
                neural.setdefault(id(s.voc), []).append((i, w))
        for items in neural.values():
            wavs = streams[items[0][0]].voc.batch_mel_to_audio([w[1] for _, w in items])
            for (i, (s0, _, end)), wav in zip(items, wavs, strict=True):
                out[i] = streams[i]._take(s0, end, wav)
        keep = [i for i, n in enumerate(is_neural) if not n]
        if keep:
            rest = push_many(
                [streams[i] for i in keep], [mels[i] for i in keep], [finals[i] for i in keep]
            )
            for i, o in zip(keep, rest, strict=True):
                out[i] = o
        return out
    groups: dict[tuple, list] = {}
    for i, (s, m, f) in enumerate(zip(streams, mels, finals, strict=True)):
        w = s._window(m, f)
        if w is not None:
            s0, mag, known, end = w
            groups.setdefault((id(s.voc), s.n_iter, mag.shape, known.shape), []).append((i, w))
    for items in groups.values():
        voc, n_iter = streams[items[0][0]].voc, streams[items[0][0]].n_iter
        mags = np.stack([w[1] for _, w in items])  # [R, T, F]
        known = np.stack([w[2] for _, w in items])  # [R, T0, F]
        seeds = [voc.seed + w[0] for _, w in items]
        wavs, angs = voc.phase_retrieval(mags, known, seed=seeds, n_iter=n_iter)
        for (i, (s0, _, _, end)), wav, ang in zip(items, wavs, angs, strict=True):
            out[i] = streams[i]._take(s0, end, wav, ang)
    return out


def stream(
    synth,
    text: str,
    prompt: Prompt | None = None,
    strategy: str | None = None,
    seed: int = 0,
    segment_steps: int = 8,
    lookahead: int | None = None,
    min_frames: int = 1,
    n_iter: int | None = None,
    line: int = 0,
    plan: Plan | None = None,
    **overrides,
) -> Iterator[StreamChunk]:
    """Synthesize one text as a stream of `StreamChunk`s (`Synthesizer.stream`), decoded as
    `plan` says (or `synth.plan(strategy, **overrides)`). The tokens are those the offline
    `synth.synthesize(texts, prompts, seed=seed)` gives the text at index `line` (a row's
    sampling key is (seed, line, piece)); the audio differs from the offline audio by the
    windowed vocoder (and `lookahead` < R). `min_frames`, `n_iter`: see `VocoderStream`."""
    t0 = time.perf_counter()
    engine = synth.engine
    if not hasattr(engine, "decode_models_for"):
        raise ConfigError(
            f"--stream: a {engine.family} run decodes whole sequences at once; streaming needs "
            "a step-wise strategy (far, car, vadusa, dcar, ssd, tldr)"
        )
    if segment_steps < 1:
        raise ConfigError(f"segment_steps={segment_steps}: expected >= 1")
    plan = synth.plan(strategy, plan=plan, **overrides)
    options = plan.options
    rows = synth.text_rows(line, text, *engine.encode_prompt(prompt))
    ref = engine.prompt_mel(prompt) if engine.uses_voice_ref else None
    if not rows:
        raise ConfigError("stream: empty text")
    gap = np.zeros(int(synth.join_silence_s * synth.sample_rate), np.float32)
    pieces = []
    for j, row in enumerate(rows):
        if j:
            yield StreamChunk(gap, 0, False, time.perf_counter() - t0)
        batch, keys = synth.prompt_batch([row], 1, seed)
        models, params = engine.decode_models_for(batch, plan)
        run = driver.start(
            plan.strategy, models, params, batch, max_new_tokens=engine.max_new_units(options)
        )
        mels = MelStream(engine, lookahead, ref)
        voc = make_vocoder_stream(synth.vocoder, min_frames=min_frames, n_iter=n_iter)
        done = False
        while not done:
            run = driver.advance(
                run, params, keys, num_steps=segment_steps, sampling=options.sampling
            )
            n, tokens = jax.device_get((run.state.length[0], run.state.tokens[0]))
            done = run.all_done()
            audio = voc.push(mels.push(np.asarray(tokens[:n]), done), done)
            last = done and j == len(rows) - 1
            if done:
                pieces.append(np.asarray(tokens[:n], np.int32))
            if audio.size or last:
                ids = np.concatenate(pieces) if last else None
                yield StreamChunk(audio, int(n), last, time.perf_counter() - t0, ids)

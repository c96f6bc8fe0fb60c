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
   decoded so far (offline: the whole utterance's).
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
import time
from collections.abc import Iterator

import jax
import numpy as np

from jaxtts.data.prompt import Prompt
from jaxtts.decode import driver
from jaxtts.errors import ConfigError

__all__ = ["MelStream", "StreamChunk", "VocoderStream", "stream"]


@dataclasses.dataclass
class StreamChunk:
    audio: np.ndarray  # float32 [n] new samples (may be empty)
    tokens: int  # tokens decoded so far in this piece
    done: bool  # the last chunk of the text
    elapsed_s: float  # since the call started (the first chunk's: time to first audio)
    token_ids: np.ndarray | None = None  # the last chunk: the text's tokens (pieces joined)


class MelStream:
    """Tokens so far -> the log-mel frames that became final (see the module docstring)."""

    def __init__(self, engine, lookahead: int | None = None):
        tok = engine.tokenizer
        self.decode = engine.units_to_mel
        self.frames_per_token = int(round(engine.mel_cfg.frame_rate / engine.frame_rate))
        self.lookahead = int(tok.lookahead_tokens if lookahead is None else lookahead)
        if self.lookahead < 0:
            raise ConfigError(f"lookahead={self.lookahead}: expected >= 0 tokens")
        self.n_mels = engine.mel_cfg.n_mels
        self.emitted = 0  # frames

    def push(self, tokens: np.ndarray, final: bool) -> np.ndarray:
        """All tokens decoded so far int [n] -> new final frames float32 [m, n_mels]. The whole
        prefix is decoded again each call (the postfilter's mean needs it): numpy work that
        grows with the prefix, a few ms per call at a few hundred tokens."""
        n = int(tokens.size)
        ready = (n if final else max(0, n - self.lookahead)) * self.frames_per_token
        if ready <= self.emitted:
            return np.zeros((0, self.n_mels), np.float32)
        mel = np.asarray(self.decode(tokens), np.float32)  # [n f, M] the whole prefix
        out = mel[self.emitted : ready]
        self.emitted = ready
        return out


class VocoderStream:
    """Log-mel frames -> audio samples, window by window (see the module docstring)."""

    def __init__(self, vocoder, context: int = 16, hold: int = 2, crossfade: int = 2):
        if not hasattr(vocoder, "phase_retrieval"):
            raise ConfigError(
                f"streaming needs the Griffin-Lim vocoder, got {type(vocoder).__name__}"
            )
        if context < hold + 2 or hold < 1 or crossfade < 0 or crossfade > hold:
            raise ConfigError(
                f"VocoderStream: context={context}, hold={hold}, crossfade={crossfade}: "
                "expected context >= hold + 2, hold >= 1, 0 <= crossfade <= hold frames"
            )
        self.voc = vocoder
        self.hop = vocoder.mel_cfg.hop_length
        self.context, self.hold, self.crossfade = context, hold, crossfade
        self.mel = np.zeros((0, vocoder.mel_cfg.n_mels), np.float32)
        self.phases = np.zeros((0, vocoder.mel_cfg.n_fft // 2 + 1), np.complex64)
        self.emitted = 0  # samples
        self.tail = np.zeros((0,), np.float32)  # the last window's samples past `emitted`

    def push(self, mel: np.ndarray, final: bool) -> np.ndarray:
        """New frames float [m, n_mels] -> new samples float32 [k]."""
        self.mel = np.concatenate([self.mel, np.asarray(mel, np.float32)])
        t = self.mel.shape[0]
        end = (t - 1 if final else t - 1 - self.hold) * self.hop
        if t < 2 or end <= self.emitted:
            return np.zeros((0,), np.float32)
        s0 = max(0, self.emitted // self.hop - self.context)  # the window's first frame
        mag = self.voc.linear_magnitude(self.mel[s0:]) ** self.voc.power  # [t - s0, F]
        known = self.phases[s0:]  # phases the previous window found
        wav, ang = self.voc.phase_retrieval(mag, known, seed=self.voc.seed + s0)
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


def stream(
    synth,
    text: str,
    prompt: Prompt | None = None,
    strategy: str | None = None,
    seed: int = 0,
    segment_steps: int = 8,
    lookahead: int | None = None,
    max_seconds: float | None = None,
    line: int = 0,
    **sampling_overrides,
) -> Iterator[StreamChunk]:
    """Synthesize one text as a stream of `StreamChunk`s (`Synthesizer.stream`). The tokens are
    those the offline `synth.synthesize(texts, prompts, seed=seed)` gives the text at index
    `line` (a row's sampling key is (seed, line, piece)); the audio differs from the offline
    audio by the windowed vocoder (and `lookahead` < R)."""
    t0 = time.perf_counter()
    engine = synth.engine
    if not hasattr(engine, "decode_plan"):
        raise ConfigError(
            f"--stream: a {engine.family} run decodes whole sequences at once; streaming needs "
            "a step-wise strategy (far, car, vadusa, dcar, ssd, tldr)"
        )
    if segment_steps < 1:
        raise ConfigError(f"segment_steps={segment_steps}: expected >= 1")
    options = engine.options(
        strategy=strategy, max_seconds=max_seconds or None, **sampling_overrides
    )
    engine.check_strategy(options.strategy)
    rows = synth._text_rows(line, text, *engine.encode_prompt(prompt))
    if not rows:
        raise ConfigError("stream: empty text")
    gap = np.zeros(int(synth.join_silence_s * synth.sample_rate), np.float32)
    pieces = []
    for j, row in enumerate(rows):
        if j:
            yield StreamChunk(gap, 0, False, time.perf_counter() - t0)
        batch, keys = synth._prompt_batch([row], 1, seed)
        strat, models, params = engine.decode_plan(batch, options)
        run = driver.start(
            strat, models, params, batch, max_new_tokens=engine.max_new_units(options)
        )
        mels, voc = MelStream(engine, lookahead), VocoderStream(synth.vocoder)
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

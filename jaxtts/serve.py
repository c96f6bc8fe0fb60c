"""An HTTP server for one shipped model: streamed speech in the shape of OpenAI's
`/v1/audio/speech`, on the loopback interface (FastAPI + uvicorn).

    python -m jaxtts.serve --workdir pretrained/car_small --port 8000
    curl -s localhost:8000/v1/audio/speech -H 'content-type: application/json' \
        -d '{"input": "Where did you put the keys?", "voice": "spk03"}' -o keys.wav

Endpoints:
- `POST /v1/audio/speech`: JSON `{input, voice, strategy, response_format, stream, seed,
  max_seconds}`. `voice` is a corpus speaker or utterance id (`spk03`), or an uploaded prompt
  `{"wav_base64": <a wav file, base64>, "text": <its transcript>}`. `response_format`: `wav`
  (16-bit mono, a streaming header whose sizes say "unknown") or `pcm` (raw s16le). With
  `stream` (the default) the body is sent chunk by chunk as the LM decodes
  (`jaxtts.stream`); without it, once the utterance is done. The response's `X-Request-Id`
  names the request for `GET /v1/requests/{id}`.
- `GET /v1/requests/{id}`: a finished request's tokens, time to first audio, audio seconds and
  status (`done`, `cancelled`, `failed`): the last `--keep_requests` requests.
- `GET /health`, `GET /metrics` (counters, queue depth, time-to-first-audio percentiles).
- `GET /`: a page with a text box, voice and strategy pickers and a player that starts on the
  first chunk.

Scheduling: one worker thread owns the device. For the step-wise families (far, car, vadusa,
dcar, ssd, tldr) it batches continuously (`jaxtts.decode.slots`): each strategy has `--slots`
rows of one decode loop; a request is prefilled into a free row at a segment boundary, every
occupied row advances `segment_steps` steps at a time, and each row's new tokens become audio
(`jaxtts.stream`'s MelStream and VocoderStream; the rows' vocoder windows of equal shape run
as one batch, 16 new frames at a time after the first audio) sent to its client; a row that
ends frees its slot. Shapes never change after warm-up (`/metrics` counts compilations since
then), and a request's tokens are those of its offline synthesis at the server's batch
whatever shares the loop (the loop always runs every slot: XLA's CPU kernels round a batch-1
step differently, benchmarks/RESULTS.md#serve). Other families
(MDM, PALLE) are served one request at a time. Requests beyond the slots wait in a bounded
queue (`--max_queue`), and past it get a 503 with Retry-After. A client that disconnects frees
its slot at the next segment boundary.

Bad input is a 4xx with a one-line JSON `{"error": ...}` naming the field, and the server
goes on serving everyone else.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import dataclasses
import io
import itertools
import logging
import queue
import struct
import sys
import threading
import time
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from jaxtts import cli
from jaxtts.data.prompt import Prompt
from jaxtts.data.text import unspeakable
from jaxtts.errors import ConfigError, JaxttsError

log = logging.getLogger("jaxtts.serve")

FORMATS = ("wav", "pcm")
MAX_PROMPT_SECONDS = 20.0
_DONE = object()  # end of a job's chunk queue


def wav_header(sample_rate: int, num_samples: int | None = None) -> bytes:
    """A 44-byte RIFF header of 16-bit mono PCM; `num_samples=None` (streaming): the sizes
    are 0xFFFFFFFF, which players read as "until the end of the stream"."""
    data = 0xFFFFFFFF if num_samples is None else 2 * num_samples
    riff = 0xFFFFFFFF if num_samples is None else 36 + data
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )


def pcm16(audio: np.ndarray) -> bytes:
    """float32 [n] in [-1, 1] -> little-endian int16 bytes."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


class RequestError(JaxttsError):
    """A request the server rejects: an HTTP status and a one-line message."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


@dataclasses.dataclass
class Job:
    id: str
    text: str
    prompt: object  # Prompt | None
    plan: object  # jaxtts.engine.Plan: the strategy and options, checked by `Server.parse`
    seed: int
    format: str = "wav"  # response_format: wav | pcm
    stream: bool = True  # send chunks as they decode
    warm_up: bool = False  # the server's own compile run: not in the metrics
    pieces: list | None = None  # the text's ids (Synthesizer.text_pieces), made by the handler
    chunks: queue.Queue = dataclasses.field(default_factory=queue.Queue)
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)
    status: str = "queued"
    tokens: list | None = None
    first_audio_s: float | None = None  # from submission to the first audio chunk's decode
    audio_s: float = 0.0
    error: str | None = None
    submitted: float = dataclasses.field(default_factory=time.perf_counter)

    def record(self) -> dict:
        return {
            "id": self.id,
            "status": self.status,
            "strategy": self.plan.name,
            "seed": self.seed,
            "tokens": self.tokens,
            "first_audio_ms": None if self.first_audio_s is None else 1e3 * self.first_audio_s,
            "audio_seconds": self.audio_s,
            "error": self.error,
        }


class Server:
    """The model, the request queue and the worker thread that owns the device."""

    def __init__(
        self,
        synth,
        workdir: str,
        max_queue: int = 16,
        segment_steps: int = 4,
        max_chars: int = 600,
        keep_requests: int = 256,
        slots: int = 8,
        vocoder_frames: int = 16,
        vocoder_iters: int = 8,
    ):
        self.synth, self.workdir = synth, workdir
        # after a request's first audio, its vocoder waits for this many new frames: fewer,
        # longer windows (jaxtts.stream.VocoderStream's min_frames)
        if int(vocoder_frames) < 1:
            raise ConfigError(f"--vocoder_frames {vocoder_frames}: expected >= 1 mel frames")
        self.vocoder_frames = int(vocoder_frames)
        # Griffin-Lim iterations per streamed window (its known frames start from the last
        # window's phases): 16 measured as good as 32, and 8 as good as 16 (the same CER on 96
        # test sentences, RESULTS §serve) at 0.7x its host time
        if int(vocoder_iters) < 1:
            raise ConfigError(f"--vocoder_iters {vocoder_iters}: expected >= 1")
        self.vocoder_iters = int(vocoder_iters)
        # the host's audio work runs beside XLA's decode threads: one BLAS thread (measured
        # 10x less host time per audio second on 2 busy cores; jaxtts.cli.limit_host_blas)
        cli.limit_host_blas()
        self.engine = synth.engine
        self.sample_rate = synth.sample_rate
        self.segment_steps, self.max_chars = segment_steps, max_chars
        # a request's longest audio: the run's decode budget (the slots are allocated for it)
        self.max_seconds = float(self.engine.options().max_seconds)
        self.batching = slots > 0 and hasattr(self.engine, "decode_plan")
        self.scheduler = SlotScheduler(self, slots) if self.batching else None
        self.compiles = _CompileCounter()
        self.strategies = self._strategies()
        self.voices = self._voices()
        self._encoded: dict[str, tuple] = {}  # voice -> (prompt transcript ids, prompt units)
        self.jobs: queue.Queue = queue.Queue(maxsize=max_queue)
        self.done: collections.OrderedDict[str, Job] = collections.OrderedDict()
        self.keep_requests = keep_requests
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.metrics = collections.Counter()
        self.ttfa: collections.deque = collections.deque(maxlen=1000)  # seconds
        self.active: Job | None = None
        work = self.scheduler.work if self.batching else self._work
        self.worker = threading.Thread(target=work, name="jaxtts-decode", daemon=True)
        self.worker.start()

    # -- set-up
    def _strategies(self) -> list[str]:
        default = self.engine.decode_config.get("strategy", "far")
        out = [default]
        for s in ("far", "car:2", "car:3", "vadusa:2", "dcar", "dcar:sample", "tldr"):
            try:
                self.engine.parse_strategy(s)
            except JaxttsError:
                continue
            if s not in out:
                out.append(s)
        return out

    def _voices(self) -> dict[str, object]:
        """Corpus speakers -> their first test utterance (the prompts `infer.py --speaker`
        takes); empty when the corpus is not built (uploaded prompts still work)."""
        from jaxtts.synthesize import resolve_prompt  # start-up: jax 820 ms

        out = {}
        for spk in [f"spk{i:02d}" for i in range(10)]:
            try:
                out[spk] = resolve_prompt(self.workdir, speaker=spk)
            except JaxttsError:
                continue
        return out

    def encode_prompt(self, prompt):
        """`engine.encode_prompt`, kept for the corpus voices (encoded once, at warm-up): a
        request with a named voice pays neither the encoding nor its compilation."""
        key = next((name for name, p in self.voices.items() if p is prompt), None)
        if key is None:
            return self.engine.encode_prompt(prompt)
        if key not in self._encoded:
            self._encoded[key] = self.engine.encode_prompt(prompt)
        return self._encoded[key]

    def warm_up(self, seconds: float = 1.0, strategies: list[str] | None = None) -> None:
        """Compile every strategy's segment program before the first request (a few seconds
        each on a CPU) and encode every voice's prompt, so that no request pays for either."""
        for p in self.voices.values():
            self.encode_prompt(p)
        prompt = next(iter(self.voices.values()), None)
        for s in strategies or self.strategies:
            plan = self.synth.plan(s, max_seconds=seconds)
            if self.batching:  # a request through the slots: prefill, insert, advance, free
                job = Job("warm-up", "Warm up.", prompt, plan, 0, warm_up=True)
                self.submit(job, count=False)
                while job.chunks.get() is not _DONE:
                    pass
                continue
            for _ in self.synth.stream(
                "Warm up.", prompt, plan=plan, segment_steps=self.segment_steps
            ):
                pass
        self.compiles.mark()

    # -- requests
    def parse(self, body: dict) -> Job:
        """The JSON body of /v1/audio/speech -> a Job (RequestError 400 naming the field)."""
        if not isinstance(body, dict):
            raise RequestError(400, "body: expected a JSON object")
        known = {"input", "voice", "strategy", "response_format", "stream", "seed", "max_seconds"}
        extra = sorted(set(body) - known - {"model", "speed"})
        if extra:
            raise RequestError(400, f"{extra[0]}: unknown field, expected one of {sorted(known)}")
        text = body.get("input")
        if not isinstance(text, str) or not text.strip():
            raise RequestError(400, "input: expected a non-empty string of text")
        if len(text) > self.max_chars:
            raise RequestError(400, f"input: {len(text)} characters, the limit is {self.max_chars}")
        if (why := unspeakable(text)) is not None:
            raise RequestError(400, f"input: {why}")
        strategy = body.get("strategy") or self.strategies[0]
        if not isinstance(strategy, str):
            raise RequestError(400, "strategy: expected a string")
        fmt = body.get("response_format", "wav")
        if fmt not in FORMATS:
            raise RequestError(400, f"response_format: {fmt!r}, expected one of {list(FORMATS)}")
        seed = body.get("seed", 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise RequestError(400, f"seed: {seed!r}, expected an integer >= 0")
        max_s = body.get("max_seconds")
        if max_s is not None and (
            not isinstance(max_s, int | float) or not 0 < max_s <= self.max_seconds
        ):
            raise RequestError(
                400, f"max_seconds: {max_s!r}, expected a number in (0, {self.max_seconds:g}]"
            )
        try:
            plan = self.synth.plan(strategy, max_seconds=max_s)
        except JaxttsError as e:
            raise RequestError(400, f"strategy: {e}") from None
        voice = body.get("voice")
        if voice is None:
            prompt = None
        elif isinstance(voice, str):
            if voice not in self.voices:
                raise RequestError(
                    400, f"voice: unknown voice {voice!r}, expected one of {sorted(self.voices)}"
                )
            prompt = self.voices[voice]
        elif isinstance(voice, dict):
            wav_b64, ptext = voice.get("wav_base64"), voice.get("text")
            if not isinstance(wav_b64, str) or not isinstance(ptext, str) or not ptext.strip():
                raise RequestError(
                    400, "voice: expected {'wav_base64': <wav file, base64>, 'text': <transcript>}"
                )
            prompt = Prompt(
                "upload", "", ptext.strip(), self._decode_wav(wav_b64), self.sample_rate
            )
        else:
            raise RequestError(400, "voice: expected a speaker name or {'wav_base64', 'text'}")
        stream = body.get("stream", True)
        if not isinstance(stream, bool):
            raise RequestError(400, f"stream: {stream!r}, expected true or false")
        return Job(f"req{next(self.ids)}", text.strip(), prompt, plan, seed, fmt, stream)

    def _decode_wav(self, b64: str) -> np.ndarray:
        try:
            raw = base64.b64decode(b64, validate=True)
            wav, sr = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
        except Exception as e:  # noqa: BLE001 - any decoder failure is the upload's fault
            msg = str(e).splitlines()[0].split(": ")[-1] if str(e) else type(e).__name__
            raise RequestError(400, f"voice.wav_base64: not a readable wav file ({msg})") from None
        wav = wav.mean(axis=1)
        if wav.size == 0:
            raise RequestError(400, "voice.wav_base64: the wav holds no samples")
        if wav.size / sr > MAX_PROMPT_SECONDS:
            raise RequestError(
                400,
                f"voice.wav_base64: {wav.size / sr:.1f} s of audio, the limit is "
                f"{MAX_PROMPT_SECONDS:.0f} s",
            )
        if sr != self.sample_rate:
            wav = librosa.resample(wav, orig_sr=sr, target_sr=self.sample_rate)
        return wav.astype(np.float32)

    def submit(self, job: Job, count: bool = True) -> None:
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            self.metrics["rejected_busy"] += 1
            raise RequestError(
                503,
                f"server busy: {self.jobs.maxsize} requests are waiting; retry later",
                {"Retry-After": "1"},
            ) from None
        if count:
            self.metrics["requests"] += 1

    def request(self, rid: str) -> dict:
        with self.lock:
            job = self.done.get(rid)
        if job is None:
            raise RequestError(404, f"request {rid!r}: unknown or no longer kept")
        return job.record()

    # -- the worker: the only thread that runs JAX
    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            self.active = job
            try:
                self._run(job)
            finally:
                self.active = None
                self._finish(job)

    def _finish(self, job: Job) -> None:
        """Keep the job's record and close its chunk queue (it ended: done, cancelled, failed)."""
        with self.lock:
            self.done[job.id] = job
            while len(self.done) > self.keep_requests:
                self.done.popitem(last=False)
        job.chunks.put(_DONE)

    def _send_audio(self, job: Job, audio: np.ndarray) -> None:
        """Send a chunk of audio to the job's client (and note its time to first audio)."""
        if not audio.size:
            return
        if job.first_audio_s is None:
            job.first_audio_s = time.perf_counter() - job.submitted
            if not job.warm_up:
                self.ttfa.append(job.first_audio_s)
        job.audio_s += audio.size / self.sample_rate
        job.chunks.put(audio)

    def _end(self, job: Job, status: str, error: Exception | None = None) -> None:
        job.status = status
        if job.warm_up:
            return
        self.metrics[status if status != "done" else "completed"] += 1
        if status == "done":
            self.metrics["audio_ms"] += int(1e3 * job.audio_s)
        if error is not None:
            job.error = (
                str(error) if isinstance(error, JaxttsError) else f"{type(error).__name__}: {error}"
            )
            job.chunks.put(error)

    def _run(self, job: Job) -> None:
        if job.cancelled.is_set():
            return self._end(job, "cancelled")
        job.status = "running"
        try:
            for chunk in self.synth.stream(
                job.text, job.prompt, plan=job.plan, seed=job.seed, segment_steps=self.segment_steps
            ):
                if job.cancelled.is_set():  # the client left: free the device now
                    return self._end(job, "cancelled")
                self._send_audio(job, chunk.audio)
                if chunk.done:
                    job.tokens = [int(t) for t in chunk.token_ids]
        except Exception as e:  # noqa: BLE001 - a bad request or a bug must not stop the worker
            if not isinstance(e, JaxttsError):
                log.exception("request %s failed", job.id)
            return self._end(job, "failed", e)
        self._end(job, "done")

    def snapshot(self) -> dict:
        t = np.asarray(self.ttfa, np.float64) * 1e3
        pct = {f"p{q}": float(np.percentile(t, q)) if t.size else None for q in (50, 90, 99)}
        keys = ("requests", "completed", "cancelled", "failed", "rejected_busy")
        return {
            **{k: int(self.metrics[k]) for k in keys},
            "audio_seconds": self.metrics["audio_ms"] / 1e3,
            "queued": self.jobs.qsize(),
            "active": (
                self.scheduler.active_ids()
                if self.batching
                else []
                if self.active is None
                else [self.active.id]
            ),
            "slots": self.scheduler.num_slots if self.batching else 1,
            "peak_active": self.scheduler.peak if self.batching else None,
            "worker_seconds": dict(self.scheduler.seconds) if self.batching else None,
            "compilations_since_warmup": self.compiles.since_mark(),
            "time_to_first_audio_ms": pct,
        }

    def close(self) -> None:
        self.jobs.put(None)


class _CompileCounter:
    """XLA backend compilations in this process (jax.monitoring), and since `mark()`."""

    def __init__(self):
        import jax  # start-up: jax 660 ms

        self.count, self.marked = 0, 0

        def on_event(event: str, duration: float, **kw) -> None:
            if event == "/jax/core/compile/backend_compile_duration":
                self.count += 1

        jax.monitoring.register_event_duration_secs_listener(on_event)

    def mark(self) -> None:
        self.marked = self.count

    def since_mark(self) -> int:
        return self.count - self.marked


@dataclasses.dataclass
class _Row:
    """A request in a slot: its pieces (synthesizer rows) and the streams of the current one."""

    job: Job
    rows: list  # (line, piece, text ids, prompt units, prompt transcript length)
    cap: int  # the request's token budget (its max_seconds)
    slot: int
    pool: object  # the Slots of its strategy
    piece: int = 0
    mels: object = None
    voc: object = None
    tokens: list = dataclasses.field(default_factory=list)  # finished pieces' tokens


class SlotScheduler:
    """Continuous batching for `Server` (see the module docstring): the worker thread's loop."""

    def __init__(self, server: Server, num_slots: int):
        self.server, self.num_slots = server, int(num_slots)
        self.pools: dict[str, object] = {}  # strategy -> Slots
        self.rows: dict[tuple[str, int], _Row] = {}  # (strategy, slot) -> its request
        self.peak = 0  # most requests decoded together so far
        # the worker's time: decoding segments (device) and turning tokens into audio (host)
        self.seconds: collections.Counter = collections.Counter()
        self.in_flight: dict[str, bool] = {}  # strategy -> a segment is dispatched, not read
        synth = server.synth
        # widths every request fits: the longest text piece plus a prompt's transcript share
        # (64 ids: ~5 s of speech), and full-length prompts
        from jaxtts.synthesize import bucket  # start-up: jax 820 ms

        self.text_width = bucket(server.engine.max_text_symbols + 64, 64)
        self.prompt_width = synth.prompt_bucket

    def active_ids(self) -> list[str]:
        return [r.job.id for r in self.rows.values()]

    def pool(self, plan):
        """The Slots of `plan`'s strategy (made by its first request), for the server's
        longest request."""
        if plan.name not in self.pools:
            from jaxtts.decode.slots import Slots  # start-up: jax 820 ms

            engine = self.server.engine
            _, units = engine.encode_prompt(None)
            strat, models, params = engine.decode_plan(None, plan)
            longest = dataclasses.replace(plan.options, max_seconds=self.server.max_seconds)
            self.pools[plan.name] = Slots(
                strat,
                models,
                params,
                num_slots=self.num_slots,
                text_width=self.text_width,
                prompt_width=self.prompt_width,
                prompt_example=units,
                max_new_tokens=engine.max_new_units(longest),
                sampling=plan.options.sampling,
            )
        return self.pools[plan.name]

    def work(self) -> None:
        server = self.server
        while True:
            # admit: one request per free row (all strategies share `num_slots` requests)
            while len(self.rows) < self.num_slots:
                try:
                    job = server.jobs.get(timeout=None if not self.rows else 0)
                except queue.Empty:
                    break
                if job is None:
                    return
                self._admit(job)
            for strategy, pool in list(self.pools.items()):
                mine = {k[1]: r for k, r in self.rows.items() if k[0] == strategy}
                if not mine:
                    continue
                t0 = time.perf_counter()
                try:
                    if not self.in_flight.get(strategy):
                        pool.advance(server.segment_steps)
                    length, tokens, done, _ = pool.read()  # waits for the dispatched segment
                    # the next segment decodes (XLA's threads) while this one becomes audio
                    pool.advance(server.segment_steps)
                    self.in_flight[strategy] = True
                except Exception as e:  # noqa: BLE001 - a bug must not stop the worker
                    log.exception("decoding %s failed", strategy)
                    self.in_flight[strategy] = False
                    for slot, r in mine.items():
                        self._close(strategy, slot, r, "failed", e)
                    continue
                t1 = time.perf_counter()
                live = {k: r for k, r in mine.items() if not r.job.cancelled.is_set()}
                for slot in mine.keys() - live.keys():  # the client left: free the slot now
                    self._close(strategy, slot, mine[slot], "cancelled")
                # (in this thread: the host's Griffin-Lim is small numpy FFTs that hold the
                # GIL, so a thread pool across rows measured slower, RESULTS §serve; the rows'
                # windows of equal shape are one batch instead)
                outs = self._audio(live, length, tokens, done)
                for slot, r in live.items():
                    self._emit(strategy, slot, r, outs[slot])
                self.seconds["decode"] += t1 - t0
                self.seconds["audio"] += time.perf_counter() - t1
                self.seconds["segments"] += 1

    def _admit(self, job: Job) -> None:
        server, engine = self.server, self.server.engine
        if job.cancelled.is_set():
            server._end(job, "cancelled")
            return server._finish(job)
        try:
            name = job.plan.name
            rows = server.synth.text_rows(
                0, job.text, *server.encode_prompt(job.prompt), pieces=job.pieces
            )
            if not rows:
                raise ConfigError("input: no pronounceable text")
            pool = self.pool(job.plan)
            slot = next(i for i in range(self.num_slots) if (name, i) not in self.rows)
            r = _Row(job, rows, engine.max_new_units(job.plan.options), slot, pool)
            self._start_piece(r)
        except Exception as e:  # noqa: BLE001 - a bad request must not stop the worker
            if not isinstance(e, JaxttsError):
                log.exception("request %s failed", job.id)
            server._end(job, "failed", e)
            return server._finish(job)
        job.status = "running"
        self.rows[(name, slot)] = r
        self.peak = max(self.peak, len(self.rows))

    def _start_piece(self, r: _Row) -> None:
        from jaxtts.stream import MelStream, make_vocoder_stream  # start-up: jax 770 ms
        from jaxtts.synthesize import piece_keys  # start-up: jax 820 ms

        _, _, ids, units, n_ptext = r.rows[r.piece]
        try:
            r.pool.insert(r.slot, (ids, units, n_ptext), piece_keys(r.job.seed, [r.rows[r.piece]]))
        except ValueError as e:
            raise ConfigError(f"input: a piece too long for the server's slots ({e})") from None
        r.mels = MelStream(self.server.engine)
        r.voc = make_vocoder_stream(
            self.server.synth.vocoder,
            min_frames=self.server.vocoder_frames,
            n_iter=self.server.vocoder_iters,
        )

    @staticmethod
    def _audio(live: dict[int, _Row], length, tokens, done) -> dict[int, tuple]:
        """Each live row's tokens so far -> {slot: (tokens, ended, new audio | the
        exception)}: the host's share of a segment (token decoder, then the windowed
        Griffin-Lim of every row as one batch, `jaxtts.stream.push_many`)."""
        from jaxtts.stream import push_many, push_mels  # start-up: jax 770 ms

        out, mels = {}, {}
        for slot, r in live.items():
            n = min(int(length[slot]), r.cap)
            ended = bool(done[slot]) or n >= r.cap
            out[slot] = (np.asarray(tokens[slot, :n], np.int32), ended, None)
        order = list(live)
        toks, ends = [out[i][0] for i in order], [out[i][1] for i in order]
        try:  # every row's token decoder window in one batch (a bad row raises before any
            # row's state moves: `push_mels` decodes first, then takes)
            frames = push_mels([live[i].mels for i in order], toks, ends)
            mels = dict(zip(order, frames, strict=True))
        except Exception:  # noqa: BLE001 - find the failing row(s): one at a time
            for slot in order:
                toks, ended, _ = out[slot]
                try:
                    mels[slot] = live[slot].mels.push(toks, ended)
                except Exception as e:  # noqa: BLE001 - reported by _emit as the request's failure
                    out[slot] = (toks, ended, e)
        slots = list(mels)
        try:
            audio = push_many(
                [live[i].voc for i in slots], [mels[i] for i in slots], [out[i][1] for i in slots]
            )
        except Exception as e:  # noqa: BLE001 - every row of the batch fails with it
            audio = [e] * len(slots)
        for i, a in zip(slots, audio, strict=True):
            out[i] = (out[i][0], out[i][1], a)
        return out

    def _emit(self, strategy: str, slot: int, r: _Row, out) -> None:
        """A segment's audio of one row -> its client; the row's end (the worker thread)."""
        server, job = self.server, r.job
        toks, done, audio = out
        if isinstance(audio, Exception):
            log.error("request %s failed: %s", job.id, audio)
            return self._close(strategy, slot, r, "failed", audio)
        server._send_audio(job, audio)
        if not done:
            return
        r.tokens.append(toks)
        r.piece += 1
        if r.piece < len(r.rows):  # the next piece in the same slot, after a short pause
            server._send_audio(
                job, np.zeros(int(server.synth.join_silence_s * server.sample_rate), np.float32)
            )
            return self._start_piece(r)
        job.tokens = [int(t) for t in np.concatenate(r.tokens)]
        self._close(strategy, slot, r, "done")

    def _close(self, strategy, slot, r: _Row, status: str, error=None) -> None:
        r.pool.free(slot)
        del self.rows[(strategy, slot)]
        self.server._end(r.job, status, error)
        self.server._finish(r.job)


def create_app(server: Server):
    """The FastAPI app of a `Server`."""
    app = FastAPI(title="jaxtts", docs_url=None, redoc_url=None)

    @app.exception_handler(RequestError)
    async def _request_error(request, e: RequestError):
        return JSONResponse({"error": str(e)}, status_code=e.status, headers=e.headers)

    @app.get("/health")
    async def health():
        return {
            "status": "ok",
            "model": server.workdir,
            "family": server.engine.family,
            "strategies": server.strategies,
            "voices": sorted(server.voices),
            "sample_rate": server.sample_rate,
        }

    @app.get("/metrics")
    async def metrics():
        return server.snapshot()

    @app.get("/v1/requests/{rid}")
    async def request_record(rid: str):
        return server.request(rid)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return (Path(__file__).parent / "serve_page.html").read_text()

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        try:
            body = await request.json()
        except Exception:  # noqa: BLE001 - any parse failure is the client's
            raise RequestError(400, "body: not valid JSON") from None
        job = server.parse(body)
        if server.batching:  # the phonemizer (a process per text) off the device thread
            try:
                job.pieces = await asyncio.to_thread(server.synth.text_pieces, job.text)
            except JaxttsError as e:
                raise RequestError(400, f"input: {e}") from None
        server.submit(job)
        media = "audio/wav" if job.format == "wav" else "audio/L16"
        headers = {"X-Request-Id": job.id, "X-Sample-Rate": str(server.sample_rate)}

        async def next_chunk():
            return await asyncio.to_thread(job.chunks.get)

        if not job.stream:
            pieces = []
            try:
                while (c := await next_chunk()) is not _DONE:
                    if isinstance(c, Exception):
                        raise RequestError(_status(c), f"synthesis failed: {c}")
                    pieces.append(c)
            finally:
                job.cancelled.set()  # a no-op once done; frees the slot if the client left
            audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
            data = pcm16(audio)
            if job.format == "wav":
                data = wav_header(server.sample_rate, audio.size) + data
            return Response(data, media_type=media, headers=headers)

        async def body_iter():
            try:
                if job.format == "wav":
                    yield wav_header(server.sample_rate)
                while (c := await next_chunk()) is not _DONE:
                    if isinstance(c, Exception):
                        return  # headers are sent: the stream ends early; the record says why
                    yield pcm16(c)
            finally:
                job.cancelled.set()  # the client left (or the stream ended): free the device

        return StreamingResponse(body_iter(), media_type=media, headers=headers)

    return app


class LiveServer:
    """uvicorn serving `app` on a free loopback port in a daemon thread (tests and
    benchmarks: real sockets, so a client can leave mid-stream). `.url`, `.close()`."""

    def __init__(self, app, host: str = "127.0.0.1", timeout: float = 30.0):
        import uvicorn  # start-up: uvicorn 64 ms, only to listen

        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        t0 = time.perf_counter()
        while not self.server.started:
            if time.perf_counter() - t0 > timeout or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{host}:{port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _status(e: Exception) -> int:
    return 400 if isinstance(e, ConfigError) else 500


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m jaxtts.serve", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--workdir", required=True, help="a run folder, e.g. pretrained/car_small")
    ap.add_argument("--host", default="127.0.0.1", help="interface (default: loopback only)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max_queue", type=int, default=16, help="waiting requests before 503")
    ap.add_argument("--segment_steps", type=int, default=4, help="decode steps per chunk")
    ap.add_argument(
        "--slots", type=int, default=8, help="requests decoded together (0: one at a time)"
    )
    ap.add_argument(
        "--vocoder_frames",
        type=int,
        default=16,
        help="after the first audio, vocode at least this many new mel frames at a time",
    )
    ap.add_argument(
        "--vocoder_iters",
        type=int,
        default=8,
        help="Griffin-Lim iterations per streamed window (offline synthesis: 32; 8 and 16 "
        "measured the same CER against the offline audio, RESULTS serve)",
    )
    ap.add_argument("--max_chars", type=int, default=600, help="longest input text accepted")
    ap.add_argument("--keep_requests", type=int, default=256, help="records for /v1/requests")
    ap.add_argument("--no_warmup", action="store_true", help="skip compiling before serving")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        import uvicorn  # start-up: uvicorn 64 ms, after parsing args

        from jaxtts.synthesize import Synthesizer  # start-up: jax 820 ms, after parsing args

        synth = Synthesizer.from_workdir(args.workdir)
        server = Server(
            synth,
            args.workdir,
            max_queue=args.max_queue,
            segment_steps=args.segment_steps,
            max_chars=args.max_chars,
            keep_requests=args.keep_requests,
            slots=args.slots,
            vocoder_frames=args.vocoder_frames,
            vocoder_iters=args.vocoder_iters,
        )
        if not args.no_warmup:
            log.info("compiling %s (once, before serving)", ", ".join(server.strategies))
            server.warm_up()
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log.info("serving %s on http://%s:%d/", args.workdir, args.host, args.port)
    uvicorn.run(create_app(server), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The serving scheduler: one model, a bounded request queue, the device thread and the audio
thread. It knows nothing of HTTP (`jaxtts.serve.app` is the web layer): requests come in as
checked `Job`s (`Scheduler.make_job`), audio goes out through each job's chunk queue, and a
rejected request is a `ServeError` whose `kind` the app maps to a status.

Threads. For the step-wise families (far, car, vadusa, dcar, ssd, tldr) continuous batching
(`jaxtts.decode.slots`): each strategy has `slots` rows of one decode loop; the **device
thread** admits a request into a free row at a segment boundary (its prefill), advances every
occupied row `segment_steps` steps at a time, and hands each segment's tokens to the **audio
thread**, which turns them into audio (`jaxtts.stream`'s MelStream and VocoderStream; the rows'
vocoder windows of equal shape as one batch, 16 new frames at a time after the first audio)
and sends it to the row's client. A prefill therefore never waits for audio, and audio never
waits for a prefill. A row that ends frees its slot on the device thread at once; its last
audio and its record follow on the audio thread, in order. Shapes never change after warm-up
(`snapshot()` counts compilations since then), and a request's tokens are those of its offline
synthesis at the scheduler's batch whatever shares the loop (the loop always runs every slot:
XLA's CPU kernels round a batch-1 step differently, benchmarks/RESULTS.md#serve). Other
families (MDM, PALLE), or `slots=0`, run one request at a time on the device thread (decode
and audio together, `jaxtts.stream`). Requests beyond the slots wait in the queue
(`max_queue`), and past it are refused (`ServeError('busy')`). A client that leaves
(`job.cancelled`) frees its slot at the next segment boundary.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import io
import itertools
import logging
import queue
import threading
import time

import librosa
import numpy as np
import soundfile as sf

from jaxtts import cli
from jaxtts.data.prompt import Prompt
from jaxtts.data.text import unspeakable
from jaxtts.errors import ConfigError, JaxttsError

log = logging.getLogger("jaxtts.serve")

FORMATS = ("wav", "pcm")
MAX_PROMPT_SECONDS = 20.0
DONE = object()  # end of a job's chunk queue


class ServeError(JaxttsError):
    """A request the scheduler refuses: `kind` is 'invalid' (the request is wrong; the message
    names the field), 'busy' (the queue is full) or 'unknown' (no such request record)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass
class Job:
    id: str
    text: str
    prompt: object  # Prompt | None
    plan: object  # jaxtts.engine.Plan: the strategy and options, checked by `make_job`
    seed: int
    format: str = "wav"  # response_format: wav | pcm
    stream: bool = True  # send chunks as they decode
    warm_up: bool = False  # the scheduler's own compile run: not in the metrics
    pieces: list | None = None  # the text's ids (Synthesizer.text_pieces), made off-thread
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


class Scheduler:
    """The model, the request queue, the device thread and (batching) the audio thread."""

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
        self.batching = slots > 0 and hasattr(self.engine, "decode_models_for")
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
        self.slots = _Batcher(self, slots) if self.batching else None
        work = self.slots.work if self.batching else self._work
        self.worker = threading.Thread(target=work, name="jaxtts-device", daemon=True)
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
                while job.chunks.get() is not DONE:
                    pass
                continue
            for _ in self.synth.stream(
                "Warm up.", prompt, plan=plan, segment_steps=self.segment_steps
            ):
                pass
        self.compiles.mark()

    # -- requests
    def make_job(
        self,
        text,
        voice=None,
        strategy: str | None = None,
        seed: int = 0,
        max_seconds: float | None = None,
        format: str = "wav",
        stream: bool = True,
    ) -> Job:
        """A checked Job of a request's fields (ServeError('invalid') naming the field).
        `voice`: None, a corpus voice name, or {'wav_base64': <a wav file>, 'text': <its
        transcript>}."""

        def invalid(msg: str) -> ServeError:
            return ServeError("invalid", msg)

        if not isinstance(text, str) or not text.strip():
            raise invalid("input: expected a non-empty string of text")
        if len(text) > self.max_chars:
            raise invalid(f"input: {len(text)} characters, the limit is {self.max_chars}")
        if (why := unspeakable(text)) is not None:
            raise invalid(f"input: {why}")
        strategy = strategy or self.strategies[0]
        if format not in FORMATS:
            raise invalid(f"response_format: {format!r}, expected one of {list(FORMATS)}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise invalid(f"seed: {seed!r}, expected an integer >= 0")
        if max_seconds is not None and (
            not isinstance(max_seconds, int | float)
            or isinstance(max_seconds, bool)
            or not 0 < max_seconds <= self.max_seconds
        ):
            raise invalid(
                f"max_seconds: {max_seconds!r}, expected a number in (0, {self.max_seconds:g}]"
            )
        try:
            plan = self.synth.plan(strategy, max_seconds=max_seconds)
        except JaxttsError as e:
            raise invalid(f"strategy: {e}") from None
        if voice is None:
            prompt = None
        elif isinstance(voice, str):
            if voice not in self.voices:
                raise invalid(
                    f"voice: unknown voice {voice!r}, expected one of {sorted(self.voices)}"
                )
            prompt = self.voices[voice]
        else:
            wav_b64, ptext = voice.get("wav_base64"), voice.get("text")
            if not isinstance(wav_b64, str) or not isinstance(ptext, str) or not ptext.strip():
                raise invalid(
                    "voice: expected {'wav_base64': <wav file, base64>, 'text': <transcript>}"
                )
            prompt = Prompt("upload", "", ptext.strip(), self.decode_wav(wav_b64), self.sample_rate)
        return Job(f"req{next(self.ids)}", text.strip(), prompt, plan, seed, format, stream)

    def decode_wav(self, b64: str) -> np.ndarray:
        """An uploaded prompt (a wav file, base64) -> mono float32 at the model's rate."""
        try:
            raw = base64.b64decode(b64, validate=True)
            wav, sr = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
        except Exception as e:  # noqa: BLE001 - any decoder failure is the upload's fault
            msg = str(e).splitlines()[0].split(": ")[-1] if str(e) else type(e).__name__
            raise ServeError(
                "invalid", f"voice.wav_base64: not a readable wav file ({msg})"
            ) from None
        wav = wav.mean(axis=1)
        if wav.size == 0:
            raise ServeError("invalid", "voice.wav_base64: the wav holds no samples")
        if wav.size / sr > MAX_PROMPT_SECONDS:
            raise ServeError(
                "invalid",
                f"voice.wav_base64: {wav.size / sr:.1f} s of audio, the limit is "
                f"{MAX_PROMPT_SECONDS:.0f} s",
            )
        if sr != self.sample_rate:
            wav = librosa.resample(wav, orig_sr=sr, target_sr=self.sample_rate)
        return wav.astype(np.float32)

    def prepare(self, job: Job) -> None:
        """The job's text pieces (the phonemizer: a process per text), made on the caller's
        thread rather than the device thread's (ServeError('invalid') if unspeakable)."""
        if self.batching:
            try:
                job.pieces = self.synth.text_pieces(job.text)
            except JaxttsError as e:
                raise ServeError("invalid", f"input: {e}") from None

    def submit(self, job: Job, count: bool = True) -> None:
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            self.metrics["rejected_busy"] += 1
            raise ServeError(
                "busy", f"server busy: {self.jobs.maxsize} requests are waiting; retry later"
            ) from None
        if count:
            self.metrics["requests"] += 1

    def request(self, rid: str) -> dict:
        with self.lock:
            job = self.done.get(rid)
        if job is None:
            raise ServeError("unknown", f"request {rid!r}: unknown or no longer kept")
        return job.record()

    # -- a job's output (any thread; each job's chunks come from one thread at a time)
    def send_audio(self, job: Job, audio: np.ndarray) -> None:
        """Send a chunk of audio to the job's client (and note its time to first audio)."""
        if not audio.size:
            return
        if job.first_audio_s is None:
            job.first_audio_s = time.perf_counter() - job.submitted
            if not job.warm_up:
                self.ttfa.append(job.first_audio_s)
        job.audio_s += audio.size / self.sample_rate
        job.chunks.put(audio)

    def close_job(self, job: Job, status: str, error: Exception | None = None) -> None:
        """The job ended (done, cancelled, failed): count it, keep its record, close its
        chunk queue (an error first, for the client). A job closes once."""
        if job.status in ("done", "cancelled", "failed"):
            return
        job.status = status
        if not job.warm_up:
            self.metrics[status if status != "done" else "completed"] += 1
            if status == "done":
                self.metrics["audio_ms"] += int(1e3 * job.audio_s)
            if error is not None:
                job.error = (
                    str(error)
                    if isinstance(error, JaxttsError)
                    else f"{type(error).__name__}: {error}"
                )
                job.chunks.put(error)
        with self.lock:
            self.done[job.id] = job
            while len(self.done) > self.keep_requests:
                self.done.popitem(last=False)
        job.chunks.put(DONE)

    # -- one request at a time (no batching): the device thread decodes and vocodes
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

    def _run(self, job: Job) -> None:
        if job.cancelled.is_set():
            return self.close_job(job, "cancelled")
        job.status = "running"
        try:
            for chunk in self.synth.stream(
                job.text, job.prompt, plan=job.plan, seed=job.seed, segment_steps=self.segment_steps
            ):
                if job.cancelled.is_set():  # the client left: free the device now
                    return self.close_job(job, "cancelled")
                self.send_audio(job, chunk.audio)
                if chunk.done:
                    job.tokens = [int(t) for t in chunk.token_ids]
        except Exception as e:  # noqa: BLE001 - a bad request or a bug must not stop the worker
            if not isinstance(e, JaxttsError):
                log.exception("request %s failed", job.id)
            return self.close_job(job, "failed", e)
        self.close_job(job, "done")

    def snapshot(self) -> dict:
        t = np.asarray(self.ttfa, np.float64) * 1e3
        pct = {f"p{q}": float(np.percentile(t, q)) if t.size else None for q in (50, 90, 99)}
        keys = ("requests", "completed", "cancelled", "failed", "rejected_busy")
        if self.batching:
            active = self.slots.active_ids()
        else:
            active = [] if self.active is None else [self.active.id]
        return {
            **{k: int(self.metrics[k]) for k in keys},
            "audio_seconds": self.metrics["audio_ms"] / 1e3,
            "queued": self.jobs.qsize(),
            "active": active,
            "slots": self.slots.num_slots if self.batching else 1,
            "peak_active": self.slots.peak if self.batching else None,
            "worker_seconds": dict(self.slots.seconds) if self.batching else None,
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
    """A request in a slot (the device thread's view): its pieces and where it is."""

    job: Job
    rows: list  # (line, piece, text ids, prompt units, prompt transcript length)
    cap: int  # the request's token budget (its max_seconds)
    slot: int
    pool: object  # the Slots of its strategy
    piece: int = 0
    tokens: list = dataclasses.field(default_factory=list)  # finished pieces' tokens


@dataclasses.dataclass
class _Piece:
    """One row's share of a segment, handed to the audio thread."""

    job: Job
    piece: int  # which of the request's pieces
    tokens: np.ndarray  # the piece's tokens so far
    ended: bool  # the piece ended in this segment
    final: list | None = None  # every token of the request, when its last piece ended


class _Batcher:
    """Continuous batching for `Scheduler` (see the module docstring): the device thread's
    loop (`work`) and the audio thread's (`_audio_work`)."""

    def __init__(self, sched: Scheduler, num_slots: int):
        self.sched, self.num_slots = sched, int(num_slots)
        self.pools: dict[str, object] = {}  # strategy -> Slots
        self.rows: dict[tuple[str, int], _Row] = {}  # (strategy, slot) -> its request
        self.peak = 0  # most requests decoded together so far
        # the device thread's time decoding segments, the audio thread's making audio
        self.seconds: collections.Counter = collections.Counter()
        self.in_flight: dict[str, bool] = {}  # strategy -> a segment is dispatched, not read
        # widths every request fits: the longest text piece plus a prompt's transcript share
        # (64 ids: ~5 s of speech), and full-length prompts
        from jaxtts.synthesize import bucket  # start-up: jax 820 ms

        self.text_width = bucket(sched.engine.max_text_symbols + 64, 64)
        self.prompt_width = sched.synth.prompt_bucket
        # segments' pieces (a list each) or closes, in order, for the audio thread
        self.audio_queue: queue.Queue = queue.Queue()
        self.audio = threading.Thread(target=self._audio_work, name="jaxtts-audio", daemon=True)
        self.audio.start()

    def active_ids(self) -> list[str]:
        return [r.job.id for r in list(self.rows.values())]

    def pool(self, plan):
        """The Slots of `plan`'s strategy (made by its first request), for the longest
        request."""
        if plan.name not in self.pools:
            from jaxtts.decode.slots import Slots  # start-up: jax 820 ms

            engine = self.sched.engine
            _, units = engine.encode_prompt(None)
            models, params = engine.decode_models_for(None, plan)
            longest = dataclasses.replace(plan.options, max_seconds=self.sched.max_seconds)
            self.pools[plan.name] = Slots(
                plan.strategy,
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

    # -- the device thread
    def work(self) -> None:
        sched = self.sched
        while True:
            # admit: one request per free row (all strategies share `num_slots` requests)
            while len(self.rows) < self.num_slots:
                try:
                    job = sched.jobs.get(timeout=None if not self.rows else 0)
                except queue.Empty:
                    break
                if job is None:
                    self.audio_queue.put(None)
                    return
                self._admit(job)
            for strategy, pool in list(self.pools.items()):
                mine = {k[1]: r for k, r in self.rows.items() if k[0] == strategy}
                if not mine:
                    continue
                t0 = time.perf_counter()
                try:
                    if not self.in_flight.get(strategy):
                        pool.advance(sched.segment_steps)
                    length, tokens, done, _ = pool.read()  # waits for the dispatched segment
                    # the next segment decodes (XLA's threads) while this one becomes audio
                    pool.advance(sched.segment_steps)
                    self.in_flight[strategy] = True
                except Exception as e:  # noqa: BLE001 - a bug must not stop the worker
                    log.exception("decoding %s failed", strategy)
                    self.in_flight[strategy] = False
                    for slot, r in mine.items():
                        self._free(strategy, slot, r, "failed", e)
                    continue
                pieces = []
                for slot, r in mine.items():
                    if r.job.cancelled.is_set():  # the client left (or its audio failed)
                        self._free(strategy, slot, r, "cancelled")
                        continue
                    n = min(int(length[slot]), r.cap)
                    ended = bool(done[slot]) or n >= r.cap
                    toks = np.asarray(tokens[slot, :n], np.int32)
                    pieces.append(_Piece(r.job, r.piece, toks, ended))
                    if ended:
                        r.tokens.append(toks)
                        r.piece += 1
                        if r.piece < len(r.rows):  # the next piece in the same slot
                            try:
                                self._start_piece(r)
                            except JaxttsError as e:
                                self._free(strategy, slot, r, "failed", e)
                        else:
                            pieces[-1].final = [int(t) for t in np.concatenate(r.tokens)]
                            self._free(strategy, slot, r, None)
                if pieces:
                    self.audio_queue.put(pieces)
                self.seconds["decode"] += time.perf_counter() - t0
                self.seconds["segments"] += 1

    def _admit(self, job: Job) -> None:
        sched, engine = self.sched, self.sched.engine
        if job.cancelled.is_set():
            return self.audio_queue.put(("close", job, "cancelled", None))
        try:
            name = job.plan.name
            rows = sched.synth.text_rows(
                0, job.text, *sched.encode_prompt(job.prompt), pieces=job.pieces
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
            return self.audio_queue.put(("close", job, "failed", e))
        job.status = "running"
        self.rows[(name, slot)] = r
        self.peak = max(self.peak, len(self.rows))

    def _start_piece(self, r: _Row) -> None:
        from jaxtts.synthesize import piece_keys  # start-up: jax 820 ms

        _, _, ids, units, n_ptext = r.rows[r.piece]
        try:
            r.pool.insert(r.slot, (ids, units, n_ptext), piece_keys(r.job.seed, [r.rows[r.piece]]))
        except ValueError as e:
            raise ConfigError(f"input: a piece too long for the server's slots ({e})") from None

    def _free(self, strategy, slot, r: _Row, status: str | None, error=None) -> None:
        """The row's slot is free for the next request; its job closes on the audio thread
        (after its audio) with `status` (None: when its final audio is sent)."""
        r.pool.free(slot)
        del self.rows[(strategy, slot)]
        if status is not None:
            self.audio_queue.put(("close", r.job, status, error))

    # -- the audio thread
    def _audio_work(self) -> None:
        sched = self.sched
        streams: dict[str, tuple] = {}  # job id -> (piece, MelStream, VocoderStream)
        while True:
            item = self.audio_queue.get()
            if item is None:
                return
            t0 = time.perf_counter()
            if isinstance(item, tuple):  # ("close", job, status, error)
                _, job, status, error = item
                streams.pop(job.id, None)
                sched.close_job(job, status, error)
                continue
            live = []
            for p in item:
                if not p.job.cancelled.is_set():
                    live.append(p)
                elif p.final is not None:  # left as its last piece ended: its slot is free
                    streams.pop(p.job.id, None)
                    sched.close_job(p.job, "cancelled")
            for p in live:
                if streams.get(p.job.id, (None,))[0] != p.piece:
                    if p.piece:  # the next piece of a request, after a short pause
                        gap = int(sched.synth.join_silence_s * sched.sample_rate)
                        sched.send_audio(p.job, np.zeros(gap, np.float32))
                    streams[p.job.id] = (p.piece, *self._new_streams(p.job))
            outs = self._audio(live, streams)
            for p, audio in zip(live, outs, strict=True):
                if isinstance(audio, Exception):
                    log.error("request %s failed: %s", p.job.id, audio)
                    streams.pop(p.job.id, None)
                    p.job.cancelled.set()  # the device thread frees its slot
                    sched.close_job(p.job, "failed", audio)
                    continue
                sched.send_audio(p.job, audio)
                if p.final is not None:
                    p.job.tokens = p.final
                    streams.pop(p.job.id, None)
                    sched.close_job(p.job, "done")
            self.seconds["audio"] += time.perf_counter() - t0

    def _new_streams(self, job: Job) -> tuple:
        from jaxtts.stream import MelStream, make_vocoder_stream  # start-up: jax 770 ms

        sched, engine = self.sched, self.sched.engine
        voc = make_vocoder_stream(
            sched.synth.vocoder, min_frames=sched.vocoder_frames, n_iter=sched.vocoder_iters
        )
        ref = engine.prompt_mel(job.prompt) if engine.uses_voice_ref else None
        return MelStream(engine, ref=ref), voc

    @staticmethod
    def _audio(live: list[_Piece], streams: dict) -> list:
        """Each row's tokens so far -> its new audio (or the exception that failed it): the
        token decoder of every row in one batch, then the windowed Griffin-Lim of every row
        as one batch (`jaxtts.stream.push_mels`, `push_many`)."""
        from jaxtts.stream import push_many, push_mels  # start-up: jax 770 ms

        mels_of = [streams[p.job.id][1] for p in live]
        vocs_of = [streams[p.job.id][2] for p in live]
        out: list = [None] * len(live)
        mels = {}
        try:  # every row's token decoder window in one batch (a bad row raises before any
            # row's state moves: `push_mels` decodes first, then takes)
            frames = push_mels(mels_of, [p.tokens for p in live], [p.ended for p in live])
            mels = dict(enumerate(frames))
        except Exception:  # noqa: BLE001 - find the failing row(s): one at a time
            for i, p in enumerate(live):
                try:
                    mels[i] = mels_of[i].push(p.tokens, p.ended)
                except Exception as e:  # noqa: BLE001 - that request fails, the others go on
                    out[i] = e
        idx = list(mels)
        try:
            audio = push_many(
                [vocs_of[i] for i in idx], [mels[i] for i in idx], [live[i].ended for i in idx]
            )
        except Exception as e:  # noqa: BLE001 - every row of the batch fails with it
            audio = [e] * len(idx)
        for i, a in zip(idx, audio, strict=True):
            out[i] = a
        return out

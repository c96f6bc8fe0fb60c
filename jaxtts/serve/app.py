"""The web layer of `python -m jaxtts.serve`: a FastAPI app over a `Scheduler`, with pydantic
request and response models in the shape of OpenAI's `/v1/audio/speech`.

Endpoints:
- `POST /v1/audio/speech`: `SpeechRequest` (`input`, `voice`, `strategy`, `response_format`,
  `stream`, `seed`, `max_seconds`; OpenAI's `model` and `speed` are accepted and ignored).
  `voice` is a corpus speaker or utterance id (`spk03`), or an uploaded prompt
  `{"wav_base64": <a wav file, base64>, "text": <its transcript>}`. `response_format`: `wav`
  (16-bit mono, a streaming header whose sizes say "unknown") or `pcm` (raw s16le). With
  `stream` (the default) the body is sent chunk by chunk as the LM decodes; without it, once
  the utterance is done. The response's `X-Request-Id` names the request for
  `GET /v1/requests/{id}`.
- `GET /v1/requests/{id}`: a finished request's `RequestRecord` (tokens, time to first audio,
  audio seconds, status `done` / `cancelled` / `failed`): the last `keep_requests` requests.
- `GET /health` (`Health`), `GET /metrics` (counters, queue depth, time-to-first-audio
  percentiles).
- `GET /`: a page with a text box, voice, strategy and seed pickers, an upload for a prompt
  wav with its transcript, a player that starts on the first chunk, the spectrogram drawn as
  the audio streams in, and a download button.

Every refused request is a 4xx with a one-line JSON `{"error": "<field>: ..."}`; a full queue
is a 503 with `Retry-After`. The app holds no state of its own: everything is the Scheduler's.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Literal

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt

from jaxtts.errors import ConfigError
from jaxtts.serve.scheduler import DONE, Scheduler, ServeError

_STATUS = {"invalid": 400, "busy": 503, "unknown": 404}


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


class UploadedVoice(BaseModel):
    """A prompt of the caller's own: a wav file (base64) and its transcript."""

    model_config = ConfigDict(extra="forbid")
    wav_base64: str
    text: str


class SpeechRequest(BaseModel):
    """The body of `POST /v1/audio/speech` (OpenAI's field names)."""

    model_config = ConfigDict(extra="forbid")
    input: str
    voice: str | UploadedVoice | None = None
    strategy: str | None = None
    response_format: Literal["wav", "pcm"] = "wav"
    stream: StrictBool = True
    seed: StrictInt = 0
    max_seconds: float | None = None
    model: str | None = None  # OpenAI's; one model is served
    speed: float | None = None  # OpenAI's; not supported, ignored


class RequestRecord(BaseModel):
    id: str
    status: str
    strategy: str
    seed: int
    tokens: list[int] | None
    first_audio_ms: float | None
    audio_seconds: float
    error: str | None


class Health(BaseModel):
    status: str
    model: str
    family: str
    strategies: list[str]
    voices: list[str]
    sample_rate: int


def _one_line(exc: RequestValidationError) -> str:
    """pydantic's first error as `<field>: <what was wrong>`."""
    err = exc.errors()[0]
    loc = [str(x) for x in err.get("loc", ()) if x != "body"]
    field = loc[0] if loc else "body"
    kind = err.get("type", "")
    if kind == "json_invalid":
        return "body: not valid JSON"
    if kind in ("model_attributes_type", "dict_type", "model_type") and not loc:
        return "body: expected a JSON object"
    if kind == "extra_forbidden":
        where = ".".join(loc)
        fields = sorted(SpeechRequest.model_fields)
        return f"{where}: unknown field, expected one of {fields}"
    if kind == "missing":
        return f"{'.'.join(loc)}: required"
    if field == "voice":
        return (
            "voice: expected a speaker name or {'wav_base64': <wav, base64>, 'text': <transcript>}"
        )
    msg = err.get("msg", "invalid").replace("Input should be", "expected")
    return f"{field}: {err.get('input')!r}, {msg}"


def create_app(sched: Scheduler) -> FastAPI:
    """The FastAPI app of a `Scheduler`."""
    app = FastAPI(title="jaxtts", docs_url=None, redoc_url=None)

    @app.exception_handler(ServeError)
    async def _refused(request, e: ServeError):
        headers = {"Retry-After": "1"} if e.kind == "busy" else None
        return JSONResponse({"error": str(e)}, status_code=_STATUS[e.kind], headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, e: RequestValidationError):
        return JSONResponse({"error": _one_line(e)}, status_code=400)

    @app.get("/health", response_model=Health)
    async def health():
        return Health(
            status="ok",
            model=sched.workdir,
            family=sched.engine.family,
            strategies=sched.strategies,
            voices=sorted(sched.voices),
            sample_rate=sched.sample_rate,
        )

    @app.get("/metrics")
    async def metrics():
        return sched.snapshot()

    @app.get("/v1/requests/{rid}", response_model=RequestRecord)
    async def request_record(rid: str):
        return sched.request(rid)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return (Path(__file__).parent / "page.html").read_text()

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechRequest, request: Request):
        voice = body.voice.model_dump() if isinstance(body.voice, UploadedVoice) else body.voice
        job = sched.make_job(
            body.input,
            voice,
            body.strategy,
            body.seed,
            body.max_seconds,
            body.response_format,
            body.stream,
        )
        await asyncio.to_thread(sched.prepare, job)  # the phonemizer, off the event loop
        sched.submit(job)
        media = "audio/wav" if job.format == "wav" else "audio/L16"
        headers = {"X-Request-Id": job.id, "X-Sample-Rate": str(sched.sample_rate)}

        async def next_chunk():
            return await asyncio.to_thread(job.chunks.get)

        if not job.stream:
            pieces = []
            try:
                while (c := await next_chunk()) is not DONE:
                    if isinstance(c, Exception):
                        kind = "invalid" if isinstance(c, ConfigError) else None
                        if kind is None:
                            return JSONResponse(
                                {"error": f"synthesis failed: {c}"}, status_code=500
                            )
                        raise ServeError(kind, f"synthesis failed: {c}")
                    pieces.append(c)
            finally:
                job.cancelled.set()  # a no-op once done; frees the slot if the client left
            audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
            data = pcm16(audio)
            if job.format == "wav":
                data = wav_header(sched.sample_rate, audio.size) + data
            return Response(data, media_type=media, headers=headers)

        async def body_iter():
            try:
                if job.format == "wav":
                    yield wav_header(sched.sample_rate)
                while (c := await next_chunk()) is not DONE:
                    if isinstance(c, Exception):
                        return  # headers are sent: the stream ends early; the record says why
                    yield pcm16(c)
            finally:
                job.cancelled.set()  # the client left (or the stream ended): free the device

        return StreamingResponse(body_iter(), media_type=media, headers=headers)

    return app


__all__ = [
    "Health",
    "RequestRecord",
    "SpeechRequest",
    "UploadedVoice",
    "create_app",
    "pcm16",
    "wav_header",
]

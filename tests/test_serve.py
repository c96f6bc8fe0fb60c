"""`python -m jaxtts.serve`: the HTTP API (FastAPI TestClient, no socket). The scheduling
cases (a full queue, a client that leaves mid-stream) run on a stand-in model whose chunks a
test releases one by one; the shipped backbone checks that a served request's tokens are the
offline synthesis's and that its streamed audio is what the record says."""

import base64
import io
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

ROOT = Path(__file__).resolve().parents[1]


class _Engine:
    family = "lm"
    decode_config = {"strategy": "far"}

    def parse_strategy(self, s):
        from jaxtts.errors import ConfigError

        if s not in ("far", "car:3"):
            raise ConfigError(f"--strategy {s!r}: unknown strategy")

    def options(self, **kw):
        import types

        return types.SimpleNamespace(**{"max_seconds": 12.0, **kw})


class _Synth:
    """Yields `chunks` chunks of 160 samples, each once the test releases it."""

    sample_rate = 16000

    def __init__(self, chunks=3):
        self.engine, self.chunks = _Engine(), chunks
        self.release = threading.Semaphore(0)
        self.started = threading.Event()

    def plan(self, strategy=None, **kw):
        import types

        from jaxtts.engine import Plan

        self.engine.parse_strategy(strategy)
        return Plan(types.SimpleNamespace(name=strategy), self.engine.options(strategy=strategy))

    def stream(self, text, prompt, plan=None, seed=0, **kw):
        from jaxtts.stream import StreamChunk

        self.started.set()
        for i in range(self.chunks):
            self.release.acquire()
            last = i == self.chunks - 1
            ids = np.arange(3) if last else None
            yield StreamChunk(np.full(160, 0.1, np.float32), 3 * (i + 1), last, 0.0, ids)


def _client(synth, **kw):
    from fastapi.testclient import TestClient

    from jaxtts.serve import Scheduler, create_app

    server = Scheduler(synth, "no/such/run", **kw)
    return server, TestClient(create_app(server))


def _wait(cond, timeout=10.0):
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.01)


def test_wav_header_and_pcm_are_exact():
    from jaxtts.serve import pcm16, wav_header

    h = wav_header(16000, 3)
    assert len(h) == 44 and h[:4] == b"RIFF" and h[8:16] == b"WAVEfmt "
    assert int.from_bytes(h[40:44], "little") == 6 and int.from_bytes(h[4:8], "little") == 42
    assert wav_header(16000)[40:44] == b"\xff\xff\xff\xff"  # streaming: size unknown
    assert (
        pcm16(np.array([0.0, 0.5, -1.0, 2.0], np.float32))
        == np.array([0, 16383, -32767, 32767], "<i2").tobytes()
    )


def test_bad_requests_are_one_line_4xx_and_the_server_keeps_serving():
    synth = _Synth(chunks=1)
    server, c = _client(synth, max_chars=50)
    sf = pytest.importorskip("soundfile")
    long_wav = io.BytesIO()
    sf.write(long_wav, np.zeros(16000 * 25, np.float32), 16000, format="WAV")
    bad = [
        ({"input": ""}, "input: expected a non-empty"),
        ({"input": "x" * 51}, "input: 51 characters, the limit is 50"),
        ({"input": "hi", "voice": "nobody"}, "voice: unknown voice 'nobody'"),
        ({"input": "hi", "strategy": "zzz"}, "strategy: --strategy 'zzz'"),
        ({"input": "hi", "response_format": "mp3"}, "response_format: 'mp3'"),
        ({"input": "hi", "seed": -1}, "seed: -1"),
        ({"input": "hi", "voice": {"wav_base64": "AAAA", "text": "a"}}, "not a readable wav"),
        (
            {
                "input": "hi",
                "voice": {
                    "wav_base64": base64.b64encode(long_wav.getvalue()).decode(),
                    "text": "a",
                },
            },
            "25.0 s of audio, the limit is 20 s",
        ),
        ({"input": "hi", "colour": 1}, "colour: unknown field"),
        (
            {"input": "你好世界你好世界"},
            "input: nothing an English voice can say: 8 letters of "
            "another script (CJK: '你好世界你好世界')",
        ),
        ({"input": "<b></b>"}, "input: nothing an English voice can say: markup"),
        ({"input": "\x07\x08"}, "control characters ['U+0007', 'U+0008']"),
    ]
    for body, msg in bad:
        r = c.post("/v1/audio/speech", json=body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert msg in err and "\n" not in err, (msg, err)
    r = c.post(
        "/v1/audio/speech", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"] == "body: not valid JSON"
    synth.release.release()
    r = c.post("/v1/audio/speech", json={"input": "hi", "stream": False})
    assert r.status_code == 200 and len(r.content) == 44 + 2 * 160
    assert c.get("/metrics").json()["completed"] == 1
    assert c.get("/v1/requests/nope").status_code == 404


def test_full_queue_is_503_with_retry_after_and_a_left_client_frees_the_device():
    import httpx

    from jaxtts.serve import LiveServer, create_app

    synth = _Synth(chunks=3)
    server, _ = _client(synth, max_queue=1)
    live = LiveServer(create_app(server))
    try:
        with httpx.Client(base_url=live.url, timeout=20) as c:
            # request 1 streams: its first chunk arrives, then the client leaves mid-stream
            with c.stream("POST", "/v1/audio/speech", json={"input": "one"}) as r1:
                rid1 = r1.headers["x-request-id"]
                synth.release.release()
                _wait(lambda: server.active is not None)
                job1 = server.active
                got = b""
                for piece in r1.iter_bytes():
                    got += piece
                    if len(got) >= 44 + 320:
                        break
                # the worker is busy with request 1: one request may wait, the next is refused
                server.submit(server.make_job("two", stream=False))
                r3 = c.post("/v1/audio/speech", json={"input": "three"})
                assert r3.status_code == 503 and r3.headers["retry-after"] == "1"
                assert "server busy" in r3.json()["error"]
            # closed: the server sees the disconnect and flags request 1, which stops at its
            # next chunk; request 2 then runs to its end
            _wait(lambda: job1.cancelled.is_set())
            for _ in range(4):
                synth.release.release()
            _wait(lambda: server.snapshot()["completed"] == 1)
            assert c.get(f"/v1/requests/{rid1}").json()["status"] == "cancelled"
            m = c.get("/metrics").json()
            assert m["cancelled"] == 1 and m["rejected_busy"] == 1 and m["queued"] == 0
    finally:
        live.close()


@pytest.fixture(scope="module")
def served():
    from fastapi.testclient import TestClient

    from jaxtts.serve import Scheduler, create_app
    from jaxtts.synthesize import Synthesizer

    run = ROOT / "pretrained" / "car_small"
    synth = Synthesizer.from_workdir(run)
    server = Scheduler(synth, str(run), segment_steps=4)
    return synth, server, TestClient(create_app(server))


def test_served_tokens_are_the_offline_synthesis(served, tiny_corpus):
    """A streamed request (pcm) and a whole one (wav) with the same seed: both carry the
    tokens an offline `synthesize` of the text gives; the streamed body holds the audio
    seconds its record counts; the page is served."""
    from jaxtts.data.manifest import read_split
    from jaxtts.data.prompt import Prompt

    synth, server, c = served
    utt = read_split(tiny_corpus, "test")[0]
    wav = io.BytesIO()
    import soundfile as sf

    sf.write(wav, Prompt.from_utterance(utt).wav, 16000, format="WAV")
    voice = {"wav_base64": base64.b64encode(wav.getvalue()).decode(), "text": utt.text}
    text = "The cat sat on the mat."
    body = {"input": text, "voice": voice, "strategy": "car:3", "seed": 5, "max_seconds": 4}
    r = c.post("/v1/audio/speech", json={**body, "response_format": "pcm"})
    assert r.status_code == 200, r.text
    rec = c.get(f"/v1/requests/{r.headers['x-request-id']}").json()
    assert rec["status"] == "done" and rec["first_audio_ms"] > 0
    assert len(r.content) == 2 * round(rec["audio_seconds"] * 16000)
    r2 = c.post("/v1/audio/speech", json={**body, "stream": False})
    assert (
        r2.content[:4] == b"RIFF"
        and int.from_bytes(r2.content[40:44], "little") == len(r2.content) - 44
    )
    rec2 = c.get(f"/v1/requests/{r2.headers['x-request-id']}").json()
    prompt = server.decode_wav(voice["wav_base64"])
    # offline at the server's batch (line 0 of 8): XLA's CPU kernels may round a batch-1 step
    # differently, which can flip a top-p draw (benchmarks/RESULTS.md#serve)
    off = synth.synthesize(
        [text] * server.slots.num_slots,
        Prompt("upload", "", utt.text, prompt),
        strategy="car:3",
        seed=5,
        max_seconds=4,
        progress=False,
        vocode=False,
    )[0]
    assert rec["tokens"] == rec2["tokens"] == off.tokens.tolist()
    assert "<textarea" in c.get("/").text
    assert c.get("/health").json()["sample_rate"] == 16000


def test_concurrent_requests_share_the_slots_keep_their_tokens_and_compile_nothing(served):
    """Five requests of different lengths, seeds and two strategies at once: they decode
    together in the slots (peak > 1), each carries the tokens of its offline synthesis, and
    nothing compiles after the warm-up (shapes are static)."""
    synth, server, _ = served
    server.warm_up(seconds=0.5, strategies=["far", "car:3"])
    texts = [
        ("Hi there.", "far", 1),
        ("The cat sat on the mat.", "car:3", 2),
        ("Where did you put the keys that were on the table?", "far", 3),
        ("Yes.", "car:3", 4),
        ("Seven old farmers sold their cows on a rainy Monday.", "far", 5),
    ]
    jobs = []
    for text, strategy, seed in texts:
        job = server.make_job(text, strategy=strategy, seed=seed, max_seconds=3)
        server.submit(job)
        jobs.append(job)
    from jaxtts.serve import DONE

    for job in jobs:
        while (c := job.chunks.get(timeout=300)) is not DONE:
            assert not isinstance(c, Exception), c
        assert job.status == "done", job.error
    m = server.snapshot()
    assert m["peak_active"] > 1 and m["compilations_since_warmup"] == 0
    for job, (text, strategy, seed) in zip(jobs, texts, strict=True):
        off = synth.synthesize(
            [text] * server.slots.num_slots,
            None,
            strategy=strategy,
            seed=seed,
            max_seconds=3,
            progress=False,
            vocode=False,
        )[0]  # line 0 at the server's batch (see above)
        assert job.tokens == off.tokens.tolist(), text

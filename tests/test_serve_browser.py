"""The served page in a real headless browser: Chromium's headless shell (the system package
`chromium-headless-shell`, installed by scripts/setup.sh), driven over the DevTools protocol on
a pipe (`--remote-debugging-pipe`: JSON messages ending in NUL on fds 3 and 4, no extra
package). It opens `/?autoplay=1&text=...`; the page streams the sentence through
`/v1/audio/speech` into Web Audio, and then shows its time to first audio and the audio
seconds that arrived. JAXTTS_SCREENSHOT=<png> keeps the page's screenshot
(docs/serve_page.png was made so)."""

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BROWSER = shutil.which("chromium-headless-shell") or shutil.which("chromium")


class DevTools:
    """A headless browser and its DevTools protocol over a pipe: `call(method, **params)`."""

    def __init__(self, browser: str, args: list[str], env: dict):
        r3, w3 = os.pipe()  # us -> the browser (its fd 3)
        r4, w4 = os.pipe()  # the browser -> us (its fd 4)

        def child():
            os.dup2(r3, 3)
            os.dup2(w4, 4)

        self.proc = subprocess.Popen(
            [browser, *args, "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4, r3, w4),  # 3 and 4 survive the closing of the other descriptors
            preexec_fn=child,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        os.close(r3)
        os.close(w4)
        self.w, self.r = os.fdopen(w3, "wb", buffering=0), os.fdopen(r4, "rb", buffering=0)
        self.n, self.buf = 0, b""

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.w.write(json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = self.r.read(65536)
                if not chunk:
                    raise RuntimeError(f"the browser closed its pipe during {method}")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            m = json.loads(raw)
            if m.get("id") == self.n:  # (events have no id)
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: scripts/setup.sh installs chromium-headless-shell"
)
def test_page_streams_a_sentence_in_a_headless_browser(tmp_path):
    from jaxtts.serve import LiveServer, Scheduler, create_app
    from jaxtts.synthesize import Synthesizer

    run = ROOT / "pretrained" / "car_small"
    server = Scheduler(Synthesizer.from_workdir(run), os.path.relpath(run), slots=2)
    server.warm_up(seconds=0.5, strategies=server.strategies[:1])  # the page's default
    live = LiveServer(create_app(server))
    args = [
        "--headless",
        "--no-sandbox",  # tests run as root in CI containers
        "--disable-gpu",
        "--autoplay-policy=no-user-gesture-required",
        "--window-size=760,560",
    ]
    browser = DevTools(BROWSER, args, {**os.environ, "HOME": str(tmp_path)})
    try:
        url = f"{live.url}/?autoplay=1&seed=3&text=Where%20did%20you%20put%20the%20keys%3F"
        target = browser.call("Target.createTarget", url=url)["targetId"]
        sid = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        probe = (
            "JSON.stringify([document.body.dataset.firstAudioMs || null, "
            "document.body.dataset.audioSeconds || null, document.body.dataset.error || null, "
            "document.getElementById('status').textContent, "
            "document.body.dataset.spectrogramColumns || null, "
            "document.body.dataset.download || null])"
        )
        t0, seen = time.time(), None
        while time.time() - t0 < 120:
            value = browser.call("Runtime.evaluate", sid, expression=probe, returnByValue=True)
            value = value["result"].get("value")  # none while the page is still loading
            seen = json.loads(value) if value else seen
            if seen and (seen[0] or seen[2]):
                break
            time.sleep(0.2)
        first_ms, secs, error, status, columns, download = seen
        assert error is None and first_ms is not None, seen
        assert 0 < int(first_ms) < 60_000 and float(secs) > 0.5
        assert status.startswith(f"time to first audio: {first_ms} ms")
        # the spectrogram drew one column per 256 samples of what arrived (512-point frames)
        assert int(columns) == (round(float(secs) * 16000) - 512) // 256 + 1
        assert download.startswith("blob:")  # the download button holds the utterance's wav
        rec = server.request("req1")
        assert rec["seed"] == 3 and rec["status"] == "done"  # the page's seed reached the API
        assert server.snapshot()["completed"] == 1
        shot = base64.b64decode(browser.call("Page.captureScreenshot", sid, format="png")["data"])
        assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 5000
        if os.environ.get("JAXTTS_SCREENSHOT"):
            Path(os.environ["JAXTTS_SCREENSHOT"]).write_bytes(shot)
    finally:
        browser.close()
        live.close()

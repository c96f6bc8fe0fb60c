"""Benchmark: the token round-trip ceiling of k-means tokenizers at 50 / 25 Hz and K = 1024 / 2048.

    python -m benchmarks.diagnostics.tokenizer_ceilings [--corpus data/builtin] [--num 240] \
        [--k 1024,2048]
        [--frames 1,2] [--out out/tokenizer_ceilings] [--asr_workers 1]

Fits (or finds cached) `kmeans<K>[x<frames>]` on the corpus's train split, exactly as
`train.py` would (`jaxtts.train.prepare.tokenizer_for`), then runs ONE
`python -m jaxtts.evaluate` over the test split with the ground-truth row and one
`tokenizer:<dir>` row per tokenizer (audio -> tokens -> log-mel -> Griffin-Lim -> ASR, both
evaluator LMs). The WER of a tokenizer row is the best a TTS LM on those tokens can reach with
this vocoder. Fit times are printed (they are minutes on 2 CPU cores for K = 2048).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import ml_collections as mlc

from jaxtts.data.manifest import read_split
from jaxtts.train.prepare import tokenizer_for

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--num", type=int, default=None, help="test utterances (default: all)")
    ap.add_argument("--k", default="1024,2048")
    ap.add_argument("--frames", default="1,2", help="mel frames a token: 1 = 50 Hz, 2 = 25 Hz")
    ap.add_argument("--out", default="out/tokenizer_ceilings")
    ap.add_argument("--asr_workers", default="1")
    a = ap.parse_args()
    corpus = Path(a.corpus)
    train = read_split(corpus, "train")
    dirs = []
    for k in (int(x) for x in a.k.split(",")):
        for f in (int(x) for x in a.frames.split(",")):
            data_cfg = mlc.ConfigDict(
                dict(tokenizer="kmeans", tokenizer_k=k, tokenizer_frames=f, tokenizer_dir="")
            )
            t0 = time.perf_counter()
            tok = tokenizer_for(data_cfg, corpus, train)
            print(
                f"{tok.name}: {tok.frame_rate:g} Hz, ready in {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
            dirs.append(corpus / "tokenizers" / tok.name)
    rows = ",".join(["ground_truth"] + [f"tokenizer:{d}" for d in dirs])
    cmd = [
        sys.executable,
        "-m",
        "jaxtts.evaluate",
        "--corpus",
        str(corpus),
        "--split",
        "test",
        "--rows",
        rows,
        "--speaker_encoder",
        "none",
        "--no_plots",
        "--out",
        a.out,
        "--asr_workers",
        a.asr_workers,
    ]
    if a.num:
        cmd += ["--num", str(a.num)]
    print("$", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())

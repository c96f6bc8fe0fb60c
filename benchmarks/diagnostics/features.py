"""Feature extraction throughput and tokenizer / vocoder round-trip quality on a corpus split.

    python -m benchmarks.diagnostics.features --corpus data/builtin --split test --num 100 \
        --tokenizer data/builtin/tokenizers/kmeans1024

Measures, over `--num` utterances (single process, whatever cores numpy/JAX use):
  load + log-mel      utterances/s and seconds of audio per second (x realtime)
  tokenizer encode    frames/s (k-means: JAX nearest-centroid), x realtime
  vocoder             Griffin-Lim RTF (seconds of compute per second of audio)
  round trips (mel L1 = mean |log-mel difference| over all frames and bins, natural log):
    k-means decode    tokens -> centroid mel vs the original mel
    linear quantiser  Q=100 levels (the MDM paper's) decode vs the original mel
    GL re-analysis    log-mel of the Griffin-Lim audio of the original mel vs that mel
The ASR WER of the same round trips is a `jaxtts.evaluate` table (rows ground_truth,
resynth:griffin_lim, tokenizer:<dir>); see benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--split", default="test")
    ap.add_argument("--num", type=int, default=100)
    ap.add_argument("--tokenizer", default="data/builtin/tokenizers/kmeans1024")
    ap.add_argument("--vocoder_num", type=int, default=20)
    a = ap.parse_args(argv)

    import numpy as np

    from jaxtts.codec import load_tokenizer
    from jaxtts.data.audio import MelConfig, load_audio, log_mel
    from jaxtts.data.manifest import read_split
    from jaxtts.data.tokenizers import LinearMelQuantizer
    from jaxtts.data.vocoder import GriffinLim

    cfg = MelConfig()
    utts = read_split(a.corpus, a.split, a.num)
    t0 = time.perf_counter()
    wavs = [load_audio(u.path, cfg.sample_rate) for u in utts]
    t1 = time.perf_counter()
    mels = [log_mel(w, cfg) for w in wavs]
    t2 = time.perf_counter()
    audio_s = sum(w.size for w in wavs) / cfg.sample_rate
    frames = sum(m.shape[0] for m in mels)
    rows = [
        ("load audio", f"{len(utts) / (t1 - t0):.0f} utt/s", f"{audio_s / (t1 - t0):.0f}x"),
        ("log-mel (numpy)", f"{len(utts) / (t2 - t1):.0f} utt/s", f"{audio_s / (t2 - t1):.0f}x"),
    ]

    tok = load_tokenizer(a.tokenizer)
    tok.encode(mels[0])  # compile
    t0 = time.perf_counter()
    codes = [tok.encode(m) for m in mels]
    t1 = time.perf_counter()
    rows.append(
        (f"{tok.name} encode", f"{frames / (t1 - t0):.0f} frames/s", f"{audio_s / (t1 - t0):.0f}x")
    )
    km_l1 = float(
        np.mean(
            np.concatenate(
                [np.abs(tok.decode(c) - m).ravel() for c, m in zip(codes, mels, strict=True)]
            )
        )
    )
    q = LinearMelQuantizer(100).fit(mels)
    q_l1 = float(np.mean(np.concatenate([np.abs(q.decode(q.encode(m)) - m).ravel() for m in mels])))

    voc = GriffinLim(cfg)
    sub = mels[: a.vocoder_num]
    voc.mel_to_audio(sub[0])
    t0 = time.perf_counter()
    outs = [voc.mel_to_audio(m) for m in sub]
    t1 = time.perf_counter()
    sub_s = sum(o.size for o in outs) / cfg.sample_rate
    rows.append(
        ("Griffin-Lim vocoder", f"RTF {(t1 - t0) / sub_s:.4f}", f"{sub_s / (t1 - t0):.0f}x")
    )
    diffs = []
    for o, m in zip(outs, sub, strict=True):
        r = log_mel(o, cfg)
        n = min(r.shape[0], m.shape[0])
        diffs.append(np.abs(r[:n] - m[:n]).ravel())
    gl_l1 = float(np.mean(np.concatenate(diffs)))

    print(
        f"{a.corpus}/{a.split}: {len(utts)} utterances, {audio_s:.0f} s of audio, {frames} frames\n"
    )
    print("| stage | throughput | x realtime |\n|---|--:|--:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print("\n| round trip | mel L1 (nats) |\n|---|--:|")
    print(f"| {tok.name} encode -> decode | {km_l1:.3f} |")
    print(f"| linear quantiser Q=100 | {q_l1:.4f} (step {q.step:.3f}) |")
    print(f"| Griffin-Lim audio -> log-mel | {gl_l1:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CTC reward ASR on ground-truth audio: CER/WER per split and speaker, and throughput.

    python -m benchmarks.diagnostics.ctc_asr --workdir runs/ctc_asr [--corpus data/builtin]
        [--splits dev,test] [--batch-size 32] [--out out/ctc_asr]

Prints markdown tables: CER/WER per split (and per speaker of the last split), and the
batch transcription throughput (seconds of audio per wall second) of the jitted forward +
greedy decoding on precomputed log-mels, and end to end from waveforms (log-mel included),
after a warm-up pass. Per-utterance transcripts go to `<out>/ctc_asr_<split>.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", default="runs/ctc_asr")
    p.add_argument("--corpus", default="")
    p.add_argument("--splits", default="dev,test")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--out", default="out/ctc_asr")
    a = p.parse_args(argv)

    import numpy as np

    from jaxtts.data.audio import MelConfig, load_audio, wav_to_mel
    from jaxtts.methods.ctc_asr import CTCASR, error_rates, evaluate_split

    asr = CTCASR.load(a.workdir, batch_size=a.batch_size)
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, last = [], None
    for split in a.splits.split(","):
        r = evaluate_split(asr, a.corpus or None, split, progress=False)
        rows.append((split, r))
        last = r
        with open(out_dir / f"ctc_asr_{split}.json", "w") as f:
            rows_out = [
                {"id": u.id, "speaker": u.speaker, "ref": ref, "hyp": hyp}
                for u, ref, hyp in zip(r["utts"], r["refs"], r["hyps"], strict=True)
            ]
            json.dump(rows_out, f, indent=1)

    print("| split | N | audio (s) | CER % | WER % |")
    print("|---|--:|--:|--:|--:|")
    for split, r in rows:
        print(
            f"| {split} | {r['n']} | {r['audio_s']:.0f} | {100 * r['cer']:.2f} | "
            f"{100 * r['wer']:.2f} |"
        )
    split = rows[-1][0]
    print(f"\nPer speaker ({split}):\n")
    print("| speaker | N | CER % | WER % |")
    print("|---|--:|--:|--:|")
    for spk in sorted({u.speaker for u in last["utts"]}):
        idx = [i for i, u in enumerate(last["utts"]) if u.speaker == spk]
        e = error_rates([last["refs"][i] for i in idx], [last["hyps"][i] for i in idx])
        print(f"| {spk} | {len(idx)} | {100 * e['cer']:.2f} | {100 * e['wer']:.2f} |")

    # Throughput on the last split (second pass: compiled shapes are warm).
    utts = last["utts"]
    cfg = MelConfig()
    wavs = [load_audio(u.path, cfg.sample_rate) for u in utts]
    audio_s = sum(len(w) for w in wavs) / cfg.sample_rate
    mels = [wav_to_mel(w, cfg.sample_rate) for w in wavs]
    asr.transcribe_mels(mels)  # warm-up
    t0 = time.perf_counter()
    asr.transcribe_mels(mels)
    t_mel = time.perf_counter() - t0
    t0 = time.perf_counter()
    asr.transcribe(wavs, cfg.sample_rate)
    t_wav = time.perf_counter() - t0
    t0 = time.perf_counter()
    for w in wavs[:20]:
        asr.transcribe([w], cfg.sample_rate)
    t_one = (time.perf_counter() - t0) / min(20, len(wavs))
    mean_dur = float(np.mean([len(w) for w in wavs[:20]])) / cfg.sample_rate
    import jax

    print(
        f"\nThroughput ({split}, {len(utts)} utterances, {audio_s:.0f} s of audio, "
        f"batch {a.batch_size}, {jax.devices()[0].platform}):\n"
    )
    print("| input | wall (s) | utterances/s | x real time |")
    print("|---|--:|--:|--:|")
    print(f"| log-mels, batched | {t_mel:.2f} | {len(utts) / t_mel:.0f} | {audio_s / t_mel:.0f} |")
    print(
        f"| waveforms, batched (incl. log-mel) | {t_wav:.2f} | {len(utts) / t_wav:.0f} | "
        f"{audio_s / t_wav:.0f} |"
    )
    print(
        f"| waveform, batch 1 (mean {mean_dur:.1f} s clip) | {t_one:.3f} | {1 / t_one:.0f} | "
        f"{mean_dur / t_one:.0f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

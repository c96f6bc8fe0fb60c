"""What streaming costs: the streamed audio against the whole-utterance audio, per lookahead,
and the time to first audio.

    python -m benchmarks.stream_quality --workdir pretrained/car_small --strategies far,car:3 \
        --lookahead 5,2,0 --num 20 --out out/stream_quality.json

For the first `--num` test sentences with their zero-shot prompts (seed 0, batch 1): the
offline synthesis and the stream (`jaxtts.stream`, `--segment_steps` decode steps per chunk)
of every strategy x lookahead (tokens; the tokenizer's own receptive field when left out). The
tokens are the same (checked here and in tests/test_stream.py); the audio differs by the
windowed vocoder and, below the tokenizer's lookahead, by the cut token context. Columns: MCD
of the streamed against the offline audio (dB, DTW-aligned), WER / CER of both through the
shipped CTC ASR (no language model: compare the two columns, not other tables), the time to
first audio (median over the sentences; compiled; from the call to the first non-empty chunk),
the audio that the first chunk holds, and the wall time to the last chunk.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_small")
    ap.add_argument("--strategies", default="far,car:3")
    ap.add_argument(
        "--lookahead", default="", help="tokens, comma-separated ('' = the tokenizer's)"
    )
    ap.add_argument("--segment_steps", type=int, default=4)
    ap.add_argument(
        "--n_iter",
        default="",
        help="Griffin-Lim iterations per streamed window, comma-separated ('' = the vocoder's)",
    )
    ap.add_argument(
        "--min_frames",
        default="1",
        help="VocoderStream min_frames, comma-separated (the server vocodes 16 at a time)",
    )
    ap.add_argument("--num", type=int, default=20)
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--out", default="out/stream_quality.json")
    args = ap.parse_args(argv)

    from jaxtts.eval.metrics import mel_cepstral_distortion
    from jaxtts.methods.ctc_asr import CTCASR, error_rates
    from jaxtts.synthesize import Synthesizer, zero_shot_sentences

    synth = Synthesizer.from_workdir(args.workdir)
    texts, prompts = zero_shot_sentences(args.corpus, args.num)
    asr = CTCASR.load("pretrained/ctc_asr")
    sr = synth.sample_rate
    r_tok = synth.engine.tokenizer.lookahead_tokens
    looks = [int(x) for x in args.lookahead.split(",") if x] or [r_tok]
    frames = [int(x) for x in args.min_frames.split(",")]
    iters = [int(x) for x in args.n_iter.split(",") if x] or [synth.vocoder.n_iter]
    rows = []
    print(
        "| strategy | lookahead (tokens / ms) | min frames | GL iterations | MCD dB | "
        "WER offline % | WER streamed % | CER offline / streamed % | first audio ms | "
        "first chunk ms of audio | done s |",
        flush=True,
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|", flush=True)
    for strategy in args.strategies.split(","):
        off = synth.synthesize(texts, prompts, strategy=strategy, batch_size=1, progress=False)
        e_off = error_rates(texts, asr.transcribe([r.wav for r in off], sr))
        for look, min_frames, n_iter in [(a, b, c) for a in looks for b in frames for c in iters]:
            list(synth.stream(texts[0], prompts[0], strategy=strategy, lookahead=look))  # compile
            wavs, first, first_len, done, mcd = [], [], [], [], []
            for k, (text, prompt, o) in enumerate(zip(texts, prompts, off, strict=True)):
                chunks = list(
                    synth.stream(
                        text,
                        prompt,
                        strategy=strategy,
                        lookahead=look,
                        min_frames=min_frames,
                        n_iter=n_iter,
                        segment_steps=args.segment_steps,
                        line=k,  # the offline call's key for line k
                    )
                )
                if chunks[-1].tokens != o.tokens.size:
                    raise SystemExit(f"{strategy}: streamed tokens differ from offline: {text!r}")
                audio = [c for c in chunks if c.audio.size]
                first.append(audio[0].elapsed_s)
                first_len.append(audio[0].audio.size / sr)
                done.append(chunks[-1].elapsed_s)
                wav = np.concatenate([c.audio for c in chunks])
                wavs.append(wav)
                mcd.append(mel_cepstral_distortion(o.wav, wav, sr))
            e = error_rates(texts, asr.transcribe(wavs, sr))
            row = {
                "strategy": strategy,
                "lookahead_tokens": look,
                "lookahead_ms": 1e3 * look / synth.engine.frame_rate,
                "min_frames": min_frames,
                "n_iter": n_iter,
                "mcd_db": float(np.mean(mcd)),
                "wer_offline": e_off["wer"],
                "wer_stream": e["wer"],
                "cer_offline": e_off["cer"],
                "cer_stream": e["cer"],
                "first_audio_ms": 1e3 * statistics.median(first),
                "first_chunk_audio_ms": 1e3 * statistics.median(first_len),
                "done_s": statistics.median(done),
                "num": len(texts),
                "segment_steps": args.segment_steps,
            }
            rows.append(row)
            print(
                f"| {strategy} | {look} / {row['lookahead_ms']:.0f} | {min_frames} | {n_iter} | "
                f"{row['mcd_db']:.2f} | "
                f"{100 * e_off['wer']:.1f} | {100 * e['wer']:.1f} | {100 * e_off['cer']:.1f} / "
                f"{100 * e['cer']:.1f} | {row['first_audio_ms']:.0f} | "
                f"{row['first_chunk_audio_ms']:.0f} | {row['done_s']:.2f} |",
                flush=True,
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

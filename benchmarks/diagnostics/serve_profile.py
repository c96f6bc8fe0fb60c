"""Where a served request's time goes, without HTTP: the parts of time to first audio at one
client, and the host's audio work per row and segment at a full slot loop.

    python -m benchmarks.diagnostics.serve_profile --workdir pretrained/car_small --strategy far

Prints one JSON object (times: median of `--rounds`):
- `text_rows_ms`: the text front-end (phonemes -> ids) of a 10-word sentence;
- `insert_ms`: prefill of one row into a slot (`Slots.insert`, waited for);
- `segment_ms`: one `advance(segment_steps)` + `read` with 1 and with every slot occupied (the
  loop runs every slot either way);
- `host`: the host's audio work (token decoder + windowed Griffin-Lim) of 1 and 8 streams of
  one decoded utterance, segment by segment: the whole-prefix mel decode and per-row vocoder
  against the windowed decode, the batched vocoder (`push_many`) and `min_frames`;
- `first_audio_ms`: the sum a lone request waits (text rows + insert + the segments until the
  first audio + that audio's host work).
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from benchmarks.serve_load import SENTENCES
from jaxtts import cli
from jaxtts.decode.slots import Slots
from jaxtts.stream import MelStream, VocoderStream, push_many, push_mels
from jaxtts.synthesize import Synthesizer, _bucket, piece_keys, resolve_prompt


def _ms(f, rounds: int) -> float:
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="pretrained/car_small")
    ap.add_argument("--strategy", default="far")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--segment_steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--prefill_bucket",
        type=int,
        default=64,
        help="the slots' prefill width step (`Slots`; the text width: no split prefill)",
    )
    args = ap.parse_args()
    cli.limit_host_blas()
    synth = Synthesizer.from_workdir(args.workdir)
    engine = synth.engine
    prompt = resolve_prompt(args.workdir, speaker="spk03")
    p_ids, p_units = engine.encode_prompt(prompt)
    plan = synth.plan(args.strategy)
    text = SENTENCES[1]
    out = {"strategy": args.strategy, "slots": args.slots, "segment_steps": args.segment_steps}
    out["text_rows_ms"] = _ms(lambda: synth.text_rows(0, text, p_ids, p_units), args.rounds)
    rows = synth.text_rows(0, text, p_ids, p_units)
    strat = plan.strategy
    models, params = engine.decode_models_for(None, plan)
    pool = Slots(
        strat,
        models,
        params,
        num_slots=args.slots,
        text_width=_bucket(engine.max_text_symbols + 64, 64),
        prompt_width=synth.prompt_bucket,
        prompt_example=p_units,
        max_new_tokens=engine.max_new_units(plan.options),
        sampling=plan.options.sampling,
        prefill_bucket=args.prefill_bucket,
    )
    _, _, ids, units, n_ptext = rows[0]
    key = piece_keys(0, rows[:1])

    def insert(slot=0):
        pool.insert(slot, (ids, units, n_ptext), key)
        jax.block_until_ready(pool.state)

    insert()  # compile
    out["insert_ms"] = _ms(insert, args.rounds)

    def segment():
        pool.advance(args.segment_steps)
        return pool.read()

    seg = {}
    for occupied in (1, args.slots):
        for s in range(args.slots):
            pool.free(s)
        for s in range(occupied):
            insert(s)
        segment()  # compile / warm
        ts = []
        for _ in range(args.rounds):
            for s in range(occupied):  # fresh rows: a segment near the utterance start
                insert(s)
            t0 = time.perf_counter()
            segment()
            ts.append(time.perf_counter() - t0)
        seg[occupied] = 1e3 * float(np.median(ts))
    out["segment_ms"] = seg

    # one whole utterance of one row: the segments to first audio, its tokens
    for s in range(args.slots):
        pool.free(s)
    insert(0)
    n_seg, cuts = 0, []
    while True:
        length, tokens, done, _ = segment()
        n_seg += 1
        cuts.append(int(length[0]))
        if bool(done[0]):
            break
    toks = np.asarray(tokens[0, : cuts[-1]], np.int32)

    def host(rows: int, windowed: bool, min_frames: int, batched: bool, n_iter: int = 32):
        """The host's audio work of `rows` streams of these tokens, segment by segment ->
        (ms per segment, ms per audio second and stream, segments to the first audio)."""
        mels = [MelStream(engine) for _ in range(rows)]
        vocs = [
            VocoderStream(synth.vocoder, min_frames=min_frames, n_iter=n_iter) for _ in range(rows)
        ]
        if not windowed:
            for m in mels:
                m.tok = None
        t, samples, first = 0.0, 0, None
        for k, n in enumerate(cuts):
            fin = k == len(cuts) - 1
            t0 = time.perf_counter()
            if batched:  # the server: token decoder windows and vocoder windows as batches
                frames = push_mels(mels, [toks[:n]] * rows, [fin] * rows)
                audio = push_many(vocs, frames, [fin] * rows)
            else:
                frames = [m.push(toks[:n], fin) for m in mels]
                audio = [v.push(f, fin) for v, f in zip(vocs, frames, strict=True)]
            t += time.perf_counter() - t0
            samples += audio[0].size
            if first is None and audio[0].size:
                first = (k + 1, 1e3 * (time.perf_counter() - t0))
        audio_s = samples / synth.sample_rate
        return {
            "ms_per_segment": 1e3 * t / len(cuts),
            "ms_per_audio_s_per_stream": 1e3 * t / audio_s / rows,
            "first_audio": first,
        }

    out["utterance"] = {"tokens": int(toks.size), "segments": len(cuts)}
    out["host"] = {}
    for name, kw in {
        "1 row, whole prefix, per window": dict(
            rows=1, windowed=False, min_frames=1, batched=False
        ),
        "1 row, windowed mel": dict(rows=1, windowed=True, min_frames=1, batched=False),
        "1 row, windowed, min_frames 16": dict(rows=1, windowed=True, min_frames=16, batched=False),
        "8 rows, whole prefix, per row": dict(rows=8, windowed=False, min_frames=1, batched=False),
        "8 rows, windowed, batched": dict(rows=8, windowed=True, min_frames=1, batched=True),
        "8 rows, windowed, batched, min_frames 16": dict(
            rows=8, windowed=True, min_frames=16, batched=True
        ),
        "8 rows, windowed, batched, min_frames 16, 16 iterations": dict(
            rows=8, windowed=True, min_frames=16, batched=True, n_iter=16
        ),
        "8 rows, windowed, batched, min_frames 16, 8 iterations (the server)": dict(
            rows=8, windowed=True, min_frames=16, batched=True, n_iter=8
        ),
    }.items():
        out["host"][name] = host(**kw)
    n_first, host_first = out["host"]["1 row, windowed mel"]["first_audio"]
    out["first_audio_ms"] = {
        "segments": n_first,
        "text_rows + insert + segments + host": out["text_rows_ms"]
        + out["insert_ms"]
        + n_first * seg[1]
        + host_first,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""Quick quality check with the shipped CTC ASR (no language model, so its WER runs high:
compare rows with each other, not with the domain-LM tables): the first `--num` test sentences
with their zero-shot prompts, batch 8, seed 0, one row per `<strategy>@<run folder>`.

    python -m benchmarks.diagnostics.quick_ctc_wer \
        --rows far@pretrained/car_deep,car:3@pretrained/car_deep \
        --num 40 --out out/ctc_wer_deep.json

Writes `--out` in the row layout of an evaluate results.json (`rows[*].name` '<strategy>
@<folder>', `wer_ctc`, `cer_ctc`), which `benchmarks/methods_speed.py --eval` reads as the WER
column when no domain-LM WER of the row is given.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="far@pretrained/car_deep,car:3@pretrained/car_deep")
    ap.add_argument("--num", type=int, default=40)
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument("--out", default="out/ctc_wer.json")
    args = ap.parse_args(argv)

    from jaxtts.evaluate import split_specs
    from jaxtts.methods.ctc_asr import CTCASR, error_rates
    from jaxtts.synthesize import Synthesizer, zero_shot_sentences

    texts, prompts = zero_shot_sentences(args.corpus, args.num)
    asr = CTCASR.load("pretrained/ctc_asr")
    synths: dict = {}
    rows = []
    for spec in split_specs(args.rows):
        strategy, _, folder = spec.partition("@")
        folder = os.path.normpath(folder)
        if folder not in synths:
            synths[folder] = Synthesizer.from_workdir(folder)
        synth = synths[folder]
        t = time.time()
        res = synth.synthesize(
            texts, prompts, strategy=strategy, batch_size=8, seed=0, progress=False
        )
        r = error_rates(texts, asr.transcribe([x.wav for x in res], synth.sample_rate))
        capped = sum(x.info["hit_max"] for x in res)
        rows.append(
            {
                "kind": "model",
                "name": f"{strategy} @{folder}",
                "wer_ctc": r["wer"],
                "cer_ctc": r["cer"],
                "capped": capped,
                "num_utts": len(texts),
            }
        )
        print(
            f"{strategy} @{folder}: CTC-ASR WER {100 * r['wer']:.1f} % CER "
            f"{100 * r['cer']:.1f} %, capped {capped}, {time.time() - t:.0f} s",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "num_utts": len(texts)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

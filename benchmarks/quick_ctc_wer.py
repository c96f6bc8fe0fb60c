"""Quick quality check of LM backbones with the shipped CTC ASR (no language model, so its WER
runs high: compare rows, not with the domain-LM tables): the first 40 test sentences with their
zero-shot prompts, batch 8, seed 0, FAR and CAR c=3.

    python benchmarks/quick_ctc_wer.py car_deep car_small
"""

import sys
import time

from jaxtts.data.manifest import read_split
from jaxtts.methods.ctc_asr import CTCASR, error_rates
from jaxtts.synthesize import Synthesizer, prompts_from_utterances


def main(names) -> None:
    pool = read_split("data/builtin", "test")
    utts = pool[:40]
    prompts = prompts_from_utterances(pool, utts)
    texts = [u.text for u in utts]
    asr = CTCASR.load("pretrained/ctc_asr")
    for name in names:
        synth = Synthesizer.from_workdir(f"pretrained/{name}")
        for strategy in ("far", "car:3"):
            t = time.time()
            res = synth.synthesize(
                texts, prompts, strategy=strategy, batch_size=8, seed=0, progress=False
            )
            r = error_rates(texts, asr.transcribe([x.wav for x in res], synth.sample_rate))
            capped = sum(x.info["hit_max"] for x in res)
            print(
                f"{name} {strategy}: CTC-ASR WER {r['wer']:.3f} CER {r['cer']:.3f}, "
                f"capped {capped}, {time.time() - t:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:] or ["car_deep", "car_small"])

"""Every shipped TTS model says its text: a few fixed sentences, a fixed seed, the shipped CTC
ASR (`pretrained/ctc_asr`) transcribes the audio, and the character error rate must stay under
a bound that the shipped model passes with a margin and that an untrained model (or a
babbling early checkpoint) fails. The measured CERs and the failing references are in
benchmarks/RESULTS.md (#audio-tests); `python tests/test_audio.py` prints them.
"""

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

ROOT = Path(__file__).resolve().parents[1]
PRETRAINED = ROOT / "pretrained"
SENTENCES = [
    "The cat sat on the mat.",
    "Where did you put the keys?",
    "She sells shells by the sea shore.",
    "A dog ran across the road.",
]
# (row, run folder, strategy, CER bound): the bound sits between the shipped model's CER and an
# untrained model's (RESULTS #audio-tests)
# measured (`python tests/test_audio.py`): far 0.094, car3 0.104, dcar (dcar_deep, argmax)
# 0.160, ssd (ssd_deep) 0.094, tldr (tldr_deep) 0.189, tldr_p4 (the two-stage tldr_deep_p4
# before 2026-11-29) 0.179, palle 0.406, mdm 0.170; car_small with random weights: 1.99
# (babble to the cap)
MODELS = [
    ("far", "car_small", "far", {}, 0.25),
    ("car3", "car_small", "car:3", {}, 0.25),
    ("dcar", "dcar_deep", "dcar", {}, 0.4),
    ("ssd", "ssd_deep", "ssd:L=3,beta=0", {}, 0.3),
    ("tldr", "tldr_deep", "tldr", {}, 0.45),
    ("tldr_p4", "tldr_deep_p4", "tldr", {}, 0.45),
    ("palle", "palle", "palle", {}, 0.65),
    ("mdm", "mdm", "topk:8", {"greedy": True}, 0.35),
]


def cer_of(folder: str, strategy: str, sampling: dict, prompt) -> float:
    """CER (0..1) of the ASR transcripts of SENTENCES synthesized by `folder` with `strategy`
    (batch 4, seed 0, 4 s cap)."""
    from jaxtts.methods.ctc_asr import CTCASR, error_rates
    from jaxtts.synthesize import Synthesizer

    synth = Synthesizer.from_workdir(PRETRAINED / folder)
    res = synth.synthesize(SENTENCES, [prompt] * len(SENTENCES), strategy=strategy,
                           batch_size=len(SENTENCES), seed=0, max_seconds=4.0, progress=False,
                           **sampling)  # fmt: skip
    asr = CTCASR.load(PRETRAINED / "ctc_asr")
    hyps = asr.transcribe([r.wav for r in res], synth.sample_rate)
    return error_rates(SENTENCES, hyps)["cer"]


@pytest.fixture(scope="module")
def prompt(tiny_corpus):
    from jaxtts.data.manifest import read_split
    from jaxtts.synthesize import Prompt

    return Prompt.from_utterance(read_split(tiny_corpus, "test")[0])


@pytest.mark.parametrize("row,folder,strategy,sampling,bound", MODELS, ids=[m[0] for m in MODELS])
def test_shipped_model_says_its_text(prompt, row, folder, strategy, sampling, bound):
    cer = cer_of(folder, strategy, sampling, prompt)
    assert cer < bound, f"{row}: CER {cer:.3f} >= {bound}"


if __name__ == "__main__":  # print every row's CER (the numbers RESULTS quotes)
    import tempfile

    from jaxtts.data.corpus import build_corpus
    from jaxtts.data.manifest import read_split
    from jaxtts.synthesize import Prompt

    out = Path(tempfile.mkdtemp()) / "builtin"
    build_corpus(out, num_utterances=40, seed=0, progress=False)
    p = Prompt.from_utterance(read_split(out, "test")[0])
    for row, folder, strategy, sampling, bound in MODELS:
        cer = cer_of(folder, strategy, sampling, p)
        print(f"{row}: CER {cer:.3f} (bound {bound})", flush=True)
    sys.exit(0)

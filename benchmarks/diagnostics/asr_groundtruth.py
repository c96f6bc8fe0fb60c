"""ASR floor: PocketSphinx WER on ground-truth (and Griffin-Lim resynthesised) test audio.

    python -m benchmarks.diagnostics.asr_groundtruth --corpus data/builtin --split test [--num 200]

Prints a markdown table per speaker with the WER of each row under three LMs:
  domain       Kneser-Ney trigram of the TRAINING sentences only
  domain+gen   the same plus `--lm-generated` fresh generator sentences (dev/test removed):
               the evaluator's default domain LM for the built-in corpus
  default      the bundled generic en-us LM
each with the stock en-us acoustic model and (suffix `/MAP`) with the model MAP-adapted to the
training audio (`jaxtts.eval.am_adapt`, what `python -m jaxtts.evaluate` uses; `--no-adapt`
skips those columns).
Rows: the corpus audio, and ground-truth mel -> Griffin-Lim if the vocoder exists.
Per-utterance transcripts go to `<out>/asr_groundtruth.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from jaxtts.eval.metrics import wer_details


def per_speaker_table(scores: dict, utts: list, voices: dict[str, str]) -> str:
    """scores: {(row, lm): [WerDetail per utterance]} -> markdown, one line per speaker."""
    keys = list(scores)
    speakers = sorted({u.speaker for u in utts})
    head = ["speaker", "voice", "N"] + [f"{row} / {lm} %" for row, lm in keys]
    lines = ["| " + " | ".join(head) + " |", "|---|---|--:|" + "--:|" * len(keys)]
    for spk in speakers + [None]:
        idx = [i for i, u in enumerate(utts) if spk is None or u.speaker == spk]
        cells = [spk or "**all**", voices.get(spk, "") if spk else "", str(len(idx))]
        for k in keys:
            ds = [scores[k][i] for i in idx]
            errs, words = sum(d.errors for d in ds), sum(d.num_ref_words for d in ds)
            cells.append(f"{100 * errs / max(words, 1):.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="data/builtin")
    p.add_argument("--split", default="test")
    p.add_argument("--num", type=int, default=None)
    p.add_argument("--out", default="out/asr_groundtruth")
    p.add_argument(
        "--lm-generated", type=int, default=None, help="default: jaxtts.evaluate.AUTO_LM_GENERATED"
    )
    p.add_argument("--no-resynth", action="store_true")
    p.add_argument("--asr-workers", type=int, default=1)
    p.add_argument("--no-adapt", action="store_true")
    a = p.parse_args(argv)

    from jaxtts.data.manifest import read_manifest
    from jaxtts.errors import MissingDependencyError
    from jaxtts.eval.asr import PocketSphinxASR
    from jaxtts.evaluate import EVAL_SR, generate_row, load_split, make_row

    t0 = time.time()
    corpus = Path(a.corpus)
    utts, gt, prompts, warn = load_split(read_manifest(corpus / f"{a.split}.jsonl"), a.num)
    rows = [make_row("ground_truth", None)]
    if not a.no_resynth:
        try:
            rows.append(make_row("resynth:griffin_lim", None))
        except MissingDependencyError as e:
            warn.append(f"resynthesis row skipped: {e}")
    samples = {r.name: generate_row(r, utts, gt, prompts, True)[0] for r in rows}
    for name, ss in samples.items():
        warn += [f"{name} / {s.id}: {s.error}" for s in ss if s.error]

    if a.lm_generated is None:
        from jaxtts.evaluate import AUTO_LM_GENERATED

        a.lm_generated = AUTO_LM_GENERATED
    kw = {"num_workers": a.asr_workers}
    asrs = {"domain": PocketSphinxASR.from_corpus(corpus, "domain", **kw)}
    if a.lm_generated > 0:
        asrs["domain+gen"] = PocketSphinxASR.from_corpus(
            corpus, "domain", generated_sentences=a.lm_generated, **kw
        )
    asrs["default"] = PocketSphinxASR.from_corpus(corpus, "default", **kw)
    if not a.no_adapt:
        from jaxtts.eval.asr import corpus_adapted_hmm

        t_adapt = time.time()
        hmm = corpus_adapted_hmm(corpus, num_workers=a.asr_workers)
        print(f"adapted acoustic model: {hmm} ({time.time() - t_adapt:.0f} s incl. cache)")
        for name in list(asrs):
            gen = {"generated_sentences": a.lm_generated} if name == "domain+gen" else {}
            lm = "default" if name == "default" else "domain"
            asrs[f"{name}/MAP"] = PocketSphinxASR.from_corpus(corpus, lm, hmm=hmm, **gen, **kw)
    refs = [u.text for u in utts]
    scores, dump = {}, []
    for name, ss in samples.items():
        for lm, asr in asrs.items():
            hyps = asr.transcribe([s.wav for s in ss], EVAL_SR)
            scores[(name, lm)] = wer_details(refs, hyps)
            dump.append(
                {
                    "row": name,
                    "lm": lm,
                    "asr": asr.name,
                    "utterances": [
                        {"id": u.id, "speaker": u.speaker, "ref": d.ref, "hyp": d.hyp, "wer": d.wer}
                        for u, d in zip(utts, scores[(name, lm)], strict=False)
                    ],
                }
            )
    voices = {}
    spk_file = corpus / "speakers.json"
    if spk_file.exists():
        for spk, v in json.loads(spk_file.read_text()).items():
            voices[spk] = (
                f"{v.get('voice', '')} p{v.get('pitch', '')} s{v.get('rate', '')}"
                if isinstance(v, dict)
                else str(v)
            )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "asr_groundtruth.json").write_text(json.dumps(dump, indent=1))
    print(
        f"\nPocketSphinx WER on {corpus}/{a.split} ({len(utts)} utterances, "
        f"{time.time() - t0:.0f} s); LMs: "
        + ", ".join(f"{k}={v.name}" for k, v in asrs.items())
        + "\n"
    )
    print(per_speaker_table(scores, utts, voices))
    for w in warn[:20]:
        print(f"- warning: {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

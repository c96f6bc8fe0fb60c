"""How much does a trained TTS LM use its text? Dev cross-entropy with the right transcript vs
with another row's transcript (the batch's texts rolled by one row), per MTP head
(`jaxtts.methods.lm.diagnostics.text_information`). TLDR and PALLE runs work too: the
extractor's CE (`jaxtts.methods.tldr.task.text_information`), the stage's masked span CE
(`jaxtts.methods.palle.task.text_information`), one row each.

    python -m benchmarks.diagnostics.text_conditioning \
        --workdir runs/car_small [--step N] [--split dev] [--speakers a,b] [--text_parts open]
    python -m benchmarks.diagnostics.text_conditioning --workdir pretrained/car_small \
        --corpus data/builtin
    python -m benchmarks.diagnostics.text_conditioning --workdir runs/car_small_noalign \
        --step 1000 --align
    python -m benchmarks.diagnostics.text_conditioning --workdir runs/palle_stretch --step 1000

A model that has learned to align speech with text predicts its tokens much better from the
right text; a model that only continues the speaker prompt's acoustics (babble) does not care.
The gap, in nats per token, is the information the model takes from the text. Prints a
markdown table; `--out` writes JSON. Tokens come from the audio with the run's own tokenizer.
`--align` adds the alignment metrics of training (diagonal mass, CTC alignment loss) for every
layer x head (`jaxtts.methods.lm.diagnostics.alignment_scores`), also for a run trained
without alignment learning.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _training(run) -> dict:
    """What the run was trained on, from its config.json (the table's 'trained on' cells)."""
    c = run.read_config()
    d, t = c.get("data", {}), c.get("train", {})
    moved = run.read_data_info().get("retokened_from", {})
    out = {
        "corpus": d.get("corpus_dir") or "built-in",
        "speakers": d.get("speakers", ""),
        "text_parts": d.get("text_parts", ""),
        "tokenizer": d.get("tokenizer", "kmeans"),
        "init_from": t.get("init_from", ""),
        "init_skip": t.get("init_skip", ""),
    }
    if moved:  # jaxtts.methods.lm.retoken: a trained run moved onto this tokenizer, no step
        out["retokened_from"] = moved["run"]
    return out


def record(path: str, out: dict, run, utts, corpus) -> None:
    """Adds `out` (one measurement) to the rows of the results JSON at `path`."""
    from pathlib import Path

    from benchmarks.provenance import provenance

    p = Path(path)
    res = json.loads(p.read_text()) if p.is_file() else {"values": {"rows": []}}
    row = dict(
        out,
        step=out["step"] if out["step"] is not None else 0,  # a params-only folder: its start
        corpus=str(corpus),
        utterances=len(utts),
        training=_training(run),
        command="python -m benchmarks.diagnostics.text_conditioning " + " ".join(sys.argv[1:]),
        **provenance(),
    )
    key = ("workdir", "step", "split", "speakers", "text_parts")
    rows = [
        r
        for r in res["values"]["rows"]
        if tuple(r.get(k) for k in key) != tuple(row[k] for k in key)
    ]
    res["values"]["rows"] = rows + [row]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(res, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--corpus", default=None, help="corpus folder (default: the run's data.json)")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--step", type=int, default=None, help="checkpoint step (default: latest)")
    ap.add_argument("--speakers", default="", help="these speakers only (comma list)")
    ap.add_argument("--text_parts", default="", help="grammar and/or open (the natural corpus)")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--record",
        default=None,
        help="results JSON to add this measurement to as a row (benchmarks.tables: "
        "text_information); a row of the same run, step, split and slice is replaced",
    )
    ap.add_argument("--align", action="store_true", help="also score every head's alignment")
    args = ap.parse_args()

    from jaxtts.data.manifest import read_split
    from jaxtts.methods.lm.diagnostics import alignment_scores
    from jaxtts.methods.lm.diagnostics import text_information as lm_text_information
    from jaxtts.methods.palle.task import text_information as palle_text_information
    from jaxtts.methods.tldr.task import text_information as tldr_text_information
    from jaxtts.run_folder import RunFolder
    from jaxtts.synthesize import Synthesizer
    from jaxtts.train.prepare import slice_utterances

    run = RunFolder(args.workdir)
    step = args.step
    if step is None and run.checkpoints_dir.is_dir():
        step = run.checkpointer(read_only=True).latest_step()
    engine = Synthesizer.from_workdir(args.workdir, step=step).engine
    corpus = args.corpus or run.read_data_info()["corpus_dir"]
    utts = slice_utterances(
        read_split(corpus, args.split),
        args.speakers,
        args.text_parts,
        f"{corpus}/{args.split}.jsonl",
        prefix="--",
    )
    family = getattr(engine, "family", "lm")
    text_information = {"tldr": tldr_text_information, "palle": palle_text_information}.get(
        family, lm_text_information
    )
    if args.align and family != "lm":
        ap.error(f"--align: only for TTS LM runs, {args.workdir} is a {family} run")
    info = text_information(engine, utts)
    part = " ".join(
        f"{k}={v}" for k, v in (("speakers", args.speakers), ("parts", args.text_parts)) if v
    )
    print(
        f"{args.workdir} step {step}, {args.split} split of {corpus}{' ' + part if part else ''}, "
        f"{len(utts)} utterances, {info.tokens} tokens"
    )
    print("| head | CE right text (nats) | CE other row's text | gap (nats/token) |")
    print("|--:|--:|--:|--:|")
    for h in range(len(info.gap)):
        print(f"| {h + 1} | {info.ce_right[h]:.3f} | {info.ce_other[h]:.3f} | {info.gap[h]:+.3f} |")
    out = {
        "workdir": args.workdir,
        "step": step,
        "split": args.split,
        "speakers": args.speakers,
        "text_parts": args.text_parts,
        "tokens": info.tokens,
        "ce_right": info.ce_right.tolist(),
        "ce_other": info.ce_other.tolist(),
    }
    if args.align:
        a = alignment_scores(engine, utts)
        print("\n| layer | diagonal mass per head | CTC alignment loss per head |")
        print("|--:|--|--|")
        for i in range(a.diag_mass.shape[0]):
            print(
                f"| {i} | {' / '.join(f'{v:.3f}' for v in a.diag_mass[i])} | "
                f"{' / '.join(f'{v:.2f}' for v in a.ctc[i])} |"
            )
        out.update(diag_mass=a.diag_mass.tolist(), align_ctc=a.ctc.tolist())
    if args.record:
        record(args.record, out, run, utts, corpus)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    from jaxtts.errors import JaxttsError

    try:
        main()
    except JaxttsError as e:  # a user mistake (no such run / step / corpus): one line
        sys.exit(f"error: {e}")

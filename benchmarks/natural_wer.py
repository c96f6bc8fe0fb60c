"""The WER table of the natural-voice retrain (issue 100): each system's Whisper WER over its
seeds, by part of the test split, and its paired interval against FAR, recorded as
`benchmarks/results/natural_wer.json` (rendered by `python -m benchmarks.tables`, table
`natural_wer`).

    python -m benchmarks.natural_wer out/nat_wer_*/results.json \
        --systems "FAR|far @car_deep_nat;CAR c = 3|car:3 @car_deep_nat" --baseline FAR \
        --command "python -m jaxtts.evaluate ..." --out benchmarks/results/natural_wer.json

A system is `label|substring[|speed row]` (systems separated by `;`; the speed row, e.g.
`far@pretrained/car_deep_nat`, is the methods_speed row whose WER this is, for the
`natural_speed` table): every row whose name contains the substring is one seed of it
(`benchmarks/wer_paired.py`'s rule), and all of them cover the same utterances. The parts:
grammar / open-domain sentences (the id's `_g` / `_t`), the seen natural voices (awb, joe,
slth) and the held-out natural voice (rms); the ground truth's and the codec round trip's WER
on the same utterances come from rows named `ground truth` / `tokenizer ...` when present.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks.provenance import provenance
from benchmarks.wer_paired import _pick, _rows
from jaxtts.cli import die
from jaxtts.eval.metrics import paired_wer

LM = "whisper"
HELD_OUT = ("rms",)
PARTS = {
    "grammar": lambda u: "_g" in u["id"],
    "open": lambda u: "_t" in u["id"],
    "seen": lambda u: u["speaker"] not in HELD_OUT,
    "held_out": lambda u: u["speaker"] in HELD_OUT,
}


def _utts(rows, sub: str) -> list[dict]:
    """The utterance records (id, speaker) of the first row matching `sub`, sorted by id."""
    for _, r in rows:
        if sub in str(r.get("name", "")):
            return sorted(r["utterances"], key=lambda u: u["id"])
    return []


def _part_wers(errors: np.ndarray, words: np.ndarray, utts: list[dict]) -> dict:
    """{part: WER (fraction, mean over seeds)} of errors [S, U] against words [U]."""
    out = {"all": float(errors.sum(1).mean() / words.sum())}
    for part, keep in PARTS.items():
        m = np.array([keep(u) for u in utts])
        if m.any():
            out[part] = float(errors[:, m].sum(1).mean() / words[m].sum())
    return out


def _single(rows, name: str) -> dict | None:
    """A reference row (ground truth, codec) by name prefix: its WER by part, one draw."""
    for _, r in rows:
        if str(r.get("name", "")).startswith(name) and r.get("utterances"):
            utts = sorted(r["utterances"], key=lambda u: u["id"])
            e = np.array([[u[f"errors_{LM}"] for u in utts]], np.float64)
            w = np.array([u[f"words_{LM}"] for u in utts], np.float64)
            return {"name": r["name"], "n": len(utts), "wer": _part_wers(e, w, utts)}
    return None


def record(paths: list[str], systems: list[tuple], baseline: str) -> dict:
    rows = _rows(paths)
    picked = {}
    speed_rows = {}
    for label, sub, *speed in systems:
        ids, errors, words, seeds = _pick(rows, sub, LM, f"--systems {label}|")
        picked[label] = (ids, errors, words, seeds, _utts(rows, sub))
        speed_rows[label] = speed[0] if speed else None
    if baseline not in picked:
        die(f"--baseline {baseline!r}: not one of the --systems labels {list(picked)}")
    ids_b, eb, _, _, _ = picked[baseline]
    out = []
    for label, (ids, errors, words, seeds, utts) in picked.items():
        if ids != ids_b:
            die(f"--systems {label}: covers other utterances than {baseline} ({len(ids)})")
        row = {
            "system": label,
            "n": len(ids),
            "words": int(words.sum()),
            "seeds": [round(float(w), 4) for _, w in seeds],
            "wer": _part_wers(errors, words, utts),
        }
        if speed_rows[label]:
            row["row"] = speed_rows[label]
        if label != baseline:
            p = paired_wer(errors, eb, words)
            row["vs_baseline"] = {"diff": p.diff, "lo": p.lo, "hi": p.hi}
        out.append(row)
    refs = [r for r in (_single(rows, "ground truth"), _single(rows, "tokenizer")) if r]
    return {"systems": out, "references": refs, "baseline": baseline}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="jaxtts.evaluate results.json files")
    ap.add_argument("--systems", required=True, help="label|row-name substring, ';'-separated")
    ap.add_argument("--baseline", default="FAR", help="the label the intervals are against")
    ap.add_argument("--command", required=True, help="the evaluate command(s) that made them")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default="benchmarks/results/natural_wer.json")
    args = ap.parse_args(argv)
    systems = []
    for item in args.systems.split(";"):
        label, sep, sub = item.partition("|")
        sub, _, speed = sub.partition("|")
        if not sep or not label.strip() or not sub.strip():
            die(f"--systems: {item!r} is not label|substring[|speed row]")
        systems.append((label.strip(), sub.strip()) + ((speed.strip(),) if speed.strip() else ()))
    values = record(args.results, systems, args.baseline)
    judge = json.loads(open(args.results[0]).read()).get("asr", {}).get(LM, LM)
    doc = {
        "command": args.command,
        **provenance(),
        "judge": judge,
        "note": args.note,
        "values": values,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for r in values["systems"]:
        iv = r.get("vs_baseline")
        ci = ""
        if iv:
            ci = f"  {100 * iv['diff']:+.1f} [{100 * iv['lo']:+.1f}, {100 * iv['hi']:+.1f}]"
        print(f"{r['system']:24s} {100 * r['wer']['all']:5.1f} %{ci}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

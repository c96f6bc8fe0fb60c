"""Record `python -m jaxtts.evaluate` runs on the natural corpus as one results JSON: the Whisper
WER of every row by test-split group (seen natural voices' grammar and open-domain sentences,
the held-out natural voice, the espeak voices seen and held out), pooled over words, with each
row's LM-RTF and mean chunk. `python -m benchmarks.tables` makes the docs' tables from it.

    python -m benchmarks.eval_record out/eval_car_natural/results.json \
        --command "python -m jaxtts.evaluate --corpus data/natural ..." \
        --out benchmarks/results/natural_lm.json

Several results files (one per evaluate run, comma-separated) become one JSON; a row name
that an earlier file already had gets the later file's folder name in brackets. The
`--command` text is the evaluate command(s) that wrote them (the JSON's provenance; this
script only regroups their numbers).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
GROUPS = (
    "natural, seen, grammar",
    "natural, seen, open",
    "natural, held out",
    "espeak, seen",
    "espeak, held out",
)


def group_of(speaker: str, utt_id: str, speakers: dict) -> str:
    """The test-split group of one utterance (`speakers`: the corpus's speakers.json)."""
    from jaxtts.data.natural import utterance_part

    info = speakers.get(speaker, {})
    engine = "espeak" if info.get("engine", "espeak") == "espeak" else "natural"
    held = info.get("role") == "heldout"
    if engine == "espeak":
        return f"espeak, {'held out' if held else 'seen'}"
    return "natural, held out" if held else f"natural, seen, {utterance_part(utt_id)}"


def record_rows(results: dict, speakers: dict) -> list[dict]:
    """Per row of one evaluate results.json: n, Whisper WER overall and per group."""
    out = []
    for row in results["rows"]:
        per = [u for u in row.get("utterances", []) if "words_whisper" in u]
        if not per:
            continue
        groups = {}
        for u in per:
            groups.setdefault(group_of(u["speaker"], u["id"], speakers), []).append(u)

        def pooled(us):
            words = sum(u["words_whisper"] for u in us)
            errors = sum(u["errors_whisper"] for u in us)
            return {"n": len(us), "words": words, "wer": errors / words if words else None}

        out.append(
            {
                "name": row["name"],
                "all": pooled(per),
                "groups": {g: pooled(us) for g, us in groups.items()},
                "lm_rtf": row.get("lm_rtf"),
                "mean_chunk": row.get("mean_chunk"),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="evaluate results.json files, comma-separated")
    ap.add_argument("--command", required=True, help="the evaluate command(s) that wrote them")
    ap.add_argument("--corpus", default="data/natural", help="the corpus (its speakers.json)")
    ap.add_argument("--note", default="", help="one line on what the rows are")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    speakers_file = Path(a.corpus) / "speakers.json"
    if not speakers_file.is_file():
        raise SystemExit(f"error: {speakers_file}: not found (--corpus: a natural corpus folder)")
    speakers = json.loads(speakers_file.read_text())
    rows: dict[str, dict] = {}
    judge = None
    for p in a.results.split(","):
        path = Path(p.strip())
        try:
            res = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"error: {path}: not a readable evaluate results.json ({e})") from None
        if "rows" not in res:
            raise SystemExit(f"error: {path}: no 'rows' (expected an evaluate results.json)")
        judge = (res.get("asr") or {}).get("whisper", judge)
        for r in record_rows(res, speakers):
            if r["name"] in rows:  # the same row on other utterances: named by its folder
                r["name"] = f"{r['name']} ({path.parent.name})"
            rows[r["name"]] = r
    result = {
        "command": a.command,
        **provenance(),
        "judge": judge,
        "note": a.note,
        "values": {"rows": list(rows.values())},
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}: {len(rows)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

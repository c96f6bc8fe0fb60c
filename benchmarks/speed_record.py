"""Record runs of `benchmarks/methods_speed.py` (its --out JSON files, one per run) as one
results file for `python -m benchmarks.tables` (table `natural_speed`): each row's speed
against FAR per run, its rounds' range, and the target check, so a target is judged on every
run rather than on one.

    python -m benchmarks.speed_record out/nat_speed_1.json out/nat_speed_2.json \
        --command "python -m benchmarks.methods_speed ..." \
        --out benchmarks/results/natural_speed.json
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks.methods_speed import paper_row
from benchmarks.provenance import provenance
from jaxtts.cli import die


def summarise(runs: list[list[dict]]) -> list[dict]:
    """One row per (strategy, folder) in the first run's order: per run and batch size the
    median speed vs FAR and the range of its rounds' own ratios."""
    order, rows = [], {}
    for i, table in enumerate(runs):
        for e in table:
            key = (e["strategy"], e["folder"])
            if key not in rows:
                order.append(key)
                paper, target, allowance = paper_row(e["strategy"])
                rows[key] = {
                    "strategy": e["strategy"],
                    "folder": e["folder"],
                    "paper": paper,
                    "target": target,
                    "wer_allowance": allowance,
                    "runs": [None] * len(runs),
                }
            cells = {}
            for k, v in e.items():
                if k[0] == "b" and k[1:].isdigit() and isinstance(v, dict):
                    ups = v.get("speed_vs_far_rounds") or []
                    cells[k] = {
                        "lm_rtf": v["lm_rtf"],
                        "vs_far": v.get("speed_vs_far"),
                        "lo": min(ups) if ups else None,
                        "hi": max(ups) if ups else None,
                        "rounds": len(v.get("lm_rtf_rounds") or []),
                        "tokens_per_step": v.get("tokens_per_step"),
                    }
            rows[key]["runs"][i] = cells
    return [rows[k] for k in order]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="methods_speed --out JSON files, one per run")
    ap.add_argument("--command", required=True, help="the methods_speed command of the runs")
    ap.add_argument("--machine", default="", help="e.g. '2 Zen 4 cores, bfloat16'")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default="benchmarks/results/natural_speed.json")
    args = ap.parse_args(argv)
    runs = []
    for p in args.runs:
        try:
            table = json.loads(open(p).read())
        except (OSError, json.JSONDecodeError) as e:
            die(f"{p}: cannot read it as a methods_speed --out JSON ({e})")
        if not isinstance(table, list) or not all(isinstance(e, dict) for e in table):
            die(f"{p}: expected a methods_speed --out JSON (a list of rows)")
        runs.append(table)
    doc = {
        "command": args.command,
        **provenance(),
        "machine": args.machine or provenance()["machine"],
        "note": args.note,
        "values": {"rows": summarise(runs), "num_runs": len(runs)},
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

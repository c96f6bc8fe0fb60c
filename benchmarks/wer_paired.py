"""Is method A's WER within a margin of method B's? A paired bootstrap over the test
utterances, from `jaxtts.evaluate` results (one or more results.json, any number of seeds).

    python -m benchmarks.wer_paired out/eval_far6/results.json out/eval_tl012/results.json \
        out/eval_tl345/results.json --a "tldr @tldr_deep_p4_tl" --b "far " --margin 0.01

(an evaluation's rows are named '<strategy> [@<run folder>] precision=... [seed=N]'; FAR rows
decoded with the evaluation's --workdir have no '@').

Rows are picked by a substring of their name (`--a`, `--b`; every matching row is one seed);
all of them must cover the same utterances. Prints each row's WER, each system's seed mean,
the difference A - B with its 95 % interval (utterances resampled, the same draw for both:
`jaxtts.eval.metrics.paired_wer`) and the share of resamples in which A - B > margin.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from jaxtts.cli import die
from jaxtts.eval.metrics import paired_wer


def _rows(paths: list[str]) -> list[tuple[str, dict]]:
    out = []
    for p in paths:
        try:
            data = json.loads(open(p).read())
        except (OSError, json.JSONDecodeError) as e:
            die(f"{p}: cannot read it as a jaxtts.evaluate results.json ({e})")
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
            die(f"{p}: expected a jaxtts.evaluate results.json (a 'rows' list)")
        out += [(p, r) for r in data["rows"] if isinstance(r, dict) and r.get("utterances")]
    return out


def _pick(rows: list[tuple[str, dict]], sub: str, lm: str, flag: str):
    picked = [(p, r) for p, r in rows if sub in str(r.get("name", ""))]
    if not picked:
        names = sorted({str(r.get("name")) for _, r in rows})
        die(f"{flag} {sub!r}: no row's name contains it (rows: {names})")
    ids = None
    errors, words, seeds = [], None, []
    for p, r in picked:
        utts = sorted(r["utterances"], key=lambda u: u["id"])
        these = [u["id"] for u in utts]
        if ids is None:
            ids = these
        elif these != ids:
            die(f"{p}: row {r['name']!r} covers other utterances than {picked[0][1]['name']!r}")
        key = f"errors_{lm}"
        if any(u.get(key) is None for u in utts):
            die(
                f"{p}: row {r['name']!r} has no {key!r} per utterance "
                f"(evaluated without --asr_lms {lm}?)"
            )
        errors.append([u[key] for u in utts])
        words = [u[f"words_{lm}"] for u in utts]
        seeds.append((r["name"], r.get(f"wer_{lm}")))
    return ids, np.asarray(errors, np.float64), np.asarray(words, np.float64), seeds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="jaxtts.evaluate results.json files")
    ap.add_argument("--a", required=True, help="substring of the rows of system A")
    ap.add_argument("--b", required=True, help="substring of the rows of system B")
    ap.add_argument("--lm", default="domain", help="the ASR language model's WER to compare")
    ap.add_argument("--margin", type=float, default=0.01, help="A - B to test against (fraction)")
    ap.add_argument("--resamples", type=int, default=10_000)
    args = ap.parse_args(argv)
    rows = _rows(args.results)
    ids_a, ea, wa, seeds_a = _pick(rows, args.a, args.lm, "--a")
    ids_b, eb, _, seeds_b = _pick(rows, args.b, args.lm, "--b")
    if ids_a != ids_b:
        die(
            f"--a {args.a!r} and --b {args.b!r} cover other utterances "
            f"({len(ids_a)} vs {len(ids_b)})"
        )
    res = paired_wer(ea, eb, wa, margin=args.margin, num_resamples=args.resamples)
    for tag, seeds in (("A", seeds_a), ("B", seeds_b)):
        for name, w in seeds:
            print(f"{tag}  {name}: {100 * w:.2f} %")
    print(f"utterances {len(ids_a)}, words {int(wa.sum())}, seeds A {len(ea)} / B {len(eb)}")
    print(f"A {100 * res.wer_a:.2f} %   B {100 * res.wer_b:.2f} %")
    print(
        f"A - B {100 * res.diff:+.2f} pp, "
        f"95 % interval [{100 * res.lo:+.2f}, {100 * res.hi:+.2f}] pp; "
        f"P(A - B > {100 * args.margin:g} pp) = {res.prob_diff_above:.2f} "
        "(paired bootstrap over utterances)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

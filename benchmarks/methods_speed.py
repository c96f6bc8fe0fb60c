"""One command, one table: every method's speed against FAR on the same backbone, with its WER.

    python -m benchmarks.methods_speed \
        --rows far@pretrained/car_deep,car:2@pretrained/car_deep,car:3@pretrained/car_deep \
        --eval out/eval_deep/results.json --num 40 --rounds 3 --batch 1,8

Rows are `<strategy>@<run folder>` (the evaluate command's row syntax, sampling settings
included: `far+top_p=1.0@pretrained/car_deep`). Speed: LM time of the
first `--num` test sentences (or one count per batch size) with their zero-shot prompts (the
evaluation's; vocoder and ASR excluded, compilation excluded), batch size after batch size, in
`--rounds` interleaved rounds (every row once per round, so slow drift of the machine hits every
row alike); LM-RTF is the median over the rounds. `speed vs FAR` divides by the FAR row on the
same backbone (a DCAR, SSD or TLDR folder names its backbone in its config; an LM folder is its
own backbone); in brackets the lowest and highest of the rounds' own ratios (round r of the row
against round r of FAR), and `holds` says in how many rounds the speed target was met, so one
run shows the machine's noise beside the median. Steps and KV bytes are per
second of generated audio. WER: the domain-LM WER of the row with the same strategy and folder in
an evaluate `results.json` (`--eval`, any number, comma-separated): the full test split as the
README's table. The paper's figure and this project's target are printed beside each row.
`--merge <earlier JSON>` keeps an earlier run's other rows in the table (a new method's rows
next to the measured ones); `--steps_only` adds step statistics to an earlier run's rows
without timing.

Run it on a quiet machine: every number is wall time. Every row x batch compiles its decode
shapes first (~30 s each for the 12-layer backbone on 2 CPU cores, several text-length buckets
per row): 10 rows at two batch sizes spent > 20 min compiling; set JAX_COMPILATION_CACHE_DIR to
reuse compiles across runs. Writes `--out` (JSON) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.timing_lock import exclusive

# (strategy prefix, the paper's speed-up over its AR baseline, this project's target at batch
# 1, the WER allowance over FAR in points); first match wins. The targets are issue 100's, the
# papers' own ratios (DCAR's WER allowance is against the best fixed CAR, checked by hand)
PAPER = [
    ("car:3", "2.64x (DCAR paper, CAR c=3)", 2.2, 1.0),
    ("car:", "", None, None),
    ("dcar", "2.61x (DCAR [2,3,4])", 2.6, 1.0),
    ("vadusa", "", None, None),
    ("ssd:L=3,beta=0.4", "1.4x (SSD, beta 0.4)", 1.4, 3.0),
    ("ssd", "1.0x (SSD, beta 0)", 1.0, 1.0),
    ("tldr", "1.8x (TLDR)", 1.8, 1.0),
    ("palle", "3.5x over AR (PALLE)", None, None),
    ("far", "", None, None),
]


def paper_row(strategy: str):
    """(the paper's figure, this project's batch-1 target, WER allowance in pp) of a row; SSD
    rows by their beta whatever the draft length."""
    if strategy.startswith("ssd"):
        beta = strategy.partition("beta=")[2].split(",")[0]
        if beta and float(beta) > 0:
            strategy = "ssd:L=3,beta=0.4"  # the paper's tolerance row
        elif beta:
            strategy = "ssd"
    for prefix, paper, target, allowance in PAPER:
        if strategy.startswith(prefix):
            return paper, target, allowance
    return "", None, None


def backbone_of(folder: str) -> str:
    """The LM run a row's folder decodes with: its own for an LM run, else the one its config
    names (DCAR `dcpo.backbone`, SSD `ssd.target`, TLDR `tldr.backbone`)."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    for section, key in (("dcpo", "backbone"), ("ssd", "target"), ("tldr", "backbone")):
        if cfg.get(section, {}).get(key):
            return os.path.normpath(cfg[section][key])
    return os.path.normpath(folder)


def wer_lookup(paths: list[str], judge: str = "domain") -> dict:
    """(strategy, run folder or None) -> (WER %, source) from evaluate results.json files
    (source 'domain': the domain-LM WER of the full evaluation, the mean over the rows of one
    key, i.e. its seeds: 'domain, N seeds'; or 'ctc<N>': the CTC ASR on the first N test
    sentences from `quick_ctc_wer.py` files); a row named '<strategy> @<folder> ...' has its
    folder, a plain '<strategy>' row was decoded with that evaluation's --workdir (None:
    matched by strategy alone). A domain-LM WER wins over a CTC one. `judge='whisper'`: the
    Whisper WER in place of the domain-LM one (source 'whisper, N seeds')."""
    domain: dict = {}
    ctc: dict = {}
    for p in paths:
        res = json.loads(Path(p).read_text())
        for r in res["rows"]:
            if r.get("kind") != "model":
                continue
            words = r["name"].split()
            folder = next((os.path.normpath(w[1:]) for w in words[1:] if w.startswith("@")), None)
            key = (words[0], folder)
            if r.get(f"wer_{judge}") is not None:
                domain.setdefault(key, []).append(100.0 * r[f"wer_{judge}"])
            elif r.get("wer_ctc") is not None and key not in ctc:
                n = r.get("num_utts", res.get("num_utts", ""))
                ctc[key] = (100.0 * r["wer_ctc"], f"ctc{n}")
    out = dict(ctc)
    for key, vals in domain.items():
        src = judge if len(vals) == 1 else f"{judge}, {len(vals)} seeds"
        out[key] = (statistics.mean(vals), src)
    return out


def wer_of(wers: dict, strategy: str, folder: str) -> tuple:
    """(WER %, source) of a row from `wer_lookup`'s dict, or (None, '')."""
    wer = wers.get((strategy, folder)) or wers.get((strategy, os.path.basename(folder)))
    return wer or wers.get((strategy, None)) or (None, "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="", help="<strategy>@<run folder>, comma-separated")
    ap.add_argument(
        "--combine",
        default="",
        help="no timing: --out JSONs of separate runs (one process per row, gpu_check.sh), "
        "comma-separated, joined into one table with each row's speed against FAR",
    )
    ap.add_argument(
        "--eval",
        default="",
        help="evaluate results.json files (WER column; with --combine: rows that have none)",
    )
    ap.add_argument("--corpus", default="data/builtin")
    ap.add_argument(
        "--speakers",
        default="",
        help="time these test speakers' sentences only (comma list, e.g. the natural voices "
        "awb,joe,slth,rms of data/natural); prompts from the same speakers",
    )
    ap.add_argument(
        "--judge",
        default="domain",
        choices=["domain", "whisper"],
        help="the --eval WER column: PocketSphinx with the domain LM, or Whisper",
    )
    ap.add_argument(
        "--num",
        default="40",
        help="test sentences; one number, or one per batch size (e.g. 8,16,32 for --batch 1,8,32)",
    )
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "bfloat16"],
        help="matmul precision of every row (bfloat16: weights and matmul inputs, float32 sums)",
    )
    ap.add_argument("--out", default="out/methods_speed.json")
    ap.add_argument(
        "--merge",
        default="",
        help="an earlier --out JSON: its rows not measured now are kept in the table",
    )
    ap.add_argument(
        "--steps_only",
        action="store_true",
        help="no timing: decode each row once per batch size and add the step statistics "
        "(steps, batch steps, tokens per step) to the matching rows of --merge, keeping their "
        "measured times (decoding is seeded, so the steps are those of the timed run)",
    )
    args = ap.parse_args(argv)
    if args.combine:
        table = []
        for p in args.combine.split(","):
            if not Path(p).is_file():
                print(f"  (--combine: {p}: no such file; its rows are missing)", file=sys.stderr)
                continue
            for e in json.loads(Path(p).read_text()):  # one row's batch sizes may come from
                same = [
                    t for t in table if (t["strategy"], t["folder"]) == (e["strategy"], e["folder"])
                ]
                if same:  # several processes: one entry with all of them
                    same[0].update({k: v for k, v in e.items() if k[0] == "b" and k[1:].isdigit()})
                else:
                    table.append(e)
        if not table:
            print(f"error: --combine: {args.combine}: no rows", file=sys.stderr)
            return 2
        wers = wer_lookup([p for p in args.eval.split(",") if p], args.judge)
        for e in table:  # --eval fills the rows measured without a WER
            if e.get("wer") is None:
                e["wer"], e["wer_source"] = wer_of(wers, e["strategy"], e["folder"])
        batches = sorted({int(k[1:]) for e in table for k in e if k[0] == "b" and k[1:].isdigit()})
        report([], batches, {}, {}, args.out, True, table)
        return 0
    if not args.rows:
        print("error: expected --rows (or --combine)", file=sys.stderr)
        return 2

    import jax
    import numpy as np

    from jaxtts.data.manifest import read_split
    from jaxtts.errors import JaxttsError
    from jaxtts.evaluate import _row_sampling, split_specs
    from jaxtts.synthesize import Synthesizer, prompts_from_utterances

    rows, sampling = [], {}  # sampling: a row's '+top_p=1.0'-style settings (evaluate's syntax)
    for spec in split_specs(args.rows):
        strategy, _, folder = spec.partition("@")
        if not folder:
            print(f"error: --rows: {spec!r}: expected <strategy>@<run folder>", file=sys.stderr)
            return 2
        _, *opts = strategy.split("+")
        try:
            sampling[strategy] = _row_sampling(spec, opts)
        except JaxttsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        rows.append((strategy, os.path.normpath(folder)))
    batches = [int(x) for x in args.batch.split(",")]
    try:
        synths = {f: Synthesizer.from_workdir(f) for f in sorted({f for _, f in rows})}
        for strategy, folder in rows:
            synths[folder].plan(strategy.split("+")[0])
    except JaxttsError as e:
        print(f"error: --rows: {e}", file=sys.stderr)
        return 2
    nums = [int(x) for x in str(args.num).split(",")]
    if len(nums) == 1:
        nums = nums * len(batches)
    if len(nums) != len(batches):
        print(f"error: --num: {args.num!r}: one number or one per batch size", file=sys.stderr)
        return 2
    pool = read_split(args.corpus, "test")
    if args.speakers:
        want = set(args.speakers.split(","))
        if missing := sorted(want - {u.speaker for u in pool}):
            where = f"{args.corpus}'s test split"
            print(f"error: --speakers: {missing} not in {where}", file=sys.stderr)
            return 2
        pool = [u for u in pool if u.speaker in want]
    work = {}  # batch size -> (texts, prompts): the first `num` test sentences
    for b, n in zip(batches, nums, strict=True):
        utts = pool[:n]
        work[b] = ([u.text for u in utts], prompts_from_utterances(pool, utts))
    print(f"{jax.devices()[0].device_kind}: test sentences {nums} at batches {batches}, "
          f"{args.rounds} interleaved rounds", flush=True)  # fmt: skip

    def run(strategy, folder, b):
        texts, prompts = work[b]
        res = synths[folder].synthesize(
            texts,
            prompts,
            strategy=strategy.split("+")[0],
            batch_size=b,
            progress=False,
            vocode=False,
            **{"precision": args.precision, **sampling[strategy]},
        )
        audio = sum(r.info["duration"] for r in res)
        hists = [r.info["chunk_hist"] for r in res if r.info.get("chunk_hist") is not None]
        extra = {"chunk_hist": [int(v) for v in np.sum(hists, axis=0)]} if hists else {}
        return extra | {
            "lm_rtf": sum(r.info["lm_s"] for r in res) / audio,
            "steps_per_audio_s": sum(r.info["steps"] for r in res) / audio,
            # the steps the batches ran (each until its longest row ended) per audio second
            "batch_steps_per_audio_s": sum(r.info["batch_step_share"] for r in res) / audio,
            "tokens_per_step": sum(r.info["num_tokens"] for r in res)
            / max(1, sum(r.info["steps"] for r in res)),
            "kv_mb_per_audio_s": sum(r.info["kv_cache_bytes"] for r in res) / audio / 2**20,
            "audio_s": audio,
        }

    wers = wer_lookup([p for p in args.eval.split(",") if p], args.judge)
    earlier = json.loads(Path(args.merge).read_text()) if args.merge else []
    if args.steps_only:
        if not earlier:
            print("error: --steps_only: expected --merge <earlier JSON>", file=sys.stderr)
            return 2
        for e in earlier:
            for b in batches:
                if (e["strategy"], e["folder"]) in rows and f"b{b}" in e:
                    m = run(e["strategy"], e["folder"], b)
                    e[f"b{b}"].update({k: v for k, v in m.items() if "step" in k})
                    print(f"  steps {e['strategy']}@{e['folder']} b{b}: {m}", flush=True)
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        Path(args.out).write_text(json.dumps(earlier, indent=1))
        print(f"-> {args.out}")
        return 0
    meas: dict = {}
    for i, b in enumerate(batches):  # one batch size after another; the JSON grows with each
        for strategy, folder in rows:  # compile every shape of this batch size before timing
            t0 = time.perf_counter()
            run(strategy, folder, b)
            print(
                f"  warm-up {strategy}@{folder} b{b}: {time.perf_counter() - t0:.0f} s", flush=True
            )
        with exclusive(f"{args.rows} b{b}"):  # gpu_check.sh: one process times at a time
            for _ in range(args.rounds):
                for strategy, folder in rows:
                    meas.setdefault((strategy, folder, b), []).append(run(strategy, folder, b))
        print(f"batch {b}: {args.rounds} rounds done", flush=True)
        keep = [e for e in earlier if (e["strategy"], e["folder"]) not in rows]
        final = i == len(batches) - 1
        report(rows, batches[: i + 1], meas, wers, args.out, final, keep, args.precision)
    return 0


def round_speedups(far: dict | None, row: dict) -> list[float]:
    """A row's speed against FAR in each interleaved round (FAR's LM-RTF of round r over the
    row's of round r: the two ran minutes apart, so the machine's drift cancels), or [] where
    either side has no per-round times (an entry written before they were kept)."""
    a, b = (far or {}).get("lm_rtf_rounds") or [], row.get("lm_rtf_rounds") or []
    return [x / y for x, y in zip(a, b, strict=True)] if a and len(a) == len(b) else []


def report(rows, batches, meas, wers, out, final: bool, keep=(), precision="float32") -> list:
    """The table of the batch sizes measured so far: printed and written to `out` (JSON), so a
    run stopped at its time limit keeps the batch sizes it finished."""
    table = []
    for strategy, folder in rows:
        entry = {"strategy": strategy, "folder": folder, "backbone": backbone_of(folder)}
        entry["precision"] = precision
        entry["wer"], entry["wer_source"] = wer_of(wers, strategy, folder)
        for b in batches:
            ms = meas[(strategy, folder, b)]
            entry[f"b{b}"] = {  # (a list, DCAR's chunk sizes: the same every round, seeded)
                k: ms[0][k] if isinstance(ms[0][k], list) else statistics.median(m[k] for m in ms)
                for k in ms[0]
            }
            entry[f"b{b}"]["lm_rtf_rounds"] = [m["lm_rtf"] for m in ms]
        table.append(entry)
    table = list(keep) + table  # rows of an earlier run (--merge), as they were measured
    far = {e["backbone"]: e for e in table if e["strategy"] == "far"}
    b0 = 1  # the targets are batch 1's: a table without batch 1 judges none (holds: —)
    lines = ["\n| method | run | backbone | WER % | " + " | ".join(
        f"LM-RTF b{b} | vs FAR b{b}" for b in batches) + " | steps / audio s | KV MB / audio s "
        "| the paper | target | holds |"]  # fmt: skip
    lines.append("|---|---|---|--:|" + "--:|--:|" * len(batches) + "--:|--:|---|--:|---|")
    for e in table:
        ref = far.get(e["backbone"])
        paper, target, allowance = paper_row(e["strategy"])
        cells = []
        for b in batches:
            if f"b{b}" not in e:  # a kept row not measured at this batch size
                cells += ["—", "—"]
                continue
            up = ref[f"b{b}"]["lm_rtf"] / e[f"b{b}"]["lm_rtf"] if ref and f"b{b}" in ref else None
            e[f"b{b}"]["speed_vs_far"] = up
            ups = round_speedups(ref.get(f"b{b}") if ref else None, e[f"b{b}"])
            e[f"b{b}"]["speed_vs_far_rounds"] = ups
            spread = f" ({min(ups):.2f}-{max(ups):.2f})" if len(ups) > 1 else ""
            cells += [f"{e[f'b{b}']['lm_rtf']:.4f}", f"{up:.2f}x{spread}" if up else "—"]
        up0 = e.get(f"b{b0}", {}).get("speed_vs_far")
        holds = "—"
        if target is not None and up0 is not None:
            wer_ok = (
                e["wer"] is not None
                and ref is not None
                and ref["wer"] is not None
                and e["wer"] <= ref["wer"] + allowance
            )
            holds = "yes" if up0 >= target and wer_ok else "no"
            holds += "" if e["wer"] is not None and ref and ref["wer"] is not None else " (no WER)"
            ups0 = e[f"b{b0}"].get("speed_vs_far_rounds") or []
            if len(ups0) > 1:  # the speed target in each interleaved round, on its own
                holds += f"; speed in {sum(u >= target for u in ups0)} of {len(ups0)} rounds"
        e["holds"] = holds
        first = next(e[f"b{b}"] for b in batches if f"b{b}" in e)  # steps: the first measured
        wer = f"{e['wer']:.1f} ({e['wer_source']})" if e["wer"] is not None else "—"
        lines.append(
            f"| {e['strategy']} | {e['folder']} | {e['backbone']} | {wer} | "
            + " | ".join(cells)
            + f" | {first['steps_per_audio_s']:.1f} | {first['kv_mb_per_audio_s']:.2f}"
            f" | {paper} | {f'{target:.1f}x' if target else '—'} | {holds} |"
        )
    print("\n".join(lines) + ("" if final else "\n(more batch sizes follow)"), flush=True)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    Path(out).write_text(json.dumps(table, indent=1))
    return table


if __name__ == "__main__":
    sys.exit(main())

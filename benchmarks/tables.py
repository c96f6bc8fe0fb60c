"""Tables generated from measurements: the docs' marked blocks, rewritten from benchmarks/results/.

    python -m benchmarks.tables --check     # exit 1 naming every block that differs from its JSON
    python -m benchmarks.tables --write     # rewrite the blocks from the JSON

A block in a markdown file is the text between `<!-- table:NAME -->` and `<!-- /table -->`;
`TABLES[NAME]` makes it from the JSON files under `benchmarks/results/` (each written by the
benchmark that measured it, with its command, commit, machine and date). A number is typed
once, by the benchmark; a hand-edited cell fails `--check` (tests/test_tables.py runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "benchmarks/RESULTS.md", "docs/history/natural.md")
_BLOCK = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table -->)", re.S)


def _load(root: Path, name: str) -> dict:
    return json.loads((root / "benchmarks" / "results" / f"{name}.json").read_text())


def _pooled(rows: list[dict], key: str) -> float | None:
    rs = [r[key] for r in rows if key in r]
    words = sum(r["words"] for r in rs)
    return sum(r["wer"] * r["words"] for r in rs) / words if words else None


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.1f}"


def _footer(*results: dict) -> str:
    parts = [f"`{r['command']}` (commit {r['commit']}, {r['date']})" for r in results]
    return "Generated from " + "; ".join(parts) + ".\n"


def _by_speaker(result: dict) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in result["values"]["rows"]:
        out.setdefault(r["speaker"], []).append(r)
    return out


def natural_voices(root: Path) -> str:
    """The voice table: every voice on the same sentences, ground truth and round trips."""
    new, old = _load(root, "natural_voices"), _load(root, "natural_voices_old_tokenizer")
    by_new, by_old = _by_speaker(new), _by_speaker(old)
    lines = [
        "| voice | source | role | WER grammar % | WER open % | WER both % | round trip % "
        "(refit tokenizer) | round trip % (espeak-fitted tokenizer) | decoded-mel L1 refit |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    order = sorted(by_new, key=lambda s: (by_new[s][0]["engine"] == "espeak", s))
    for s in order:
        rows = by_new[s]
        part = {r["part"]: r for r in rows}
        l1 = [r["round_trip"]["mel_l1"] for r in rows if "round_trip" in r]
        lines.append(
            f"| {s} | {rows[0]['source'] or rows[0]['engine']} | {rows[0]['role']} | "
            f"{_pct(_pooled([part['grammar']], 'ground_truth'))} | "
            f"{_pct(_pooled([part['open']], 'ground_truth'))} | "
            f"{_pct(_pooled(rows, 'ground_truth'))} | {_pct(_pooled(rows, 'round_trip'))} | "
            f"{_pct(_pooled(by_old.get(s, []), 'round_trip'))} | "
            f"{sum(l1) / len(l1):.3f} |"
        )
    real, real_old = new["values"]["real_speech"], old["values"]["real_speech"]
    lines.append(
        f"| real speech (12 clips) | pocketsphinx-testdata | check | | | "
        f"{_pct(real['ground_truth']['wer'])} | {_pct(real['round_trip']['wer'])} | "
        f"{_pct(real_old['round_trip']['wer'])} | {real['round_trip']['mel_l1']:.3f} |"
    )
    return "\n".join(lines) + "\n\n" + _footer(new, old)


def natural_test_split(root: Path) -> str:
    """Ground truth on the natural corpus's test split, by group."""
    res = _load(root, "natural_test_split")
    rows = res["values"]["rows"]
    nat = lambda r: r["engine"] != "espeak"  # noqa: E731
    groups = (
        ("natural voices, all", nat),
        (
            "seen natural voices, grammar",
            lambda r: nat(r) and r["role"] == "train" and r["part"] == "grammar",
        ),
        (
            "seen natural voices, open-domain",
            lambda r: nat(r) and r["role"] == "train" and r["part"] == "open",
        ),
        (
            "held-out natural voice, grammar",
            lambda r: nat(r) and r["role"] == "heldout" and r["part"] == "grammar",
        ),
        (
            "held-out natural voice, open-domain",
            lambda r: nat(r) and r["role"] == "heldout" and r["part"] == "open",
        ),
        ("espeak, seen speakers", lambda r: not nat(r) and r["role"] == "train"),
        ("espeak, held-out spk09", lambda r: not nat(r) and r["role"] == "heldout"),
    )
    lines = ["| test-split group | utterances | Whisper WER % |", "|---|--:|--:|"]
    for name, keep in groups:
        rs = [r for r in rows if keep(r)]
        n = sum(r["ground_truth"]["n"] for r in rs)
        lines.append(f"| {name} | {n} | {_pct(_pooled(rs, 'ground_truth'))} |")
    return "\n".join(lines) + "\n\n" + _footer(res)


def vocoder(root: Path) -> str:
    """Copy synthesis (and the token round trip) through Griffin-Lim and the neural vocoder."""
    res = _load(root, "vocoder")
    v = res["values"]
    lines = [
        "| mels | vocoder | group | utterances | Whisper WER % | MCD dB | MR-STFT distance |",
        "|---|---|---|--:|--:|--:|--:|",
    ]
    order = {"all": 0, "natural, seen": 1, "natural, held out": 2, "espeak": 3}
    kind = {"ground_truth": 0, "griffin_lim": 1, "vocoder": 2}
    rows = sorted(
        v["rows"],
        key=lambda r: (r["source"], order.get(r["group"], 9), kind.get(r["vocoder"], 9)),
    )
    for r in rows:
        spectral = r["vocoder"] != "ground_truth"
        lines.append(
            f"| {r['source']} | {r['vocoder']} | {r['group']} | {r['n']} | {_pct(r['wer'])} | "
            + (f"{r['mcd']:.2f} | {r['mrstft']:.3f} |" if spectral else "| |")
        )
    lines += [
        "",
        "| vocoder | ms per audio s, batch 1 | ms per audio s, batch 8 |",
        "|---|--:|--:|",
    ]
    for name, sp in v["speed"].items():
        lines.append(
            f"| {name} | {sp['ms_per_audio_s_batch1']:.1f} | {sp['ms_per_audio_s_batch8']:.1f} |"
        )
    return "\n".join(lines) + "\n\n" + _footer(res)


def codec_round_trip(root: Path) -> str:
    """The learned tokenizer's round trip per voice, beside the k-means refit's (same sentences)."""
    new, km = _load(root, "codec_round_trip"), _load(root, "natural_voices")
    plain = _load(root, "codec_round_trip_nocond")
    by_new, by_km, by_plain = _by_speaker(new), _by_speaker(km), _by_speaker(plain)
    lines = [
        "| voice | role | ground truth % | round trip % (codec) | round trip % (codec without "
        "the voice) | round trip % (k-means refit) | decoded-mel L1 codec | decoded-mel L1 "
        "k-means |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for s in sorted(by_new, key=lambda s: (by_new[s][0]["engine"] == "espeak", s)):
        rows, old = by_new[s], by_km.get(s, [])

        def l1(rs):
            v = [r["round_trip"]["mel_l1"] for r in rs if "round_trip" in r]
            return f"{sum(v) / len(v):.3f}" if v else ""

        lines.append(
            f"| {s} | {rows[0]['role']} | {_pct(_pooled(rows, 'ground_truth'))} | "
            f"{_pct(_pooled(rows, 'round_trip'))} | "
            f"{_pct(_pooled(by_plain.get(s, []), 'round_trip'))} | "
            f"{_pct(_pooled(old, 'round_trip'))} | {l1(rows)} | {l1(old)} |"
        )
    split = _load(root, "codec_test_split")
    for s, rows in _by_speaker(split).items():
        lines.append(
            f"| {s}, its {sum(r['ground_truth']['n'] for r in rows)} test-split utterances | "
            f"{rows[0]['role']} | {_pct(_pooled(rows, 'ground_truth'))} | "
            f"{_pct(_pooled(rows, 'round_trip'))} | | | "
            f"{sum(r['round_trip']['mel_l1'] for r in rows) / len(rows):.3f} | |"
        )
    real, real_km = new["values"]["real_speech"], km["values"]["real_speech"]
    real_plain = plain["values"]["real_speech"]
    lines.append(
        f"| real speech (12 clips) | check | {_pct(real['ground_truth']['wer'])} | "
        f"{_pct(real['round_trip']['wer'])} | {_pct(real_plain['round_trip']['wer'])} | "
        f"{_pct(real_km['round_trip']['wer'])} | "
        f"{real['round_trip']['mel_l1']:.3f} | {real_km['round_trip']['mel_l1']:.3f} |"
    )
    return "\n".join(lines) + "\n\n" + _footer(new, plain, split, km)


def natural_voices_80(root: Path) -> str:
    """Ground truth of every voice on the same 40 grammar + 40 open-domain sentences."""
    res = _load(root, "natural_voices_80")
    by = _by_speaker(res)
    natural = [s for s in by if by[s][0]["engine"] != "espeak"]
    best = min(_pooled(by[s], "ground_truth") for s in natural if by[s][0]["role"] != "left out")
    lines = [
        "| voice | source | role | WER grammar % | WER open % | WER both % | pp above the best |",
        "|---|---|---|--:|--:|--:|--:|",
    ]
    for s in sorted(by, key=lambda s: (by[s][0]["engine"] == "espeak", s)):
        rows = by[s]
        part = {r["part"]: r for r in rows}
        both = _pooled(rows, "ground_truth")
        above = f"{100 * (both - best):+.1f}" if s in natural else ""
        lines.append(
            f"| {s} | {rows[0]['source'] or rows[0]['engine']} | {rows[0]['role']} | "
            f"{_pct(_pooled([part['grammar']], 'ground_truth'))} | "
            f"{_pct(_pooled([part['open']], 'ground_truth'))} | {_pct(both)} | {above} |"
        )
    return "\n".join(lines) + "\n\n" + _footer(res)


def _ratio(cell) -> str:
    """[median, lo, hi] -> '2.20x (2.12-2.23)'; [lo, hi] -> '1.43-2.02x'; None -> '-'."""
    if not cell:
        return "-"
    if len(cell) == 2:
        return f"{cell[0]:.2f}x" if cell[0] == cell[1] else f"{cell[0]:.2f}-{cell[1]:.2f}x"
    med, lo, hi = cell
    return f"{med:.2f}x" if lo == hi == med else f"{med:.2f}x ({lo:.2f}-{hi:.2f})"


def methods(root: Path) -> str:
    """The README's Methods table: one number per cell (the median, its range over runs)."""
    res = _load(root, "methods")
    hist = {"deep-speed", "deep-speed-spr", "deep-dcar-ablations", "ssd-windows"}
    hist |= {"deep-ft-methods", "deep-tldr-text"}
    lines = [
        "| method | what it is | WER % | vs FAR, 2 CPU cores, batch 1 (range over runs) | "
        "batch 8 | H200 batch 1 / 8 | the paper | holds? |",
        "|---|---|--:|--:|--:|--:|---|---|",
    ]
    for r in res["values"]["rows"]:
        a = r["anchor"]
        if a in hist:
            link = f"docs/history/deep.md#{a}"
        elif a == "16f":
            link = f"docs/history/mdm.md#{a}"
        else:
            link = f"benchmarks/RESULTS.md#{a}"
        holds = f"**{r['holds']}**: {r['why']} " if r["holds"] else f"{r['why']} "
        lines.append(
            f"| {r['method']} | {r['what']} | {r['wer']:.1f} | {_ratio(r['b1'])} | "
            f"{_ratio(r['b8'])} | {r['h200'] or '-'} | {r['paper'] or '-'} | "
            f"{holds.lstrip()}([§{a}]({link})) |"
        )
    note = f"Speed: {res['machine']}. WER: {res['judge']}. {res['source']}\n"
    return "\n".join(lines) + "\n\n" + note + _footer(res)


CODEC_RUNS = (  # (results file, column): the same sentences of the rebuilt corpus's test split
    ("codec_plain_newsplit", "codec (runs/codec_v2)"),
    ("codec_vtlp", "+ VTLP 0.1 (runs/codec_v3)"),
    ("codec_vtlp_mask", "+ input masks, 1800 steps more (runs/codec_v4)"),
)


def codec_augment(root: Path) -> str:
    """The speaker augmentations of the learned tokenizer, round trip per voice (same
    sentences, same judge): the codec, with VTLP, and fine-tuned with input masks too."""
    runs = [
        (_load(root, f), name)
        for f, name in CODEC_RUNS
        if (root / "benchmarks" / "results" / f"{f}.json").is_file()
    ]
    by = [_by_speaker(r) for r, _ in runs]
    head = " | ".join(f"round trip % {name}" for _, name in runs)
    lines = [
        f"| voice | role | ground truth % | {head} |",
        "|---|---|--:|" + "--:|" * len(runs),
    ]
    first = by[0]
    for spk in sorted(first, key=lambda s: (first[s][0]["engine"] == "espeak", s)):
        cells = " | ".join(_pct(_pooled(b.get(spk, []), "round_trip")) for b in by)
        gt = _pct(_pooled(first[spk], "ground_truth"))
        lines.append(f"| {spk} | {first[spk][0]['role']} | {gt} | {cells} |")
    split = _load(root, "codec_vtlp_test_split")  # the shipped codec on the headline split
    for spk, rows in _by_speaker(split).items():
        n = sum(r["ground_truth"]["n"] for r in rows)
        rt = _pct(_pooled(rows, "round_trip"))
        cells = " | ".join(rt if f == "codec_vtlp" else "" for f, _ in CODEC_RUNS[: len(runs)])
        gt = _pct(_pooled(rows, "ground_truth"))
        lines.append(
            f"| {spk}, its {n} test-split utterances | {rows[0]['role']} | {gt} | {cells} |"
        )
    real = [r["values"]["real_speech"] for r, _ in runs]
    cells = " | ".join(_pct(x["round_trip"]["wer"]) for x in real)
    lines.append(
        f"| real speech (12 clips) | check | {_pct(real[0]['ground_truth']['wer'])} | {cells} |"
    )
    return "\n".join(lines) + "\n\n" + _footer(*(r for r, _ in runs), split)


def serve_load(root: Path) -> str:
    """The server under load: per strategy and client count, the median over runs (range)."""
    res = _load(root, "serve_load")
    cells: dict[tuple, list] = {}
    for run in res["values"]["runs"]:
        one = {r["strategy"]: r["throughput"] for r in run if r["clients"] == 1}
        for r in run:
            cells.setdefault((r["strategy"], r["clients"]), []).append(
                (
                    r["ttfa_ms_p50"],
                    r["ttfa_ms_p99"],
                    r["throughput"],
                    r["throughput"] / one[r["strategy"]],
                )
            )

    def med(vals, fmt):
        v = sorted(vals)
        m = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
        return (
            fmt.format(m)
            if fmt.format(v[0]) == fmt.format(v[-1])
            else f"{fmt.format(m)} ({fmt.format(v[0])}-{fmt.format(v[-1])})"
        )

    lines = [
        "| strategy | clients | runs | first audio p50 ms | first audio p99 ms | audio s / wall s "
        "| vs 1 client |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for (strategy, clients), v in sorted(cells.items()):
        lines.append(
            f"| {strategy} | {clients} | {len(v)} | {med([x[0] for x in v], '{:.0f}')} | "
            f"{med([x[1] for x in v], '{:.0f}')} | {med([x[2] for x in v], '{:.1f}')} | "
            f"{med([x[3] for x in v], '{:.2f}x')} |"
        )
    return "\n".join(lines) + "\n\n" + _footer(res)


def natural_lm(root: Path) -> str:
    """Whisper WER of evaluate rows on the natural test split by group (benchmarks/eval_record)."""
    from benchmarks.eval_record import GROUPS

    res = _load(root, "natural_lm")
    head = "| row | utterances | WER % | " + " | ".join(GROUPS) + " | LM-RTF | mean chunk |"
    lines = [head, "|---|" + "--:|" * (len(GROUPS) + 4)]
    for r in res["values"]["rows"]:
        cells = [_pct(r["groups"].get(g, {}).get("wer")) for g in GROUPS]
        rtf = "" if r.get("lm_rtf") is None else f"{r['lm_rtf']:.3f}"
        chunk = "" if r.get("mean_chunk") is None else f"{r['mean_chunk']:.2f}"
        lines.append(
            f"| {r['name']} | {r['all']['n']} | {_pct(r['all']['wer'])} | "
            + " | ".join(cells)
            + f" | {rtf} | {chunk} |"
        )
    note = f"{res['note']} " if res.get("note") else ""
    return "\n".join(lines) + "\n\n" + note + _footer(res)


def natural_speed(root: Path) -> str:
    """The natural retrain's speed table (benchmarks/speed_record.py over methods_speed runs):
    per run the median speed vs FAR and its rounds' range, at each batch size; WER from the
    natural_wer table (same strategy and folder), and the batch-1 target met in how many runs."""
    res = _load(root, "natural_speed")
    wers = {}
    if (root / "benchmarks" / "results" / "natural_wer.json").is_file():
        for r in _load(root, "natural_wer")["values"]["systems"]:
            wers[r.get("row", r["system"])] = r
    rows = res["values"]["rows"]
    batches = sorted(
        {k for r in rows for run in r["runs"] if run for k in run}, key=lambda k: int(k[1:])
    )
    lines = [
        "| row | WER % | "
        + " | ".join(f"vs FAR batch {b[1:]} (runs; rounds' range)" for b in batches)
        + " | tokens / step | target (batch 1) | met in |",
        "|---|--:|" + "---|" * len(batches) + "--:|--:|---|",
    ]
    far_wer = None
    for r in rows:
        w = wers.get(f"{r['strategy']}@{r['folder']}")
        if r["strategy"] == "far" and w:
            far_wer = w["wer"]["all"]
        cells = []
        for b in batches:
            runs = [run[b] for run in r["runs"] if run and b in run and run[b]["vs_far"]]
            cells.append(
                "; ".join(
                    f"{c['vs_far']:.2f}x ({c['lo']:.2f}-{c['hi']:.2f})"
                    if c["lo"] is not None and c["lo"] != c["hi"]
                    else f"{c['vs_far']:.2f}x"
                    for c in runs
                )
                or "-"
            )
        first = next((run for run in r["runs"] if run), {})
        tps = first.get(batches[0], {}).get("tokens_per_step")
        target, met = r["target"], ""
        if target is not None:
            b1 = [run["b1"]["vs_far"] for run in r["runs"] if run and "b1" in run]
            met = f"speed {sum(u >= target for u in b1)} of {len(b1)} runs"
            if w and far_wer is not None and r["wer_allowance"] is not None:
                ok = 100 * (w["wer"]["all"] - far_wer) <= r["wer_allowance"]
                met += f"; WER {'within' if ok else 'over'} FAR + {r['wer_allowance']:g} pp"
        wer = _pct(w["wer"]["all"]) if w else ""
        lines.append(
            f"| {r['strategy']} @{r['folder'].rsplit('/', 1)[-1]} | {wer} | "
            + " | ".join(cells)
            + f" | {'' if tps is None else f'{tps:.2f}'} | "
            + (f"{target:.1f}x" if target else "")
            + f" | {met} |"
        )
    note = f"{res['machine']}. " + (f"{res['note']} " if res.get("note") else "")
    return "\n".join(lines) + "\n\n" + note + _footer(res)


def natural_wer(root: Path) -> str:
    """The natural retrain's WER table (benchmarks/natural_wer.py): mean over seeds, by part,
    the paired 95 % interval against the baseline; the ground truth / codec rows first."""
    res = _load(root, "natural_wer")
    v = res["values"]
    parts = ("grammar", "open", "seen", "held_out")
    lines = [
        "| system | seeds (WER %) | WER % | grammar | open-domain | seen voices | held-out voice "
        f"| vs {v['baseline']} (pp, 95 % paired) |",
        "|---|---|--:|--:|--:|--:|--:|---|",
    ]
    for r in v["references"]:
        cells = " | ".join(_pct(r["wer"].get(p)) for p in parts)
        lines.append(f"| {r['name']} | one draw | {_pct(r['wer']['all'])} | {cells} | |")
    for r in v["systems"]:
        cells = " | ".join(_pct(r["wer"].get(p)) for p in parts)
        seeds = " / ".join(f"{100 * w:.1f}" for w in r["seeds"])
        iv = r.get("vs_baseline")
        vs = f"{100 * iv['diff']:+.1f} [{100 * iv['lo']:+.1f}, {100 * iv['hi']:+.1f}]" if iv else ""
        lines.append(f"| {r['system']} | {seeds} | {_pct(r['wer']['all'])} | {cells} | {vs} |")
    n = v["systems"][0]
    note = f"{n['n']} utterances ({n['words']} words), judge {res['judge']}. " + (
        f"{res['note']} " if res.get("note") else ""
    )
    return "\n".join(lines) + "\n\n" + note + _footer(res)


def _who(speakers: str) -> str:
    """'spk00,...,spk08' -> 'espeak voices (9)'; 'awb,joe' -> 'awb, joe'; '' -> 'all voices'."""
    names = [x for x in str(speakers or "").split(",") if x]
    if not names:
        return "all voices"
    if all(x.startswith("spk") for x in names):
        return f"espeak voices ({len(names)})"
    return "natural voices " + ", ".join(names)


def _trained_on(t: dict) -> str:
    who = _who(t.get("speakers", ""))
    parts = t.get("text_parts") or "all text"
    tok = str(t.get("tokenizer", "kmeans")).split(":")[0]
    corpus = Path(str(t.get("corpus", ""))).name or "built-in"
    start = f"; from {Path(t['init_from']).name}" if t.get("init_from") else ""
    if t.get("init_from") and t.get("init_skip"):
        start += " without its speech embedding and output layers"
    if t.get("retokened_from"):
        start += f"; {Path(t['retokened_from']).name} moved onto these tokens, not trained"
    return f"{corpus}: {who}, {parts}, {tok}{start}"


def text_information(root: Path) -> str:
    """How much each LM run reads its text: dev CE with the right transcript against another
    row's, head 1 (`benchmarks/diagnostics/text_conditioning.py --record`)."""
    res = _load(root, "text_information")
    lines = [
        "| run | trained on | step | scored on (dev split) | utterances | CE right text "
        "| CE other text | text information (nats/token) |",
        "|---|---|--:|---|--:|--:|--:|--:|",
    ]
    for r in res["values"]["rows"]:
        scored = ", ".join(x for x in (_who(r.get("speakers", "")), r.get("text_parts")) if x)
        lines.append(
            f"| {Path(r['workdir']).name} | {_trained_on(r['training'])} | {r['step']} | "
            f"{scored} | {r['utterances']} | {r['ce_right'][0]:.3f} | {r['ce_other'][0]:.3f} "
            f"| {r['ce_other'][0] - r['ce_right'][0]:+.3f} |"
        )
    commits = sorted({r["commit"] for r in res["values"]["rows"]})
    dates = sorted({r["date"] for r in res["values"]["rows"]})
    return (
        "\n".join(lines)
        + "\n\nGenerated from `python -m benchmarks.diagnostics.text_conditioning --workdir <run> "
        "--step <step> [--speakers ...] --record benchmarks/results/text_information.json`, "
        f"one call per row (commits {', '.join(commits)}; {', '.join(dates)}).\n"
    )


CLAIM_STATUSES = ("holds", "partly", "does not", "invalid")
CLAIM_FIELDS = ("method", "claim", "paper", "ours", "status", "reason", "evidence")


def _claims(root: Path) -> tuple[dict, list[dict]]:
    res = _load(root, "claims")
    rows = res["values"]["rows"]
    for i, r in enumerate(rows):
        missing = [k for k in CLAIM_FIELDS if not isinstance(r.get(k), str)]
        if missing:
            raise SystemExit(
                f"error: benchmarks/results/claims.json: row {i} has no {missing[0]!r}: "
                f"expected the text fields {list(CLAIM_FIELDS)}"
            )
        if r["status"] not in CLAIM_STATUSES:
            raise SystemExit(
                f"error: benchmarks/results/claims.json: row {i} status={r['status']!r}: "
                f"expected one of {list(CLAIM_STATUSES)}"
            )
    return res, rows


def claims(root: Path) -> str:
    """Every headline claim of the five papers: the paper's number, ours, holds or not, and the
    section whose measurement decides it (benchmarks/results/claims.json, reviewed by hand:
    each row points at the generated table or section that measured it)."""
    res, rows = _claims(root)
    lines = [
        "| method | the paper's claim | the paper | ours | holds? | why | evidence |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        path, _, anchor = r["evidence"].partition("#")  # repository-relative
        if path == "benchmarks/RESULTS.md" and anchor:  # the table lives in that file
            ev = f"#{anchor}"
        else:
            ev = os.path.relpath(path, "benchmarks") + (f"#{anchor}" if anchor else "")
        lines.append(
            f"| {r['method']} | {r['claim']} | {r['paper']} | {r['ours']} | **{r['status']}** | "
            f"{r['reason']} | [§{anchor or path}]({ev}) |"
        )
    return (
        "\n".join(lines)
        + f"\n\n{res['note']}\nReviewed against the docs at commit {res['commit']} "
        + f"({res['date']}).\n"
    )


def claims_summary(root: Path) -> str:
    """The README's count of the claims table: per method, how many hold, partly, do not, or
    rest on a broken comparison."""
    res, rows = _claims(root)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = [
        "| method | " + " | ".join(CLAIM_STATUSES) + " |",
        "|---|" + "--:|" * len(CLAIM_STATUSES),
    ]
    for m in methods + ["all"]:
        n = [
            sum(1 for r in rows if r["status"] == s and m in (r["method"], "all"))
            for s in CLAIM_STATUSES
        ]
        name = "**all**" if m == "all" else m
        lines.append(f"| {name} | " + " | ".join(str(x) for x in n) + " |")
    return "\n".join(lines) + f"\n\nReviewed at commit {res['commit']}.\n"


TABLES = {
    "claims": claims,
    "claims_summary": claims_summary,
    "text_information": text_information,
    "natural_lm": natural_lm,
    "natural_wer": natural_wer,
    "natural_speed": natural_speed,
    "serve_load": serve_load,
    "codec_augment": codec_augment,
    "methods": methods,
    "codec_round_trip": codec_round_trip,
    "natural_voices_80": natural_voices_80,
    "natural_voices": natural_voices,
    "natural_test_split": natural_test_split,
    "vocoder": vocoder,
}


def render(text: str, root: Path) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit(f"error: table {name!r} in a doc: expected one of {sorted(TABLES)}")
        return m.group(1) + TABLES[name](root) + m.group(4)

    return _BLOCK.sub(sub, text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    ap.add_argument("--root", default=str(ROOT), help="repository root (tests use a copy)")
    a = ap.parse_args(argv)
    root = Path(a.root)
    stale = []
    for doc in DOCS:
        path = root / doc
        text = path.read_text()
        new = render(text, root)
        if new != text:
            if a.write:
                path.write_text(new)
                print(f"rewrote {doc}")
            else:
                fresh = {m.group(2): m.group(3) for m in _BLOCK.finditer(new)}
                names = [
                    m.group(2) for m in _BLOCK.finditer(text) if fresh[m.group(2)] != m.group(3)
                ]
                stale += [f"{doc} ({', '.join(names)})"]
    if stale:
        print(
            "error: tables differ from benchmarks/results/: "
            + "; ".join(stale)
            + " (python -m benchmarks.tables --write)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

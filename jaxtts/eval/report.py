"""Tables (markdown) and plots (matplotlib Agg) for `jaxtts.evaluate` results."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import soundfile as sf

from jaxtts.data.audio import MelConfig, log_mel

# (key, header, formatter)
COLUMNS = [
    ("name", "row", str),
    ("num_utts", "N", lambda v: f"{v:d}"),
    ("wer_whisper", "WER Whisper %", lambda v: f"{100 * v:.1f}"),
    ("cer_whisper", "CER Whisper %", lambda v: f"{100 * v:.1f}"),
    ("wer_whisper_natural", "Whisper natural voices %", lambda v: f"{100 * v:.1f}"),
    ("wer_whisper_espeak", "Whisper espeak %", lambda v: f"{100 * v:.1f}"),
    ("wer_whisper_open", "Whisper open-domain %", lambda v: f"{100 * v:.1f}"),
    ("wer_whisper_heldout", "Whisper held-out spk %", lambda v: f"{100 * v:.1f}"),
    ("wer_domain", "WER domain-LM %", lambda v: f"{100 * v:.1f}"),
    ("wer_default", "WER default-LM %", lambda v: f"{100 * v:.1f}"),
    ("wer_default_delta", "Δ default vs GT (pp)", lambda v: f"{100 * v:+.1f}"),
    ("wer_domain_heldout", "WER domain held-out spk %", lambda v: f"{100 * v:.1f}"),
    ("sim", "SIM", lambda v: f"{v:.3f}"),
    ("mcd", "MCD dB", lambda v: f"{v:.2f}"),
    ("logf0_rmse", "logF0 RMSE", lambda v: f"{v:.3f}"),
    ("rtf", "RTF", lambda v: f"{v:.3g}"),
    ("lm_rtf", "LM-RTF", lambda v: f"{v:.3g}"),
    ("forwards_per_audio_s", "steps / audio s", lambda v: f"{v:.1f}"),
    ("mean_chunk", "mean chunk", lambda v: f"{v:.2f}"),
    ("no_eos", "no EOS %", lambda v: f"{100 * v:.1f}"),
    ("tokens_per_s", "tokens/s", lambda v: f"{v:.0f}"),
    ("kv_bytes_per_audio_s", "KV bytes / audio s", lambda v: f"{v:.3g}"),
    ("compile_s", "compile s", lambda v: f"{v:.1f}"),
    ("failed", "failed", lambda v: f"{v:d}"),
]
ALWAYS = {
    "name",
    "num_utts",
    "wer_domain",
    "wer_default",
    "wer_default_delta",
    "sim",
    "mcd",
    "logf0_rmse",
    "rtf",
    "forwards_per_audio_s",
    "failed",
}


def _cell(fmt, v) -> str:
    return "—" if v is None else fmt(v)


def markdown_table(results: dict) -> str:
    """One line per row; optional speed columns only when some row has them."""
    rows = results["rows"]
    cols = [c for c in COLUMNS if c[0] in ALWAYS or any(r.get(c[0]) is not None for r in rows)]
    lines = [
        "| " + " | ".join(h for _, h, _ in cols) + " |",
        "|" + "|".join("---" if k == "name" else "--:" for k, _, _ in cols) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join(_cell(f, r.get(k)) for k, _, f in cols) + " |")
    return "\n".join(lines)


def error_breakdown(results: dict, lm: str = "domain") -> str:
    """Where a row's `lm` WER comes from: substitutions / deletions / insertions (skipped and
    repeated words show up as D and I) and the WER of each speaker, from the per-utterance
    hypotheses in `results`. Empty when no row has `lm` hypotheses."""
    import jiwer  # evaluation dependency; only imported when a report is written

    rows = [
        r for r in results["rows"] if any(u.get(f"hyp_{lm}") is not None for u in r["utterances"])
    ]
    if not rows:
        return ""
    speakers = sorted({u.get("speaker") or "?" for r in rows for u in r["utterances"]})
    lines = [
        "| row | words | S | D | I | " + " | ".join(speakers) + " |",
        "|---|--:|--:|--:|--:|" + "--:|" * len(speakers),
    ]
    for r in rows:
        us = [u for u in r["utterances"] if u.get(f"hyp_{lm}") is not None and u.get("ref")]
        refs = [u["ref"] for u in us]
        hyps = [u[f"hyp_{lm}"] for u in us]
        # jiwer rejects empty references; an utterance's empty hypothesis is all deletions
        m = jiwer.process_words(refs, hyps)
        per_spk = []
        for spk in speakers:
            su = [u for u in us if (u.get("speaker") or "?") == spk]
            words = sum(u.get(f"words_{lm}", 0) for u in su)
            errs = sum(u.get(f"errors_{lm}", 0) for u in su)
            per_spk.append(f"{100 * errs / words:.1f}" if words else "—")
        lines.append(
            f"| {r['name']} | {sum(len(x.split()) for x in refs)} | "
            f"{m.substitutions} | {m.deletions} | {m.insertions} | " + " | ".join(per_spk) + " |"
        )
    return "\n".join(lines)


def markdown_report(results: dict) -> str:
    """results.md: table, definitions, warnings, failures."""
    out = [
        f"# Evaluation: {results['corpus']} / {results['split']} "
        f"({results['num_utts']} utterances)",
        "",
        markdown_table(results),
        "",
    ]
    asr = results.get("asr") or {}
    out += [
        "Judges: "
        + (", ".join(f"{k}={v}" for k, v in asr.items()) or "unavailable")
        + " (Whisper WER/CER on whisper_normalize'd text; PocketSphinx on the corpus "
        "normaliser's); domain LM = training-split sentences (+ fresh generator sentences for the "
        "built-in corpus), never dev/test ones. Δ = default-LM WER minus the "
        "ground-truth row's (the ASR floor). MCD: DTW-aligned mel-cepstral distortion over "
        "c1..c24; logF0 RMSE: natural log, frames voiced in both (see jaxtts/eval/metrics.py). "
        "RTF: wall / audio seconds at batch 1 after a warm-up call (compile excluded). "
        f"SIM encoder: {results.get('speaker_encoder') or 'none'}.",
        "",
    ]
    breakdown = error_breakdown(results)
    if breakdown:
        out += [
            "## Where the errors are (domain LM)",
            "",
            "Word errors by kind (S substitutions, D deletions, I insertions: skipped and "
            "repeated words show up as D and I) and WER % per speaker.",
            "",
            breakdown,
            "",
        ]
    shares = [(r["name"], r["chunk_share"]) for r in results["rows"] if r.get("chunk_share")]
    if shares:
        out += [
            "## Chunk sizes chosen (share of decisions)",
            "",
            "| row | " + " | ".join(f"c={c + 1}" for c in range(len(shares[0][1]))) + " |",
            "|---|" + "--:|" * len(shares[0][1]),
        ]
        out += [f"| {n} | " + " | ".join(f"{100 * v:.1f} %" for v in h) + " |" for n, h in shares]
        out.append("")
    if results.get("warnings"):
        out += ["## Warnings", ""] + [f"- {w}" for w in results["warnings"]] + [""]
    fails = [
        (r["name"], u["id"], u["error"])
        for r in results["rows"]
        for u in r["utterances"]
        if u.get("error")
    ]
    if fails:
        out += ["## Failed utterances (scored WER 100%)", ""]
        out += [f"- {n} / {i}: {e}" for n, i, e in fails[:50]]
        if len(fails) > 50:
            out.append(f"- ... {len(fails) - 50} more in results.json")
        out.append("")
    mem = results.get("memory") or {}
    if mem:
        dev = mem.get("device") or {}
        out.append(
            f"Peak host RSS {mem.get('peak_host_rss_bytes', 0) / 2**20:.0f} MiB; device "
            + (
                f"peak {dev['peak_bytes_in_use'] / 2**20:.0f} MiB"
                if dev.get("peak_bytes_in_use")
                else "memory stats unavailable"
            )
            + "."
        )
    return "\n".join(out) + "\n"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "row"


def save_samples(folder: Path, samples_by_row: dict, n: int, sr: int) -> None:
    """First `n` non-empty outputs of each row as 16-bit wavs under folder/<row>/<id>.wav."""
    if n <= 0:
        return
    for name, samples in samples_by_row.items():
        d = Path(folder) / _slug(name)
        kept = [s for s in samples if s.wav.size and not s.error][:n]
        if kept:
            d.mkdir(parents=True, exist_ok=True)
        for s in kept:
            sf.write(d / f"{_slug(s.id)}.wav", np.clip(s.wav, -1, 1), sr, subtype="PCM_16")


def _plt():
    import matplotlib  # start-up: matplotlib 150 ms, only for plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up: pyplot 600+ ms; after use('Agg')

    return plt


def plot_wer_vs_rtf(results: dict, path: Path) -> bool:
    """Scatter of WER (both LMs) vs RTF, one point per timed row. False if nothing to plot."""
    pts = [r for r in results["rows"] if r.get("rtf") and r.get("rtf") > 0]
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in (
        (axes[0], "wer_domain", "domain LM"),
        (axes[1], "wer_default", "default LM"),
    ):
        for r in pts:
            if r.get(key) is None:
                continue
            ax.scatter(r["rtf"], 100 * r[key])
            ax.annotate(
                r["name"],
                (r["rtf"], 100 * r[key]),
                fontsize=8,
                xytext=(3, 3),
                textcoords="offset points",
            )
        gt = next((r for r in results["rows"] if r["kind"] == "ground_truth"), None)
        if gt is not None and gt.get(key) is not None:
            ax.axhline(100 * gt[key], ls="--", c="gray", lw=1, label="ground truth")
            ax.legend(fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("RTF (wall / audio s, batch 1)")
        ax.set_ylabel("WER %")
        ax.set_title(f"WER ({title}) vs RTF")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return bool(pts)


def plot_mels(samples_by_row: dict, path: Path, index: int = 0) -> bool:
    """Log-mel spectrogram of utterance `index` for every row, stacked. False if none."""
    cfg = MelConfig()
    items = []
    for name, samples in samples_by_row.items():
        if len(samples) > index and samples[index].wav.size:
            items.append((name, samples[index].id, np.asarray(log_mel(samples[index].wav, cfg))))
    if not items:
        return False
    plt = _plt()
    fig, axes = plt.subplots(len(items), 1, figsize=(10, 2.2 * len(items)), squeeze=False)
    for ax, (name, uid, mel) in zip(axes[:, 0], items, strict=False):
        ax.imshow(mel.T, origin="lower", aspect="auto", interpolation="nearest")  # [80, T]
        ax.set_title(f"{name}: {uid}", fontsize=9)
        ax.set_ylabel("mel")
    axes[-1, 0].set_xlabel("frame")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True

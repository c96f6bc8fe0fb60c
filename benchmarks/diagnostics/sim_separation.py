"""Speaker-encoder separation on the TEST split (incl. the held-out speaker never trained on).

    python -m benchmarks.diagnostics.sim_separation [--corpus data/builtin] [--split test]
        [--jax-workdir runs/speaker_encoder] [--encoders jax,resemblyzer]

For every encoder: cosine similarity of same-speaker vs different-speaker pairs of whole
utterances (mean +- std over all unordered pairs), the equal error rate of the threshold test
on those pairs, and leave-one-out nearest-centroid speaker-ID accuracy among the test speakers.
Rows: all test speakers, and "held-out": same-speaker pairs within the held-out speaker,
different-speaker pairs held-out x seen, ID accuracy over the held-out speaker's utterances.
Prints a markdown table;
an encoder that is not installed / not trained is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def heldout_speakers(corpus: Path) -> set[str]:
    path = corpus / "speakers.json"
    if not path.is_file():
        return set()
    info = json.load(open(path))
    return {k for k, v in info.items() if v.get("role") == "heldout"}


def heldout_stats(emb, speakers, held: set[str]) -> dict[str, float]:
    """Same pairs within held-out speakers; different pairs held-out x seen."""
    import numpy as np

    from jaxtts.methods.speaker_encoder import equal_error_rate, nearest_centroid

    spk = np.asarray(speakers)
    e = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    h = np.isin(spk, list(held))
    cos = e @ e.T
    same, diff = [], []
    for i in np.where(h)[0]:
        for j in range(len(spk)):
            if j == i:
                continue
            if spk[j] == spk[i] and j > i:
                same.append(cos[i, j])
            elif not h[j]:
                diff.append(cos[i, j])
    same, diff = np.array(same), np.array(diff)
    return {
        "same_mean": same.mean(),
        "same_std": same.std(),
        "diff_mean": diff.mean(),
        "diff_std": diff.std(),
        "gap": same.mean() - diff.mean(),
        "eer": equal_error_rate(same, diff),
        "id_acc": float(np.mean(nearest_centroid(emb, spk)[h] == spk[h])),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="")
    p.add_argument("--split", default="test")
    p.add_argument("--jax-workdir", default="runs/speaker_encoder")
    p.add_argument("--encoders", default="jax,resemblyzer")
    a = p.parse_args(argv)

    from jaxtts.data.audio import MelConfig, load_audio
    from jaxtts.data.corpus import default_corpus_dir
    from jaxtts.data.manifest import read_manifest
    from jaxtts.errors import JaxttsError
    from jaxtts.methods.speaker_encoder import (
        JaxSpeakerEncoder,
        ResemblyzerEncoder,
        separation_stats,
    )

    corpus = Path(a.corpus) if a.corpus else default_corpus_dir()
    utts = read_manifest(corpus / f"{a.split}.jsonl")
    sr = MelConfig().sample_rate
    wavs = [load_audio(u.path, sr) for u in utts]
    speakers = [u.speaker for u in utts]
    held = heldout_speakers(corpus)
    factories = {"jax": lambda: JaxSpeakerEncoder(a.jax_workdir), "resemblyzer": ResemblyzerEncoder}
    results, notes = [], []
    for name in a.encoders.split(","):
        try:
            enc = factories[name]()
        except JaxttsError as e:
            notes.append(f"{name}: skipped ({e})")
            continue
        enc.embed(wavs[:2], sr)  # warm-up (compilation / model load)
        t0 = time.perf_counter()
        emb = enc.embed(wavs, sr)
        dt = time.perf_counter() - t0
        results.append((name, "all", separation_stats(emb, speakers), dt))
        if held & set(speakers):
            results.append(
                (
                    name,
                    "held-out " + ",".join(sorted(held)),
                    heldout_stats(emb, speakers, held),
                    None,
                )
            )

    n_spk = len(set(speakers))
    print(
        f"{a.split} split: {len(utts)} utterances, {n_spk} speakers "
        f"(held out from training: {', '.join(sorted(held)) or 'none'})\n"
    )
    print(
        "| encoder | pairs | same-speaker cos | different-speaker cos | gap | EER % "
        "| speaker-ID acc % | embed time (s) |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for name, rows, st, dt in results:
        acc = f"{100 * st['id_acc']:.1f}" if "id_acc" in st else "-"
        t = f"{dt:.1f}" if dt is not None else "-"
        print(
            f"| {name} | {rows} | {st['same_mean']:.3f} +- {st['same_std']:.3f} | "
            f"{st['diff_mean']:.3f} +- {st['diff_std']:.3f} | {st['gap']:.3f} | "
            f"{100 * st['eer']:.1f} | {acc} | {t} |"
        )
    for n in notes:
        print(f"\n{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

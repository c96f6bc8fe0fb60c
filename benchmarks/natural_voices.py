"""The voice table: Whisper WER of each corpus voice's ground truth and of the tokenizer's round
trip, per text part, and the same on the real-speech smoke set.

    python -m benchmarks.natural_voices --corpus data/natural \
        [--tokenizer pretrained/car_deep/tokenizer] [--num 0] [--gl_iters 32] \
        [--out benchmarks/results/natural_voices.json]

For every test speaker of the corpus and each text part (grammar / open-domain): the
utterances' ground-truth audio is transcribed by the judge (`jaxtts.eval.whisper.WhisperASR`,
Whisper tiny.en, greedy, int8) and scored with `whisper_normalize` on both sides (WER and
CER); with `--tokenizer`, the same audio goes through the round trip (log-mel -> tokens ->
decoded log-mel -> Griffin-Lim `--gl_iters` -> judge) and its decoded-mel L1 is reported too.
The real-speech set (`jaxtts.eval.realspeech`, 12 human recordings) gets the same two rows.
`--num N` keeps the first N utterances of each (speaker, part) (0: all).

`--same_text N` judges the voices on the SAME sentences instead (the voice table): every voice
of `jaxtts.data.natural.VOICES` (flite's kal16, left out of the corpus, included) speaks the
corpus's first N grammar and first N open-domain test sentences, with its own per-utterance
draws, into `out/voice_check/<voice>/`; a seen voice's test split holds only 12 utterances.
Writes the table as markdown to stdout and the numbers as JSON (command, commit, machine,
date, values) to `--out`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.provenance import provenance
from jaxtts.codec import load_tokenizer
from jaxtts.data.audio import MelConfig, load_audio, log_mel
from jaxtts.data.manifest import read_split
from jaxtts.data.natural import utterance_part
from jaxtts.data.vocoder import make_vocoder
from jaxtts.eval import metrics as M
from jaxtts.eval.realspeech import real_speech_set
from jaxtts.eval.whisper import WhisperASR, whisper_normalize

ROOT = Path(__file__).resolve().parents[1]


def _scores(refs: list[str], hyps: list[str]) -> dict:
    r = [whisper_normalize(x) for x in refs]
    h = [whisper_normalize(x) for x in hyps]
    det = M.wer_details(r, h, normalize=False)
    cer = M.sentence_cer(r, h)
    lens = np.array([max(1, len(x)) for x in r], np.float64)
    return {
        "wer": M.corpus_wer(det),
        "cer": float((cer * lens).sum() / lens.sum()),
        "n": len(refs),
        "words": int(sum(d.num_ref_words for d in det)),
    }


def _round_trip(tok, vocoder, wavs: list[np.ndarray], cfg: MelConfig, same_speaker=True):
    """A voice-conditioned codec decodes each utterance in the voice of the NEXT utterance of
    the group (`same_speaker`: one speaker's, as a prompt with other words would give it), or
    in its own voice (the real-speech set: several speakers)."""
    out, l1 = [], []
    mels = [log_mel(w, cfg) for w in wavs]  # [T, M] each
    for i, mel in enumerate(mels):
        codes = tok.encode(mel)
        ref = {}
        if getattr(tok, "conditioned", False):
            ref = {"ref": mels[(i + 1) % len(mels)] if same_speaker else mel}
        dec = tok.decode(codes, **ref)[: len(mel)]  # [T, M]
        l1.append(float(np.abs(dec - mel[: len(dec)]).mean()))
        out.append(vocoder.mel_to_audio(dec))
    return out, float(np.mean(l1)) if l1 else None


def _same_text(utts, n: int):
    """Every voice speaks the first n grammar + n open-domain test sentences (cached wavs)."""
    import dataclasses

    from jaxtts.data.manifest import Utterance
    from jaxtts.data.natural import DROPPED, VOICES
    from jaxtts.data.voices import check_voice, synthesize_batch

    texts = {
        p: [u.text for u in utts if utterance_part(u.id) == p][:n] for p in ("grammar", "open")
    }
    speakers, groups = {}, defaultdict(list)
    for v in VOICES:
        check_voice(v)
        folder = ROOT / "out" / "voice_check" / v.name
        folder.mkdir(parents=True, exist_ok=True)
        items = []
        for p, ts in texts.items():
            for i, t in enumerate(ts):
                uid = f"{v.name}_{p[0]}{i:03d}"
                # the cached wav is named by its text too: a rebuilt corpus's test split (other
                # sentences at the same index) never reuses a wav of another sentence
                digest = hashlib.sha1(t.encode()).hexdigest()[:10]
                path = folder / f"{uid}_{digest}.wav"
                u = Utterance(uid, str(path), t, speaker=v.name)
                groups[(v.name, p)].append(u)
                if not path.is_file():
                    items.append((t, v.draw(0, uid), path))
        if items:
            synthesize_batch(v, items)
        role = "left out" if v.name in DROPPED else v.role
        speakers[v.name] = {**dataclasses.asdict(v), "source": v.source or v.engine, "role": role}
    return speakers, groups


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="data/natural")
    ap.add_argument("--split", default="test")
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder for the round trip")
    ap.add_argument("--num", type=int, default=0, help="utterances per (speaker, part); 0 all")
    ap.add_argument("--gl_iters", type=int, default=32)
    ap.add_argument("--same_text", type=int, default=0, help="N: every voice speaks the same 2N")
    ap.add_argument("--voices", default="", help="comma-separated speakers to keep (default all)")
    ap.add_argument("--whisper_model", default=None, help="CTranslate2 folder (default tiny.en)")
    ap.add_argument("--out", default="benchmarks/results/natural_voices.json")
    a = ap.parse_args()
    t0 = time.perf_counter()
    corpus = Path(a.corpus)
    speakers = json.loads((corpus / "speakers.json").read_text())
    utts = read_split(corpus, a.split)
    groups: dict[tuple[str, str], list] = defaultdict(list)
    if a.same_text > 0:
        speakers, groups = _same_text(utts, a.same_text)
    else:
        for u in utts:
            groups[(u.speaker, utterance_part(u.id))].append(u)
    if a.num > 0:
        groups = {k: v[: a.num] for k, v in groups.items()}
    if a.voices:
        keep = set(a.voices.split(","))
        groups = {k: v for k, v in groups.items() if k[0] in keep}
    asr = WhisperASR(a.whisper_model, progress=False)
    tok = load_tokenizer(a.tokenizer) if a.tokenizer else None
    cfg = tok.mel_cfg if tok is not None else MelConfig()
    voc = make_vocoder("griffin_lim", cfg, n_iter=a.gl_iters) if tok is not None else None
    rows = []
    for (spk, part), us in sorted(groups.items()):
        wavs = [load_audio(u.path, cfg.sample_rate) for u in us]
        refs = [u.text for u in us]
        info = speakers.get(spk, {})
        row = {
            "speaker": spk,
            "engine": info.get("engine", "espeak"),
            "source": info.get("source", ""),
            "role": info.get("role", ""),
            "part": part,
            "ground_truth": _scores(refs, asr.transcribe(wavs, cfg.sample_rate)),
        }
        if tok is not None:
            rt, l1 = _round_trip(tok, voc, wavs, cfg)
            row["round_trip"] = {**_scores(refs, asr.transcribe(rt, cfg.sample_rate)), "mel_l1": l1}
        rows.append(row)
        print(f"  {spk} {part}: {json.dumps(row)}", file=sys.stderr, flush=True)
    clips = real_speech_set()
    wavs = [c.wav for c in clips]
    real = {"ground_truth": _scores([c.text for c in clips], asr.transcribe(wavs, 16000))}
    if tok is not None:
        rt, l1 = _round_trip(tok, voc, wavs, cfg, same_speaker=False)
        real["round_trip"] = {
            **_scores([c.text for c in clips], asr.transcribe(rt, 16000)),
            "mel_l1": l1,
        }
    result = {
        "command": "python -m benchmarks.natural_voices " + " ".join(sys.argv[1:]),
        **provenance(),
        "judge": asr.name,
        "values": {"rows": rows, "real_speech": real, "seconds": time.perf_counter() - t0},
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    return 0


def _pct(d: dict | None, key: str = "wer") -> str:
    return "" if not d else f"{100 * d[key]:.1f}"


def markdown(result: dict) -> str:
    """The voice table of a result JSON (one row a speaker, the two parts side by side)."""
    by: dict[str, dict] = defaultdict(dict)
    for r in result["values"]["rows"]:
        by[r["speaker"]][r["part"]] = r
        by[r["speaker"]]["meta"] = r
    lines = [
        "| voice | source | role | WER grammar | WER open | round trip grammar | "
        "round trip open | decoded-mel L1 |",
        "|---|---|---|--:|--:|--:|--:|--:|",
    ]
    order = sorted(by, key=lambda s: (by[s]["meta"]["engine"] == "espeak", s))
    for s in order:
        g, o, m = by[s].get("grammar"), by[s].get("open"), by[s]["meta"]
        l1 = [x["round_trip"]["mel_l1"] for x in (g, o) if x and "round_trip" in x]
        lines.append(
            f"| {s} | {m['source'] or m['engine']} | {m['role']} | "
            f"{_pct(g and g['ground_truth'])} | {_pct(o and o['ground_truth'])} | "
            f"{_pct(g and g.get('round_trip'))} | {_pct(o and o.get('round_trip'))} | "
            f"{np.mean(l1):.3f} |"
            if l1
            else f"| {s} | {m['source'] or m['engine']} | {m['role']} | "
            f"{_pct(g and g['ground_truth'])} | {_pct(o and o['ground_truth'])} | | | |"
        )
    real = result["values"]["real_speech"]
    rt = real.get("round_trip")
    lines.append(
        f"| real speech (12 clips) | pocketsphinx-testdata | check | "
        f"{_pct(real['ground_truth'])} | | {_pct(rt)} | | {rt['mel_l1']:.3f} |"
        if rt
        else f"| real speech (12 clips) | pocketsphinx-testdata | check | "
        f"{_pct(real['ground_truth'])} | | | | |"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""Move a trained TTS LM onto another speech tokenizer of the same frame rate (vocabulary
transfer), so that a model that reads its text keeps its layers when its tokens change.

    python -m jaxtts.methods.lm.retoken runs/abl_espeak runs/car_codec_init \
        --tokenizer pretrained/codec --corpus data/natural [--speakers spk00,spk01]

Both tokenizers' tokens of the corpus's train utterances are read from their caches
(`<corpus>/tokens/<name>/<id>.npy`, written by any training run with that tokenizer), frame by
frame (the shorter length of the two). Co-occurrence counts `N[c, k]` (new token c, old token
k on the same frame) give `P(k | c)`; each new token's input embedding and output column (every
head; the base head's bias too) is the `P(k | c)`-weighted mean of the old tokens' ones
(`# new[c] = sum_k P(k|c) old[k]`); EOS, BOS and PAD keep the old model's rows; a new token
never seen in the counts gets the mean of all old tokens. Every other parameter (text
embedding, layers, the heads' hidden blocks) is copied. The new folder is a run folder (config
with the new tokenizer, data.json, text_frontend/, tokenizer/, one params file) for
`train.init_from`.

Why: the natural-voice corpus with the learned tokenizer's tokens does not start reading its
text within 600 steps, even on its espeak voices alone, while k-means tokens on the same
utterances read 0.58 nats a token at step 500 (benchmarks/RESULTS.md §natural-lm). This carries
the k-means model's alignment over to the learned tokens instead of waiting for it to form.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from jaxtts import checkpoint as ckpt_lib
from jaxtts.errors import ConfigError, DataError, JaxttsError
from jaxtts.run_folder import CONFIG, TEXT_FRONTEND, TOKENIZER, RunFolder, params_fingerprint

# parameter paths whose last axis (output columns) or first axis (embedding rows) is the
# speech vocabulary
_EMBED = "speech_embed"
_OUT = ("base_head/kernel", "base_head/bias")


def cooccurrence(old_dir: Path, new_dir: Path, ids: list[str], k_old: int, k_new: int):
    """N [k_new, k_old] int64: frames where new token c and old token k coincide."""
    counts = np.zeros((k_new, k_old), np.int64)
    used = 0
    for i in ids:
        a, b = old_dir / f"{i}.npy", new_dir / f"{i}.npy"
        if not (a.is_file() and b.is_file()):
            continue
        old, new = np.load(a), np.load(b)
        n = min(len(old), len(new))
        np.add.at(counts, (new[:n], old[:n]), 1)
        used += 1
    if not used:
        raise DataError(
            f"{old_dir} / {new_dir}: no utterance has tokens of both tokenizers; train (or run "
            "jaxtts.data.tokenizers extract) with each tokenizer on the corpus first"
        )
    return counts, used


def transfer_matrix(counts: np.ndarray) -> np.ndarray:
    """P(k | c) [k_new, k_old]; a row never seen: uniform."""
    rows = counts.sum(axis=1, keepdims=True)
    p = counts / np.maximum(rows, 1)
    p[rows[:, 0] == 0] = 1.0 / counts.shape[1]
    return p


def move_params(params: dict, p: np.ndarray, k_old: int, v_in: int, v_out: int) -> dict:
    """The speech-vocabulary leaves of `params` (old tokenizer: K_old tokens) moved to the new
    tokenizer's K_new = p.shape[0] (inputs K + 3 ids padded to `v_in` rows, outputs K + 1
    columns padded to `v_out`); every other leaf unchanged."""
    from jaxtts.train.state import tree_from_flat, tree_to_flat

    k_new = p.shape[0]
    flat = tree_to_flat(params)
    out = {}
    for path, x in flat.items():
        x = np.asarray(x, np.float32)
        if path == _EMBED:  # [V_in_old, D] -> [v_in, D]
            y = np.zeros((v_in, x.shape[1]), np.float32)
            y[:k_new] = np.einsum("ck,kd->cd", p, x[:k_old])
            y[k_new : k_new + 3] = x[k_old : k_old + 3]  # EOS, BOS, PAD
        elif path in _OUT or (path.startswith("head_") and path.endswith("/out/kernel")):
            # [..., V_out_old] -> [..., v_out]
            y = np.zeros(x.shape[:-1] + (v_out,), np.float32)
            y[..., :k_new] = np.einsum("ck,...k->...c", p, x[..., :k_old])
            y[..., k_new] = x[..., k_old]  # EOS
        else:
            y = x
        out[path] = y
    return tree_from_flat(out)


def retoken_run(
    src: str | Path,
    dest: str | Path,
    tokenizer: str | Path,
    corpus: str | Path,
    speakers: str = "",
    dtype: str | None = "float16",
) -> RunFolder:
    """Writes `dest`: the LM run `src` moved onto `tokenizer` (module docstring)."""
    from jaxtts.codec import load_tokenizer
    from jaxtts.data.manifest import read_split
    from jaxtts.methods.lm.model import LMConfig
    from jaxtts.train.prepare import slice_utterances

    run, corpus = RunFolder(src), Path(corpus)
    config = run.read_config("lm")
    old_tok = json.loads((run.path / TOKENIZER / "tokenizer.json").read_text())
    new = load_tokenizer(tokenizer)
    old_name, k_old = old_tok["name"], int(config.model.num_speech_tokens)
    old_rate = float(run.read_data_info()["frame_rate"])
    if abs(old_rate - new.frame_rate) > 1e-6:
        raise ConfigError(
            f"--tokenizer {tokenizer}: {new.frame_rate} tokens a second, {src}'s tokenizer "
            f"{old_rate}: expected the same frame rate"
        )
    utts = slice_utterances(
        read_split(corpus, "train"), speakers, "", f"{corpus}/train.jsonl", "--"
    )
    counts, used = cooccurrence(
        corpus / "tokens" / old_name,
        corpus / "tokens" / new.name,
        [u.id for u in utts],
        k_old,
        new.vocab_size,
    )
    p = transfer_matrix(counts)
    cfg = json.loads(run.config_path.read_text())
    cfg["model"]["num_speech_tokens"] = int(new.vocab_size)
    if getattr(new, "kind", "") == "kmeans":
        cfg["data"].update(tokenizer="kmeans", tokenizer_dir=str(tokenizer))
    else:  # a learned tokenizer (jaxtts.codec)
        cfg["data"]["tokenizer"] = f"codec:{tokenizer}"
    lm = LMConfig.from_config(cfg["model"])
    params = run.saved_params()
    fingerprint = params_fingerprint(params)
    moved = move_params(params, p, k_old, lm.padded(new.vocab_size + 3), lm.padded(lm.out_vocab))
    out = RunFolder(dest)
    out.path.mkdir(parents=True, exist_ok=True)
    if (run.path / TEXT_FRONTEND).is_dir():
        shutil.copytree(run.path / TEXT_FRONTEND, out.path / TEXT_FRONTEND, dirs_exist_ok=True)
    new.save(out.path / TOKENIZER)
    info = run.read_data_info()
    info.update(tokenizer=new.name, frame_rate=new.frame_rate)
    seen = float((counts.sum(axis=1) > 0).mean())
    info["retokened_from"] = dict(
        run=str(src),
        tokenizer=old_name,
        fingerprint=fingerprint,
        utterances=used,
        new_tokens_seen=seen,
    )
    out.write_data_info(info)
    (out.path / CONFIG).write_text(json.dumps(cfg, indent=2))
    ckpt_lib.write_params_file(out.params_file, moved, dtype)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", help="a trained TTS LM run folder")
    ap.add_argument("dest", help="the new run folder (for train.init_from)")
    ap.add_argument("--tokenizer", required=True, help="the new tokenizer (a codec folder)")
    ap.add_argument("--corpus", required=True, help="the corpus whose cached tokens are counted")
    ap.add_argument("--speakers", default="", help="count these speakers' utterances only")
    a = ap.parse_args(argv)
    try:
        out = retoken_run(a.src, a.dest, a.tokenizer, a.corpus, a.speakers)
    except JaxttsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    info = out.read_data_info()["retokened_from"]
    print(
        f"wrote {out.path}: {info['utterances']} utterances counted, "
        f"{100 * info['new_tokens_seen']:.1f} % of the new tokens seen"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

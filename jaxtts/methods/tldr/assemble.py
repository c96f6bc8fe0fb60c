"""How a TLDR model is put together from its parts: the `config.tldr` keys, the frozen
backbone and speaker encoder runs they name, the tokenizer's centroid log-mel table and the
frozen parameter tree (`tldr_init`). Shared by training (`task.py`) and loading (`engine.py`).
"""

from __future__ import annotations

import dataclasses

import ml_collections as mlc
import numpy as np

from jaxtts.errors import ConfigError
from jaxtts.methods.speaker_encoder import load_params, model_from_config
from jaxtts.methods.tldr.model import TLDRConfig
from jaxtts.run_folder import check_trained_on, resolve_run
from jaxtts.train.state import trainable_predicate
from jaxtts.trees import tree_from_flat, tree_to_flat

TRAINABLE = "lora|prefix:compressor,extractor,text_compressor,text_reader"
# config.tldr keys that are not TLDRConfig fields
RUN_KEYS = (
    "backbone",
    "speaker_encoder",
    "lora_rank",
    "lora_alpha",
    "corpus_utterances",
    "batch_size",
    "data_seed",
    "fixed_shapes",
    "min_reference_seconds",
    "warm_start",
    "warm_start_backbone",
    "text_layers",
    "teacher",
    "distill",
    "distill_kl",
)
MODEL_KEYS = (
    "patch",
    "compressor",
    "window",
    "comp_heads",
    "comp_ff",
    "ext_layers",
    "ext_width",
    "ext_heads",
    "ext_ff",
    "slots",
    "ext_prev",
    "speaker",
    "speaker_proj",
    "token_rate_positions",
    "text_patch",
    "text_slot_order",
    "ext_text",
    "dropout",
)


def check_keys(section) -> None:
    unknown = sorted(set(dict(section)) - set(RUN_KEYS) - set(MODEL_KEYS))
    if unknown:
        raise ConfigError(
            f"tldr.{unknown[0]}: unknown key, expected one of {sorted(RUN_KEYS + MODEL_KEYS)}"
        )


def text_layers(value, num_layers: int) -> tuple[int, ...]:
    """`tldr.text_layers` (backbone layer indices, a list or "a,b,c"; empty = all) as a
    sorted tuple; a bad value is a ConfigError naming it and the backbone's depth."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    try:
        out = tuple(sorted({int(i) for i in items if str(i).strip()}))
    except (TypeError, ValueError):
        out = None
    if out is None or any(not 0 <= i < num_layers for i in out):
        raise ConfigError(
            f"tldr.text_layers={value!r}: expected backbone layer indices in [0, {num_layers})"
        )
    return () if len(out) == num_layers else out


def tldr_config(section, backbone_cfg, tokenizer, speaker_model=None) -> TLDRConfig:
    """TLDRConfig from `config.tldr`, the backbone's LMConfig (LoRA set from the section), its
    tokenizer and the speaker encoder model (None: no speaker conditioning)."""
    check_keys(section)
    s = dict(section)
    rank, alpha = int(s.get("lora_rank", 0)), float(s.get("lora_alpha", 0.0))
    if rank < 0:
        raise ConfigError(f"tldr.lora_rank={rank}: expected >= 0 (0 = no LoRA)")
    bb = dataclasses.replace(
        backbone_cfg,
        lora_rank=rank,
        lora_alpha=alpha,
        dropout=0.0,
        text_layers=text_layers(s.get("text_layers", ()), backbone_cfg.num_layers),
    )
    kw = {k: s[k] for k in MODEL_KEYS if k in s}
    mel_rate = tokenizer.mel_cfg.frame_rate
    extra = dict(
        token_frames=int(round(mel_rate / tokenizer.frame_rate)),
        n_mels=int(tokenizer.mel_cfg.n_mels),
        min_reference_frames=int(round(float(s.get("min_reference_seconds", 0.5)) * mel_rate)),
    )
    if speaker_model is not None:
        if speaker_model.n_mels != extra["n_mels"]:
            raise ConfigError(
                f"tldr.speaker_encoder: reads {speaker_model.n_mels} mel bins, the "
                f"tokenizer decodes {extra['n_mels']}"
            )
        extra["speaker_dim"] = int(speaker_model.embed_dim)
    return TLDRConfig(backbone=bb, **kw, **extra)


def mel_table(tokenizer) -> np.ndarray:
    """The tokenizer's decoded log-mel of every token: float32 [K, f, M]."""
    k = tokenizer.vocab_size
    mel = np.asarray(tokenizer.decode(np.arange(k, dtype=np.int32)), np.float32)
    return mel.reshape(k, -1, mel.shape[-1])


def frozen_params(backbone_params, speaker_params, table) -> dict:
    """The frozen part of TLDR's tree (what `tldr_init` holds)."""
    out = {"backbone": backbone_params}
    if speaker_params is not None:
        out["speaker_encoder"] = speaker_params
        out["mel_table"] = table
    return out


def load_speaker(section, *bases):
    """(speaker encoder run path, SpeakerEncoderModel, params) or (None, None, None)."""
    if not bool(dict(section).get("speaker", True)):
        return None, None, None
    run = resolve_run(str(section.speaker_encoder), "tldr.speaker_encoder", *bases)
    model_cfg, params = load_params(run.path)
    return run, model_from_config(model_cfg), params


def _first_rows(v: np.ndarray, n: int, block: int) -> np.ndarray:
    """v [N' block, ...] -> [n block, ...]: its first min(N', n) blocks of rows, zeros after."""
    if v.shape[0] == n * block:
        return v
    out = np.zeros((n * block, *v.shape[1:]), v.dtype)
    m = min(n * block, v.shape[0])
    out[:m] = v[:m]
    return out


def teacher_part(section, backbone_params, backbone_cfg, tokenizer, speaker_model):
    """`tldr.distill` = w > 0 (not in the paper): the TLDR run named by `tldr.teacher`,
    trained on this backbone, as (its TLDRConfig, its trained leaves {path: array}); None
    when w = 0. The student's loss becomes (1 - w) CE + w KL(teacher || student) over the
    same target cells (`TLDRTask`), e.g. the text in 4 layers distilled from the same model
    with the text in every layer. One-line ConfigErrors for a missing teacher or a weight
    outside [0, 1]."""
    s = dict(section)
    w = float(s.get("distill", 0.0) or 0.0)
    if not 0.0 <= w <= 1.0:
        raise ConfigError(f"tldr.distill={w}: expected a weight in [0, 1]")
    kind = s.get("distill_kl", "forward")
    if kind not in ("forward", "reverse"):
        raise ConfigError(f"tldr.distill_kl={kind!r}: expected 'forward' or 'reverse'")
    if w == 0.0:
        return None
    src = str(s.get("teacher", "") or "")
    if not src:
        raise ConfigError(f"tldr.distill={w}: needs tldr.teacher (a TLDR run on this backbone)")
    run = resolve_run(src, "tldr.teacher")
    tsec = dict(run.read_config("tldr").tldr)
    tsec.update(backbone=s["backbone"], warm_start=src, teacher="", distill=0.0)
    tsec.pop("distill_kl", None)
    tsec.pop("warm_start_backbone", None)
    tsec = mlc.ConfigDict(tsec)
    tcfg = tldr_config(tsec, backbone_cfg, tokenizer, speaker_model)
    leaves = tree_to_flat(warm_start_params(tsec, backbone_params, tcfg.patch, tcfg.text_patch))
    return tcfg, leaves


def warm_start_params(section, backbone_params, patch: int, text_patch: int = 1) -> dict:
    """The trained leaves (LoRA, compressor, extractor) of the TLDR run named by
    `tldr.warm_start`, to start a run from (e.g. P = 4 from a trained P = 2 model: every
    module's shape is independent of P except the extractor's position table [P, E], whose
    first min(P', P) rows are copied and the rest start at zero; likewise the text
    compressor's Q-row leaves for another `text_patch`: its position-in-slot table [Q, D] and
    its order map [Q D, D], by blocks of D rows). The warm start must have been trained on this
    backbone (its fingerprint); a module the source lacks (the text compressor, when only the
    target has `text_patch` > 1) starts from its initialisation. {} when the key is empty.

    `tldr.warm_start_backbone` (opt-in): the warm start was trained on that other backbone
    run, e.g. the same architecture fine-tuned further (the previous car_deep, kept in git,
    -> today's pretrained/car_deep: configs/tldr.py:deep_ft); its fingerprint is checked
    against that run instead, and its shapes must match this backbone's."""
    src = str(dict(section).get("warm_start", "") or "")
    if not src:
        return {}
    run = resolve_run(src, "tldr.warm_start")
    run.read_config("tldr")  # a TLDR run, or a one-line CheckpointError
    other = str(dict(section).get("warm_start_backbone", "") or "")
    if other:
        other_run = resolve_run(other, "tldr.warm_start_backbone")
        other_params = other_run.saved_params()
        check_trained_on(run, "backbone", other, {}, other_params)
        have = {k: np.shape(v) for k, v in tree_to_flat(backbone_params).items()}
        was = {k: np.shape(v) for k, v in tree_to_flat(other_params).items()}
        for k in sorted(set(have) | set(was)):
            if have.get(k) != was.get(k):
                raise ConfigError(
                    f"tldr.warm_start_backbone={other}: {k} is {was.get(k)} there but "
                    f"{have.get(k)} in tldr.backbone={section.backbone}; a warm start "
                    "needs the same architecture"
                )
    else:
        check_trained_on(run, "backbone", str(section.backbone), {}, backbone_params)
    if not run.read_data_info().get("backbone_fingerprint"):
        raise ConfigError(f"tldr.warm_start={src}: its data.json records no backbone fingerprint")
    keep = trainable_predicate(TRAINABLE)
    flat = {k: np.asarray(v) for k, v in tree_to_flat(run.trained_params()).items() if keep(k)}
    for k, v in flat.items():
        if k.endswith("pos_embed"):  # [P', E] -> [P, E]
            flat[k] = _first_rows(v, patch, 1)
        elif k.endswith("text_compressor/slot_pos"):  # [Q', D] -> [Q, D]
            flat[k] = _first_rows(v, text_patch, 1)
        elif k.endswith("text_compressor/order/kernel"):  # [Q' D, D] -> [Q D, D]
            flat[k] = _first_rows(v, text_patch, v.shape[1])
    return tree_from_flat(flat)

"""How a TLDR model is put together from its parts: the `config.tldr` keys, the frozen
backbone and speaker encoder runs they name, the tokenizer's centroid log-mel table and the
frozen parameter tree (`tldr_init`). Shared by training (`task.py`) and loading (`engine.py`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxtts.errors import ConfigError
from jaxtts.methods.speaker_encoder import load_params, model_from_config
from jaxtts.methods.tldr.model import TLDRConfig
from jaxtts.run_folder import resolve_run

TRAINABLE = "lora|prefix:compressor,extractor"
# config.tldr keys that are not TLDRConfig fields
RUN_KEYS = (
    "backbone",
    "speaker_encoder",
    "lora_rank",
    "lora_alpha",
    "corpus_utterances",
    "min_reference_seconds",
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
    "speaker",
    "speaker_proj",
    "token_rate_positions",
)


def check_keys(section) -> None:
    unknown = sorted(set(dict(section)) - set(RUN_KEYS) - set(MODEL_KEYS))
    if unknown:
        raise ConfigError(
            f"tldr.{unknown[0]}: unknown key, expected one of {sorted(RUN_KEYS + MODEL_KEYS)}"
        )


def tldr_config(section, backbone_cfg, tokenizer, speaker_model=None) -> TLDRConfig:
    """TLDRConfig from `config.tldr`, the backbone's LMConfig (LoRA set from the section), its
    tokenizer and the speaker encoder model (None: no speaker conditioning)."""
    check_keys(section)
    s = dict(section)
    rank, alpha = int(s.get("lora_rank", 0)), float(s.get("lora_alpha", 0.0))
    if rank < 0:
        raise ConfigError(f"tldr.lora_rank={rank}: expected >= 0 (0 = no LoRA)")
    bb = dataclasses.replace(backbone_cfg, lora_rank=rank, lora_alpha=alpha, dropout=0.0)
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

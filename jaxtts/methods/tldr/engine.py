"""The TLDR engine: the frozen backbone named in the run's config (`tldr.backbone`) + the
trained LoRA adapters, compressor and extractor of a TLDR run folder.

`infer.py --workdir runs/tldr` (or `pretrained/tldr`) decodes with `tldr` by default; the
backbone's own strategies (far, car:c, vadusa:tau) run on the un-adapted backbone, so one
evaluate command compares them. A TLDR run whose backbone differs from the loaded one (width,
layers, heads, tokenizer) is a one-line error naming both; so is a speaker reference shorter
than the speaker encoder needs.

A shipped TLDR folder holds only the trained parameters (`python -m jaxtts.run_folder export
runs/tldr pretrained/tldr --trained_only`); the frozen ones come from the backbone and speaker
encoder runs it names.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtts.checkpoint import abstract_params, check_tree_matches
from jaxtts.errors import DataError
from jaxtts.methods.lm import LMEngine
from jaxtts.methods.tldr.assemble import (
    frozen_params,
    load_speaker,
    mel_table,
    resolve_run,
    tldr_config,
)
from jaxtts.methods.tldr.model import TLDRModel
from jaxtts.nn.layers import merge_lora
from jaxtts.run_folder import RunFolder, check_trained_on
from jaxtts.trees import tree_from_flat, tree_to_flat


class TLDREngine(LMEngine):
    family = "tldr"

    def __init__(self, config, base: LMEngine, cfg, speaker_model, params):
        """An engine from a TLDR run's config, its backbone's engine and the full TLDR
        parameters (also what training samples with)."""
        args, kw = base._backbone_args()
        super().__init__(*args, **kw)
        # decoding runs the backbone with its LoRA adapters folded into the kernels (one model
        # with lora_rank 0: the same function up to rounding; 0.3-0.8 ms less per batch-1 step
        # of the 12-layer backbone on a CPU, RESULTS tldr-step)
        bb = cfg.backbone
        params = merge_lora(params, bb.lora_rank, bb.lora_alpha)
        cfg = dataclasses.replace(
            cfg, backbone=dataclasses.replace(bb, lora_rank=0, lora_alpha=0.0)
        )
        self.tldr, self.tldr_params = TLDRModel(cfg, speaker_model), params
        self.decode_config = {**base.decode_config, **dict(config.decode), "strategy": "tldr"}

    @classmethod
    def build(cls, config, base: LMEngine, cfg, speaker_model, params) -> TLDREngine:
        return cls(config, base, cfg, speaker_model, params)

    @classmethod
    def from_run(cls, run: RunFolder, step: int | None = None) -> TLDREngine:
        config = run.read_config("tldr")
        backbone = resolve_run(
            str(config.tldr.backbone), f"{run.config_path}: tldr.backbone", run.path
        )
        base = LMEngine.from_run(backbone)
        check_trained_on(
            run,
            "backbone",
            backbone.path,
            {
                "d_model": base.cfg.d_model,
                "num_layers": base.cfg.num_layers,
                "num_heads": base.cfg.num_heads,
                "tokenizer": base.tokenizer.name,
            },
            base.params,
        )
        _, spk_model, spk_params = load_speaker(config.tldr, run.path)
        cfg = tldr_config(config.tldr, base.cfg, base.tokenizer, spk_model)
        model = TLDRModel(cfg, spk_model)
        b = np.ones((1, 8), np.int32)
        like = abstract_params(model.init, b, np.array([8]), b, np.array([8]), np.array([4]))
        trained = run.trained_params(step)
        table = mel_table(base.tokenizer) if spk_model is not None else None
        flat = tree_to_flat(frozen_params(base.params, spk_params, table))
        flat.update({k: v for k, v in tree_to_flat(trained).items()})
        like_flat = tree_to_flat(like)
        params = tree_from_flat(
            {k: jnp.asarray(flat[k], jnp.float32) for k in like_flat if k in flat}
        )
        check_tree_matches(params, like, str(run.path))
        return cls.build(config, base, cfg, spk_model, params)

    def decode_models(self) -> dict:
        return {"target": self.model, "tldr": self.tldr}

    def decode_params(self) -> dict:
        return {"target": self.params, "tldr": self.tldr_params}

    def check_reference(self, prompt_len: np.ndarray) -> None:
        """A speaker reference too short for the speaker encoder: a one-line DataError (no
        prompt at all is fine: s = 0, as for training rows without a prompt)."""
        c = self.tldr.cfg
        if not c.speaker:
            return
        frames = np.asarray(prompt_len) * c.token_frames
        frames = frames[frames > 0]
        if frames.size and frames.min() < c.min_reference_frames:
            rate = self.mel_cfg.frame_rate
            raise DataError(
                f"tldr: a speaker reference of {frames.min() / rate:.2f} s; the "
                f"speaker encoder needs >= {c.min_reference_frames / rate:.2f} s of "
                "prompt speech (pass a longer --prompt)"
            )

    def decode_models_for(self, batch, plan):
        if plan.name == "tldr" and batch is not None:
            self.check_reference(jax.device_get(batch.prompt_len))
        return super().decode_models_for(batch, plan)

    def memory_bytes(
        self, text_len: int, prompt_len: int, length: int, strategy: str | None = None
    ) -> int:
        if strategy != "tldr":
            return super().memory_bytes(text_len, prompt_len, length, strategy)
        c = self.tldr.cfg
        return global_kv_bytes(
            self.cfg,
            text_len,
            prompt_len,
            length,
            c.patch,
            c.text_patch,
            c.ext_text,
            len(c.backbone.text_layers),
        )


def global_kv_bytes(
    lm,
    text_len: int,
    prompt_len: int,
    length: int,
    patch: int = 1,
    text_patch: int = 1,
    ext_text: int = 0,
    text_layers: int = 0,
) -> int:
    """Global KV bytes of one row: the backbone's (`LMConfig` lm) cache slots
    (`global_kv_slots`) x its K+V bytes per slot, plus the extractor's text memory
    (`ext_text`: keys and values of that width per text symbol, in the backbone's dtype).
    text_layers > 0: only that many layers cache the text slots (`tldr.text_layers`)."""
    memory = 2 * ext_text * text_len * np.dtype(lm.dtype).itemsize
    slots = global_kv_slots(text_len, prompt_len, length, patch, text_patch)
    if not text_layers:
        return lm.kv_bytes_per_token() * slots + memory
    text = -(-text_len // text_patch)
    per_layer = lm.kv_bytes_per_token(1)
    return per_layer * (lm.num_layers * (slots - text) + text_layers * text) + memory


def global_kv_slots(
    text_len: int, prompt_len: int, length: int, patch: int = 1, text_patch: int = 1
) -> int:
    """Backbone cache slots of one row: text, BOS, prompt and output, the speech at the patch
    rate and the text at one slot per `text_patch` symbols (both 1: the token-level
    backbone, FAR)."""
    return -(-text_len // text_patch) + 1 + -(-prompt_len // patch) + -(-length // patch)

"""Training PALLE's stages on the TTS LM's data (same corpus, tokens and text front-end).

    python train.py --config configs/palle.py:small --workdir runs/palle              # PAR
    python train.py --config configs/palle.py:small_refine --workdir runs/palle_refine \
        --config.train.init_from=runs/palle                                            # NAR refine

Rows are the LM loader's zero-shot rows (`jaxtts.train.prepare.prepare_data`): the prompt's
transcript then the target text, the prompt's tokens then the target tokens, so training sees
the layout of inference. `palle.stage` picks the mask (`jaxtts.methods.palle.masking`):
'par' (stage one), 'refine' (stage two, initialised from a stage-one run with
`train.init_from`) or 'nar' (the MaskGCT-style baseline). The loss is the token cross-entropy
on the stage's loss positions, averaged over them; rows whose text is longer than their
speech are left out (counted in `dropped_rows`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections as mlc

from jaxtts.errors import ConfigError
from jaxtts.methods.lm.diagnostics import text_information as lm_text_information
from jaxtts.methods.palle import masking
from jaxtts.methods.palle.model import MaskedGenTransformer, PALLEConfig
from jaxtts.run_folder import RunFolder
from jaxtts.train import loop
from jaxtts.train.prepare import fill_model_sizes, prepare_data

log = logging.getLogger("jaxtts.palle")

STAGES = ("par", "refine", "nar")


class PALLETask:
    """`jaxtts.train.loop.Task`: masked-token cross-entropy under one stage's masks."""

    def __init__(self, cfg: PALLEConfig, stage: str, refine_p: float = 0.1):
        if stage not in STAGES:
            raise ConfigError(f"palle.stage={stage!r}: expected one of {list(STAGES)}")
        if not 0 < refine_p < 1:
            raise ConfigError(f"palle.refine_p={refine_p}: expected in (0, 1)")
        self.cfg, self.stage, self.refine_p = cfg, stage, float(refine_p)
        self.model = MaskedGenTransformer(cfg)

    def init(self, rng, batch):
        return self.model.init(
            rng,
            jnp.asarray(batch["text"]),
            jnp.asarray(batch["text_len"]),
            jnp.asarray(batch["speech"]),
            jnp.asarray(batch["speech_len"]),
        )["params"]

    def masked_inputs(self, batch, rng):
        """(speech input with [MASK] [B, T], loss mask bool [B, T], row ok [B])."""
        speech = jnp.asarray(batch["speech"])
        length = jnp.asarray(batch["speech_len"])
        masked, loss_mask = masking.stage_masks(
            self.stage, rng, length, speech.shape[1], self.refine_p
        )
        ok = (jnp.asarray(batch["text_len"]) <= length) & (length > 0)  # [B]
        return (jnp.where(masked, self.cfg.mask_id, speech), loss_mask & ok[:, None], ok)

    def loss(self, params, batch, rng, *, train: bool, step=None):
        mask_rng, drop_rng = jax.random.split(rng if rng is not None else jax.random.key(0))
        x, loss_mask, ok = self.masked_inputs(batch, mask_rng)
        logits = self.model.apply(
            {"params": params},
            jnp.asarray(batch["text"]),
            jnp.asarray(batch["text_len"]),
            x,
            jnp.asarray(batch["speech_len"]),
            train=train,
            rngs={"dropout": drop_rng} if train else {},
        )  # [B, T, V]
        target = jnp.asarray(batch["speech"])
        lp = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(lp, target[..., None], axis=-1)[..., 0]  # [B, T]
        w = loss_mask.astype(jnp.float32)
        n = jnp.sum(w)
        loss = jnp.sum(nll * w) / jnp.maximum(n, 1.0)
        acc = jnp.sum((jnp.argmax(logits, -1) == target) * w) / jnp.maximum(n, 1.0)
        real = jnp.asarray(batch["speech_len"]) > 0
        return loss, {
            "loss": loss,
            "accuracy": acc,
            "weight": n,
            "dropped_rows": jnp.sum(real & ~ok).astype(jnp.float32),
        }


def text_information(engine, utts, batch_size: int = 16, seeds: int = 4):
    """`jaxtts.methods.lm.diagnostics.text_information` for a PALLE engine: the CE of the
    engine's training stage (stage one: the span after a mask start) with the right vs another
    row's transcript, `seeds` fixed mask draws per batch (the same draws for both texts; rows
    whose rolled text is longer than their speech keep it, cut by the model)."""
    task = PALLETask(engine.cfg, engine.stage)

    def score(params, batch):
        speech, length = batch["speech"], batch["speech_len"]
        total = count = 0.0
        per_row = 0
        for i in range(seeds):
            masked, loss_mask = masking.stage_masks(
                task.stage, jax.random.key(i), length, speech.shape[1], task.refine_p
            )
            loss_mask = loss_mask & (batch["text_len"] > 0)[:, None]
            x = jnp.where(masked, task.cfg.mask_id, speech)
            logits = task.model.apply(
                {"params": params}, batch["text"], batch["text_len"], x, length
            )  # [B, T, V]
            lp = jax.nn.log_softmax(logits, axis=-1)
            nll = -jnp.take_along_axis(lp, speech[..., None], axis=-1)[..., 0]  # [B, T]
            total = total + jnp.sum(nll * loss_mask)
            count = count + jnp.sum(loss_mask)
            per_row = per_row + jnp.sum(loss_mask, axis=1)
        return total[None], count[None], per_row  # [1], [1], [B]

    return lm_text_information(
        engine, utts, batch_size=batch_size, score=score, params=engine.params
    )


def model_config(config, data) -> PALLEConfig:
    """config.model with the data's vocabulary sizes filled in (-1) or checked."""

    return PALLEConfig.from_config(dict(fill_model_sizes(config, data).model))


def _check_init_from(config, cfg: PALLEConfig) -> None:
    """A refine run initialised from a stage-one run must share its vocabularies and sizes."""
    src = str(config.train.get("init_from", "") or "")
    if not src:
        if config.palle.stage == "refine":
            log.warning("palle.stage='refine' without train.init_from: stage two from scratch")
        return
    run = RunFolder(src)
    if not run.config_path.is_file():
        raise ConfigError(f"train.init_from={src}: no run folder there (config.json missing)")
    other = run.read_config()
    if other.get("task") != "palle":
        raise ConfigError(
            f"train.init_from={src}: a {other.get('task')!r} run, expected a PALLE stage-one run"
        )
    theirs = dict(other.model)
    for key in (
        "num_text_symbols",
        "num_speech_tokens",
        "d_model",
        "num_layers",
        "num_heads",
        "head_dim",
        "d_ff",
    ):
        if int(theirs.get(key, -1)) != int(getattr(cfg, key)):
            raise ConfigError(
                f"train.init_from={src}: model.{key}={theirs.get(key)} there but "
                f"{getattr(cfg, key)} here (stage two must match stage one)"
            )
    layout = str(theirs.get("text_layout", "pad"))
    if layout != cfg.text_layout:
        raise ConfigError(
            f"train.init_from={src}: model.text_layout={layout!r} there but "
            f"{cfg.text_layout!r} here (set --config.model.text_layout={layout})"
        )


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    if config.get("task") != "palle":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'palle'")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    data = prepare_data(config, workdir, progress)
    cfg = model_config(config, data)
    config = mlc.ConfigDict(config.to_dict())
    config.model.update(
        num_text_symbols=cfg.num_text_symbols, num_speech_tokens=cfg.num_speech_tokens
    )
    _check_init_from(config, cfg)
    task = PALLETask(cfg, str(config.palle.stage), float(config.palle.refine_p))
    RunFolder(workdir).write_data_info(
        {
            "corpus_dir": str(data.corpus_dir),
            "tokenizer": data.tokenizer.name,
            "frame_rate": data.tokenizer.frame_rate,
            "train_records": len(data.train.records),
            "stage": task.stage,
            # the length estimate without a prompt (jaxtts/methods/palle/engine.py)
            "tokens_per_symbol": float(
                sum(r.speech.size for r in data.train.records)
                / max(sum(r.text_ids.size for r in data.train.records), 1)
            ),
            "max_target_text": int(max(r.text_ids.size for r in data.train.records)),
        }
    )
    dev = data.dev

    def eval_batches():
        return (dev.get_batch(s) for s in range(len(dev)))

    return loop.train_and_evaluate(
        config,
        workdir,
        task,
        data.train,
        eval_batches if dev is not None else None,
        mesh=mesh,
        progress=progress,
    )

"""How much does a TTS LM use its text? Teacher-forced cross-entropy per MTP head with the right
transcript vs with another row's transcript (texts rolled by one row among the batch's real
rows). A model that aligns speech with text predicts its tokens much better from the right
text; one that only continues the prompt's acoustics (babble) does not care. The gap, in nats
per token, is the information the model takes from the text.

Used by `benchmarks/diagnostics/text_conditioning.py` (the curve over checkpoints) and by the
shipped-model test (`tests/test_pretrained.py`: only a model that reads its text passes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from jaxtts.data.audio import load_audio, log_mel
from jaxtts.data.pipeline import LMLoader, make_lm_records
from jaxtts.methods.lm.model import with_bos
from jaxtts.methods.lm.task import LMTask
from jaxtts.train import align as align_lib
from jaxtts.train import losses


@dataclasses.dataclass
class TextInformation:
    tokens: int  # scored target tokens (head 1)
    ce_right: np.ndarray  # [K] nats per token, right transcript
    ce_other: np.ndarray  # [K] another row's transcript

    @property
    def gap(self) -> np.ndarray:
        return self.ce_other - self.ce_right


def utterance_tokens(engine, utts: Sequence) -> dict[str, np.ndarray]:
    """Speech tokens of utterances from their audio with the engine's own tokenizer."""
    return {
        u.id: engine.mel_to_units(
            log_mel(load_audio(u.path, engine.mel_cfg.sample_rate), engine.mel_cfg)
        )
        for u in utts
    }


def teacher_forcing_loader(
    engine, utts: Sequence, tokens: dict[str, np.ndarray] | None, batch_size: int
):
    """Teacher-forcing batches of `utts` in a fixed order, as in training (prompts: other
    utterances of the same speaker)."""
    tokens = tokens if tokens is not None else utterance_tokens(engine, utts)
    records = make_lm_records(utts, tokens, engine.frontend)
    data_cfg = mlc.ConfigDict(dict(engine.config.data))
    data_cfg.batch_size = batch_size
    return LMLoader.from_config(
        records,
        data_cfg,
        frame_rate=engine.frame_rate,
        shuffle=False,
        drop_remainder=False,
        num_epochs=1,
        sort_window=1_000_000,
    )


def text_information(
    engine,
    utts: Sequence,
    tokens: dict[str, np.ndarray] | None = None,
    batch_size: int = 16,
    score=None,
    params=None,
) -> TextInformation:
    """Per-head CE with the right vs a rolled transcript over `utts` (prompts: other utterances
    of the same speaker, as in training). `engine`: an `LMEngine`; tokens default to
    `utterance_tokens`. `score(params, batch) -> (nll sums [K], counts [K], scored tokens per
    row [B])` and `params` replace the MTP heads' score (TLDR scores its extractor)."""
    loader = teacher_forcing_loader(engine, utts, tokens, batch_size)
    cfg, model = engine.cfg, engine.model

    @jax.jit
    def head_ce(params, batch):
        k = cfg.num_mtp_heads
        x, x_len = with_bos(batch["speech"], batch["speech_len"], cfg)
        logits, _ = model.apply({"params": params}, batch["text"], batch["text_len"], x, x_len)
        targets, valid = losses.mtp_targets(
            batch["speech"], batch["speech_len"], batch["prompt_len"], cfg.eos, k
        )
        valid = valid & (batch["text_len"] > 0)[:, None, None]
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)  # [B, T, K, V]
        nll = -jnp.take_along_axis(logp, targets[..., None], -1)[..., 0]  # [B, T, K]
        return (
            jnp.sum(nll * valid, (0, 1)),
            jnp.sum(valid, (0, 1)),
            jnp.sum(valid[..., 0], 1),
        )  # [K], [K], [B]

    if score is not None:
        head_ce = jax.jit(score)
    params = engine.params if params is None else params
    right = other = count = 0.0
    for s in range(len(loader)):
        b = {name: jnp.asarray(v) for name, v in loader.get_batch(s).items()}
        ce, n, per_row = head_ce(params, b)
        real = np.asarray(per_row) > 0
        if real.sum() < 2:
            continue  # rolling needs two real rows
        idx = np.arange(real.size)
        r = idx[real]
        idx[r] = np.roll(r, 1)  # padding rows keep their empty text
        ce2, n2, _ = head_ce(params, dict(b, text=b["text"][idx], text_len=b["text_len"][idx]))
        if not np.array_equal(np.asarray(n2), np.asarray(n)):
            raise RuntimeError("token counts changed under the text roll")
        right += np.asarray(ce)
        other += np.asarray(ce2)
        count += np.asarray(n)
    count = np.maximum(np.atleast_1d(count), 1)
    return TextInformation(
        int(count[0]), np.atleast_1d(right) / count, np.atleast_1d(other) / count
    )


@dataclasses.dataclass
class AlignmentScores:
    diag_mass: np.ndarray  # [L, N] share of speech->text attention near the diagonal
    ctc: np.ndarray  # [L, N] CTC alignment loss of each head (nats per text symbol)


def alignment_scores(
    engine,
    utts: Sequence,
    tokens: dict[str, np.ndarray] | None = None,
    batch_size: int = 16,
    band: float = 0.1,
) -> AlignmentScores:
    """The training-time alignment metrics (`jaxtts.train.align`: diagonal mass and CTC
    alignment loss of the speech->text attention, no prior) for EVERY layer and head of an LM,
    teacher-forced on `utts` (batch means weighted by their rows). Lets a run trained without
    alignment learning be scored on the heads another run aligned, and shows where a model
    aligns on its own."""
    cfg = engine.cfg
    task = LMTask(
        cfg,
        align=align_lib.AlignConfig(layers=tuple(range(cfg.num_layers)), ctc_weight=1.0, band=band),
    )
    groups = cfg.num_layers * cfg.num_heads

    @jax.jit
    def score(params, batch):
        _, _, st = task.forward(params, batch)  # st [B, L N, T, X]
        n = batch["text_len"]
        m = batch["speech_len"] + 1  # the BOS-prefixed speech input, as in `LMTask.forward`
        m = jnp.where(m >= n, m, 0)  # CTC needs frames >= text symbols
        rows = jnp.sum((n > 0) & (m > 0))  # padding rows have no text
        out = [
            jnp.stack(
                [
                    align_lib.diagonal_mass(st[:, g], n, m, band),
                    align_lib.ctc_alignment_loss(st[:, g], n, m),
                ]
            )
            for g in range(groups)
        ]
        return jnp.stack(out) * rows, rows  # [G, 2] batch means weighted by its rows

    loader = teacher_forcing_loader(engine, utts, tokens, batch_size)
    total, rows = np.zeros((groups, 2)), 0.0
    for s in range(len(loader)):
        b = {name: jnp.asarray(v) for name, v in loader.get_batch(s).items()}
        val, n = score(engine.params, b)
        total += np.asarray(val)
        rows += float(n)
    total /= max(rows, 1.0)
    shape = (cfg.num_layers, cfg.num_heads)
    return AlignmentScores(total[:, 0].reshape(shape), total[:, 1].reshape(shape))

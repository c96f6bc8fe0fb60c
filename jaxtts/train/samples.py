"""Listening samples during training: an `on_eval` hook that synthesizes a few dev sentences
with the current parameters, writes their wavs to `samples/step_<k>/` and scores them with the
evaluation ASR (domain LM) when it is available. Every speech family's trainer uses it with its
own engine factory (`make_engine(params) -> Engine`)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import jax
import numpy as np

from jaxtts.eval.asr import PocketSphinxASR
from jaxtts.eval.metrics import wer
from jaxtts.run_folder import RunFolder
from jaxtts.synthesize import Synthesizer, prompts_from_utterances
from jaxtts.train.prepare import LMData

log = logging.getLogger("jaxtts.train")


def sample_eval(config, workdir: str, data: LMData, n: int, make_engine: Callable) -> Callable:
    """on_eval(step, state) -> metrics: `n` dev sentences synthesized with
    `make_engine(state.full_params)` and `config.decode.strategy`, written to the run's samples
    folder (process 0), their mean length, length-cap rate and domain-LM WER."""
    utts = data.splits["dev"][:n]
    prompts = prompts_from_utterances(data.splits["dev"], utts)
    asr = None
    if config.eval.get("asr", "domain") != "none":
        try:
            asr = PocketSphinxASR.from_corpus(data.corpus_dir, "domain", progress=False)
        except Exception as e:  # noqa: BLE001 - an optional metric must not stop training
            log.warning("sample WER disabled: %s", e)

    def on_eval(step, state) -> dict[str, float]:
        synth = Synthesizer(
            make_engine(state.full_params), vocoder=config.eval.get("vocoder", "griffin_lim")
        )
        results = synth.synthesize(
            [u.text for u in utts],
            prompts,
            strategy=config.decode.strategy,
            batch_size=len(utts),
            progress=False,
        )
        out: dict[str, float] = {}
        if jax.process_index() == 0:
            synth.write(results, RunFolder(workdir).samples_dir(step))
        out["samples/mean_tokens"] = float(np.mean([r.info["num_tokens"] for r in results]))
        out["samples/hit_max"] = float(np.mean([r.info["hit_max"] for r in results]))
        if asr is not None:
            hyps = asr.transcribe([r.wav for r in results], synth.sample_rate)
            out["samples/wer_domain"] = wer([u.text for u in utts], hyps)
        return out

    return on_eval

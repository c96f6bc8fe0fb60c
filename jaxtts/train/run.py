"""Dispatch from `config.task` to the model family's training function (a registry)."""

from __future__ import annotations

import importlib
import logging
import os

import jax

from jaxtts.errors import ConfigError

# task name -> "module:function(config, workdir)"; imported lazily so one family's
# dependencies never load for another.
TRAINERS = {
    "lm": "jaxtts.train.lm_task:train",
    "ctc_asr": "jaxtts.eval.ctc_asr:train",
    "speaker_encoder": "jaxtts.eval.speaker_encoders:train",
}


def maybe_initialize_distributed(flag: bool | None = None) -> None:
    """`jax.distributed.initialize()` for multi-host runs (flag or $JAXTTS_DISTRIBUTED=1).

    On TPU pods and SLURM/Open MPI GPU clusters JAX discovers the coordinator itself; elsewhere
    set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID.
    """
    enabled = flag if flag is not None else os.environ.get("JAXTTS_DISTRIBUTED", "0") == "1"
    if enabled:
        jax.distributed.initialize()
        logging.info(
            "distributed: process %d of %d, %d local / %d global devices",
            jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count(),
        )


def train(config, workdir: str):
    task = config.get("task", "lm")
    if task not in TRAINERS:
        raise ConfigError(f"config.task='{task}': expected one of {sorted(TRAINERS)}")
    module, fn = TRAINERS[task].split(":")
    return getattr(importlib.import_module(module), fn)(config, workdir)

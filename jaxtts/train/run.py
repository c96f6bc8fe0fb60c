"""Dispatch from `config.task` to the model family's training function (`jaxtts.families`)."""

from __future__ import annotations

import logging
import os

import jax

from jaxtts.families import family, resolve


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
            jax.process_index(),
            jax.process_count(),
            jax.local_device_count(),
            jax.device_count(),
        )


def train(config, workdir: str):
    return resolve(family(config.get("task", "lm")).train)(config, workdir)

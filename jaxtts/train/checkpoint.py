"""Orbax checkpoints of sharded train state: async save, keep-N, restore onto any mesh.

A checkpoint step holds three items: `params`, `opt_state` (both sharded pytrees, restored
with the shardings of the *current* mesh, so a run saved as fsdp=8 restores on 2 devices or as
data=4,tensor=2) and `meta` (JSON: step, config fingerprint). `restore_params` restores the
parameters alone for fine-tuning or inference.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxtts.errors import CheckpointError


def read_run_config(workdir: str | os.PathLike, task: str, how_to_train: str) -> dict:
    """`<workdir>/config.json` of a training run, checked to be a `task` run.

    Raises CheckpointError naming the file: missing (with `how_to_train`, the command that
    makes such a folder) or of another task.
    """
    path = os.path.join(os.fspath(workdir), "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: not found; the folder must be a training run of task "
                              f"{task!r} ({how_to_train})")  # fmt: skip
    with open(path) as f:
        config = json.load(f)
    if config.get("task") != task:
        raise CheckpointError(f"{path}: task={config.get('task')!r}, expected {task!r}")
    return config


def abstract_params(init_fn, *args) -> Any:
    """Unboxed ShapeDtypeStructs of `init_fn(key, *args)['params']` on the first device: the
    restore target for inference (no real initialisation runs)."""
    import flax.linen as nn

    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    shapes = nn.unbox(jax.eval_shape(lambda *a: init_fn(jax.random.key(0), *a)["params"], *args))
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes)


def _abstract(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) for restoring into the layout of `tree`."""

    def leaf(x):
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))

    return jax.tree.map(leaf, tree)


class Checkpointer:
    """Thin wrapper over `ocp.CheckpointManager` with jaxtts's items and error messages."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_to_keep: int | None = 3,
        save_interval_steps: int = 1,
        async_save: bool = True,
        read_only: bool = False,
    ):
        self.directory = os.path.abspath(os.fspath(directory))
        if read_only and not os.path.isdir(self.directory):
            raise CheckpointError(f"{self.directory}: checkpoint directory does not exist")
        handlers = {
            "params": ocp.StandardCheckpointHandler(),
            "opt_state": ocp.StandardCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
        }
        quiet = logging.getLogger("absl")  # orbax warns that read-only managers cannot save
        level = quiet.level
        if read_only:
            quiet.setLevel(logging.ERROR)
        try:
            options = ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                save_interval_steps=save_interval_steps,
                enable_async_checkpointing=async_save,
                read_only=read_only,
                create=not read_only,
            )
            self.manager = ocp.CheckpointManager(
                self.directory, item_handlers=handlers, options=options
            )
        finally:
            quiet.setLevel(level)

    # -- queries ---------------------------------------------------------------------------
    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    # -- save ------------------------------------------------------------------------------
    def save(
        self, step: int, params: Any, opt_state: Any, meta: Mapping[str, Any], force: bool = False
    ) -> bool:
        args = ocp.args.Composite(
            params=ocp.args.StandardSave(params),
            opt_state=ocp.args.StandardSave(opt_state),
            meta=ocp.args.JsonSave(dict(meta, step=int(step))),
        )
        return self.manager.save(int(step), args=args, force=force)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()

    # -- restore ---------------------------------------------------------------------------
    def _step_or_latest(self, step: int | None) -> int:
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"{self.directory}: no checkpoint found")
        if step not in self.all_steps():
            raise CheckpointError(
                f"{self.directory}: no checkpoint for step {step}; have {self.all_steps()}"
            )
        return step

    def _check_shapes(self, step: int, item: str, target: Any) -> None:
        """One-line error naming the first parameter whose saved shape differs from `target`."""
        try:
            saved = self.manager.item_metadata(step)[item]
        except Exception:  # metadata unavailable: let orbax report problems itself
            return
        saved = getattr(saved, "tree", saved)
        if saved is None:
            return
        saved_flat = dict(jax.tree_util.tree_flatten_with_path(saved)[0])
        target_flat = dict(jax.tree_util.tree_flatten_with_path(target)[0])

        def name(path):
            return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)

        saved_by_name = {name(p): v for p, v in saved_flat.items()}
        target_by_name = {name(p): v for p, v in target_flat.items()}
        missing = sorted(set(target_by_name) - set(saved_by_name))
        extra = sorted(set(saved_by_name) - set(target_by_name))
        if missing or extra:
            raise CheckpointError(
                f"{self.directory}/{step}/{item}: parameter tree differs from the config "
                f"(missing in checkpoint: {missing[:3]}, unexpected: {extra[:3]})"
            )
        for key, t in target_by_name.items():
            s_shape = tuple(getattr(saved_by_name[key], "shape", ()) or ())
            if s_shape != tuple(t.shape):
                raise CheckpointError(
                    f"{self.directory}/{step}/{item}: '{key}' has shape {s_shape} in the "
                    f"checkpoint but {tuple(t.shape)} in the config"
                )

    def restore(self, params_like: Any, opt_state_like: Any, step: int | None = None):
        """Restore (params, opt_state, meta) into the shapes/shardings of the `*_like` trees."""
        step = self._step_or_latest(step)
        params_t, opt_t = _abstract(params_like), _abstract(opt_state_like)
        self._check_shapes(step, "params", params_t)
        out = self.manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(params_t),
                opt_state=ocp.args.StandardRestore(opt_t),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return out["params"], out["opt_state"], dict(out["meta"])

    def restore_params(self, params_like: Any, step: int | None = None):
        """Parameters only (fine-tuning / inference), in the layout of `params_like`."""
        step = self._step_or_latest(step)
        params_t = _abstract(params_like)
        self._check_shapes(step, "params", params_t)
        out = self.manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(params_t), meta=ocp.args.JsonRestore()
            ),
        )
        return out["params"], dict(out["meta"])


def tree_equal(a: Any, b: Any) -> bool:
    """Exact equality of two pytrees of arrays (host copies)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(np.array_equal(np.asarray(x), np.asarray(y))
                            for x, y in zip(la, lb, strict=True))

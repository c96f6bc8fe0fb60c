"""Orbax checkpoints of sharded train state: async save, keep-N, restore onto any mesh.

A checkpoint step holds `params` (the trained tree), `opt_state` (both sharded pytrees,
restored with the shardings of the *current* mesh, so a run saved as fsdp=8 restores on 2
devices or as data=4,tensor=2), `frozen` (the frozen parameters of a LoRA / draft / policy run,
only when there are any) and `meta` (JSON: step, config fingerprint). `restore_params`
restores the trained parameters alone; `restore_inference_params` the full model (trained and
frozen merged) for inference. `write_params_file` / `read_params_file`: a whole parameter tree
in one compact msgpack file (the shipped models in `pretrained/`).
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization

from jaxtts.errors import CheckpointError
from jaxtts.trees import merge_trees, tree_from_flat, tree_to_flat


def abstract_params(init_fn, *args) -> Any:
    """Unboxed ShapeDtypeStructs of `init_fn(key, *args)['params']` on the first device: the
    restore target for inference (no real initialisation runs)."""
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
            "frozen": ocp.StandardCheckpointHandler(),
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
        self,
        step: int,
        params: Any,
        opt_state: Any,
        meta: Mapping[str, Any],
        force: bool = False,
        frozen: Any = None,
    ) -> bool:
        items = dict(
            params=ocp.args.StandardSave(params),
            opt_state=ocp.args.StandardSave(opt_state),
            meta=ocp.args.JsonSave(dict(meta, step=int(step))),
        )
        if jax.tree.leaves(frozen):
            items["frozen"] = ocp.args.StandardSave(frozen)
        return self.manager.save(int(step), args=ocp.args.Composite(**items), force=force)

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

    def has_frozen(self, step: int | None = None) -> bool:
        step = self._step_or_latest(step)
        return os.path.isdir(os.path.join(self.directory, str(step), "frozen"))

    def restore_frozen(self, frozen_like: Any, step: int | None = None) -> Any:
        """The frozen tree of a step, in the layout of `frozen_like`."""
        step = self._step_or_latest(step)
        target = _abstract(frozen_like)
        self._check_shapes(step, "frozen", target)
        out = self.manager.restore(
            step, args=ocp.args.Composite(frozen=ocp.args.StandardRestore(target))
        )
        return out["frozen"]

    def restore_as_saved(self, item: str, step: int | None = None) -> Any:
        """An item's tree as saved (shapes from its metadata), on the first device."""
        step = self._step_or_latest(step)
        try:
            saved = self.manager.item_metadata(step)[item]
        except Exception as e:  # noqa: BLE001 - orbax raises several types here
            raise CheckpointError(f"{self.directory}/{step}/{item}: unreadable ({e})") from None
        saved = getattr(saved, "tree", saved)
        dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        target = jax.tree.map(
            lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype, sharding=dev), saved
        )
        out = self.manager.restore(
            step, args=ocp.args.Composite(**{item: ocp.args.StandardRestore(target)})
        )
        return out[item]

    def restore_full_as_saved(self, step: int | None = None) -> Any:
        """Trained and frozen parameters merged, as saved, on the first device."""
        step = self._step_or_latest(step)
        params = self.restore_as_saved("params", step)
        if self.has_frozen(step):
            params = merge_trees(params, self.restore_as_saved("frozen", step))
        return params

    def restore_inference_params(self, params_like: Any, step: int | None = None):
        """The full parameter tree (trained + frozen merged) in the layout of `params_like`,
        for inference. Returns (params, meta)."""
        step = self._step_or_latest(step)
        if not self.has_frozen(step):
            return self.restore_params(params_like, step)
        full = self.restore_full_as_saved(step)
        check_tree_matches(full, params_like, f"{self.directory}/{step}")
        meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return _place_like(full, params_like), dict(meta["meta"])

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


def _path_name(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def check_tree_matches(tree: Any, like: Any, where: str) -> None:
    """One-line CheckpointError naming the first parameter missing, extra or of another shape."""
    have = {_path_name(p): v for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}
    want = {_path_name(p): v for p, v in jax.tree_util.tree_flatten_with_path(like)[0]}
    missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    if missing or extra:
        raise CheckpointError(
            f"{where}: parameter tree differs from the config (missing: "
            f"{missing[:3]}, unexpected: {extra[:3]})"
        )
    for key, w in want.items():
        if tuple(np.shape(have[key])) != tuple(w.shape):
            raise CheckpointError(
                f"{where}: '{key}' has shape {tuple(np.shape(have[key]))} "
                f"in the file but {tuple(w.shape)} in the config"
            )


def _place_like(tree: Any, like: Any) -> Any:
    """`tree`'s arrays as `like`'s dtypes on `like`'s shardings (default device if none)."""
    flat, like_flat = tree_to_flat(tree), tree_to_flat(like)
    out = {}
    for k, w in like_flat.items():
        x = np.asarray(flat[k]).astype(w.dtype)
        sharding = getattr(w, "sharding", None)
        out[k] = jax.device_put(x, sharding) if sharding is not None else jax.numpy.asarray(x)
    return tree_from_flat(out)


INT8_KEYS = ("int8", "scale")  # an int8-stored leaf: {"int8": q, "scale": s}, x ~ q * s


def _int8(x: np.ndarray) -> dict:
    """Symmetric int8 with one float32 scale per last-axis channel (per output unit of a
    kernel [..., out]): x ~ q * scale, |error| <= scale / 2."""
    amax = np.max(np.abs(x), axis=tuple(range(x.ndim - 1)), keepdims=True)  # [1, ..., out]
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    return {"int8": np.round(x / scale).astype(np.int8), "scale": scale}


# a byte-planed float16 leaf (the 'float16z' export): {"f16_planes": uint8 [2, N] (high bytes,
# then low bytes), "shape": int64 [ndim]}; the high bytes (sign, exponent) compress well
PLANES_KEYS = ("f16_planes", "shape")
ZLIB_MAGIC = b"JXTZ1"  # a zlib-compressed params file starts with this


def _planes(x: np.ndarray) -> dict:
    b = np.ascontiguousarray(x.astype("<f2")).view(np.uint8).reshape(-1, 2)  # [N, (lo, hi)]
    return {"f16_planes": np.ascontiguousarray(b[:, ::-1].T), "shape": np.asarray(x.shape)}


def _unplane(tree: dict) -> np.ndarray:
    b = np.ascontiguousarray(np.asarray(tree["f16_planes"], np.uint8)[::-1].T)  # [N, (lo, hi)]
    return b.reshape(-1).view("<f2").reshape(tuple(int(d) for d in tree["shape"]))


def _dequantize(tree: Any) -> Any:
    if isinstance(tree, dict):
        if set(tree) == set(INT8_KEYS):
            return np.asarray(tree["int8"], np.float32) * np.asarray(tree["scale"], np.float32)
        if set(tree) == set(PLANES_KEYS):
            return _unplane(tree)
        return {k: _dequantize(v) for k, v in tree.items()}
    return tree


def _restore_bytes(data: bytes) -> Any:
    """msgpack_restore of a params file's bytes (zlib-compressed ones included)."""
    if data.startswith(ZLIB_MAGIC):
        data = zlib.decompress(data[len(ZLIB_MAGIC) :])
    return serialization.msgpack_restore(data)


def write_params_file(path: str | os.PathLike, params: Any, dtype: str | None = None) -> int:
    """The whole parameter tree as one msgpack file; returns its size in bytes. `dtype`
    ('float16', ...) stores every floating leaf in that type (half the bytes of float32;
    `read_params_file` casts back to the model's dtype); 'int8' stores every floating matrix
    (ndim >= 2) as int8 with a float32 scale per output channel and the rest as float16 (a
    quarter of float32's bytes, for shipped models over the size limit in float16; measure
    the exported file); 'float16z' stores exactly the float16 values, byte-planed and zlib-
    compressed (lossless against 'float16', ~15 % smaller); None keeps the leaves' own."""

    def host(x):
        x = np.asarray(jax.device_get(x))
        if not (dtype and np.issubdtype(x.dtype, np.floating)):
            return x
        if dtype == "int8":
            if x.ndim >= 2:
                return _int8(x.astype(np.float32))
            return host_as(x, "float16")
        if dtype == "float16z":
            return _planes(host_as(x, "float16"))
        return host_as(x, dtype)

    def host_as(x, dtype):
        y = x.astype(dtype)
        if not np.all(np.isfinite(y)[np.isfinite(x)]):
            raise CheckpointError(
                f"{path}: a parameter overflows {dtype} (|x| up to "
                f"{np.abs(x).max():.3g}); export with dtype float32"
            )
        return y

    host = jax.tree.map(host, params)
    data = serialization.msgpack_serialize(host)
    if dtype == "float16z":
        data = ZLIB_MAGIC + zlib.compress(data, 9)
    tmp = os.fspath(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)


def read_params_tree(path: str | os.PathLike) -> Any:
    """A `write_params_file` file as saved (int8 leaves dequantised to float32), no layout."""
    return _dequantize(_restore_bytes(Path(path).read_bytes()))


def read_params_file(path: str | os.PathLike, like: Any) -> Any:
    """A `write_params_file` file restored into the layout of `like` (names and shapes checked:
    a truncated or mismatched file is a one-line CheckpointError naming it)."""
    try:
        with open(path, "rb") as f:
            tree = _restore_bytes(f.read())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: not found") from None
    except Exception as e:  # noqa: BLE001 - msgpack raises several types on truncation
        raise CheckpointError(
            f"{path}: unreadable parameter file ({type(e).__name__}); "
            "truncated or not a jaxtts params.msgpack"
        ) from None
    tree = _dequantize(tree)
    check_tree_matches(tree, like, os.fspath(path))
    return _place_like(tree, like)


def tree_equal(a: Any, b: Any) -> bool:
    """Exact equality of two pytrees of arrays (host copies)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb, strict=True)
    )

"""The one mesh abstraction of jaxtts: a (data, fsdp, tensor) device mesh and logical-axis rules.

Layers annotate parameters with the logical names of `jaxtts.nn.axes`; configs map those
names to mesh axes (`config.mesh.rules`); this module turns the mapping into `NamedSharding`s.
We use `jax.jit` over the mesh with explicit in/out shardings (no `pmap`, which is in
maintenance mode) and `AxisType.Auto` axes on purpose: shardings are given at the jit boundary
and for parameters, and XLA's propagation fills in the rest, so model code carries no per-op
sharding annotations (`jax.make_mesh` would default to `Explicit` axes, where every op must
type-check its shardings).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxtts.errors import ConfigError
from jaxtts.nn import axes

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


def resolve_mesh_shape(shape: Mapping[str, int], num_devices: int) -> tuple[int, int, int]:
    """Sizes of (data, fsdp, tensor); at most one may be -1 (= fill the remaining devices)."""
    unknown = set(shape) - set(MESH_AXES)
    if unknown:
        raise ConfigError(f"mesh.shape: unknown axes {sorted(unknown)}, expected {MESH_AXES}")
    sizes = [int(shape.get(a, 1)) for a in MESH_AXES]
    shown = dict(zip(MESH_AXES, sizes, strict=True))
    fills = [i for i, s in enumerate(sizes) if s == -1]
    if len(fills) > 1:
        raise ConfigError(f"mesh.shape={shown}: at most one axis may be -1")
    if any(s == 0 or s < -1 for s in sizes):
        raise ConfigError(f"mesh.shape={shown}: sizes must be >= 1 or -1")
    known = math.prod(s for s in sizes if s != -1)
    if fills:
        if num_devices % known:
            raise ConfigError(
                f"mesh.shape={shown}: fixed axes multiply to {known}, "
                f"which does not divide the {num_devices} available devices"
            )
        sizes[fills[0]] = num_devices // known
    if math.prod(sizes) != num_devices:
        raise ConfigError(
            f"mesh.shape={shown} needs {math.prod(sizes)} devices, but {num_devices} are available"
        )
    return tuple(sizes)  # type: ignore[return-value]


def make_mesh(shape: Mapping[str, int] | None = None, devices: Sequence[Any] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over `devices` (default: all devices of all processes)."""
    devices = list(devices) if devices is not None else jax.devices()
    sizes = resolve_mesh_shape(shape or {"data": -1}, len(devices))
    return jax.make_mesh(
        sizes, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3, devices=devices
    )


def mesh_from_config(config) -> Mesh:
    """Mesh from `config.mesh.shape` (a dict like {'data': -1, 'fsdp': 1, 'tensor': 1})."""
    mesh_cfg = config.get("mesh") if hasattr(config, "get") else None
    shape = dict(mesh_cfg.shape) if mesh_cfg is not None and "shape" in mesh_cfg else None
    return make_mesh(shape)


def rules_from_config(config) -> tuple[tuple[str, Any], ...]:
    """Logical-axis rules from `config.mesh.rules` (list of [logical, mesh axes]) or defaults."""
    mesh_cfg = config.get("mesh") if hasattr(config, "get") else None
    if mesh_cfg is None or "rules" not in mesh_cfg or mesh_cfg.rules is None:
        return axes.DEFAULT_RULES
    rules = []
    for item in mesh_cfg.rules:
        name, target = item
        if isinstance(target, list):
            target = tuple(target)
        for t in target if isinstance(target, tuple) else (target,):
            if t is not None and t not in MESH_AXES:
                raise ConfigError(f"mesh.rules: '{name}' maps to unknown mesh axis '{t}'")
        rules.append((name, target))
    return tuple(rules)


def logical_shardings(boxed_tree: Any, mesh: Mesh, rules) -> Any:
    """NamedShardings for a tree whose leaves may be `nn.LogicallyPartitioned` boxes.

    Unboxed leaves (optimizer counts, plain arrays) are replicated.
    """
    specs = nn.get_partition_spec(boxed_tree)
    return nn.logical_to_mesh_sharding(specs, mesh, rules)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) dimension split over (data, fsdp); the rest replicated."""
    return NamedSharding(mesh, P(BATCH_AXES))


def data_parallel_size(mesh: Mesh) -> int:
    return mesh.shape["data"] * mesh.shape["fsdp"]


def check_batch_size(global_batch_size: int, mesh: Mesh, microbatches: int = 1) -> None:
    dp = data_parallel_size(mesh)
    if global_batch_size % (dp * microbatches):
        raise ConfigError(
            f"data.batch_size={global_batch_size} is not divisible by data*fsdp={dp}"
            + (f" x train.microbatches={microbatches}" if microbatches > 1 else "")
        )


def shard_batch(batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Host-local numpy batch -> global jax.Arrays sharded over (data, fsdp).

    On one host the local batch is the global batch; on several hosts each process passes its
    own slice (from the pipeline's per-host sharding) and JAX assembles the global array.
    """
    sharding = batch_sharding(mesh)
    return {
        k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in batch.items()
    }

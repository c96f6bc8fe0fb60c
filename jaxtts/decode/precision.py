"""Decoding's parameter layout, at a lower matmul precision if asked: fused projections, and
bfloat16 weights and matmul inputs with float32 sums.

    models, params = at_precision(engine.decode_models(), engine.decode_params(), "bfloat16")

At every precision the token LM decodes with each block's q/k/v kernels stacked into one and
its gate/up kernels into one (`jaxtts.nn.layers.fuse_projections`, built here once per engine):
the same function with five dots fewer per layer and step (RESULTS fused-layout).

Every model whose static config (`model.cfg`, a frozen dataclass) has a `dtype` field is cloned
with `dtype` set, and the `kernel` leaves of its parameters are cast once, here, so that a
decoding step reads half the bytes and casts nothing. A config that holds another model's
config in a field (TLDR's `backbone`) gets that field changed instead, and only the parameter
subtree of the same name is cast (`params["backbone"]`); the rest (TLDR's compressor and
extractor, a DCAR policy) stays float32. Embedding tables, biases and norm scales stay float32,
as do the KV cache, attention, softmax and sampling (`jaxtts.nn.layers.matmul`).

On a CPU with bfloat16 matrix units (this project's 2-core Xeon has AMX and AVX512-BF16) a
bfloat16 matmul of 2 to 8 rows costs what a float32 matmul of one row does, so a step that
carries several tokens (CAR, VADUSA, DCAR, SSD's verify, TLDR's patch) costs about what a
one-token step does, as on the memory-bound GPUs of the papers (RESULTS precision). The tokens
differ from float32 decoding by rounding: WER is measured per precision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxtts.decode.options import check_precision
from jaxtts.nn.layers import fuse_projections

_CAST_LEAVES = ("kernel", "lora_a", "lora_b")


def cast_kernels(params: Any, dtype: str) -> Any:
    """The same tree with every `kernel` (and LoRA factor) leaf in `dtype`."""
    dt = jnp.dtype(dtype)

    def leaf(path, x):
        name = getattr(path[-1], "key", None) if path else None
        return jnp.asarray(x, dt) if name in _CAST_LEAVES else x

    return jax.tree_util.tree_map_with_path(leaf, params)


def _with_field(
    cfg: Any, field: str, value: Any, applies: Callable[[Any], bool] = lambda cfg: True
) -> tuple[Any, tuple[str, ...] | None]:
    """(cfg with `field` set to `value`, the parameter subtrees that then change: () = the
    whole tree, None = nothing changed). A config without the field is searched one level down
    (TLDR's `backbone`); one with it is changed only where `applies(cfg)`."""
    if not dataclasses.is_dataclass(cfg):
        return cfg, None
    names = {f.name for f in dataclasses.fields(cfg)}
    if field in names:
        return (dataclasses.replace(cfg, **{field: value}), ()) if applies(cfg) else (cfg, None)
    changed, subtrees = {}, []
    for name in sorted(names):
        sub, where = _with_field(getattr(cfg, name), field, value, applies)
        if where == ():
            changed[name] = sub
            subtrees.append(name)
    if not changed:
        return cfg, None
    return dataclasses.replace(cfg, **changed), tuple(subtrees)


def _without_lora(cfg: Any) -> bool:
    """A config whose layers hold no LoRA adapters (fusing would leave them unmerged: such a
    model keeps the training layout)."""
    return not getattr(cfg, "lora_rank", 0)


def _on_subtrees(params: Any, where: tuple[str, ...], fn: Callable[[Any], Any]) -> Any:
    return fn(params) if where == () else {k: fn(v) if k in where else v for k, v in params.items()}


def at_precision(
    models: dict, params: dict, precision: str, fused: bool = True
) -> tuple[dict, dict]:
    """(models, params) of a decode plan in decoding's layout, with their matmuls at
    `precision` (module docstring): every model whose config has `fused_projections` (the
    token LM, also inside TLDR) runs with its q/k/v and gate/up kernels fused, at every
    precision (fused=False: the training layout, for A/B timing); below float32 the kernels
    are also cast."""
    check_precision(precision)
    out_models, out_params = dict(models), dict(params)
    for name, model in models.items():
        cfg, p, changed = getattr(model, "cfg", None), params[name], False
        if precision != "float32":
            cfg, where = _with_field(cfg, "dtype", precision)
            if where is not None:
                p, changed = _on_subtrees(p, where, lambda t: cast_kernels(t, precision)), True
        if fused:
            cfg, where = _with_field(cfg, "fused_projections", True, _without_lora)
        else:
            where = None
        if where is not None:
            p, changed = _on_subtrees(p, where, fuse_projections), True
        if changed:
            out_models[name], out_params[name] = model.clone(cfg=cfg), p
    return out_models, out_params

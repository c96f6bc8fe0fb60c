"""Decoding at a lower matmul precision: bfloat16 weights and matmul inputs, float32 sums.

    models, params = at_precision(engine.decode_models(), engine.decode_params(), "bfloat16")

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
from typing import Any

import jax
import jax.numpy as jnp

from jaxtts.decode.options import check_precision

_CAST_LEAVES = ("kernel", "lora_a", "lora_b")


def cast_kernels(params: Any, dtype: str) -> Any:
    """The same tree with every `kernel` (and LoRA factor) leaf in `dtype`."""
    dt = jnp.dtype(dtype)

    def leaf(path, x):
        name = getattr(path[-1], "key", None) if path else None
        return jnp.asarray(x, dt) if name in _CAST_LEAVES else x

    return jax.tree_util.tree_map_with_path(leaf, params)


def _with_dtype(cfg: Any, dtype: str) -> tuple[Any, tuple[str, ...] | None]:
    """(cfg with its matmul dtype set, the parameter subtrees that then run in it: () = the
    whole tree, None = nothing changed)."""
    if not dataclasses.is_dataclass(cfg):
        return cfg, None
    names = {f.name for f in dataclasses.fields(cfg)}
    if "dtype" in names:
        return dataclasses.replace(cfg, dtype=dtype), ()
    changed, subtrees = {}, []
    for name in sorted(names):
        sub, where = _with_dtype(getattr(cfg, name), dtype)
        if where == ():
            changed[name] = sub
            subtrees.append(name)
    if not changed:
        return cfg, None
    return dataclasses.replace(cfg, **changed), tuple(subtrees)


def at_precision(models: dict, params: dict, precision: str) -> tuple[dict, dict]:
    """(models, params) of a decode plan with their matmuls at `precision` (module
    docstring). float32 returns them unchanged."""
    if check_precision(precision) == "float32":
        return models, params
    out_models, out_params = dict(models), dict(params)
    for name, model in models.items():
        cfg, where = _with_dtype(getattr(model, "cfg", None), precision)
        if where is None:
            continue
        out_models[name] = model.clone(cfg=cfg)
        p = params[name]
        if where == ():
            out_params[name] = cast_kernels(p, precision)
        else:
            out_params[name] = {
                k: cast_kernels(v, precision) if k in where else v for k, v in p.items()
            }
    return out_models, out_params

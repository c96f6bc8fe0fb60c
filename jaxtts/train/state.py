"""The train state: trained parameters next to frozen ones, and the tree helpers behind it.

    TrainState(step, params, opt_state, frozen)

`params` is what the optimizer updates; `frozen` holds parameters the loss reads but never
changes: a pretrained backbone under LoRA adapters (TLDR), a target next to its draft (SSD),
a TTS model next to its chunk-size policy (DCAR). The task's loss always sees the full tree
`merge_trees(params, frozen)`, so a task never knows which of its parameters are frozen.

Which leaves train is `config.train.trainable` (`trainable_predicate`): 'all' (default),
'lora' (LoRA adapters only) or 'prefix:<p1>,<p2>,...' (leaves whose '/'-joined path starts
with one of the prefixes, e.g. 'prefix:draft,policy'), or a union of these joined by '|'
('lora|prefix:compressor,extractor': TLDR's adapters and new modules).
`config.train.init_from` names a run folder whose parameters overwrite the fresh
initialisation wherever the paths match (a LoRA run starts at its backbone; new leaves such as
the adapters keep their init).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.struct
import jax

from jaxtts.errors import ConfigError
from jaxtts.trees import merge_trees, tree_from_flat, tree_to_flat

Tree = Any


@flax.struct.dataclass
class TrainState:
    step: jax.Array  # [] int32
    params: Any  # trained by the optimizer
    opt_state: Any
    frozen: Any = flax.struct.field(default_factory=dict)  # read by the loss, never updated

    @property
    def full_params(self) -> Any:
        return merge_trees(self.params, self.frozen)


def trainable_predicate(spec: str | None) -> Callable[[str], bool]:
    """`config.train.trainable` -> path -> bool (see the module docstring)."""
    spec = (spec or "all").strip()
    if "|" in spec:  # a union, e.g. 'lora|prefix:compressor,extractor' (TLDR)
        preds = [trainable_predicate(part) for part in spec.split("|")]
        return lambda path: any(p(path) for p in preds)
    if spec == "all":
        return lambda path: True
    if spec == "lora":
        return lambda path: path.rsplit("/", 1)[-1] in ("lora_a", "lora_b")
    if spec.startswith("prefix:") and spec[len("prefix:") :].strip():
        prefixes = tuple(p.strip().strip("/") for p in spec[len("prefix:") :].split(",") if p)
        return lambda path: any(path == p or path.startswith(p + "/") for p in prefixes)
    raise ConfigError(
        f"train.trainable={spec!r}: expected 'all', 'lora' or "
        "'prefix:<path>,<path>,...' (or a union joined by '|')"
    )


def overlay(
    tree: Tree, source: Tree, where: str, skip: Callable[[str], bool] | None = None
) -> tuple[dict, int]:
    """`tree` with every leaf that `source` has at the same path replaced by source's value
    (boxes keep their axis names), except the paths `skip` selects (they keep `tree`'s value).
    Returns (tree, number of leaves replaced). A shape mismatch is a ConfigError naming the
    leaf and `where` the source came from."""
    flat, src = tree_to_flat(tree), tree_to_flat(source)
    n = 0
    for k, v in src.items():
        if k not in flat or (skip is not None and skip(k)):
            continue
        cur = flat[k]
        value = cur.unbox() if hasattr(cur, "unbox") else cur
        if tuple(value.shape) != tuple(v.shape):
            raise ConfigError(
                f"train.init_from={where}: '{k}' has shape {tuple(v.shape)}, the "
                f"model expects {tuple(value.shape)}"
            )
        v = v.astype(value.dtype)
        flat[k] = cur.replace_boxed(v) if hasattr(cur, "replace_boxed") else v
        n += 1
    return tree_from_flat(flat), n

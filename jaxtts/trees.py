"""Nested parameter trees <-> flat '/'-joined paths, and their union: the helpers under the
train state (`jaxtts.train.state`), the checkpoints (`jaxtts.checkpoint`) and the run folders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Tree = Any

__all__ = ["merge_trees", "split_tree", "tree_from_flat", "tree_to_flat"]


def _key(k) -> str:
    return str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))


def tree_to_flat(tree: Tree) -> dict[str, Any]:
    """Nested dicts -> {'a/b/c': leaf} (boxes such as nn.LogicallyPartitioned stay leaves)."""
    out = {}

    def walk(prefix, node):
        if isinstance(node, dict) or (hasattr(node, "items") and not hasattr(node, "unbox")):
            for k, v in node.items():
                walk(f"{prefix}/{k}" if prefix else str(k), v)
        else:
            out[prefix] = node

    walk("", tree)
    return out


def tree_from_flat(flat: dict[str, Any]) -> dict:
    out: dict = {}
    for path, leaf in flat.items():
        node = out
        *parents, last = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = leaf
    return out


def split_tree(tree: Tree, keep: Callable[[str], bool]) -> tuple[dict, dict]:
    """(leaves whose path `keep`s, the rest), both nested dicts."""
    flat = tree_to_flat(tree)
    a = {k: v for k, v in flat.items() if keep(k)}
    b = {k: v for k, v in flat.items() if not keep(k)}
    return tree_from_flat(a), tree_from_flat(b)


def merge_trees(a: Tree, b: Tree) -> dict:
    """The union of two nested dicts with disjoint leaves."""
    fa, fb = tree_to_flat(a), tree_to_flat(b)
    both = sorted(set(fa) & set(fb))
    if both:
        raise ValueError(f"merge_trees: leaf {both[0]!r} in both trees")
    return tree_from_flat({**fa, **fb})

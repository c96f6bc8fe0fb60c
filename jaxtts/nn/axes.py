"""Logical axis names, the one place layers take them from.

Layers annotate parameters and activations with these names only; `configs/*.py` map them to
mesh axes (`data`, `fsdp`, `tensor`) with rules, and `jaxtts.train.mesh` applies the rules.

Legend of the axis letters used in einsum strings across `jaxtts.models`:
  B batch, T/S query/key length, D model width, N heads, H head dim, F MLP width,
  V vocabulary, K prediction heads, L layers.
"""

BATCH = "batch"  # B
LENGTH = "length"  # T
EMBED = "embed"  # D
MLP = "mlp"  # F
HEADS = "heads"  # N
KV = "kv"  # H (head dim)
VOCAB = "vocab"  # V
LAYERS = "layers"  # L (scanned layer stacks)
NONE = None

# Default rules: FSDP shards the embed dim of every weight over `fsdp`, tensor parallelism
# splits heads/MLP/vocab over `tensor`, the batch goes over (`data`, `fsdp`).
DEFAULT_RULES = (
    (BATCH, ("data", "fsdp")),
    (LENGTH, None),
    (EMBED, "fsdp"),
    (MLP, "tensor"),
    (HEADS, "tensor"),
    (KV, None),
    (VOCAB, "tensor"),
    (LAYERS, None),
)

"""Shared neural-network layers every model family builds on (functional Flax linen).

axes.py         logical axis names (the mesh rules map them to mesh axes)
layers.py       Dense (+ LoRA on any dense), RMSNorm, RoPE, MLP
attention.py    attention over an explicit KV buffer (LayerCache, write_rows)
masks.py        every visibility mask (length, padding, prefix-LM)
transformer.py  StackConfig + TransformerStack (runs any subset of its layers)
conv.py         masked conv / LayerNorm / Dense helpers (conformer ASR, speaker encoder)
"""

"""The TTS LM backbone with multi-token heads (FAR / CAR; the base of DCAR, SSD, TLDR).

The public backbone API the other families build on (import from here, not the modules):

    from jaxtts.methods.lm import TTSLM, LMConfig, KVCache, LMEngine, prefill, chunk_step

model.py       TTSLM, LMConfig, KVCache (prefill / extend / layer subsets / embeddings)
task.py        LMTask (MTP loss), train() (data preparation: `jaxtts.train.prepare`)
strategies.py  far, car:<c>, the per-row dynamic-chunk step, for the decode driver
engine.py      LMEngine: synthesis / evaluation interface
expand.py      block expansion into a deeper model with the same function
"""

from jaxtts.methods.lm.engine import LMEngine, sentence_batch, start_on_backbone
from jaxtts.methods.lm.model import TTSLM, KVCache, LMConfig, with_bos
from jaxtts.methods.lm.strategies import (
    ChunkCarry,
    cache_windows,
    chunk_logits,
    chunk_step,
    dynamic_chunk_step,
    extend_rows,
    multi_row_keys,
    prefill,
    window_fits,
)

__all__ = [
    "ChunkCarry",
    "KVCache",
    "LMConfig",
    "LMEngine",
    "TTSLM",
    "cache_windows",
    "chunk_logits",
    "chunk_step",
    "dynamic_chunk_step",
    "extend_rows",
    "multi_row_keys",
    "prefill",
    "sentence_batch",
    "start_on_backbone",
    "window_fits",
    "with_bos",
]

"""The TTS LM backbone with multi-token heads (FAR / CAR; the base of DCAR, SSD, TLDR).

model.py       TTSLM, LMConfig, KVCache (prefill / extend / layer subsets / embeddings)
task.py        data preparation, LMTask (MTP loss), train()
strategies.py  far, car:<c> (+ the per-row dynamic-chunk step) for the decode driver
engine.py      LMEngine: synthesis / evaluation interface
"""

"""DCAR (docs/methods/car_dcar.md): a chunk-size policy on the frozen multi-head TTS LM.

policy.py      ChunkPolicy: one causal transformer layer + linear over chunk sizes 1..K
strategies.py  `dcar` (per-row dynamic chunk) and the `vadusa:<tau>` baseline
dcpo.py        DCPO training: rollouts, CTC-ASR rewards, chase-then-exceed, GRPO loss
engine.py      DCAREngine (a DCPO run folder + its backbone), chunk_schedule
"""

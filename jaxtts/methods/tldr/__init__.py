"""TLDR (docs/methods/tldr.md): patch-level AR on a frozen TTS LM with LoRA.

model.py     patch grid, compressor, extractor, TLDRModel (training forward, prefill, extend)
strategy.py  `tldr` for the generic decode driver (one backbone forward per patch)
assemble.py  config keys, the frozen parts (backbone, speaker encoder, centroid mel table)
task.py      training: `python train.py --config configs/tldr.py:small --workdir runs/tldr`
engine.py    TLDREngine (infer.py / evaluate; far, car:c on the un-adapted backbone too)
"""

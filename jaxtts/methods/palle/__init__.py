"""PALLE (docs/methods/palle.md): pseudo-autoregressive span generation at fixed steps, then
NAR confidence refinement, on a masked generative transformer.

  model.py    MaskedGenTransformer (text ConvNeXt V2 + sinusoidal/conv positions + full attention)
  masking.py  stage-one (PAR), stage-two (refine) and NAR training masks
  task.py     training both stages on the backbone's data
  decode.py   par_decode / refine / nar_decode: fixed-step jitted loops
  engine.py   PALLEEngine: strategies `par`, `palle`, `nar` for synthesize / evaluate
"""

"""SSD (docs/methods/ssd.md): speculative decoding with a draft made of the target's own
layers.

  strategy.py  `ssd:L=<draft length>,beta=<tolerance>` for the generic decode driver
"""

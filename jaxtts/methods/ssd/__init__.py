"""SSD (METHODS.md section 2): speculative decoding with a draft made of the target's own
layers.

  strategy.py  `ssd:L=<draft length>,beta=<tolerance>` for the generic decode driver
"""

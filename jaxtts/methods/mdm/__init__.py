"""MDM (METHODS.md section 3): a masked-diffusion decoder over quantised mels with decoding
orders, on a Grad-TTS-style acoustic model. What exists so far (the issue's building blocks,
each tested; the acoustic model, the decoder network, Grad-TTS, training and the engine are
not written yet):

  mas.py     monotonic alignment search (jitted, batched)
  dmol.py    discretised mixture of logistics over Q levels: log-probs, NLL, sampling
  orders.py  the order-agnostic ELBO masks and the decoding orders (random, l2r, r2l,
             swap:<lambda>; top1 / top1* / topk:<k> / duration selection helpers)
"""

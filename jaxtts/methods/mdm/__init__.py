"""MDM (docs/methods/mdm.md): a masked-diffusion decoder over quantised mels with decoding
orders, on a Grad-TTS-style acoustic model, and the Grad-TTS baseline on the same encoder.

  model.py    MDMConfig, the text encoder (prior + durations), the MDM decoder (DMoL head)
  mas.py      monotonic alignment search (jitted, batched)
  dmol.py     discretised mixture of logistics over Q levels: log-probs, NLL, sampling
  orders.py   the order-agnostic ELBO masks and the decoding orders (random, l2r, r2l,
              swap:<lambda>; top1 / top1* / topk:<k> / duration selection helpers)
  decode.py   the MDM decoding loop (one lax.while_loop, every order)
  gradtts.py  the Grad-TTS baseline: score decoder, diffusion loss, probability-flow sampler
  task.py     the training loss and `train` (configs/mdm.py)
  engine.py   MDMEngine for infer.py / evaluate (strategies: the orders, gradtts:<N|length>)
"""

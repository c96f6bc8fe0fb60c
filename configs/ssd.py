"""SSD draft: a shallower LM made of the target's own layers, trained on next-token CE with
everything but its first layers and output head frozen (jaxtts/methods/ssd/; docs/methods/ssd.md).

Variants (`--config configs/ssd.py:<variant>`):
  tiny   tests: 2 steps on a 40-utterance corpus, target pretrained/car_small
  small  the draft of pretrained/car_small (4 layers): layers (0, 3), i.e. first=1, last=1
  deep   the draft of pretrained/car_deep (12 layers): 4 of 12 layers, the paper's ratio (8 of
         24). first=1, last=3 is the paper's first 2 / last 6 scaled down; it is the 4-layer
         car_small itself at step 0 (the block expansion put car_small's layers 1-3 last). The
         other split: --config.ssd.first=2 --config.ssd.last=2; distilled to the target
         (pretrained/ssd_deep): --config.ssd.distill=1.0 --config.train.learning_rate=3e-4
  natural  the draft of the natural-voice backbone pretrained/car_deep_nat (issue 100): `deep`'s
         split (layers 0, 9, 10, 11), distilled to the target as pretrained/ssd_deep was
         (distill 1.0, 3e-4, 300 steps)

  python train.py --config configs/ssd.py:small --workdir runs/ssd
  python -m jaxtts.evaluate --workdir runs/ssd --strategies far,ssd:L=3,beta=0.4

The target's data, tokenizer, symbol table, loss and decode settings are used (the run's
config.json holds the resolved LM config of the draft). The paper takes the first two and the
last six of 24 layers so that a draft forward costs 1/3 of the target's; the shipped backbone
has only 4 layers, so the small draft keeps one of each (1/2 of the stack): see RESULTS.md.
"""

import ml_collections as mlc

from configs import common

VARIANTS = ("tiny", "small", "deep", "natural")


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in VARIANTS:
        raise KeyError(
            f"configs/ssd.py: unknown variant '{args.variant}', expected {list(VARIANTS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "ssd"
    config.ssd = mlc.ConfigDict(
        dict(
            target="pretrained/car_small",  # the frozen target LM (run folder)
            first=1,  # the target's first layers (trained in the draft)
            last=1,  # the target's last layers (frozen in the draft)
            corpus_utterances=0,  # 0 = the target's training corpus
            # True: the draft is built from the target's layers at load (a shipped folder: no
            # parameter file, `python -m jaxtts.methods.ssd.task untrained`, or its trained
            # parts only, `... ship`, e.g. pretrained/ssd_deep)
            from_target=False,
            # > 0: distil to the target's distribution, loss (1 - w) CE + w KL(target || draft)
            # on the base head (not in the paper; 0 = its next-token CE)
            distill=0.0,
        )
    )
    config.train = common.train_config(
        steps=800,
        learning_rate=1e-3,
        warmup_steps=50,
        weight_decay=0.0,
        log_every=20,
        eval_every=400,
        checkpoint_every=200,
    )
    config.eval = mlc.ConfigDict(dict(num_samples=0))
    config.mesh = common.mesh_config()
    if v in ("deep", "natural"):
        config.ssd.update(target="pretrained/car_deep", first=1, last=3)
        config.train.update(steps=300, eval_every=150, checkpoint_every=50)
    if v == "natural":
        config.ssd.update(target="pretrained/car_deep_nat", distill=1.0)
        config.train.learning_rate = 3e-4
    if v == "tiny":
        config.ssd.corpus_utterances = 40
        config.train.update(
            steps=2,
            warmup_steps=1,
            log_every=1,
            eval_every=2,
            checkpoint_every=0,
            tensorboard=False,
        )
    return config

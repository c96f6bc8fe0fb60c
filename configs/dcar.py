"""DCAR: a chunk-size policy on the frozen TTS backbone, trained with DCPO (GRPO) on the CTC
reward ASR (jaxtts/methods/dcar/dcpo.py; docs/methods/car_dcar.md).

Variants (`--config configs/dcar.py:<variant>`):
  tiny   tests and smoke runs: 2 steps of 4 prompts x 2 rollouts, 1 s cap, 40-utterance corpus
         (shipped backbone and ASR)
  small  the shipped policy: pretrained/car_small + pretrained/ctc_asr, 8 prompts x 8
         rollouts a step, guidance {2, 3}
  deep   the policy of pretrained/car_deep (12 layers), guidance {2, 3, 4}, 100 steps, the
         paper's reward (it settles on c = 2: benchmarks/RESULTS.md, section deep-dcar)
  deep_cs  the earlier pretrained/dcar_deep (until 2026-11-28): `deep` with a per-sentence
         CER reward plus 0.026 x the rollout's mean chunk, 60 steps; decodes by drawing from
         the policy (`policy.pick = sample`: its argmax is one size, its draws are dynamic)
  deep_pr  `deep` with the CER reward plus a per-decision process reward (the base head's
         check of each drafted token, lambda 2: `jaxtts/methods/dcar/dcpo.py`), no speed term
  deep_conf  the pretrained/dcar_deep of 2026-11-28: `deep_pr` with a policy that also reads the
         heads' confidence (`policy.features = confidence`), lambda 0.75, learning rate 1e-3;
         decodes with the policy's argmax (it trains on draws; its argmax takes c = 4 where
         the heads are sure)
  deep_rule  `deep_conf` with a linear policy (`policy.num_layers = 0`: no causal layer, two
         small matmuls a step) that starts at the confidence-threshold rule (theta 0.4,
         `dcpo.prior_threshold`) instead of uniform; not the paper's policy;
         pretrained/dcar_deep from 2026-11-28 23:45 UTC to 2026-12-05
  deep_nochase  `deep_rule` without chase-then-exceed (`dcpo.chase_then_exceed = False`: every
         rollout drawn from the policy, no fixed-size guidance rollouts; the paper's first
         ablation): the shipped pretrained/dcar_deep since 2026-12-06 (on this backbone it
         reads no worse than `deep_rule` and takes c = 4 more often: benchmarks/RESULTS.md,
         section deep-dcar-ablations)
  natural  `deep_nochase` on the natural-voice backbone pretrained/car_deep_nat with the natural
         reward ASR pretrained/ctc_asr_nat (issue 100)

  python train.py --config configs/dcar.py:small --workdir runs/dcar
  python train.py --config configs/dcar.py:small --workdir runs/dcar_234 \
      --config.dcpo.guidance='(2,3,4)'
  python -m jaxtts.evaluate --workdir runs/dcar --strategies far,car:2,car:3,vadusa:2,dcar
"""

import ml_collections as mlc

from configs import common

VARIANTS = (
    "tiny",
    "small",
    "deep",
    "deep_cs",
    "deep_pr",
    "deep_conf",
    "deep_rule",
    "deep_nochase",
    "natural",
)


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in VARIANTS:
        raise KeyError(
            f"configs/dcar.py: unknown variant '{args.variant}', expected {list(VARIANTS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "dcar"
    # one causal layer over the backbone's hidden states (width = the backbone's d_model)
    # pick: how decoding uses it by default, 'argmax' (`dcar`) or 'sample' (`dcar:sample`)
    # features: 'hidden' (h_t, the paper) | 'confidence' (+ the heads' top prob / entropy)
    # num_layers: 1 (the paper) | 0 (a linear policy over [h_t ; features], no history)
    config.policy = mlc.ConfigDict(
        dict(num_heads=4, head_dim=64, d_ff=1024, pick="argmax", features="hidden", num_layers=1)
    )
    config.dcpo = mlc.ConfigDict(
        dict(
            backbone="pretrained/car_small",  # frozen TTS LM (run folder)
            reward_asr="pretrained/ctc_asr",  # frozen CTC ASR (run folder)
            guidance=(2, 3),  # action-guidance set: the best fixed CAR chunk sizes
            chase_then_exceed=True,  # half of each group decoded with fixed guidance sizes
            gamma=0.1,  # out-of-range penalty weight
            reward_metric="wer",  # the reward's error rate: 'wer' (the paper) | 'cer'
            speed_weight=0.0,  # + this x the rollout's mean chunk size (0: the paper)
            # per-decision process reward a - lambda (n - a) from the base head's check of
            # the drafts (rank < tau): its weight next to the outcome advantage (0: the paper)
            process_weight=0.0,
            process_tau=2,
            process_lambda=2.0,
            group_size=8,  # G rollouts per prompt (even)
            prompts_per_step=4,  # P prompts per step (N = P * G rollouts, one batch)
            min_seconds=3.0,  # training utterances at least this long
            num_utterances=0,  # 0 = all that qualify
            max_seconds=10.0,  # generation cap per rollout
            clip_eps=0.2,
            kl_beta=0.04,  # k3 KL weight to the frozen initial policy ...
            kl_warmup_steps=100,  # ... warmed up linearly from 0 over these steps
            # > 0: the policy starts at the confidence-threshold rule with this threshold and
            # logit gain (`policy.threshold_prior`; needs features 'confidence'); 0: uniform
            prior_threshold=0.0,
            prior_gain=20.0,
        )
    )
    config.data = mlc.ConfigDict(dict(corpus_dir="", corpus_utterances=2400, corpus_seed=0))
    config.train = common.train_config(
        steps=150,
        learning_rate=3e-4,
        warmup_steps=10,
        final_lr_fraction=0.3,
        weight_decay=0.0,
        trainable="prefix:policy",
        log_every=5,
        eval_every=0,
        checkpoint_every=25,
    )
    config.mesh = common.mesh_config()
    deep = ("deep", "deep_cs", "deep_pr", "deep_conf", "deep_rule", "deep_nochase", "natural")
    if v in deep:
        config.dcpo.update(backbone="pretrained/car_deep", guidance=(2, 3, 4))
        config.train.update(steps=100)
    if v == "deep_cs":
        config.dcpo.update(reward_metric="cer", speed_weight=0.026)
        config.policy.pick = "sample"
        config.train.update(steps=60)
    if v in ("deep_pr", "deep_conf", "deep_rule", "deep_nochase", "natural"):
        config.dcpo.update(reward_metric="cer", process_weight=1.0)
        config.policy.pick = "sample"
        config.train.update(steps=80, checkpoint_every=20)
    if v in ("deep_conf", "deep_rule", "deep_nochase", "natural"):
        config.policy.update(features="confidence", pick="argmax")
        config.dcpo.process_lambda = 0.75
        config.train.learning_rate = 1e-3
    if v in ("deep_rule", "deep_nochase", "natural"):
        config.policy.num_layers = 0
        config.dcpo.prior_threshold = 0.4
    if v in ("deep_nochase", "natural"):
        config.dcpo.chase_then_exceed = False
    if v == "natural":
        config.dcpo.update(backbone="pretrained/car_deep_nat", reward_asr="pretrained/ctc_asr_nat")
    if v == "tiny":
        config.policy.update(num_heads=2, head_dim=16, d_ff=64)
        config.data.corpus_utterances = 40  # built in seconds on a fresh clone
        config.dcpo.update(
            group_size=2, prompts_per_step=4, max_seconds=1.0, num_utterances=4, kl_warmup_steps=2
        )
        config.train.update(
            steps=2, warmup_steps=1, log_every=1, checkpoint_every=0, tensorboard=False
        )
    return config

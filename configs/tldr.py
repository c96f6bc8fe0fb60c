"""TLDR: patch-level AR on the frozen TTS LM with LoRA, a token-to-patch compressor and a
speaker-conditioned patch-to-token extractor (jaxtts/methods/tldr/; docs/methods/tldr.md).

Variants (`--config configs/tldr.py:<variant>`):
  tiny         tests: 1 step on a 40-utterance corpus, small modules, backbone
               pretrained/car_small
  small        P = 4 on pretrained/car_small (the shipped recipe, benchmarks/RESULTS.md)
  small_p2 / small_p8                  patch size 2 / 8
  small_meanpool / small_nolora / small_nospk   the paper's ablations (compressor = mean
               pool; lora_rank 0; no speaker embedding)
  deep / deep_p2   P = 4 / 2 on pretrained/car_deep (12 layers): the 2-layer extractor is
               1/6 of the backbone, the paper's ratio (4 next to 24)
  deep_warm    P = 4 on pretrained/car_deep, started from the trained P = 2 model
               pretrained/tldr_deep (`tldr.warm_start`: a P = 2 -> 4 curriculum)
  deep_prev    P = 4 on pretrained/car_deep with `ext_prev=4` (the extractor also sees the
               4 tokens before the patch; not in the paper), started from
               pretrained/tldr_deep_p4 (made from its version at c5e628f, ext_prev 0: the new
               table starts at zero, the same function at step 0), half the learning rate,
               1000 steps; 1200 more at 2e-4 made the shipped pretrained/tldr_deep_p4 (WER
               9.6 % against 11.5 %; its MODEL_CARD.md has the four stages)
  deep_ft      how the shipped pretrained/tldr_deep_p4 was moved onto today's
               pretrained/car_deep (2026-12-05), stage 1: the previous tldr_deep_p4 warm-started
               on it; `tldr.warm_start_backbone` names the previous car_deep, the backbone that
               model was trained on. Both are in git, not in the tree: first
               `mkdir -p runs/prev && git archive 2671bc6 pretrained/car_deep
               pretrained/tldr_deep_p4 pretrained/tldr_deep | tar -x -C runs/prev`.
               deep_prev's settings, 400 steps at 3e-4 (WER 11.3 %)
  deep_ft2     stage 2: from the deep_ft run (runs/tldr_ft), a fresh Adam, 1200 steps at 2e-4
               as the previous model's own last stage: WER 9.5 %, pretrained/tldr_deep_p4
               until stage 3 (docs/history/deep.md#deep-ft-methods)
  deep_ft3     stage 3: from pretrained/tldr_deep_p4 as stage 2 shipped it (git 655841d; the
               folder now holds this stage's result), a fresh Adam and a fresh data order
               (`data_seed=1`), 1200 steps at 1e-4: dev CE 0.989, WER 8.9 %, the shipped
               pretrained/tldr_deep_p4 (docs/history/deep.md#deep-ft-methods)
  deep_ft_p2   the previous pretrained/tldr_deep (P = 2, runs/prev as above) moved the same
               way, with `ext_prev=2` added (at most P; its table starts at zero: the same
               function at step 0), 300 steps at 3e-4: the shipped pretrained/tldr_deep
  deep_text    deep_prev + `text_patch=4` (not in the paper): the phoneme text prefix is
               compressed 4 symbols per backbone slot by a text compressor, so that the
               global KV cache at 12 s is 0.25x FAR's (0.53x with the text uncompressed);
               started from pretrained/tldr_deep_p4 (the text compressor fresh), 2800 steps:
               dev CE 1.103 (below the shipped model's 1.164) but WER 26.8 %, not shipped
               (docs/history/deep.md#deep-tldr-text)
  deep_text_order  deep_text + `text_slot_order`: the text compressor sees each symbol's
               place in its slot (zero-initialised, so the warm start, the deep_text run
               at step 2800 in runs/tldr_deep_text, is the same function at step 0);
               2400 steps at 5e-4 (measured run: 1200 steps, then lengthened to 2400 on
               resume): dev CE 1.025, WER 16.6 % (deep_text 26.8 %), not shipped
  deep_text3   deep_text_order at Q = 3 (global KV at 12 s 0.28x FAR's), from that run (its
               Q-row leaves cut to 3 rows), 1200 steps at 5e-4: dev CE 0.996, WER 12.4 %
               (FAR 8.8 %), not shipped
  deep_text3_read  deep_text3 + `ext_text=64` (not in the paper): the extractor also reads
               the symbols (a 64-wide key / value memory per symbol, output projection zero
               at init; KV 0.29x at 12 s), from the deep_text3 run (measured: at step 1380),
               1200 steps at 5e-4: dev CE 1.013, WER 11.7 % (11.4 % lengthened to 2400 on
               resume), not shipped
  deep_text_layers  deep_prev with the text in 4 of the 12 backbone layers (`text_layers`,
               not in the paper): in the other 8 the patches attend to patches only, so their
               caches hold no text (global KV at 12 s as Q = 3's); from
               pretrained/tldr_deep_p4, 2000 steps at 5e-4 (measured run: cut to 1100 on
               resume, dev CE 1.161, WER 11.4 %; resumed to 2400 at 3e-4: dev CE 1.120,
               WER 10.5 %; FAR 8.8 %), not shipped
  deep_text_layers_read  deep_text_layers + `ext_text=64`: the extractor also reads the
               symbols (at Q = 1 through the `TextReader`, one bidirectional layer over the
               frozen text embeddings; KV 0.28x -> 0.29x at 12 s), from that run's step-2400
               export (`python -m jaxtts.run_folder export runs/tldr_tl out/tl_2400 --step 2400
               --trained_only`), 1200 steps at 5e-4: dev CE 1.130, WER 11.3 % (from 10.5 %),
               not shipped
  deep_text_layers_drop  deep_text_layers + `dropout=0.1` (residual dropout in the new
               modules while training; not in the paper) from the same step-2400 export, whose
               train CE had reached the backbone's (0.74) with dev CE 0.38 above it: 700 steps
               at 3e-4 (measured run: started at 900, cut to 700 on resume at step 26)
  deep_ft_text_layers  deep_text_layers on today's backbone: from the shipped
               pretrained/tldr_deep_p4 (WER 8.9 %, the 32 h corpus), a fresh data order
               (`data_seed=2`), 1500 steps at 4e-4 (not finished: 2026-12-05's session
               ended after step 500, dev CE 1.109 there; docs/history/deep.md#deep-tldr-text)
  deep_kd_text_layers  the text in 4 layers distilled from the shipped model with the text in
               every layer (`tldr.teacher`, `tldr.distill` = 0.9: 0.1 CE + 0.9 KL; not in the
               paper), 1000 steps at 3e-4, data_seed 3: dev CE 1.007, KL 0.044, WER 9.8 %
               (600 more steps: 10.0 %; `--config.tldr.distill=1.0`, the KL alone: 9.8 %),
               KV 0.28x; not shipped. Then 500 steps on the reverse KL
               (`tldr.distill_kl=reverse`, the command in pretrained/tldr_deep_p4_tl's card):
               9.24 % (six seeds: 9.07 %, FAR + 0.88 pp), shipped as
               pretrained/tldr_deep_p4_tl (docs/history/deep.md#deep-tldr-text)
  gpu_text_layers / gpu_text3  for one GPU (benchmarks/gpu_train.sh): deep_text_layers /
               deep_text3 (Q = 3 with the slot order) started from pretrained/tldr_deep_p4,
               batch 64 (the CPU runs: 16) padded to one shape (`fixed_shapes`: the first
               lease compiled ~60 s per new bucket shape and trained 40 steps in 460 s),
               1200 steps at 8e-4 (0.29 s a step alone), no decoded samples at eval
  natural      P = 4 on the natural-voice backbone pretrained/car_deep_nat with the natural
               speaker encoder pretrained/speaker_encoder_nat (issue 100): fresh modules,
               `ext_prev=4` from the start (the shipped espeak model's final setting), 2000
               steps at 1e-3 (~2.5 s a step alone on 2 cores; resumes from its workdir)

  python train.py --config configs/tldr.py:small --workdir runs/tldr
  python -m jaxtts.evaluate --workdir runs/tldr --strategies far,tldr

The backbone's data recipe, tokenizer, symbol table and decode settings are used. The paper's
modules are D 896 (the backbone's width); here the compressor works at the backbone's width
(256) and the extractor is 2 layers of width 256 so that it stays light next to a 4-layer
backbone (the paper: 4 extractor layers next to 24 backbone layers).
"""

import ml_collections as mlc

from configs import common

VARIANTS = (
    "tiny",
    "small",
    "small_p2",
    "small_p8",
    "small_meanpool",
    "small_nolora",
    "small_nospk",
    "deep",
    "deep_p2",
    "deep_warm",
    "deep_prev",
    "deep_ft",
    "deep_ft2",
    "deep_ft3",
    "deep_ft_p2",
    "deep_text",
    "deep_text_order",
    "deep_text3",
    "deep_text3_read",
    "deep_text_layers",
    "deep_text_layers_read",
    "deep_text_layers_drop",
    "deep_ft_text_layers",
    "deep_kd_text_layers",
    "gpu_text_layers",
    "gpu_text3",
    "natural",
)

# the compressed-text runs, each from the one before:
# (Q, text_slot_order, ext_text, warm_start, steps, peak LR, warmup steps)
TEXT_STAGES = {
    "deep_text": (4, False, 0, "pretrained/tldr_deep_p4", 2800, 1e-3, 100),
    "deep_text_order": (4, True, 0, "runs/tldr_deep_text", 2400, 5e-4, 50),
    "deep_text3": (3, True, 0, "runs/tldr_deep_text_order", 1200, 5e-4, 50),
    "deep_text3_read": (3, True, 64, "runs/tldr_deep_text3", 1200, 5e-4, 50),
}
# the text in 4 of the 12 layers (`text_layers` 0,5,9,10), each stage from the one above it
# (out/tl_2400: `deep_text_layers`'s step-2400 export):
# (ext_text, dropout, warm_start, steps, peak LR, eval_every)
TEXT_LAYER_STAGES = {
    "deep_text_layers": (0, 0.0, "pretrained/tldr_deep_p4", 2000, 5e-4, 400),
    "deep_text_layers_read": (64, 0.0, "out/tl_2400", 1200, 5e-4, 400),
    "deep_text_layers_drop": (0, 0.1, "out/tl_2400", 700, 3e-4, 300),
}


def get_config(arg: str | None = None) -> mlc.ConfigDict:
    args = common.parse_arg(arg, variant="small")
    if args.variant not in VARIANTS:
        raise KeyError(
            f"configs/tldr.py: unknown variant '{args.variant}', expected {list(VARIANTS)}"
        )
    v = args.variant
    config = mlc.ConfigDict()
    config.variant = v
    config.task = "tldr"
    config.tldr = mlc.ConfigDict(
        dict(
            backbone="pretrained/car_small",  # the frozen TTS LM (run folder)
            speaker_encoder="pretrained/speaker_encoder",  # speaker embedding of the prompt
            corpus_utterances=0,  # 0 = the backbone's training corpus
            batch_size=0,  # utterances per training batch (0 = the backbone's)
            data_seed=-1,  # the loader's shuffle / prompt seed (-1 = the backbone's data.seed)
            fixed_shapes=False,  # one padded batch shape (one compile; for a GPU lease)
            patch=4,  # P speech tokens per patch
            compressor="attention",  # 'attention' (local layer + cross-attention) | 'mean'
            window=16,  # compressor's local attention window (tokens)
            comp_heads=4,
            comp_ff=768,
            ext_layers=2,
            ext_width=256,
            ext_heads=4,
            ext_ff=768,
            slots=4,
            ext_prev=0,  # speech tokens before the patch the extractor sees (0 = the paper)
            speaker=True,
            speaker_proj=128,
            min_reference_seconds=0.5,
            token_rate_positions=True,  # backbone positions advance P per patch
            text_patch=1,  # Q text symbols per backbone slot (1 = the paper; not in it: Q > 1)
            text_slot_order=True,  # Q > 1: the text compressor sees each symbol's place
            ext_text=0,  # Q > 1 or text_layers: the extractor's text memory per symbol (0 = none)
            text_layers="",  # backbone layers whose speech sees the text ('' = all; not in it)
            dropout=0.0,  # residual dropout in the new modules while training (not in it)
            lora_rank=32,
            lora_alpha=32.0,  # paper 64/64 at D 896; scaled to D 256
            warm_start="",  # a TLDR run on the same backbone to start from ('' = fresh)
            warm_start_backbone="",  # the backbone warm_start was trained on, if another one
            teacher="",  # a TLDR run on the same backbone to distil from (not in the paper)
            distill=0.0,  # w: the loss is (1 - w) CE + w KL(teacher || student)
            distill_kl="forward",  # or "reverse": KL(student || teacher) (not in the paper)
        )
    )
    config.train = common.train_config(
        steps=2000,
        learning_rate=1e-3,
        warmup_steps=100,
        weight_decay=0.0,
        log_every=20,
        eval_every=500,
        checkpoint_every=100,
    )
    config.eval = mlc.ConfigDict(dict(num_samples=8))
    config.mesh = common.mesh_config()
    t = config.tldr
    if v == "small_p2":
        t.patch = 2
    elif v == "small_p8":
        t.patch = 8
    elif v == "small_meanpool":
        t.compressor = "mean"
    elif v == "small_nolora":
        t.lora_rank = 0
    elif v == "small_nospk":
        t.speaker = False
    elif v in ("deep", "deep_p2", "deep_warm"):
        t.backbone = "pretrained/car_deep"
        t.patch = 2 if v == "deep_p2" else 4
        if v == "deep_warm":
            t.warm_start = "pretrained/tldr_deep"
    elif v == "deep_prev":
        t.backbone = "pretrained/car_deep"
        t.ext_prev = 4
        t.warm_start = "pretrained/tldr_deep_p4"
        config.train.update(steps=1000, learning_rate=5e-4, warmup_steps=50)
    elif v in ("deep_ft", "deep_ft_p2"):
        prev = "runs/prev/pretrained/"  # the folders before the move (git archive 2671bc6)
        t.update(
            backbone="pretrained/car_deep",
            patch=2 if v == "deep_ft_p2" else 4,
            ext_prev=2 if v == "deep_ft_p2" else 4,
            warm_start=prev + ("tldr_deep" if v == "deep_ft_p2" else "tldr_deep_p4"),
            warm_start_backbone=prev + "car_deep",
        )
        steps = 300 if v == "deep_ft_p2" else 400
        config.train.update(steps=steps, learning_rate=3e-4, warmup_steps=40, eval_every=steps // 2)
    elif v == "deep_ft2":
        t.update(backbone="pretrained/car_deep", ext_prev=4, warm_start="runs/tldr_ft")
        config.train.update(steps=1200, learning_rate=2e-4, warmup_steps=20, eval_every=400)
    elif v == "deep_ft3":
        # a fresh data order: deep_ft2's 1200 batches were the first of the seed-0 epoch
        t.update(
            backbone="pretrained/car_deep",
            ext_prev=4,
            warm_start="pretrained/tldr_deep_p4",
            data_seed=1,
        )
        config.train.update(steps=1200, learning_rate=1e-4, warmup_steps=20, eval_every=400)
    elif v in TEXT_STAGES:
        q, order, ext_text, warm, steps, lr, warmup = TEXT_STAGES[v]
        t.update(
            backbone="pretrained/car_deep",
            ext_prev=4,
            text_patch=q,
            text_slot_order=order,
            ext_text=ext_text,
            warm_start=warm,
        )
        config.train.update(steps=steps, learning_rate=lr, warmup_steps=warmup, eval_every=400)
    elif v in TEXT_LAYER_STAGES:
        ext_text, dropout, warm, steps, lr, every = TEXT_LAYER_STAGES[v]
        t.update(
            backbone="pretrained/car_deep",
            ext_prev=4,
            text_layers="0,5,9,10",
            ext_text=ext_text,
            dropout=dropout,
            warm_start=warm,
        )
        config.train.update(steps=steps, learning_rate=lr, warmup_steps=50, eval_every=every)
    elif v in ("deep_ft_text_layers", "deep_kd_text_layers"):
        t.update(
            backbone="pretrained/car_deep",
            ext_prev=4,
            text_layers="0,5,9,10",
            warm_start="pretrained/tldr_deep_p4",
            data_seed=2,
        )
        config.train.update(steps=1500, learning_rate=4e-4, warmup_steps=50, eval_every=500)
        if v == "deep_kd_text_layers":  # taught by the same model with the text in every layer
            t.update(teacher="pretrained/tldr_deep_p4", distill=0.9, data_seed=3)
            config.train.update(steps=1000, learning_rate=3e-4, warmup_steps=30)
    elif v == "natural":
        t.update(
            backbone="pretrained/car_deep_nat",
            speaker_encoder="pretrained/speaker_encoder_nat",
            ext_prev=4,
        )
        config.train.update(eval_every=500, checkpoint_every=50)
    elif v in ("gpu_text_layers", "gpu_text3"):
        t.update(
            backbone="pretrained/car_deep",
            ext_prev=4,
            batch_size=64,
            fixed_shapes=True,  # each new bucket shape compiled for ~60 s on an H200
            warm_start="pretrained/tldr_deep_p4",
        )
        if v == "gpu_text_layers":
            t.text_layers = "0,5,9,10"
        else:
            t.update(text_patch=3, text_slot_order=True)
        config.train.update(
            steps=1200,  # ~6 min at 0.29 s a step, one run alone on an H200
            learning_rate=8e-4,
            warmup_steps=100,
            final_lr_fraction=0.05,
            eval_every=600,
            checkpoint_every=600,
            tensorboard=False,
        )
        config.eval.num_samples = 0  # decoding samples would compile the decoder
    elif v == "tiny":
        t.update(
            corpus_utterances=40,
            comp_ff=64,
            ext_layers=1,
            ext_width=32,
            ext_heads=2,
            ext_ff=64,
            speaker_proj=16,
            lora_rank=4,
            lora_alpha=4.0,
        )
        config.train.update(
            steps=1,  # one compiled training step (a second batch may take another length bucket)
            warmup_steps=1,
            log_every=1,
            eval_every=1,
            checkpoint_every=0,
            tensorboard=False,
        )
        config.eval.num_samples = 0
    return config

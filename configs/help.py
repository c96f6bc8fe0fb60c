"""One-line descriptions of every config key (`python train.py --config ... --print_config`).

Keys are dotted paths; a description applies to that key in every config file that has it.
`tests/test_configs.py` checks that every key of every variant of every config file has one.
"""

from jaxtts.families import FAMILIES

HELP = {
    # top level
    "variant": "which variant of the config file was loaded",
    "task": "model family to train (jaxtts/families.py): " + " | ".join(FAMILIES),
    # model: token LM (configs/car.py)
    "model.num_text_symbols": "text symbol table size (-1 = filled from the data)",
    "model.num_speech_tokens": "speech tokenizer vocabulary K_tok (-1 = filled from the data)",
    "model.d_model": "model width D",
    "model.num_layers": "transformer layers L",
    "model.num_heads": "attention heads N",
    "model.head_dim": "width of one attention head H",
    "model.d_ff": "MLP hidden width F",
    "model.num_mtp_heads": "prediction heads K (base head + K-1 multi-token heads; CAR chunk <= K)",
    "model.mtp_blocks": "residual SiLU blocks in each additional prediction head",
    "model.mlp": "MLP kind: swiglu | gelu",
    "model.dropout": "dropout on attention and MLP outputs (training only)",
    "model.dtype": "compute dtype: float32 | bfloat16 (parameters stay float32)",
    "model.rope_theta": "rotary position embedding base (0 = no RoPE)",
    "model.lora_rank": "LoRA rank on every dense layer (0 = no adapters)",
    "model.lora_alpha": "LoRA scale alpha (update = alpha / rank * B A x; 0 = rank)",
    # model: CTC ASR / speaker encoder
    "model.n_mels": "log-mel bins of the input",
    "model.mel_mean": "global log-mel mean for input normalisation (None = from the train split)",
    "model.mel_std": "global log-mel std for input normalisation (None = from the train split)",
    "model.conv_kernel": "depthwise convolution width of each conformer block",
    "model.channels": "channels of the speaker encoder's convolutions",
    "model.num_blocks": "dilated convolution blocks of the speaker encoder",
    "model.embed_dim": "speaker embedding size",
    "model.attention_dim": "width of the attentive statistics pooling",
    "model.num_speakers": "training speakers (0 = filled from the train split)",
    "model.speakers": "training speaker names in class order (None = from the train split)",
    # loss
    "loss.alpha": "weight of prediction head k is alpha^(k-1) (1 = uniform)",
    "loss.input_noise": (
        "share of the target's input tokens replaced by random ones in training (targets stay "
        "clean; 0 = off)"
    ),
    "loss.align_layers": (
        "layers whose speech->text attention learns the alignment (() = off; "
        "on the command line '(1, 2)' or '()')"
    ),
    "loss.align_heads": "heads of those layers that do (() = all heads)",
    "loss.align_ctc_weight": "weight of the CTC (forward-sum) alignment loss (0 = no loss)",
    "loss.align_prior_scaling": "beta-binomial prior scaling (0 = no prior; larger = narrower)",
    "loss.align_prior_start": "the prior is fully on until this step",
    "loss.align_prior_end": "... and annealed linearly to off at this step",
    "loss.align_prior_normalize": "peak of each frame's log prior at 0 (off: text vs speech bias)",
    "loss.align_blank_logprob": "log-probability of the CTC blank before renormalisation",
    "loss.align_band": "half-width (share of the text) of the align/diag_mass band",
    "loss.scale": "AAM softmax scale s",
    "loss.margin": "AAM softmax additive angular margin m",
    # specaug
    "specaug.enabled": "SpecAugment on training batches",
    "specaug.freq_masks": "frequency masks per utterance",
    "specaug.freq_width": "largest frequency mask (mel bins)",
    "specaug.time_masks": "time masks per utterance",
    "specaug.time_width": "largest time mask (frames)",
    "specaug.max_time_fraction": "time masks cover at most this share of an utterance",
    # data
    "data.corpus_dir": "prepared corpus folder ('' = the built-in corpus, built on first use)",
    "data.corpus_utterances": "utterances of the built-in corpus",
    "data.corpus_seed": "seed of the built-in corpus's sentences and voices",
    "data.tokenizer": "speech tokens: kmeans (fitted on the train split) | external:<name>",
    "data.tokenizer_k": "k-means codebook size K",
    "data.tokenizer_frames": "50 Hz mel frames per k-means token: 1 = 50 Hz, 2 = 25 Hz tokens",
    "data.tokenizer_dir": "tokenizer folder ('' = <corpus>/tokenizers/kmeans<K>[x<frames>])",
    "data.tokenizer_context": "context decoder of a newly fitted k-means tokenizer: W tokens each "
    "side decode each token (0 = centroid lookup)",
    "data.tokenizer_conv_steps": "training steps of a new k-means tokenizer's conv decoder "
    "(a learned non-linear residual over the context decoder, jaxtts.data.token_decoder; "
    "0 = none; the shipped tokenizer's: 3000 steps, ~10 min on 2 cores, added with "
    "python -m jaxtts.data.tokenizers fit-conv)",
    "data.speakers": "train on these speakers only (comma list; '' = all; the symbol table "
    "still comes from every speaker)",
    "data.text_parts": "train on these text parts only: grammar and/or open (the natural "
    "corpus; '' = all)",
    "data.text_backend": "text symbols: espeak (IPA phonemes) | char",
    "data.prompt_seconds": "speech prompt length in training and synthesis (seconds)",
    "data.batch_size": "utterances per training batch (global, over all devices)",
    "data.eval_batch_size": "utterances per evaluation batch",
    "data.max_text_len": "longest text (symbols or characters) kept for training",
    "data.max_speech_len": "longest prompt + target speech (tokens) kept for training",
    "data.max_mel_len": "longest utterance (mel frames) kept for training",
    "data.bucket_step": "speech length buckets: step, 2*step, ... (few compiled shapes)",
    "data.text_bucket_step": "text length buckets (0 = bucket_step)",
    "data.limit_train": "use only the first N training utterances (0 = all)",
    "data.limit_dev": "use only the first N dev utterances (0 = all)",
    "data.min_crop_frames": "shortest random training crop (frames)",
    "data.max_crop_frames": "longest random training crop (frames)",
    "data.eval_batches": "dev batches per evaluation",
    "data.seed": "seed of shuffling and batching (batch s is a pure function of seed, s)",
    # train
    "train.steps": "optimizer steps (the schedule spans them; a resumed run continues)",
    "train.learning_rate": "peak learning rate",
    "train.warmup_steps": "linear warm-up steps",
    "train.final_lr_fraction": "cosine decay ends at this fraction of the peak",
    "train.optimizer": "optimizer: adamw",
    "train.b1": "Adam beta1",
    "train.b2": "Adam beta2",
    "train.eps": "Adam epsilon",
    "train.weight_decay": "decoupled weight decay",
    "train.grad_clip": "global gradient-norm clip (0 = off)",
    "train.microbatches": "gradient accumulation: microbatches per step",
    "train.trainable": "what trains: all | lora | prefix:<path>,... (the rest is frozen)",
    "train.init_from": "run folder whose parameters initialise matching paths ('' = none)",
    "train.init_skip": "comma list of parameter path prefixes that init_from leaves at their "
    "fresh init (e.g. speech_embed,base_head when the source used another speech tokenizer)",
    "train.seed": "seed of initialisation and dropout",
    "train.log_every": "steps between train-metric logs",
    "train.eval_every": "steps between dev evaluations (0 = only at the end)",
    "train.checkpoint_every": "steps between checkpoints (0 = only at the end)",
    "train.keep_checkpoints": "checkpoints kept on disk",
    "train.async_checkpoint": "write checkpoints in the background",
    "train.tensorboard": "write TensorBoard events to <workdir>/tb",
    # mesh
    "mesh.shape.data": "data-parallel mesh axis size (-1 = the remaining devices)",
    "mesh.shape.fsdp": "FSDP mesh axis size (shards parameters and optimizer state)",
    "mesh.shape.tensor": "tensor-parallel mesh axis size (heads, MLP, vocabulary)",
    "mesh.rules": "logical axis -> mesh axes (defaults: jaxtts/nn/axes.py DEFAULT_RULES)",
    # decode
    "decode.strategy": "decoding strategy: far | car:<c> (the README method table lists all)",
    "decode.temperature": "sampling temperature",
    "decode.top_k": "sample among the k most likely tokens (0 = all)",
    "decode.top_p": "nucleus sampling mass (1 = all)",
    "decode.greedy": "take the most likely token instead of sampling",
    "decode.max_seconds": "length cap per piece of text (seconds of audio)",
    # PALLE (configs/palle.py)
    "model.convnext_ff": "PALLE: pointwise MLP width of the text ConvNeXt V2 block",
    "model.conv_pos_kernel": "PALLE: kernel of the convolutional positional embedding",
    "model.conv_pos_groups": "PALLE: groups of that (depthwise-grouped) convolution",
    "model.text_layout": (
        "PALLE: text over the speech positions: pad (the paper: symbols then "
        "[PAD]) | stretch (symbol floor(t L / T) at position t)"
    ),
    "palle.stage": "PALLE stage trained: par (stage one) | refine (stage two) | nar (baseline)",
    "palle.refine_p": "stage two: masking probability beyond the visible first 30 %",
    "palle.par_run": "stage two: the stage-one run folder the 'palle' strategy starts from",
    # MDM (configs/mdm.py)
    "model.levels": "MDM: Q quantisation levels of the log-mel; codec: FSQ levels per scalar",
    "model.mel_lo": "MDM: lowest log-mel value of the quantiser's range (fitted when null)",
    "model.mel_hi": "MDM: highest log-mel value of the quantiser's range (fitted when null)",
    "model.enc_layers": "MDM text encoder: transformer layers; codec: (frame, token)-rate blocks",
    "model.enc_heads": "MDM text encoder: attention heads",
    "model.enc_ff": "MDM text encoder: SwiGLU width",
    "model.dur_channels": "MDM duration predictor: conv channels",
    "model.dec_layers": "MDM decoder: transformer layers; codec: (token-rate, frame-rate) blocks",
    "model.dec_width": "MDM decoder: width",
    "model.dec_heads": "MDM decoder: attention heads",
    "model.dec_ff": "MDM decoder: SwiGLU width",
    "model.mixtures": "MDM decoder: logistic mixture components per mel bin (K)",
    "model.speaker_dim": "MDM: speaker embedding size (filled from the speaker encoder; 0 = none)",
    "mdm.speaker_encoder": "MDM: speaker encoder run folder ('' = no speaker input)",
    "mdm.tau1": "MDM sampling: mixture-component temperature (tau_2 is decode.temperature)",
    "mdm.length_scale": "MDM synthesis: predicted durations x this",
    "mdm.train_crop": "MDM training: decoders on random windows of N frames (0 = whole utterance)",
    "mdm.gradtts_tau": "Grad-TTS baseline sampling: X_1 = mu + z / tau (the paper's 1.5)",
    "model.score_layers": "Grad-TTS baseline score decoder layers on the MDM encoder (0 = none)",
    "model.beta_min": "Grad-TTS noise schedule: beta at t = 0",
    "model.beta_max": "Grad-TTS noise schedule: beta at t = 1",
    "model.score_scale": (
        "Grad-TTS diffuses s * (the [-1, 1] mels): -1 = filled (mel_hi - mel_lo) / 2, the "
        "paper's log-mel units; 1 = runs saved before the key"
    ),
    # DCAR (configs/dcar.py)
    "policy.num_heads": "policy layer: attention heads",
    "policy.head_dim": "policy layer: width of one head",
    "policy.d_ff": "policy layer: SwiGLU width",
    "policy.features": "policy input: hidden (h_t, the paper) or confidence (+ each head's top "
    "probability and entropy)",
    "policy.pick": "decoding's default use of the policy: argmax (dcar) or sample (dcar:sample)",
    "policy.num_layers": "causal layers over the decisions: 1 (the paper) or 0 (a linear policy "
    "over [h_t ; features], no history)",
    "dcpo.backbone": "the frozen TTS LM run folder the policy decodes with (pretrained/car_small)",
    "dcpo.reward_asr": "the frozen CTC ASR run folder that scores rollouts (pretrained/ctc_asr)",
    "dcpo.guidance": "action-guidance set: chunk sizes in range (e.g. '(2,3)'); penalty outside",
    "dcpo.chase_then_exceed": "half of each group decoded with fixed sizes from the guidance set",
    "dcpo.gamma": "out-of-range penalty weight in the reward",
    "dcpo.reward_metric": "the reward's error rate: wer (the paper) or cer (finer; a weak "
    "reward ASR's per-sentence WER is too coarse to rank chunk sizes)",
    "dcpo.speed_weight": "reward + this x the rollout's mean chunk size (0 = the paper's "
    "reward, which is maximal at the WER-best size)",
    "dcpo.process_weight": "weight of the per-decision process reward a - lambda (n - a) next to "
    "the outcome advantage (0 = the paper)",
    "dcpo.process_tau": "a drafted token passes if among the base head's top tau (VADUSA's rule)",
    "dcpo.process_lambda": "process reward: cost of each kept draft that fails the check",
    "dcpo.group_size": "G: rollouts per prompt (even; advantages are normalised per group)",
    "dcpo.prompts_per_step": "P: prompts per step (P x G rollouts decoded in one batch)",
    "dcpo.min_seconds": "training utterances at least this long qualify as prompts",
    "dcpo.num_utterances": "qualifying utterances used (0 = all)",
    "dcpo.max_seconds": "generation cap per rollout in seconds",
    "dcpo.clip_eps": "GRPO ratio clip epsilon",
    "dcpo.kl_beta": "k3 KL weight to the frozen initial policy",
    "dcpo.kl_warmup_steps": "the KL weight rises linearly from 0 over these steps",
    "dcpo.prior_threshold": "> 0: the policy (and its KL reference) starts at the confidence "
    "threshold rule with this theta (needs policy.features=confidence); 0: uniform (the paper)",
    "dcpo.prior_gain": "the threshold start's logit gain: gain x sum_{k=2..c} (top_k - theta)",
    # SSD (configs/ssd.py)
    "ssd.target": "the frozen target LM run folder the draft is made from (pretrained/car_small)",
    "ssd.first": "the target's first layers kept in the draft (trained)",
    "ssd.last": "the target's last layers kept in the draft (frozen)",
    "ssd.corpus_utterances": "built-in corpus size (0 = the target's training corpus)",
    "ssd.distill": "w > 0: loss (1 - w) CE + w KL(target || draft) on the base head, the "
    "target scoring each batch (distillation; not in the paper; 0 = its next-token CE)",
    "ssd.from_target": "the draft is built from the target's layers at load: no parameter "
    "file (`python -m jaxtts.methods.ssd.task untrained`) or one of its trained parts only "
    "(`... ship`)",
    # TLDR (configs/tldr.py)
    "tldr.backbone": "the frozen TTS LM run folder TLDR adapts (e.g. pretrained/car_small)",
    "tldr.speaker_encoder": "speaker encoder run folder (the prompt's speaker embedding)",
    "tldr.corpus_utterances": "built-in corpus size (0 = the backbone's training corpus)",
    "tldr.batch_size": "utterances per training batch (0 = the backbone's data.batch_size)",
    "tldr.data_seed": "the training loader's shuffle and prompt-crop seed (-1 = the backbone's "
    "data.seed; another one gives a continued stage another epoch order)",
    "tldr.fixed_shapes": "pad every batch to the longest buckets: one compiled training step",
    "tldr.patch": "P: speech tokens per patch (one backbone forward per patch)",
    "tldr.compressor": "token-to-patch compressor: attention | mean (the ablation)",
    "tldr.window": "compressor: local causal attention window over tokens",
    "tldr.comp_heads": "compressor: attention heads",
    "tldr.comp_ff": "compressor: SwiGLU width",
    "tldr.ext_layers": "extractor: layers",
    "tldr.ext_width": "extractor: width",
    "tldr.ext_heads": "extractor: attention heads",
    "tldr.ext_ff": "extractor: SwiGLU width",
    "tldr.slots": "extractor: cross-attention slots per layer (S)",
    "tldr.ext_prev": "extractor: speech tokens before the patch its first input sees "
    "(0 = the paper; not in the paper)",
    "tldr.speaker": "condition the extractor on the prompt's speaker embedding",
    "tldr.speaker_proj": "width of the projected speaker embedding",
    "tldr.min_reference_seconds": "shortest speaker reference the speaker encoder reads",
    "tldr.token_rate_positions": "backbone RoPE positions advance P per patch (False: 1)",
    "tldr.text_patch": "Q: text symbols per backbone text slot (1 = the paper; Q > 1 "
    "compresses the phoneme prefix with a text compressor; not in the paper)",
    "tldr.text_slot_order": "Q > 1: the text compressor sees each symbol's place in its slot "
    "(position-in-slot table + order-aware query; False = order-free slots)",
    "tldr.dropout": "residual dropout rate in the compressors', text reader's and extractor's "
    "layers while training (0 = none; not in the paper)",
    "tldr.ext_text": "Q > 1 or text_layers set: width of the extractor's text memory (keys and "
    "values per text symbol, read by its first layer; counted in the KV; 0 = none; not in the "
    "paper)",
    "tldr.text_layers": "backbone layers (e.g. '0,5,9,10') whose speech slots see the text; "
    "in the others patches attend to patches only and the cache holds no text ('' = all; "
    "not in the paper)",
    "tldr.lora_rank": "LoRA rank on the backbone's projections (0 = no LoRA)",
    "tldr.lora_alpha": "LoRA alpha (scale alpha / rank)",
    "tldr.warm_start": "a TLDR run on the same backbone to start from ('' = fresh modules)",
    "tldr.warm_start_backbone": "the backbone run tldr.warm_start was trained on, when it is not "
    "tldr.backbone (same architecture, e.g. the previous car_deep; '' = tldr.backbone)",
    "tldr.teacher": "a TLDR run on the same backbone to distil from (tldr.distill > 0; not in "
    "the paper)",
    "tldr.distill": "w: the loss is (1 - w) CE + w KL(teacher || student) over the target "
    "cells (0 = no teacher)",
    "tldr.distill_kl": "forward: KL(teacher || student), mode-covering | reverse: KL(student || "
    "teacher), mode-seeking (not in the paper)",
    # the neural vocoder (configs/vocoder.py)
    "model.dim": "vocoder: channels of the ConvNeXt blocks",
    "model.mlp_dim": "vocoder: hidden width of each block's pointwise MLP",
    "model.layers": "vocoder: ConvNeXt blocks at the mel frame rate",
    "model.n_fft": "vocoder: FFT size of the inverse STFT the head predicts (a multiple of hop)",
    "model.hop": "vocoder: samples per mel frame (the inverse STFT's hop)",
    "model.mel": "vocoder: the log-mel analysis it inverts (jaxtts.data.audio.MelConfig)",
    "model.mel.sample_rate": "vocoder mels: audio sample rate (Hz)",
    "model.mel.n_fft": "vocoder mels: analysis FFT size",
    "model.mel.win_length": "vocoder mels: analysis window length",
    "model.mel.hop_length": "vocoder mels: samples per frame",
    "model.mel.n_mels": "vocoder mels: mel bins",
    "model.mel.fmin": "vocoder mels: lowest filter frequency (Hz)",
    "model.mel.fmax": "vocoder mels: highest filter frequency (Hz)",
    "model.mel.log_floor": "vocoder mels: floor before the log",
    "loss.mel": "vocoder: weight of the log-mel L1 reconstruction loss",
    "loss.stft": "vocoder: weight of the multi-resolution STFT loss",
    "loss.adv": "vocoder: weight of the hinge adversarial losses (generator and discriminators)",
    "loss.fm": "vocoder: weight of the discriminators' feature-matching L1",
    "loss.gan_start": "vocoder: the adversarial terms count from this step (0 = from the start)",
    "data.crop_frames": "vocoder: mel frames a training crop (the audio is (frames - 1) hop)",
    # the learned tokenizer (configs/codec.py)
    "model.name": "codec: the tokenizer's name (its token cache folder under <corpus>/tokens/)",
    "model.cond": "codec: decoder conditioned on a reference's voice (log-mel mean, log std)",
    "model.stride": "codec: mel frames a token (2: 50 Hz mels -> 25 Hz tokens)",
    "model.kernel": "codec: depthwise kernel of every ConvNeXt block (its reach: kernel // 2)",
    "model.mel_stats": "codec: per-bin log-mel {mean, std} (filled from the training data)",
    "model.num_phones": "codec: CTC head classes, blank included (filled from the corpus)",
    "loss.l1": "codec: weight of the standardised log-mel L1",
    "loss.l2": "codec: weight of the standardised log-mel squared error",
    "loss.ctc": "codec: weight of the CTC phoneme loss on the quantised latent (0: no head)",
    "data.vtlp": "codec: vocal-tract-length warp of training mels, factors in [1 - v, 1 + v]",
    "data.spec_mask": "codec: encoder-input masks (n_freq, max_freq, n_time, max_time); () off",
    "data.buckets": "codec: (frames, rows) length buckets; longer utterances cropped to the last",
    # eval during training
    "eval.num_samples": "dev sentences synthesised (and scored by the ASR) at each evaluation",
    "eval.vocoder": "vocoder of the training samples: griffin_lim",
    "eval.asr": "ASR for the samples' WER: domain | none",
}

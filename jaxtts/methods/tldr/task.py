"""Training TLDR on a frozen TTS LM (`config.tldr.backbone`, e.g. pretrained/car_small).

    python train.py --config configs/tldr.py:small --workdir runs/tldr

The backbone's data recipe, tokenizer and symbol table are used (its config.json's `data`
section; `tldr.corpus_utterances` may pick a smaller built-in corpus, `tldr.batch_size` another
batch size, `tldr.fixed_shapes` one padded shape for every batch). The run starts from
`<workdir>/tldr_init/params.msgpack`: the backbone's parameters, the speaker encoder's and the
tokenizer's centroid log-mel table (plus, with `tldr.warm_start`, the trained LoRA / compressor /
extractor of another TLDR run on the same backbone, e.g. P = 4 started from a P = 2 model),
written once; `train.trainable = 'lora|prefix:compressor,extractor,text_compressor,text_reader'`
trains the LoRA adapters, the compressor and the extractor (and the text compressor,
`tldr.text_patch` > 1, or the text reader, `tldr.ext_text` at Q = 1) and freezes everything
else (the trainer prints both counts). The loss is the token cross-entropy of the extractor
over the target cells (target tokens and the EOS; prompt and padding cells excluded), averaged
over them.

`tldr.distill` = w > 0 with `tldr.teacher` (not in the paper): the loss is (1 - w) CE + w
KL(teacher || student) over the same cells, the teacher a frozen TLDR run on the same backbone
(e.g. the text in every layer, distilled into a student with the text in 4 layers:
`configs/tldr.py:deep_kd_text_layers`). Dev metrics: `loss` is the CE alone (comparable with
runs without a teacher), `distill_kl` the KL.

Simplification (said in the README too): one learning rate for LoRA and the new modules (the
paper uses two).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import ml_collections as mlc
import optax
from flax import linen as nn

from jaxtts.checkpoint import write_params_file
from jaxtts.methods.lm import start_on_backbone
from jaxtts.methods.lm.diagnostics import text_information as lm_text_information
from jaxtts.methods.tldr.assemble import (
    TRAINABLE,
    check_keys,
    frozen_params,
    load_speaker,
    mel_table,
    teacher_part,
    tldr_config,
    warm_start_params,
)
from jaxtts.methods.tldr.engine import TLDREngine
from jaxtts.methods.tldr.model import TLDRConfig, TLDRModel
from jaxtts.run_folder import RunFolder, record_fingerprint
from jaxtts.train import loop
from jaxtts.train.losses import distill_loss
from jaxtts.train.prepare import prepare_data
from jaxtts.train.samples import sample_eval
from jaxtts.trees import tree_from_flat, tree_to_flat

log = logging.getLogger("jaxtts.tldr")


class TLDRTask:
    """`jaxtts.train.loop.Task`: the extractor's token cross-entropy on target cells (with
    `teacher` = (TLDRConfig, trained leaves) and `distill` = w > 0: (1 - w) CE + w KL to the
    teacher's distribution in training)."""

    def __init__(
        self,
        cfg: TLDRConfig,
        speaker_model=None,
        teacher=None,
        distill: float = 0.0,
        reverse: bool = False,
    ):
        self.cfg = cfg
        self.model = TLDRModel(cfg, speaker_model)
        self.distill = float(distill) if teacher is not None else 0.0
        self.reverse = bool(reverse)  # `tldr.distill_kl = reverse`: KL(student || teacher)
        self.teacher = None
        if teacher is not None:
            tcfg, leaves = teacher
            # the frozen leaves (backbone, speaker encoder) are the student's own; the
            # teacher's trained leaves are constants of the step
            self.teacher = (TLDRModel(tcfg, speaker_model), leaves)

    def _args(self, batch):
        return tuple(
            jnp.asarray(batch[k])
            for k in ("text", "text_len", "speech", "speech_len", "prompt_len")
        )

    def init(self, rng, batch):
        return self.model.init(rng, *self._args(batch))["params"]

    def loss(self, params, batch, rng, *, train: bool, step=None):
        rngs = {"dropout": rng} if train and self.cfg.dropout > 0 else {}  # `tldr.dropout`
        logits, targets, mask = self.model.apply({"params": params}, *self._args(batch), rngs=rngs)
        mask = mask & (jnp.asarray(batch["text_len"]) > 0)[:, None, None]  # padding rows
        # PAD targets (outside the mask) are outside the vocabulary: their CE would be NaN
        # outside jit (NaN * 0 in the sums below), so they become token 0 there
        targets = jnp.where(mask, targets, 0)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)  # [B, J, P]
        w = mask.astype(jnp.float32)
        n = jnp.sum(w)
        loss = jnp.sum(ce * w) / jnp.maximum(n, 1.0)
        acc = jnp.sum((jnp.argmax(logits, -1) == targets) * w) / jnp.maximum(n, 1.0)
        # CE by position inside the patch: the first token of a patch is the hardest
        w_i = w.sum(axis=(0, 1))  # [P]
        ce_i = (ce * w).sum(axis=(0, 1)) / jnp.maximum(w_i, 1.0)
        metrics = {"loss": loss, "accuracy": acc, "weight": n}
        metrics.update({f"ce_pos{i}": ce_i[i] for i in range(self.cfg.patch)})
        if self.teacher is not None:
            t_model, leaves = self.teacher
            t_params = jax.lax.stop_gradient(
                tree_from_flat({**tree_to_flat(nn.meta.unbox(params)), **leaves})
            )
            t_logits, _, _ = t_model.apply({"params": t_params}, *self._args(batch))
            b, v = logits.shape[0], logits.shape[-1]
            pair = (logits.reshape(b, -1, v), t_logits.reshape(b, -1, v), mask.reshape(b, -1))
            kl = distill_loss(*pair)[0] / jnp.maximum(n, 1.0)
            metrics["distill_kl"] = kl  # KL(teacher || student), logged in either direction
            if self.reverse:
                kl = distill_loss(*pair, reverse=True)[0] / jnp.maximum(n, 1.0)
                metrics["distill_rkl"] = kl
            if train:  # dev `loss` stays the CE
                metrics["ce"] = loss
                loss = (1.0 - self.distill) * loss + self.distill * kl
                metrics["loss"] = loss
        return loss, metrics


def text_information(engine, utts, batch_size: int = 16):
    """`jaxtts.methods.lm.diagnostics.text_information` for a TLDR engine: the extractor's
    teacher-forced CE per target token with the right vs another row's transcript (one
    'head': index 0)."""
    task = TLDRTask(engine.tldr.cfg, engine.tldr.speaker_encoder)

    def score(params, batch):
        logits, targets, mask = task.model.apply({"params": params}, *task._args(batch))
        mask = mask & (batch["text_len"] > 0)[:, None, None]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        return (jnp.sum(ce * mask)[None], jnp.sum(mask)[None], jnp.sum(mask, (1, 2)))

    return lm_text_information(
        engine, utts, batch_size=batch_size, score=score, params=engine.tldr_params
    )


def run_config(config, backbone: RunFolder) -> mlc.ConfigDict:
    """The config a TLDR run writes: the backbone's data / decode / model sections, the
    `tldr` section (backbone path resolved), train / mesh / eval from `config`."""
    check_keys(config.tldr)
    bcfg = backbone.read_config("lm").to_dict()
    out = dict(bcfg)
    out["data"] = dict(bcfg["data"], tokenizer_dir=str(backbone.tokenizer_dir.resolve()))
    n = int(config.tldr.get("corpus_utterances", 0))
    if n > 0:
        out["data"]["corpus_utterances"] = n
    b = int(config.tldr.get("batch_size", 0))
    if b > 0:  # e.g. 64 on a GPU, where a batch of 16 leaves the chip idle
        out["data"]["batch_size"] = b
    seed = int(config.tldr.get("data_seed", -1))
    if seed >= 0:  # a continued stage: another epoch order and other prompt crops
        out["data"]["seed"] = seed
    if bool(config.tldr.get("fixed_shapes", False)):  # one bucket: one compiled training step
        d = out["data"]
        d.update(bucket_step=d["max_speech_len"], text_bucket_step=d["max_text_len"])
    out.pop("loss", None)
    out["train"] = config.train.to_dict()
    out["mesh"] = config.mesh.to_dict()
    out["eval"] = dict(bcfg.get("eval", {}), **config.eval.to_dict())
    out["decode"] = dict(bcfg["decode"], strategy="tldr")
    out["task"] = "tldr"
    out["variant"] = config.get("variant", "")
    out["tldr"] = config.tldr.to_dict()
    trainable = str(config.train.get("trainable", "all"))
    out["train"]["trainable"] = TRAINABLE if trainable == "all" else trainable
    return mlc.ConfigDict(out)


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    backbone, run, base = start_on_backbone(config, "tldr", "backbone", workdir)
    rconf = run_config(config, backbone)
    spk_run, spk_model, spk_params = load_speaker(config.tldr)
    cfg = tldr_config(config.tldr, base.cfg, base.tokenizer, spk_model)
    init_dir = run.path / "tldr_init"
    if not (init_dir / "params.msgpack").is_file():
        init_dir.mkdir(exist_ok=True)
        table = mel_table(base.tokenizer) if spk_model is not None else None
        host = jax.device_get(base.params)
        init = frozen_params(host, spk_params, table)
        # `tldr.warm_start`: the trained leaves of another TLDR run on this backbone
        warm = warm_start_params(config.tldr, host, cfg.patch, cfg.text_patch)
        init = tree_from_flat({**tree_to_flat(init), **tree_to_flat(warm)})
        write_params_file(init_dir / "params.msgpack", init, None)
    rconf.train.init_from = str(init_dir)
    data = prepare_data(rconf, workdir, progress)
    run.write_data_info(
        {
            "corpus_dir": str(data.corpus_dir),
            "tokenizer": data.tokenizer.name,
            "frame_rate": data.tokenizer.frame_rate,
            "train_records": len(data.train.records),
            "max_target_text": int(max(r.text_ids.size for r in data.train.records)),
            "backbone": str(config.tldr.backbone),
            "backbone_fingerprint": record_fingerprint(run, "backbone", backbone.path, base.params),
            "speaker_encoder": str(config.tldr.speaker_encoder) if spk_run else None,
            "d_model": base.cfg.d_model,
            "num_layers": base.cfg.num_layers,
            "num_heads": base.cfg.num_heads,
        }
    )
    teacher = teacher_part(
        config.tldr, jax.device_get(base.params), base.cfg, base.tokenizer, spk_model
    )
    task = TLDRTask(
        cfg,
        spk_model,
        teacher,
        float(config.tldr.get("distill", 0.0) or 0.0),
        reverse=config.tldr.get("distill_kl", "forward") == "reverse",
    )
    dev = data.dev

    def eval_batches():
        return (dev.get_batch(s) for s in range(len(dev)))

    on_eval = None
    n_samples = int(rconf.eval.get("num_samples", 0))
    if n_samples > 0 and dev is not None:

        def make_engine(params):
            return TLDREngine.build(rconf, base, cfg, spk_model, params)

        on_eval = sample_eval(rconf, workdir, data, n_samples, make_engine)
    return loop.train_and_evaluate(
        rconf,
        workdir,
        task,
        data.train,
        eval_batches if dev is not None else None,
        mesh=mesh,
        progress=progress,
        on_eval=on_eval,
    )

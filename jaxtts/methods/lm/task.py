"""Training the TTS LM (FAR / CAR backbone) on a corpus: the Task and `train`.

    python train.py --config configs/car.py:small --workdir runs/car

Data preparation (corpus, tokenizer, tokens, text front-end, loaders) is the data layer's
`jaxtts.train.prepare.prepare_data`, shared with every token-LM family. The run folder is
self-contained for synthesis: `config.json`, `text_frontend/`, `tokenizer/` (a copy) and
`checkpoints/`.

Batches: `LMLoader` rows (`text`, `speech` = prompt + target tokens, `prompt_len`); the task
feeds `[BOS, speech...]` to the model and scores the multi-token heads with
`jaxtts.train.losses.mtp_loss` (prompt, padding and post-EOS targets excluded).
"""

from __future__ import annotations

import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from jaxtts.errors import ConfigError
from jaxtts.methods.lm.engine import LMEngine
from jaxtts.methods.lm.model import RETIRED_MODEL_KEYS, TTSLM, LMConfig, with_bos
from jaxtts.run_folder import RunFolder
from jaxtts.train import align as align_lib
from jaxtts.train import loop, losses
from jaxtts.train.align import AlignConfig
from jaxtts.train.prepare import fill_model_sizes, prepare_data
from jaxtts.train.samples import sample_eval

log = logging.getLogger("jaxtts.lm")


# ----------------------------------------------------------------------------- task


class LMTask:
    """`jaxtts.train.loop.Task` for the TTS LM: the multi-token loss, plus alignment learning
    (`jaxtts.train.align`) when `align.enabled`: the beta-binomial prior added to the
    speech->text attention logits of `align.layers` x `align.heads` (weight annealed by the
    train step; evaluation runs without it) and the CTC alignment loss on those logits.
    `input_noise` > 0: training inputs with that share of their target tokens replaced by
    random ones (`corrupt_inputs`; the targets stay clean), so that the past speech predicts
    less and the text more."""

    def __init__(
        self,
        cfg: LMConfig,
        alpha: float = 1.0,
        align: AlignConfig | None = None,
        distill: float = 0.0,
        input_noise: float = 0.0,
    ):
        self.cfg = cfg
        self.model = TTSLM(cfg)
        self.alpha = float(alpha)
        self.align = align or AlignConfig()
        self.distill = float(distill)
        self.input_noise = float(input_noise)

    def init(self, rng, batch):
        x, x_len = with_bos(batch["speech"], batch["speech_len"], self.cfg)
        return self.model.init(
            rng, jnp.asarray(batch["text"]), jnp.asarray(batch["text_len"]), x, x_len
        )["params"]

    def forward(self, params, batch, rng=None, *, train: bool = False, step=None):
        """(logits [B, T, K, V], align metrics + 'align/ctc' loss term, speech->text logits
        [B, L'N', T, X] of the aligned heads or None)."""
        cfg, a = self.cfg, self.align
        text, text_len = jnp.asarray(batch["text"]), jnp.asarray(batch["text_len"])
        x, x_len = with_bos(batch["speech"], batch["speech_len"], cfg)
        if train and self.input_noise > 0 and rng is not None:
            rng, noise_rng = jax.random.split(rng)
            x = corrupt_inputs(
                x, x_len, jnp.asarray(batch["prompt_len"]), self.input_noise, cfg, noise_rng
            )
        rngs = {"dropout": rng} if rng is not None else {}
        if not a.enabled:
            logits, _ = self.model.apply(
                {"params": params}, text, text_len, x, x_len, train=train, rngs=rngs
            )
            return logits, {}, None
        nx, nt = text.shape[1], x.shape[1]
        w = a.prior_weight(step)
        bias = None  # evaluation (step None) and prior-free configs build no bias at all
        if a.prior_scaling > 0 and step is not None:
            bias = align_lib.prior_bias(
                text_len,
                x_len,
                nx,
                nt,
                a.head_mask(cfg.num_heads),
                a.prior_scaling,
                w,
                a.prior_normalize,
            )  # [B,N,X+T,X+T]
        (logits, _), inter = self.model.apply(
            {"params": params},
            text,
            text_len,
            x,
            x_len,
            train=train,
            rngs=rngs,
            attn_bias=bias,
            bias_layers=a.layers,
            mutable=["intermediates"],
        )
        stack = inter["intermediates"]["stack"]
        blocks = [
            align_lib.speech_text_logits(stack[f"layer_{i}"]["attn"]["attn_logits"][0], nx, a.heads)
            for i in a.layers
        ]
        st = jnp.concatenate(blocks, axis=1)  # [B, L'N', T, X]
        b, g = st.shape[:2]
        flat = st.reshape((b * g,) + st.shape[2:])  # [B L'N', T, X]
        n_rep, m_rep = jnp.repeat(text_len, g), jnp.repeat(x_len, g)
        m_rep = jnp.where(m_rep >= n_rep, m_rep, 0)  # CTC needs frames >= text symbols
        ctc = align_lib.ctc_alignment_loss(flat, n_rep, m_rep, a.blank_logprob)
        metrics = {
            "align/ctc": ctc,
            "align/prior_weight": w,
            "align/diag_mass": align_lib.diagonal_mass(flat, n_rep, m_rep, a.band),
        }
        return logits, metrics, st

    def loss(self, params, batch, rng, *, train: bool, step=None):
        cfg = self.cfg
        logits, align_metrics, _ = self.forward(params, batch, rng, train=train, step=step)
        targets, valid = losses.mtp_targets(
            jnp.asarray(batch["speech"]),
            jnp.asarray(batch["speech_len"]),
            jnp.asarray(batch["prompt_len"]),
            cfg.eos,
            cfg.num_mtp_heads,
        )
        valid = valid & (jnp.asarray(batch["text_len"]) > 0)[:, None, None]  # padding rows
        loss, metrics = losses.mtp_loss(logits, targets, valid, self.alpha)
        if self.distill > 0 and "teacher_logits" in batch:
            # (1 - w) CE + w KL(teacher || base head) over the base head's valid targets, both
            # divided by N_1; evaluation batches carry no teacher and report the CE alone
            kl, ent = losses.distill_loss(
                logits[:, :, 0], jnp.asarray(batch["teacher_logits"]), valid[:, :, 0]
            )
            n1 = metrics["weight"]
            metrics["mtp_loss"] = loss
            metrics["distill/kl"] = kl / n1
            metrics["distill/teacher_entropy"] = ent / n1
            loss = (1.0 - self.distill) * loss + self.distill * kl / n1
        if align_metrics:
            # The CTC term is a mean over this batch's rows; the trainer weights a batch by its
            # target tokens, so with train.microbatches > 1 the accumulated CTC gradient is a
            # token-weighted mean of per-microbatch row means (exact with one microbatch).
            metrics["mtp_loss"] = loss
            loss = loss + self.align.ctc_weight * align_metrics["align/ctc"]
            metrics.update(align_metrics)
        return loss, metrics


def corrupt_inputs(
    x: jax.Array, x_len: jax.Array, prompt_len: jax.Array, rate: float, cfg: LMConfig, rng
) -> jax.Array:
    """`x` [B, T + 1] (`with_bos`: BOS, the prompt's P tokens, the target's, PAD) with each
    target token replaced by a uniform random speech token with probability `rate`; BOS, the
    prompt and the padding are kept."""
    pos = jnp.arange(x.shape[1])[None]  # [1, T + 1]
    target = (pos > prompt_len[:, None]) & (pos < x_len[:, None])  # [B, T + 1]
    k_flip, k_tok = jax.random.split(rng)
    flip = jax.random.bernoulli(k_flip, rate, x.shape) & target
    noise = jax.random.randint(k_tok, x.shape, 0, cfg.num_speech_tokens, jnp.int32)
    return jnp.where(flip, noise, x)


def lm_task_from_config(config, cfg: LMConfig) -> LMTask:
    """The task of a (filled) LM config: `loss.alpha`, `loss.distill` (the weight of the
    teacher term in [0, 1]; needs a teacher, see `train`) and the `loss.align_*` keys; an
    unknown `loss.*` key is a ConfigError naming it."""
    loss_cfg = dict(config.get("loss", {}) or {})
    unknown = sorted(
        k
        for k in loss_cfg
        if k not in ("alpha", "distill", "input_noise") and not k.startswith("align_")
    )
    if unknown:
        raise ConfigError(
            f"loss.{unknown[0]}: unknown key, expected 'alpha', 'distill', 'input_noise' or "
            "'align_*'"
        )
    distill = float(loss_cfg.get("distill", 0.0))
    if not 0.0 <= distill <= 1.0:
        raise ConfigError(f"loss.distill={distill}: expected a weight in [0, 1]")
    noise = float(loss_cfg.get("input_noise", 0.0))
    if not 0.0 <= noise < 1.0:
        raise ConfigError(f"loss.input_noise={noise}: expected a share in [0, 1)")
    align = AlignConfig.from_loss_config(loss_cfg, cfg.num_layers, cfg.num_heads)
    return LMTask(cfg, float(loss_cfg.get("alpha", 1.0)), align, distill, noise)


class TeacherSource:
    """A training source whose batches also carry `teacher_logits` [B, T+1, V] float32: a
    teacher's base-head logits at the positions the student is scored at (`loss.distill`).
    `teacher(batch) -> logits` runs on the host batch before it goes to the mesh; it is a pure
    function of the batch, so resumption stays deterministic."""

    def __init__(self, source, teacher):
        self.source, self.teacher = source, teacher

    def get_batch(self, step: int):
        batch = dict(self.source.get_batch(step))
        batch["teacher_logits"] = np.asarray(self.teacher(batch), np.float32)
        return batch


# ----------------------------------------------------------------------------- train


def _drop_retired_keys(run: RunFolder) -> None:
    """A run started before `model.max_len` / `model.param_dtype` were retired resumes: its
    config.json is rewritten without them (they were never read)."""
    if not run.config_path.is_file():
        return
    saved = run.read_config().to_dict()
    retired = sorted(RETIRED_MODEL_KEYS & set(saved.get("model", {})))
    if retired:
        for key in retired:
            del saved["model"][key]
        run.write_config(mlc.ConfigDict(saved))
        log.info("%s: dropped retired keys %s", run.config_path, retired)


def train(
    config,
    workdir: str,
    *,
    progress: bool = True,
    mesh=None,
    task_name: str = "lm",
    data_info: dict | None = None,
    teacher=None,
):
    """Train the LM; returns the trainer's `TrainResult` (see `jaxtts.train.loop`).
    `task_name`: the family whose run this is ('ssd' trains a draft LM this way);
    `data_info`: more entries for data.json (SSD: its target and the target's fingerprint);
    `teacher`: batch -> teacher logits [B, T+1, V] for `loss.distill` (`TeacherSource`)."""
    if config.get("task") != task_name:
        raise ConfigError(f"config.task={config.get('task')!r}: expected {task_name!r}")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    _drop_retired_keys(RunFolder(workdir))
    data = prepare_data(config, workdir, progress)
    config = fill_model_sizes(config, data)
    cfg = LMConfig.from_config(config.model)
    task = lm_task_from_config(config, cfg)
    if task.distill > 0 and teacher is None:
        raise ConfigError(
            f"loss.distill={task.distill}: distillation needs a teacher; only SSD's draft "
            "trains with one (ssd.distill)"
        )
    clash = sorted(
        set(data_info or {})
        & {"corpus_dir", "tokenizer", "frame_rate", "train_records", "dropped", "max_target_text"}
    )
    if clash:
        raise ValueError(f"data_info may not replace data.json's {clash[0]!r}")
    RunFolder(workdir).write_data_info(
        {
            "corpus_dir": str(data.corpus_dir),
            "tokenizer": data.tokenizer.name,
            "frame_rate": data.tokenizer.frame_rate,
            "train_records": len(data.train.records),
            "dropped": data.train.num_dropped,
            "max_target_text": int(max(r.text_ids.size for r in data.train.records)),
            **(data_info or {}),
        }
    )

    dev = data.dev

    def eval_batches():
        return (dev.get_batch(s) for s in range(len(dev)))

    hooks = []
    n_samples = int(config.get("eval", {}).get("num_samples", 0))
    if n_samples > 0 and dev is not None:
        hooks.append(
            sample_eval(
                config,
                workdir,
                data,
                n_samples,
                lambda params: LMEngine(config, params, data.frontend, data.tokenizer),
            )
        )
    if task.align.enabled and dev is not None:
        hooks.append(_attention_image(task, workdir, dev.get_batch(0)))

    def on_eval(step, state) -> dict[str, float]:
        out: dict[str, float] = {}
        for hook in hooks:
            out.update(hook(step, state) or {})
        return out

    return loop.train_and_evaluate(
        config,
        workdir,
        task,
        TeacherSource(data.train, teacher) if teacher is not None else data.train,
        eval_batches if dev is not None else None,
        mesh=mesh,
        progress=progress,
        on_eval=on_eval if hooks else None,
    )


def _attention_image(task: LMTask, workdir: str, batch):
    """on_eval hook: `samples/step_<k>/attention.png`, the aligned heads' mean speech->text
    attention (renormalised over the text) of the first dev row, without the prior."""
    forward = jax.jit(lambda p, b: task.forward(p, b)[2])
    row = {k: np.asarray(v)[:1] for k, v in batch.items()}

    def on_eval(step, state) -> dict[str, float]:
        st = forward(state.full_params, row)  # every process joins the sharded forward
        if jax.process_index() != 0:
            return {}
        st = np.asarray(jax.device_get(st))[0]  # [G, T, X]
        n, m = int(row["text_len"][0]), int(row["speech_len"][0]) + 1
        z = st[:, :m, :n]
        p = np.exp(z - z.max(-1, keepdims=True))
        p = (p / p.sum(-1, keepdims=True)).mean(0)  # [M, N]
        save_attention_png(
            p,
            RunFolder(workdir).samples_dir(step) / "attention.png",
            f"step {step}: aligned heads, speech -> text (prompt text + target; "
            f"prompt speech {int(row['prompt_len'][0])} tokens)",
        )
        return {}

    return on_eval


def save_attention_png(p: np.ndarray, path: Path, title: str) -> None:
    """p [M speech, N text] -> an image (text on the y axis, speech on the x axis)."""
    import matplotlib  # start-up: matplotlib 165 ms, only for plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up: pyplot 595 ms; after use('Agg')

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.imshow(p.T, origin="lower", aspect="auto", interpolation="nearest", cmap="viridis")
    ax.set_xlabel("speech position (BOS, prompt, target)")
    ax.set_ylabel("text position")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

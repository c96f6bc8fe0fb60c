r"""DCPO: the DCAR chunk-size policy trained with GRPO (`jaxtts.train.rl`) on ASR rewards.

    python train.py --config configs/dcar.py:small --workdir runs/dcar

The TTS backbone (`dcpo.backbone`, a run folder, default `pretrained/car_small`) and the CTC
reward ASR (`dcpo.reward_asr`, default `pretrained/ctc_asr`) are frozen and never trained; the
trainer's state holds the policy (trained) and a frozen copy of its initial parameters, the KL
reference (`train.trainable = prefix:policy`), so checkpoints and resumption work as for every
other run.

One step (`RolloutSource.get_batch`, on-policy: it reads the current policy from the state):
1. P prompts (training utterances >= `dcpo.min_seconds`, drawn by (seed, step)); each row's
   speaker prompt is another utterance of its speaker, as in evaluation. G rollouts each, in
   one batched `dcar:sample` decode of P*G rows.
2. **Chase-then-exceed** (`chase_groups`): the first G/2 rollouts of every group take a
   *fixed* chunk size drawn from the guidance set (`params["forced_chunk"]`), the other G/2
   sample from the policy; all G enter the advantage and the loss (the fixed ones' actions
   are scored under the policy, like the sampled ones).
3. **Reward** (`rewards`): tokens -> mel (tokenizer codebook) -> the JAX CTC ASR (greedy) ->
   per-row WER against the text, relative to the ASR's WER on the ground-truth audio:
       R = -(WER(gen) - WER(gt)) - gamma * mean_t dist(c_t, [min G, max G])
   where dist is how far a chosen size lies outside the guidance range. With
   `dcpo.reward_metric = "cer"` the per-row CER replaces the WER (both relative to the
   ground truth's), and `dcpo.speed_weight` > 0 adds speed_weight x the rollout's mean chunk
   size: two deviations from the paper, for a weak reward ASR whose per-sentence WER is too
   coarse to rank chunk sizes and a backbone whose WER-best size is the smallest one
   (benchmarks/diagnostics/dcar_reward_noise.py, docs/history/deep.md §deep-dcar).
4. Group-normalised advantages (`group_advantages`), one per rollout, broadcast over its
   decisions, then the batch: the recorded policy inputs [N, S, D (+ F)] (backbone hidden
   states at decision positions; with `policy.features = confidence` also the heads'
   confidence there), actions, behaviour log-probs, the decision mask (only positions where
   a size was chosen; inner-chunk positions never enter: `decision_mask`).
5. **Process reward** (`dcpo.process_weight` > 0; 0 in the paper): one reward per *decision*,
   from the frozen backbone itself, no ASR. A teacher-forced forward over each rollout's own
   tokens gives the base head's ranking at every position; token j of a chunk (j >= 2, drafted
   by head j) passes if it is among the base head's top `dcpo.process_tau` candidates there,
   VADUSA's verification rule (`vadusa:<tau>`). A decision that kept n tokens whose first a
   pass (the head-1 token always does: `decision_acceptance`) gets
       r_d = a - lambda * (n - a)                                  (lambda = dcpo.process_lambda)
   so a larger size pays where the heads agree with head 1 and costs where they do not: the
   optimal policy takes c + 1 where P(the next draft passes too) > lambda / (1 + lambda). The
   rewards are normalised over each group's decisions (`process_advantages`) and added,
   weighted, to the rollout's outcome advantage: A[n, d] = A_n + weight * A~_{n,d}. A deviation
   from the paper: its one ASR reward per rollout cannot tell the policy *where* a large chunk
   is safe (docs/history/deep.md §deep-dcar), which is what a dynamic policy needs.

Loss (`DCPOTask.loss`): the policy re-run over the recorded inputs, clipped ratio (eps), k3 KL
to the frozen reference with beta warmed up linearly from 0 over `dcpo.kl_warmup_steps`,
token-level mean over decisions (`grpo_loss`), Adam via the shared optimizer.

Deviation from the paper (said in README/RESULTS): its prompts are the first 3 s of >= 6 s
utterances continued by the model; the built-in corpus has few utterances that long (52 of
2040 >= 6 s), so targets are training sentences >= `min_seconds` with a zero-shot prompt of the
same speaker, exactly how the evaluation prompts.

Axis letters: P prompts, G group, N = P*G rollouts, S decisions, D backbone width.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_collections as mlc
import numpy as np

from jaxtts.data.audio import utterance_mels
from jaxtts.data.manifest import read_split
from jaxtts.decode.driver import PromptBatch, decode
from jaxtts.decode.sampling import SamplingConfig, row_keys
from jaxtts.errors import ConfigError
from jaxtts.eval.metrics import sentence_cer, wer_details
from jaxtts.methods.dcar.policy import ChunkPolicy, PolicyConfig, action_logp, threshold_prior
from jaxtts.methods.dcar.strategies import DCAR
from jaxtts.methods.lm import LMEngine
from jaxtts.methods.lm.model import with_bos
from jaxtts.run_folder import RunFolder, record_fingerprint
from jaxtts.synthesize import prompts_from_utterances
from jaxtts.train.prepare import ensure_builtin_corpus
from jaxtts.train.rl import group_advantages, grpo_loss, process_advantages

log = logging.getLogger("jaxtts.dcar")


# ----------------------------------------------------------------------------- pure pieces


def check_guidance(guidance, k: int) -> tuple[int, ...]:
    g = tuple(int(c) for c in guidance)
    if not g or any(c < 1 or c > k for c in g):
        raise ConfigError(f"dcpo.guidance={list(g)}: expected chunk sizes in 1..K={k}")
    return g


def out_of_range(actions: np.ndarray, mask: np.ndarray, guidance) -> np.ndarray:
    """Mean distance of the chosen chunk sizes outside [min(guidance), max(guidance)] per
    rollout: actions int [N, S], mask [N, S] -> float32 [N] (0 for a rollout without actions)."""
    lo, hi = min(guidance), max(guidance)
    a = np.asarray(actions, np.float32)
    m = np.asarray(mask, bool)
    dist = np.maximum(0.0, np.maximum(lo - a, a - hi)) * m
    return (dist.sum(1) / np.maximum(m.sum(1), 1)).astype(np.float32)


def rewards(wer_gen, wer_gt, dist, gamma: float, mean_chunk=None, speed: float = 0.0):
    """R = -(WER(gen) - WER(gt)) - gamma * dist [+ speed * mean chunk], float32 [N] (WERs as
    fractions). The speed term (`dcpo.speed_weight`, 0 in the paper) pays for tokens per step:
    without it the reward is maximal at the WER-best size, and on this backbone that is the
    smallest guidance size (benchmarks/diagnostics/dcar_reward_noise.py)."""
    r = -(np.asarray(wer_gen) - np.asarray(wer_gt)) - gamma * np.asarray(dist)
    if speed:
        r = r + speed * np.asarray(mean_chunk)
    return r.astype(np.float32)


def chase_groups(
    rng: np.random.Generator, prompts: int, group: int, guidance, chase: bool = True
) -> np.ndarray:
    """Forced chunk per rollout int32 [P*G] (0 = the policy decides): with `chase`, the first
    G//2 of every group take a fixed size drawn uniformly from `guidance`."""
    forced = np.zeros((prompts, group), np.int32)
    if chase:
        forced[:, : group // 2] = rng.choice(np.asarray(guidance), (prompts, group // 2))
    return forced.reshape(-1)


def decision_mask(steps: np.ndarray, slots: int) -> np.ndarray:
    """The decisions a rollout took: steps [N] -> bool [N, S] (decision j < steps)."""
    return np.arange(slots)[None] < np.asarray(steps)[:, None]


def decision_acceptance(
    ok: np.ndarray, actions: np.ndarray, steps: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """What each decision kept and how much of it the verification passed.

    ok bool [N, T]: generated token t passed the base head's check (`verification_ranks`);
    actions int [N, S] chunk sizes, steps [N] decisions taken, length [N] tokens kept (the
    tokens of the decision that ended a row stop at `length`).
    -> (kept, accepted) int32 [N, S]: decision d kept n = its tokens before `length`, and its
    first a <= n pass: the head-1 token always (it is what FAR would draw), then drafts up to
    the first that fails. 0 / 0 past a row's decisions."""
    ok, actions = np.asarray(ok, bool), np.asarray(actions)
    n_rows, slots = actions.shape
    kept = np.zeros((n_rows, slots), np.int32)
    acc = np.zeros((n_rows, slots), np.int32)
    for i in range(n_rows):
        start, end_row = 0, int(length[i])
        for d in range(int(steps[i])):
            c = int(actions[i, d])
            n = max(0, min(start + c, end_row) - start)
            a = 1 if n else 0
            while a < n and ok[i, start + a]:
                a += 1
            kept[i, d], acc[i, d] = n, a
            start += c
    return kept, acc


def process_rewards(kept: np.ndarray, accepted: np.ndarray, lam: float) -> np.ndarray:
    """r_d = a - lambda * (n - a) per decision (kept n, accepted a) -> float32 [N, S]."""
    a = np.asarray(accepted, np.float32)
    return (a - lam * (np.asarray(kept, np.float32) - a)).astype(np.float32)


def teacher_forced_speech(
    prompt: np.ndarray, prompt_len: np.ndarray, tokens: np.ndarray, length: np.ndarray, cfg
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's speech input [BOS, prompt..., generated...] int32 [N, 1 + P + T] and its
    length [N]: generated token t sits at slot 1 + prompt_len + t."""
    prompt, tokens = np.asarray(prompt), np.asarray(tokens)
    n, p = prompt.shape
    seq = np.zeros((n, p + tokens.shape[1]), np.int32)
    for i in range(n):
        pl, tl = int(prompt_len[i]), int(length[i])
        seq[i, :pl], seq[i, pl : pl + tl] = prompt[i, :pl], tokens[i, :tl]
    speech, speech_len = with_bos(seq, np.asarray(prompt_len) + np.asarray(length), cfg)
    return np.asarray(speech), np.asarray(speech_len)


def verification_ranks(model, params, text, text_len, speech, speech_len) -> jax.Array:
    """The base head's rank of each next speech token, teacher-forced: int32 [N, T - 1], entry
    j = how many candidates the base head at slot j scores strictly above speech[:, j + 1]
    (0 = its argmax; `vadusa:<tau>` accepts a draft with rank < tau)."""

    def run(m, text, text_len, speech, speech_len):
        h = m.hidden_embedded(text, text_len, m.embed_speech(speech), speech_len)  # [N, T, D]
        base = m.base_logits(h[:, :-1])  # [N, T-1, V]
        own = jnp.take_along_axis(base, speech[:, 1:, None], axis=-1)  # [N, T-1, 1]
        return jnp.sum(base > own, axis=-1).astype(jnp.int32)

    return model.apply({"params": params}, text, text_len, speech, speech_len, method=run)


# ----------------------------------------------------------------------------- the task


class DCPOTask:
    """Trainer task: params {'policy', 'ref'} ('ref' frozen by `train.trainable`)."""

    def __init__(self, pcfg: PolicyConfig, dcfg):
        self.pcfg = pcfg
        self.policy = ChunkPolicy(pcfg)
        self.clip_eps = float(dcfg.clip_eps)
        self.kl_beta = float(dcfg.kl_beta)
        self.kl_warmup = int(dcfg.kl_warmup_steps)
        self.prior = (float(dcfg.get("prior_threshold", 0.0)), float(dcfg.get("prior_gain", 20.0)))

    def init(self, rng, batch):
        x = jnp.zeros((1, 2, self.pcfg.d_in), jnp.float32)
        p = self.policy.init(rng, x, jnp.array([2]))["params"]
        if self.prior[0] > 0:  # start at the confidence-threshold rule (not the paper's)
            p = threshold_prior(p, self.pcfg, *self.prior)
        ref = jax.tree.map(lambda b: b, p)  # the same initial values, frozen by the trainer
        return {"policy": p, "ref": ref}

    def beta(self, step) -> jax.Array:
        if step is None or self.kl_warmup <= 0:
            return jnp.asarray(self.kl_beta, jnp.float32)
        return self.kl_beta * jnp.minimum(1.0, step.astype(jnp.float32) / self.kl_warmup)

    def loss(self, params, batch, rng, *, train: bool, step=None):
        inputs, steps, actions = batch["inputs"], batch["steps"], batch["actions"]
        logits = self.policy.apply({"params": params["policy"]}, inputs, steps)  # [N, S, A]
        logp = action_logp(logits, actions)  # [N, S]
        ref_logits = self.policy.apply({"params": params["ref"]}, inputs, steps)
        logp_ref = jax.lax.stop_gradient(action_logp(ref_logits, actions))
        mask = batch["mask"]
        beta = self.beta(step)
        loss, m = grpo_loss(
            logp,
            batch["logp_old"],
            batch["advantages"],
            mask,
            clip_eps=self.clip_eps,
            kl_beta=beta,
            logp_ref=logp_ref,
        )
        m = dict(m, kl_beta=beta)
        for k in ("reward", "wer", "cer", "mean_chunk", "out_of_range", "accepted", "process"):
            if k in batch:  # the last two: with a process reward
                m[k] = jnp.mean(batch[k])
        fixed = batch["forced"] > 0
        m["reward_policy"] = jnp.sum(jnp.where(fixed, 0.0, batch["reward"])) / jnp.maximum(
            jnp.sum(~fixed), 1
        )
        m["mean_chunk_policy"] = jnp.sum(jnp.where(fixed, 0.0, batch["mean_chunk"])) / (
            jnp.maximum(jnp.sum(~fixed), 1)
        )
        return loss, m


# ----------------------------------------------------------------------------- rollouts


@dataclasses.dataclass
class _Row:
    text: str
    ids: np.ndarray  # int32 prompt transcript + target text ids
    prompt: np.ndarray  # int32 prompt tokens
    wer_gt: float
    cer_gt: float = 0.0


REWARD_METRICS = ("wer", "cer")


def check_reward_metric(name) -> str:
    if str(name) not in REWARD_METRICS:
        raise ConfigError(f"dcpo.reward_metric={name!r}: expected one of {list(REWARD_METRICS)}")
    return str(name)


class RolloutSource:
    """On-policy batches of DCPO (see the module docstring)."""

    on_policy = True

    def __init__(self, config, engine, asr, rows: list[_Row], progress: bool = True):
        d = config.dcpo
        self.engine, self.asr, self.rows = engine, asr, rows
        self.prompts, self.group = int(d.prompts_per_step), int(d.group_size)
        if self.group < 2 or self.group % 2:
            raise ConfigError(f"dcpo.group_size={self.group}: expected an even number >= 2")
        k = engine.cfg.num_mtp_heads
        self.guidance = check_guidance(d.guidance, k)
        self.chase, self.gamma = bool(d.chase_then_exceed), float(d.gamma)
        self.metric = check_reward_metric(d.get("reward_metric", "wer"))
        self.speed = float(d.get("speed_weight", 0.0))
        if self.speed < 0:
            raise ConfigError(f"dcpo.speed_weight={self.speed}: expected >= 0")
        self.process_weight = float(d.get("process_weight", 0.0))
        self.process_tau = int(d.get("process_tau", 2))
        self.process_lambda = float(d.get("process_lambda", 2.0))
        if self.process_weight < 0 or self.process_tau < 1 or self.process_lambda < 0:
            raise ConfigError(
                f"dcpo.process_weight={self.process_weight}, process_tau={self.process_tau}, "
                f"process_lambda={self.process_lambda}: expected weight >= 0, tau >= 1, "
                "lambda >= 0"
            )
        self._ranks = jax.jit(verification_ranks, static_argnums=0)
        self.seed = int(config.train.seed)
        self.sampling = SamplingConfig.from_config(dict(engine.decode_config))  # the backbone's
        self.max_new = int(round(float(d.max_seconds) * engine.frame_rate))
        self.x = max(r.ids.size for r in rows)
        self.p = max(1, max(r.prompt.size for r in rows))
        self.models = {"target": engine.model, "policy": ChunkPolicy(config_policy(config, engine))}
        self.strategy = DCAR(sample=True, record=True)
        self.d_in = self.models["policy"].cfg.d_in  # h_t [; the heads' confidence]

    @property
    def n(self) -> int:
        return self.prompts * self.group

    def _empty(self) -> dict:
        n, s = self.n, self.max_new
        z = np.zeros((n,), np.float32)
        return {
            "inputs": np.zeros((n, s, self.d_in), np.float32),
            "steps": np.ones((n,), np.int32),
            "actions": np.ones((n, s), np.int32),
            "logp_old": np.zeros((n, s), np.float32),
            "mask": np.zeros((n, s), bool),
            "advantages": np.zeros((n, s), np.float32),
            "reward": z,
            "wer": z,
            "cer": z,
            "mean_chunk": z,
            "out_of_range": z,
            "accepted": z,
            "process": z,
            "forced": np.zeros((n,), np.int32),
        }

    def prompt_batch(self, pick) -> tuple[PromptBatch, list[_Row]]:
        """The P*G rows of prompts `pick` ([P] row indices), each repeated G times, padded to
        the source's fixed widths (one compile for every step)."""
        rows = [self.rows[i] for i in pick for _ in range(self.group)]
        text = np.zeros((len(rows), self.x), np.int32)
        prompt = np.zeros((len(rows), self.p), np.int32)
        for i, r in enumerate(rows):
            text[i, : r.ids.size], prompt[i, : r.prompt.size] = r.ids, r.prompt
        batch = PromptBatch(
            text,
            np.array([r.ids.size for r in rows], np.int32),
            prompt,
            np.array([r.prompt.size for r in rows], np.int32),
        )
        return batch, rows

    def rollout(self, policy_params, step: int, pick=None, forced=None) -> tuple[dict, dict]:
        """Decode P*G rows with the policy; -> (batch, host stats incl. texts). `pick` ([P]
        row indices) and `forced` ([P*G] fixed chunk sizes, 0 = the policy's) override the
        step's own draw (benchmarks/diagnostics/dcar_reward_noise.py)."""
        rng = np.random.default_rng([self.seed, step])
        drawn = rng.choice(len(self.rows), self.prompts, replace=False)
        pick = drawn if pick is None else np.asarray(pick)
        batch, rows = self.prompt_batch(pick)
        n = len(rows)
        drawn = chase_groups(rng, self.prompts, self.group, self.guidance, self.chase)
        forced = drawn if forced is None else np.asarray(forced, np.int32)
        keys = row_keys(self.seed * 1_000_003 + step, range(n))
        params = {
            "target": self.engine.params,
            "policy": policy_params,
            "forced_chunk": jnp.asarray(forced),
        }
        out = jax.device_get(
            decode(
                self.strategy,
                self.models,
                params,
                batch,
                keys,
                max_new_tokens=self.max_new,
                sampling=self.sampling,
            )
        )
        length, steps = np.asarray(out.length), np.maximum(np.asarray(out.steps), 1)
        mels = [
            self.engine.units_to_mel(np.asarray(out.tokens[i, : length[i]]))
            if length[i]
            else np.zeros((1, self.engine.mel_cfg.n_mels), np.float32)
            for i in range(n)
        ]
        hyps = self.asr.transcribe_mels(mels)
        texts = [r.text for r in rows]
        det = wer_details(texts, hyps)
        wer_gen = np.array([d.errors / max(d.num_ref_words, 1) for d in det], np.float32)
        cer_gen = sentence_cer(texts, hyps).astype(np.float32)
        if self.metric == "cer":
            err_gen, err_gt = cer_gen, np.array([r.cer_gt for r in rows], np.float32)
        else:
            err_gen, err_gt = wer_gen, np.array([r.wer_gt for r in rows], np.float32)
        mask = decision_mask(out.steps, self.max_new)
        actions = np.asarray(out.stats["actions"])
        dist = out_of_range(actions, mask, self.guidance)
        mean_chunk = (length / steps).astype(np.float32)
        reward = rewards(err_gen, err_gt, dist, self.gamma, mean_chunk, self.speed)
        adv = np.asarray(group_advantages(reward.reshape(self.prompts, self.group))).reshape(-1)
        adv = np.where(mask, adv[:, None], 0.0).astype(np.float32)  # [N, S]
        accepted = process = np.zeros((n,), np.float32)
        if self.process_weight > 0:
            kept, acc = self.acceptance(batch, out, actions)
            pr = process_rewards(kept, acc, self.process_lambda)  # [N, S]
            shape = (self.prompts, self.group, -1)
            padv = np.asarray(process_advantages(pr.reshape(shape), mask.reshape(shape)))
            adv = adv + self.process_weight * padv.reshape(n, -1)
            accepted = (acc.sum(1) / np.maximum(kept.sum(1), 1)).astype(np.float32)
            process = (np.where(mask, pr, 0).sum(1) / np.maximum(mask.sum(1), 1)).astype(np.float32)
        b = {
            "inputs": np.asarray(out.stats["policy_inputs"], np.float32),
            "steps": steps,
            "actions": np.maximum(actions, 1),
            "logp_old": np.asarray(out.stats["logp"]),
            "mask": mask,
            "advantages": adv,
            "reward": reward,
            "wer": wer_gen,
            "cer": cer_gen,
            "mean_chunk": mean_chunk,
            "out_of_range": dist,
            "accepted": accepted,
            "process": process,
            "forced": forced,
        }
        return b, {
            "hyps": hyps,
            "texts": texts,
            "hit_max": np.asarray(out.hit_max),
        }

    def acceptance(self, batch: PromptBatch, out, actions) -> tuple[np.ndarray, np.ndarray]:
        """(kept, accepted) int32 [N, S] of every decision of the rollouts `out`: the base
        head's teacher-forced check of each drafted token (rank < `dcpo.process_tau`)."""
        length = np.asarray(out.length)
        speech, speech_len = teacher_forced_speech(
            batch.prompt, batch.prompt_len, out.tokens, length, self.engine.cfg
        )
        ranks = np.asarray(
            self._ranks(
                self.engine.model,
                self.engine.params,
                jnp.asarray(batch.text),
                jnp.asarray(batch.text_len),
                jnp.asarray(speech),
                jnp.asarray(speech_len),
            )
        )  # [N, 1 + P + T - 1]
        # generated token t sits at slot 1 + prompt_len + t; the base head at the slot before
        cols = np.asarray(batch.prompt_len)[:, None] + np.arange(out.tokens.shape[1])[None]
        ok = np.take_along_axis(ranks, cols, axis=1) < self.process_tau  # [N, T]
        return decision_acceptance(ok, actions, np.asarray(out.steps), length)

    def get_batch(self, step: int, state) -> dict:
        if state is None:  # shapes for the trainer's init
            return self._empty()
        t0 = time.perf_counter()
        # to the host: the policy may be sharded over the mesh, the frozen backbone is not
        batch, _ = self.rollout(jax.device_get(state.params["policy"]), step)
        log.debug("rollouts of step %d in %.1fs", step, time.perf_counter() - t0)
        return batch


# ----------------------------------------------------------------------------- set-up


def config_policy(config, engine) -> PolicyConfig:
    p = dict(config.policy)
    p.pop("pick", None)  # how decoding uses the policy (the engine's default strategy)
    known = ("num_heads", "head_dim", "d_ff", "features", "num_layers")
    unknown = sorted(set(p) - set(known))
    if unknown:
        raise ConfigError(f"policy.{unknown[0]}: unknown key, expected {', '.join(known)}, pick")
    return PolicyConfig(d_model=engine.cfg.d_model, num_actions=engine.cfg.num_mtp_heads, **p)


def load_backbone(path: str):
    run = RunFolder(path)
    if not run.config_path.is_file():
        raise ConfigError(
            f"dcpo.backbone={path}: no run folder there (config.json missing); "
            "expected e.g. pretrained/car_small"
        )
    return LMEngine.from_run(run)


def load_reward_asr(path: str, batch_size: int = 64):
    from jaxtts.methods.ctc_asr import CTCASR  # start-up: 220+ ms; DCAR decoding loads dcpo

    if not RunFolder(path).config_path.is_file():
        raise ConfigError(
            f"dcpo.reward_asr={path}: no run folder there; train it with "
            "`python train.py --config configs/ctc_asr.py:small --workdir "
            "runs/ctc_asr` or use pretrained/ctc_asr"
        )
    return CTCASR.load(path, batch_size=batch_size)


def training_rows(config, engine, asr, progress: bool = True) -> list[_Row]:
    """Training utterances >= min_seconds with their prompt and the ASR's ground-truth WER."""
    d = config.dcpo
    corpus = ensure_builtin_corpus(config.data, progress)  # built on first use
    pool = read_split(corpus, "train")
    utts = [u for u in pool if u.duration >= float(d.min_seconds)]
    utts = utts[: int(d.num_utterances)] if int(d.num_utterances) > 0 else utts
    if len(utts) < int(d.prompts_per_step):
        raise ConfigError(
            f"dcpo.min_seconds={d.min_seconds}: only {len(utts)} training "
            f"utterances in {corpus} are that long, expected >= "
            f"dcpo.prompts_per_step={d.prompts_per_step}"
        )
    prompts = prompts_from_utterances(pool, utts)
    mels = utterance_mels(utts, progress=progress, desc="log-mel (ground truth)")
    texts = [u.text for u in utts]
    hyps = asr.transcribe_mels(mels)
    gt, gt_cer = wer_details(texts, hyps), sentence_cer(texts, hyps)
    rows = []
    for u, p, g, c in zip(utts, prompts, gt, gt_cer, strict=True):
        p_ids, p_units = engine.encode_prompt(p)
        ids = np.concatenate([p_ids, engine.frontend.encode(u.text)]).astype(np.int32)
        rows.append(
            _Row(
                u.text,
                ids,
                np.asarray(p_units, np.int32),
                g.errors / max(g.num_ref_words, 1),
                float(c),
            )
        )
    return rows


def train(config, workdir: str, *, progress: bool = True, mesh=None):
    from jaxtts.train import loop  # start-up: 260 ms; DCAR decoding loads dcpo

    config = mlc.ConfigDict(config.to_dict())
    if config.get("task") != "dcar":
        raise ConfigError(f"config.task={config.get('task')!r}: expected 'dcar'")
    t0 = time.perf_counter()
    engine = load_backbone(str(config.dcpo.backbone))
    asr = load_reward_asr(str(config.dcpo.reward_asr))
    rows = training_rows(config, engine, asr, progress)
    log.info(
        "%d DCPO prompts (>= %.1f s), mean ground-truth reward-ASR WER %.1f %% (%.0fs)",
        len(rows),
        float(config.dcpo.min_seconds),
        100 * float(np.mean([r.wer_gt for r in rows])),
        time.perf_counter() - t0,
    )
    source = RolloutSource(config, engine, asr, rows, progress)
    task = DCPOTask(config_policy(config, engine), config.dcpo)
    _write_backbone_info(workdir, config, engine)
    return loop.train_and_evaluate(
        config, workdir, task, source, None, mesh=mesh, progress=progress
    )


def _write_backbone_info(workdir: str, config, engine) -> None:
    Path(workdir).mkdir(parents=True, exist_ok=True)
    RunFolder(workdir).write_data_info(
        {
            "backbone": str(config.dcpo.backbone),
            "backbone_fingerprint": record_fingerprint(
                RunFolder(workdir), "backbone", config.dcpo.backbone, engine.params
            ),
            "d_model": engine.cfg.d_model,
            "num_mtp_heads": engine.cfg.num_mtp_heads,
            "num_heads": engine.cfg.num_heads,
            "tokenizer": engine.tokenizer.name,
            "reward_asr": str(config.dcpo.reward_asr),
        }
    )


__all__ = [
    "DCPOTask",
    "RolloutSource",
    "chase_groups",
    "check_reward_metric",
    "decision_acceptance",
    "decision_mask",
    "out_of_range",
    "process_rewards",
    "rewards",
    "train",
]

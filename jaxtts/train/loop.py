"""The generic sharded trainer every model family uses.

A model family plugs in as a `Task` (init + loss); the data as a `BatchSource` whose batch for
step s is a pure function of (seed, s), or an `OnPolicySource` whose batch also reads the
current train state (RL rollouts, e.g. DCPO: `jaxtts.train.rl`). The trainer owns everything
else once: the mesh, sharded init (`jax.eval_shape` -> logical shardings -> jitted init with
`out_shardings`), trained vs frozen parameters (`jaxtts.train.state`: `train.trainable`,
`train.init_from`), the jitted train step with donated state and gradient accumulation
(`lax.scan` over microbatches), and around a short loop body the hooks: logging (console
progress bar, TensorBoard, `metrics.jsonl`), evaluation, orbax checkpoints, resumption
(including after SIGKILL) and preemption (SIGTERM/SIGINT -> final checkpoint).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from tqdm.auto import tqdm

from jaxtts import checkpoint as ckpt_lib
from jaxtts.errors import CheckpointError, ConfigError
from jaxtts.run_folder import RunFolder
from jaxtts.train import mesh as mesh_lib
from jaxtts.train import optim
from jaxtts.train.state import TrainState, overlay, trainable_predicate
from jaxtts.trees import merge_trees, split_tree

log = logging.getLogger("jaxtts.train")

Batch = Mapping[str, np.ndarray]
Metrics = dict[str, jax.Array]


class Task(Protocol):
    """What a model family provides to the trainer."""

    def init(self, rng: jax.Array, batch: Batch) -> Any:
        """Parameters (leaves may be `nn.LogicallyPartitioned` boxes carrying logical axes)."""

    def loss(
        self,
        params: Any,
        batch: Batch,
        rng: jax.Array,
        *,
        train: bool,
        step: jax.Array | None = None,
    ) -> tuple[jax.Array, Metrics]:
        """Scalar loss and metrics. `step` (int32 scalar, the step being taken; None in
        evaluation) lets a loss follow a schedule (the LM's annealed alignment prior).
        `metrics['weight']` (e.g. the number of target tokens), if present, weights this batch
        when microbatches are accumulated and metrics averaged, so accumulated gradients equal
        full-batch gradients for token-mean losses."""


class BatchSource(Protocol):
    def get_batch(self, step: int) -> Batch:
        """Host-local batch for `step`; a pure function of (seed, step, host)."""


class OnPolicySource(Protocol):
    """A source whose batches depend on the current model (`on_policy = True`): the trainer
    calls `get_batch(step, state)` after step-1 finished, with the state to sample from."""

    on_policy: bool

    def get_batch(self, step: int, state: TrainState) -> Batch: ...


def _trainable_fn(task: Task) -> Callable[[Any], Any] | None:
    return getattr(task, "trainable", None)


def _weighted_metrics(metrics: Metrics) -> tuple[jax.Array, Metrics]:
    weight = jnp.asarray(metrics.get("weight", 1.0), jnp.float32)
    return weight, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items() if k != "weight"}


class Trainer:
    """Holds the mesh, the optimizer and the jitted init/train/eval functions of one task."""

    def __init__(self, task: Task, config, mesh: Mesh | None = None, rules=None):
        self.task = task
        self.config = config
        self.mesh = mesh if mesh is not None else mesh_lib.mesh_from_config(config)
        self.rules = rules if rules is not None else mesh_lib.rules_from_config(config)
        self.microbatches = int(config.train.get("microbatches", 1))
        if self.microbatches < 1:
            raise ConfigError(f"train.microbatches={self.microbatches}: expected >= 1")
        self.tx = optim.make_optimizer(config.train, _trainable_fn(task))
        self.trainable_spec = str(config.train.get("trainable", "all") or "all")
        self.trainable = trainable_predicate(self.trainable_spec)
        self.init_from = str(config.train.get("init_from", "") or "")
        skip = str(config.train.get("init_skip", "") or "").strip()
        # paths left at their fresh init (e.g. a vocabulary-sized embedding and heads when the
        # source run used another speech tokenizer): the `prefix:` form of train.trainable
        self.init_skip = trainable_predicate(f"prefix:{skip}") if skip else None
        self._init_source = None  # parameters of train.init_from, loaded once
        self.batch_sharding = mesh_lib.batch_sharding(self.mesh)
        self.state_shardings = None
        self._train_step = None
        self._eval_step = None

    # -- init --------------------------------------------------------------------------------
    def init_source(self) -> Any:
        """The parameters of `train.init_from` (a run folder), or None."""
        if not self.init_from:
            return None
        if self._init_source is None:
            run = RunFolder(self.init_from)
            if not run.path.is_dir():
                raise ConfigError(f"train.init_from={self.init_from}: no such run folder")
            self._init_source = run.saved_params()
            # host copies: the init jit places them on the mesh itself
            self._init_source = jax.tree.map(
                lambda x: np.asarray(jax.device_get(x)), self._init_source
            )
        return self._init_source

    def _boxed_state(self, rng, batch, source=None):
        params = self.task.init(rng, batch)
        if source is not None:
            params, n = overlay(params, source, self.init_from, self.init_skip)
            if n == 0:
                raise ConfigError(
                    f"train.init_from={self.init_from}: no parameter path in common with this model"
                )
        frozen = {}
        if self.trainable_spec != "all":
            params, frozen = split_tree(params, self.trainable)
            if not jax.tree.leaves(params):
                raise ConfigError(
                    f"train.trainable={self.trainable_spec!r}: selects no parameter of this model"
                )
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=self.tx.init(params),
            frozen=frozen,
        )

    def abstract_state(self, rng: jax.Array, batch: Batch) -> TrainState:
        """ShapeDtypeStructs of the (unboxed) state, carrying the mesh shardings."""
        boxed = jax.eval_shape(self._boxed_state, rng, batch, self.init_source())
        self.state_shardings = mesh_lib.logical_shardings(boxed, self.mesh, self.rules)
        abstract = nn.unbox(boxed)
        return jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            abstract,
            self.state_shardings,
        )

    def init_state(self, rng: jax.Array, batch: Batch) -> TrainState:
        """Sharded init: every array is created directly in its final sharding."""
        self.abstract_state(rng, batch)
        batch = {k: jnp.asarray(v) for k, v in batch.items()}
        init = jax.jit(
            lambda r, b, src: nn.unbox(self._boxed_state(r, b, src)),
            out_shardings=self.state_shardings,
        )
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
            return init(rng, batch, self.init_source())

    @property
    def full_param_shardings(self):
        return merge_trees(self.state_shardings.params, self.state_shardings.frozen)

    # -- steps -------------------------------------------------------------------------------
    def _grads(self, params, frozen, batch, rng, step=None):
        """(weighted loss sum, weight sum, grads sum, weighted metric sums) over microbatches;
        gradients of the trained `params` only, the loss sees them merged with `frozen`."""

        def one(mb, r):
            def f(p):
                full = merge_trees(p, frozen) if jax.tree.leaves(frozen) else p
                loss, metrics = self.task.loss(full, mb, r, train=True, step=step)
                weight, metrics = _weighted_metrics(metrics)
                return loss * weight, (weight, metrics)

            (lw, (w, m)), g = jax.value_and_grad(f, has_aux=True)(params)
            return lw, w, g, jax.tree.map(lambda x: x * w, m)

        m = self.microbatches
        if m == 1:
            return one(batch, rng)

        def split(x):  # [B, ...] -> [M, B/M, ...], each microbatch spread over all data shards
            x = x.reshape((x.shape[0] // m, m) + x.shape[1:])
            return jnp.swapaxes(x, 0, 1)

        micro = jax.tree.map(split, batch)
        rngs = jax.random.split(rng, m)
        first = jax.tree.map(lambda x: x[0], micro)
        zeros = jax.tree.map(
            lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(one, first, rngs[0])
        )

        def body(acc, xs):
            mb, r = xs
            out = one(mb, r)
            return jax.tree.map(jnp.add, acc, out), None

        acc, _ = jax.lax.scan(body, zeros, (micro, rngs))
        return acc

    def _train_step_fn(self, state: TrainState, batch, rng):
        rng = jax.random.fold_in(rng, state.step)
        lw, w, grads, msum = self._grads(state.params, state.frozen, batch, rng, state.step)
        grads = jax.tree.map(lambda g: g / w, grads)
        updates, opt_state = self.tx.update(grads, state.opt_state, state.params)
        params = jax.tree.map(jnp.add, state.params, updates)
        metrics = {k: v / w for k, v in msum.items()}
        metrics["loss"] = lw / w
        metrics["grad_norm"] = _global_norm(grads)
        metrics["param_norm"] = _global_norm(state.params)
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

    def loss_and_grads(self, state: TrainState, batch: Batch, rng: jax.Array):
        """(loss, grads) of one step as the train step computes them (for equivalence tests)."""

        def fn(params, frozen, b, r):
            lw, w, g, _ = self._grads(
                params, frozen, b, jax.random.fold_in(r, state.step), state.step
            )
            return lw / w, jax.tree.map(lambda x: x / w, g)

        sh = self.state_shardings
        f = jax.jit(
            fn,
            in_shardings=(sh.params, sh.frozen, self.batch_sharding, None),
            out_shardings=(None, sh.params),
        )
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
            return f(state.params, state.frozen, self.put_batch(batch), rng)

    def train_step(self, state: TrainState, batch: Mapping[str, jax.Array], rng: jax.Array):
        if self._train_step is None:
            self._train_step = jax.jit(
                self._train_step_fn,
                in_shardings=(self.state_shardings, self.batch_sharding, None),
                out_shardings=(self.state_shardings, None),
                donate_argnums=(0,),
            )
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
            return self._train_step(state, batch, rng)

    def eval_step(self, params, batch: Mapping[str, jax.Array]) -> tuple[jax.Array, Metrics]:
        """Weighted metric sums of a batch; `params` is the full tree (`state.full_params`)."""
        if self._eval_step is None:

            def fn(p, b):
                loss, metrics = self.task.loss(p, b, jax.random.key(0), train=False)
                weight, metrics = _weighted_metrics(metrics)
                metrics["loss"] = loss
                return weight, jax.tree.map(lambda x: x * weight, metrics)

            self._eval_step = jax.jit(
                fn, in_shardings=(self.full_param_shardings, self.batch_sharding)
            )
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
            return self._eval_step(params, batch)

    def evaluate(self, params, batches: Iterable[Batch]) -> dict[str, float]:
        total_w, sums = 0.0, {}
        for b in batches:
            w, m = self.eval_step(params, self.put_batch(b))
            total_w += float(w)
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        return {k: v / max(total_w, 1e-9) for k, v in sums.items()}

    def put_batch(self, batch: Batch) -> dict[str, jax.Array]:
        mesh_lib.check_batch_size(
            len(next(iter(batch.values()))) * jax.process_count(), self.mesh, self.microbatches
        )
        return mesh_lib.shard_batch(batch, self.mesh)


def _global_norm(tree) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


# ------------------------------------------------------------------------------------------
# The training loop.


class _Preemption:
    """SIGTERM/SIGINT set a flag; the loop then writes a final checkpoint and exits."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:  # second signal: give up immediately
            raise KeyboardInterrupt
        log.warning("signal %d: writing a final checkpoint, then stopping", signum)
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


class MetricWriter:
    """Console + TensorBoard + metrics.jsonl; only process 0 writes."""

    def __init__(self, workdir: str, enabled: bool = True, tensorboard: bool = True):
        self.enabled = enabled and jax.process_index() == 0
        self._t0 = time.perf_counter()  # elapsed_s in metrics.jsonl: since this invocation
        self._tb = None
        self._jsonl = None
        if self.enabled:
            os.makedirs(workdir, exist_ok=True)
            self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a")
            if tensorboard:
                try:
                    from tensorboardX import SummaryWriter  # optional: not in GPU bundle

                    self._tb = SummaryWriter(os.path.join(workdir, "tb"))
                except ImportError:  # pragma: no cover - optional
                    log.warning("tensorboardX not installed: no TensorBoard event files")

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        if not self.enabled:
            return
        row = {
            "step": int(step),
            "elapsed_s": round(time.perf_counter() - self._t0, 2),
            **{k: float(v) for k, v in scalars.items()},
        }
        self._jsonl.write(json.dumps(row) + "\n")
        self._jsonl.flush()
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, float(v), int(step))

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()


def _config_json(config) -> dict:
    if not hasattr(config, "to_json_best_effort"):
        return {}
    return json.loads(config.to_json_best_effort())


def check_config_matches(workdir: str, config, sections: tuple[str, ...] = ("model",)) -> None:
    """A resumed run must use the model config it was started with; name the first difference."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        saved = json.load(f)
    current = _config_json(config)
    for section in sections:
        a, b = saved.get(section, {}), current.get(section, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                raise CheckpointError(
                    f"{path}: {section}.{key}={a.get(key)!r} in the run's config but "
                    f"{b.get(key)!r} now; use a new --workdir or the original config"
                )


@dataclasses.dataclass
class TrainResult:
    state: TrainState
    history: list[dict]
    preempted: bool


class Hook(Protocol):
    """Runs after every train step (`done` = steps completed); `close` at the end."""

    def after_step(self, done: int, state: TrainState, metrics: Metrics) -> None: ...

    def close(self) -> None: ...


class LogHook:
    """Train metrics every `every` steps -> writer, history, progress bar."""

    def __init__(self, writer: MetricWriter, history: list, every: int, steps: int, pbar=None):
        self.writer, self.history, self.every, self.steps, self.pbar = (
            writer,
            history,
            max(1, every),
            steps,
            pbar,
        )
        self._t0, self._seen = time.perf_counter(), 0

    def after_step(self, done, state, metrics):
        self._seen += 1
        if done % self.every == 0 or done == self.steps:
            scalars = {f"train/{k}": float(v) for k, v in metrics.items()}
            scalars["train/steps_per_s"] = self._seen / max(time.perf_counter() - self._t0, 1e-9)
            self._t0, self._seen = time.perf_counter(), 0
            self.writer.write(done, scalars)
            self.history.append({"step": done, **scalars})
            if self.pbar is not None:
                self.pbar.set_postfix(loss=f"{scalars['train/loss']:.3f}")
        if self.pbar is not None:
            self.pbar.update(1)

    def close(self):
        if self.pbar is not None:
            self.pbar.close()
        self.writer.close()


class EvalHook:
    """Dev metrics (+ the task's `on_eval` extras, e.g. samples and their WER) every `every`
    steps and at the last step."""

    def __init__(
        self,
        trainer: Trainer,
        batches,
        every: int,
        steps: int,
        writer: MetricWriter,
        history: list,
        on_eval=None,
    ):
        self.trainer, self.batches, self.every, self.steps = trainer, batches, every, steps
        self.writer, self.history, self.on_eval = writer, history, on_eval

    def after_step(self, done, state, metrics):
        if not self.every or (done % self.every and done != self.steps):
            return
        dev = {
            f"dev/{k}": v
            for k, v in self.trainer.evaluate(state.full_params, self.batches()).items()
        }
        if self.on_eval is not None:
            dev.update(self.on_eval(done, state) or {})
        self.writer.write(done, dev)
        self.history.append({"step": done, **dev})
        log.info("step %d %s", done, " ".join(f"{k}={v:.4f}" for k, v in dev.items()))

    def close(self):
        pass


class CheckpointHook:
    """An orbax checkpoint every `every` steps (async); `save(done, state, force)` for the
    final / preemption checkpoint."""

    def __init__(self, ckpt: ckpt_lib.Checkpointer, every: int, meta: dict):
        self.ckpt, self.every, self.meta = ckpt, every, meta
        self.last_saved: int | None = None

    def save(self, done: int, state: TrainState, force: bool = False) -> None:
        if done == self.last_saved:  # e.g. a preemption right after a periodic save
            return
        self.ckpt.save(
            done, state.params, state.opt_state, self.meta, force=force, frozen=state.frozen
        )
        self.last_saved = done

    def after_step(self, done, state, metrics):
        if self.every and done % self.every == 0:
            self.save(done, state)

    def close(self):
        self.ckpt.close()


class _Feeder:
    """Batches on the mesh. Supervised sources are prefetched (the host builds batch s+1 while
    the device runs step s); on-policy sources are asked after the previous step, with the
    state."""

    def __init__(self, trainer: Trainer, source, steps: int):
        self.trainer, self.source, self.steps = trainer, source, steps
        self.on_policy = bool(getattr(source, "on_policy", False))
        self._pending: tuple[int, Any] | None = None

    def get(self, step: int, state: TrainState):
        if self.on_policy:
            return self.trainer.put_batch(self.source.get_batch(step, state))
        if self._pending is None or self._pending[0] != step:
            self.prefetch(step)
        return self._pending[1]

    def prefetch(self, step: int) -> None:
        if not self.on_policy and step < self.steps:
            self._pending = (step, self.trainer.put_batch(self.source.get_batch(step)))


def train_and_evaluate(
    config,
    workdir: str,
    task: Task,
    train_source: BatchSource | OnPolicySource,
    eval_batches: Callable[[], Iterable[Batch]] | None = None,
    *,
    mesh: Mesh | None = None,
    progress: bool = True,
    on_eval: Callable[[int, TrainState], Mapping[str, float] | None] | None = None,
    stop_at: int | None = None,
) -> TrainResult:
    """Train `task` for `config.train.steps`, resuming from `workdir` if it holds checkpoints.

    `stop_at` ends this invocation after that step with a checkpoint, as a preemption would
    (the schedule still spans `config.train.steps`; a later call continues).

    Writes `config.json`, `metrics.jsonl`, TensorBoard events and `checkpoints/` in `workdir`
    (`jaxtts.run_folder.RunFolder` owns the layout).
    """
    tcfg = config.train
    run = RunFolder(workdir)
    os.makedirs(workdir, exist_ok=True)
    check_config_matches(workdir, config)
    if jax.process_index() == 0:
        run.write_config(config)

    trainer = Trainer(task, config, mesh=mesh)
    rng = jax.random.key(int(tcfg.get("seed", 0)))
    init_rng, step_rng = jax.random.split(rng)
    feeder = _Feeder(trainer, train_source, int(tcfg.steps))
    first = train_source.get_batch(0, None) if feeder.on_policy else train_source.get_batch(0)
    state = trainer.init_state(init_rng, first)
    n_train, n_frozen = (
        sum(int(np.prod(x.shape)) for x in jax.tree.leaves(t)) for t in (state.params, state.frozen)
    )
    log.info("parameters: %s trained, %s frozen", f"{n_train:,}", f"{n_frozen:,}")

    ckpt = run.checkpointer(
        read_only=False,
        max_to_keep=int(tcfg.get("keep_checkpoints", 3)),
        async_save=bool(tcfg.get("async_checkpoint", True)),
    )
    start = 0
    if ckpt.latest_step() is not None:
        params, opt_state, meta = ckpt.restore(state.params, state.opt_state)
        frozen = ckpt.restore_frozen(state.frozen) if jax.tree.leaves(state.frozen) else {}
        start = int(meta["step"])
        state = TrainState(
            step=jnp.asarray(start, jnp.int32), params=params, opt_state=opt_state, frozen=frozen
        )
        state = jax.device_put(state, trainer.state_shardings)
        log.info("resumed from %s at step %d", ckpt.directory, start)

    steps = int(tcfg.steps)
    history: list[dict] = []
    writer = MetricWriter(workdir, tensorboard=bool(tcfg.get("tensorboard", True)))
    pbar = None
    if progress and jax.process_index() == 0 and start < steps:
        pbar = tqdm(total=steps, initial=start, desc="train", dynamic_ncols=True)
    checkpoints = CheckpointHook(
        ckpt, int(tcfg.get("checkpoint_every", 0)), {"config": _config_json(config)}
    )
    hooks: list[Hook] = [LogHook(writer, history, int(tcfg.get("log_every", 10)), steps, pbar)]
    if eval_batches is not None:
        hooks.append(
            EvalHook(
                trainer,
                eval_batches,
                int(tcfg.get("eval_every", 0)),
                steps,
                writer,
                history,
                on_eval,
            )
        )
    hooks.append(checkpoints)

    preempted = False
    try:
        with _Preemption() as preempt:
            for step in range(start, steps):
                batch = feeder.get(step, state)
                state, metrics = trainer.train_step(state, batch, step_rng)
                feeder.prefetch(step + 1)
                done = step + 1
                for hook in hooks:
                    hook.after_step(done, state, metrics)
                if preempt.requested or (stop_at is not None and done >= stop_at):
                    preempted = True
                    checkpoints.save(done, state, force=True)
                    break
        if not preempted and start < steps and ckpt.latest_step() != steps:
            checkpoints.save(steps, state, force=True)
    finally:
        for hook in hooks:
            hook.close()
    return TrainResult(state=state, history=history, preempted=preempted)

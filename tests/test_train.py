"""Trainer, mesh and checkpoint tests on 8 simulated CPU devices (toy task; the TTS LM has its
own sharding test in test_sharding_lm.py)."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from toy_task import ToySource, ToyTask
from toy_train_main import config as toy_config

from jaxtts import checkpoint as ckpt_lib
from jaxtts.errors import CheckpointError, ConfigError
from jaxtts.train import loop
from jaxtts.train import mesh as mesh_lib

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

MESHES = [
    {"data": 8, "fsdp": 1, "tensor": 1},
    {"data": 1, "fsdp": 8, "tensor": 1},
    {"data": 2, "fsdp": 2, "tensor": 2},
]


def _cfg(mesh, microbatches=1):
    cfg = toy_config(mesh=mesh)
    cfg.train.microbatches = microbatches
    return cfg


def _host(tree):
    return jax.tree.map(lambda x: np.asarray(jax.device_get(x)), tree)


def test_eight_devices_visible():
    assert jax.device_count() == 8


@pytest.fixture(scope="module")
def reference():
    cfg = _cfg({"data": 1}, 1)
    tr = loop.Trainer(ToyTask(), cfg, mesh=mesh_lib.make_mesh({"data": 1}, jax.devices()[:1]))
    batch = ToySource().get_batch(0)
    state = tr.init_state(jax.random.key(0), batch)
    loss, grads = tr.loss_and_grads(state, batch, jax.random.key(1))
    return float(loss), _host(grads), _host(state.params)


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: "x".join(map(str, s.values())))
def test_sharded_loss_and_grads_match_single_device(reference, shape):
    ref_loss, ref_grads, ref_params = reference
    tr = loop.Trainer(ToyTask(), _cfg(shape))
    batch = ToySource().get_batch(0)
    state = tr.init_state(jax.random.key(0), batch)
    # Same init regardless of mesh.
    jax.tree.map(np.testing.assert_array_equal, _host(state.params), ref_params)
    loss, grads = tr.loss_and_grads(state, batch, jax.random.key(1))
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), _host(grads), ref_grads
    )


def test_microbatch_accumulation_equals_full_batch(reference):
    ref_loss, ref_grads, _ = reference
    tr = loop.Trainer(ToyTask(), _cfg({"data": 2, "fsdp": 2, "tensor": 2}, microbatches=2))
    batch = ToySource().get_batch(0)
    state = tr.init_state(jax.random.key(0), batch)
    loss, grads = tr.loss_and_grads(state, batch, jax.random.key(1))
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-6)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), _host(grads), ref_grads
    )


def test_param_shardings_follow_rules():
    tr = loop.Trainer(ToyTask(), _cfg({"data": 2, "fsdp": 2, "tensor": 2}))
    state = tr.init_state(jax.random.key(0), ToySource().get_batch(0))
    P = jax.sharding.PartitionSpec
    assert state.params["w1"].sharding.spec == P("fsdp", "tensor")  # (embed, mlp)
    assert state.params["w2"].sharding.spec == P("tensor", "fsdp")  # (mlp, embed)
    assert state.params["b1"].sharding.spec == P("tensor")
    mu = state.opt_state[1][0].mu  # adamw moments are sharded like the params (FSDP)
    assert mu["w1"].sharding.spec == P("fsdp", "tensor")
    # w1 [16, 32] over fsdp=2 x tensor=2: each device holds an [8, 16] block.
    assert state.params["w1"].addressable_shards[0].data.shape == (8, 16)


def test_mesh_errors_name_sizes():
    with pytest.raises(ConfigError, match="needs 6 devices, but 8"):
        mesh_lib.make_mesh({"data": 3, "fsdp": 2, "tensor": 1})
    with pytest.raises(ConfigError, match="multiply to 3"):
        mesh_lib.make_mesh({"data": -1, "fsdp": 3})
    mesh = mesh_lib.make_mesh({"data": 4, "fsdp": 2})
    with pytest.raises(ConfigError, match="batch_size=12 is not divisible by data\\*fsdp=8"):
        mesh_lib.check_batch_size(12, mesh)
    with pytest.raises(ConfigError, match="unknown axes"):
        mesh_lib.make_mesh({"model": 8})


def test_checkpoint_restores_onto_other_mesh(tmp_path):
    src = ToySource()
    tr8 = loop.Trainer(ToyTask(), _cfg({"data": 1, "fsdp": 8, "tensor": 1}))
    state = tr8.init_state(jax.random.key(0), src.get_batch(0))
    for s in range(3):
        state, _ = tr8.train_step(state, tr8.put_batch(src.get_batch(s)), jax.random.key(1))
    saved = _host(state)
    ck = ckpt_lib.Checkpointer(tmp_path / "ck", async_save=True)
    ck.save(3, state.params, state.opt_state, {"note": "x"})
    ck.close()

    for shape, devices in [({"data": 2}, jax.devices()[:2]), ({"data": 4, "tensor": 2}, None)]:
        mesh = mesh_lib.make_mesh(shape, devices)
        tr = loop.Trainer(ToyTask(), _cfg(shape), mesh=mesh)
        fresh = tr.init_state(jax.random.key(42), src.get_batch(0))
        ck = ckpt_lib.Checkpointer(tmp_path / "ck", read_only=True)
        params, opt_state, meta = ck.restore(fresh.params, fresh.opt_state)
        assert meta["step"] == 3 and meta["note"] == "x"
        assert ckpt_lib.tree_equal(params, saved.params)
        assert ckpt_lib.tree_equal(opt_state, saved.opt_state)
        assert params["w1"].sharding.mesh.shape == mesh.shape
        p_only, _ = ck.restore_params(fresh.params)
        assert ckpt_lib.tree_equal(p_only, saved.params)


def test_checkpoint_shape_mismatch_is_one_line(tmp_path):
    tr = loop.Trainer(ToyTask(), _cfg({"data": -1}))
    state = tr.init_state(jax.random.key(0), ToySource().get_batch(0))
    ck = ckpt_lib.Checkpointer(tmp_path / "ck", async_save=False)
    ck.save(1, state.params, state.opt_state, {})
    ck.close()

    class Wider(ToyTask):
        def __init__(self):
            super().__init__()
            self.model = self.model.clone(d_hidden=64)

    tr2 = loop.Trainer(Wider(), _cfg({"data": -1}))
    other = tr2.init_state(jax.random.key(0), ToySource().get_batch(0))
    msg = r"'b1' has shape \(32,\) in the checkpoint but \(64,\)"
    with pytest.raises(CheckpointError, match=msg):
        ckpt_lib.Checkpointer(tmp_path / "ck", read_only=True).restore_params(other.params)
    with pytest.raises(CheckpointError, match="no checkpoint found"):
        ckpt_lib.Checkpointer(tmp_path / "empty").restore_params(other.params)


def _final_losses(workdir):
    rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    wd = str(tmp_path_factory.mktemp("full"))
    res = loop.train_and_evaluate(toy_config(), wd, ToyTask(), ToySource(), progress=False)
    return wd, res


def test_resume_continues_with_same_losses(tmp_path, uninterrupted):
    full_wd, full = uninterrupted
    wd = str(tmp_path / "run")
    first = loop.train_and_evaluate(
        toy_config(), wd, ToyTask(), ToySource(), progress=False, stop_at=11
    )
    assert first.preempted and first.history[-1]["step"] == 11
    res = loop.train_and_evaluate(toy_config(), wd, ToyTask(), ToySource(), progress=False)
    assert res.history[0]["step"] == 12
    ref = _final_losses(full_wd)
    got = _final_losses(wd)
    for step in range(12, 31):
        assert got[step] == pytest.approx(ref[step], rel=1e-6), step
    assert ckpt_lib.tree_equal(res.state.params, full.state.params)


def test_resume_rejects_changed_model_config(tmp_path):
    wd = str(tmp_path / "run")
    cfg = toy_config(steps=2)
    cfg.model = {"width": 8}
    loop.train_and_evaluate(cfg, wd, ToyTask(), ToySource(), progress=False)
    cfg.model.width = 16
    with pytest.raises(CheckpointError, match="model.width=8 in the run's config but 16 now"):
        loop.train_and_evaluate(cfg, wd, ToyTask(), ToySource(), progress=False)


def _spawn(wd, sleep):
    env = dict(os.environ, TOY_SLEEP=str(sleep), PYTHONUNBUFFERED="1")
    main = os.path.join(os.path.dirname(__file__), "toy_train_main.py")
    return subprocess.Popen(
        [sys.executable, main, wd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_checkpoint(wd, min_step, proc, timeout=120):
    ck = os.path.join(wd, "checkpoints")
    t0 = time.time()
    while time.time() - t0 < timeout:
        steps = [int(d) for d in os.listdir(ck) if d.isdigit()] if os.path.isdir(ck) else []
        if steps and max(steps) >= min_step:
            return
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    raise AssertionError("no checkpoint appeared")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_killed_run_resumes_to_same_final_loss(tmp_path, uninterrupted, sig):
    full_wd, _ = uninterrupted
    wd = str(tmp_path / "run")
    proc = _spawn(wd, sleep=0.15)
    _wait_for_checkpoint(wd, 6, proc)
    proc.send_signal(sig)
    out = proc.communicate(timeout=120)[0]
    if sig == signal.SIGTERM:  # graceful: final checkpoint at the step it stopped
        assert proc.returncode == 0, out
        ck = ckpt_lib.Checkpointer(os.path.join(wd, "checkpoints"), read_only=True)
        assert ck.latest_step() % 3 != 0 or ck.latest_step() >= 6
    else:
        assert proc.returncode == -signal.SIGKILL
    proc = _spawn(wd, sleep=0.0)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    final = float(out.strip().splitlines()[-1].split()[1])
    assert final == pytest.approx(_final_losses(full_wd)[30], rel=1e-6)


def test_run_folder_read_config_names_the_file_and_the_task(tmp_path):
    from jaxtts.run_folder import RunFolder

    with pytest.raises(
        CheckpointError,
        match=r"run/config.json: not found; the folder must be "
        r"a training run of task 'lm' \(python train.py "
        r"--config configs/car.py:small",
    ):
        RunFolder(tmp_path / "run").read_config("lm")
    (tmp_path / "config.json").write_text(json.dumps({"task": "ctc_asr", "model": {"d": 1}}))
    with pytest.raises(CheckpointError, match=r"config.json: task='ctc_asr', expected 'lm'"):
        RunFolder(tmp_path).read_config("lm")
    assert RunFolder(tmp_path).read_config("ctc_asr").to_dict() == {
        "task": "ctc_asr",
        "model": {"d": 1},
    }
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json: not valid JSON"):
        RunFolder(tmp_path).read_config()


def test_frozen_tree_init_from_and_resume(tmp_path):
    """A run initialised from another run (`train.init_from`) that trains only `w2`
    (`train.trainable`): w1/b1 are frozen bit for bit, live in the `frozen` tree (sharded,
    checkpointed), the optimizer state covers w2 only, and a resumed run matches."""
    src_wd = str(tmp_path / "src")
    src = loop.train_and_evaluate(
        toy_config(steps=4), src_wd, ToyTask(), ToySource(), progress=False
    )
    base = _host(src.state.params)

    def cfg(steps):
        c = toy_config(steps=steps, checkpoint_every=2, mesh={"data": 2, "fsdp": 2, "tensor": 2})
        c.train.trainable = "prefix:w2"
        c.train.init_from = src_wd
        return c

    full = loop.train_and_evaluate(
        cfg(6), str(tmp_path / "ft"), ToyTask(), ToySource(seed=1), progress=False
    )
    st = _host(full.state)
    assert set(st.params) == {"w2"} and set(st.frozen) == {"w1", "b1"}
    np.testing.assert_array_equal(st.frozen["w1"], base["w1"])
    np.testing.assert_array_equal(st.frozen["b1"], base["b1"])
    assert not np.array_equal(st.params["w2"], base["w2"])  # trained from the source's w2
    assert tuple(full.state.frozen["w1"].sharding.spec) == ("fsdp", "tensor")  # embed, mlp
    n_opt = sum(x.size for x in jax.tree.leaves(st.opt_state))
    assert 2 * st.params["w2"].size <= n_opt <= 2 * st.params["w2"].size + 4  # mu, nu + counters
    # interrupted at 4 and resumed: same final parameters
    wd = str(tmp_path / "ft2")
    loop.train_and_evaluate(cfg(6), wd, ToyTask(), ToySource(seed=1), progress=False, stop_at=4)
    res = loop.train_and_evaluate(cfg(6), wd, ToyTask(), ToySource(seed=1), progress=False)
    assert ckpt_lib.tree_equal(res.state.params, full.state.params)
    assert ckpt_lib.tree_equal(res.state.frozen, full.state.frozen)
    # inference restores the merged tree
    ck = ckpt_lib.Checkpointer(os.path.join(wd, "checkpoints"), read_only=True)
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), base)
    merged, _ = ck.restore_inference_params(like)
    assert sorted(merged) == ["b1", "w1", "w2"]
    np.testing.assert_array_equal(merged["w1"], base["w1"])
    np.testing.assert_array_equal(merged["w2"], st.params["w2"])


def test_init_skip_leaves_the_named_paths_at_their_fresh_init():
    """`train.init_skip` (another speech tokenizer's run as the source): the skipped paths keep
    the new model's values, even where the shapes differ; every other path is the source's."""
    from jaxtts.train.state import overlay, trainable_predicate

    new = {"speech_embed": np.zeros((4, 2)), "head": {"out": np.zeros((2, 4))}, "w": np.zeros(3)}
    src = {"speech_embed": np.ones((5, 2)), "head": {"out": np.ones((2, 5))}, "w": np.ones(3)}
    skip = trainable_predicate("prefix:speech_embed,head/out")
    out, n = overlay(new, src, "src", skip)
    assert n == 1
    np.testing.assert_array_equal(out["w"], np.ones(3))
    np.testing.assert_array_equal(out["speech_embed"], np.zeros((4, 2)))
    np.testing.assert_array_equal(out["head"]["out"], np.zeros((2, 4)))
    with pytest.raises(
        ConfigError, match=r"train.init_from=src: 'speech_embed' has shape \(5, 2\)"
    ):
        overlay(new, src, "src")


def test_trainable_and_init_from_errors(tmp_path):
    c = toy_config(steps=2)
    c.train.trainable = "prefix:nothing"
    with pytest.raises(ConfigError, match=r"train.trainable='prefix:nothing': selects no"):
        loop.train_and_evaluate(c, str(tmp_path / "a"), ToyTask(), ToySource(), progress=False)
    c.train.trainable = "some"
    with pytest.raises(ConfigError, match=r"train.trainable='some': expected 'all', 'lora'"):
        loop.train_and_evaluate(c, str(tmp_path / "b"), ToyTask(), ToySource(), progress=False)
    c.train.trainable = "all"
    c.train.init_from = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"train.init_from=.*missing: no such run folder"):
        loop.train_and_evaluate(c, str(tmp_path / "c"), ToyTask(), ToySource(), progress=False)


class OnPolicy(ToySource):
    """Batch s depends on the current parameters: targets = the model's own prediction + 1."""

    on_policy = True

    def __init__(self):
        super().__init__()
        self.seen_steps = []

    def get_batch(self, step, state):
        batch = super().get_batch(step)
        if state is not None:  # the trainer's first call (shapes for init) has no state yet
            self.seen_steps.append(int(state.step))
            pred = ToyTask().model.apply({"params": state.full_params}, batch["x"])[:, 0]
            batch["y"] = np.asarray(pred) + 1.0
        return batch


def test_on_policy_source_reads_the_current_state(tmp_path):
    src = OnPolicy()
    res = loop.train_and_evaluate(
        toy_config(steps=5), str(tmp_path / "rl"), ToyTask(), src, progress=False
    )
    assert src.seen_steps == [0, 1, 2, 3, 4]  # asked after each step, with that state
    losses = [h["train/loss"] for h in res.history if "train/loss" in h]
    # the target always sits 1 above the current prediction: MSE is exactly 1 at every step
    np.testing.assert_allclose(losses, 1.0, rtol=1e-5)

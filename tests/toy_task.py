"""A small regression task with logically partitioned params, for trainer/mesh tests."""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from jaxtts.nn import axes


class ToyMLP(nn.Module):
    d_in: int = 16
    d_hidden: int = 32

    @nn.compact
    def __call__(self, x):  # [B, D] -> [B, 1]
        w1 = self.param(
            "w1",
            nn.with_logical_partitioning(nn.initializers.lecun_normal(), (axes.EMBED, axes.MLP)),
            (self.d_in, self.d_hidden),
        )
        b1 = self.param(
            "b1", nn.with_logical_partitioning(nn.initializers.zeros, (axes.MLP,)), (self.d_hidden,)
        )
        w2 = self.param(
            "w2",
            nn.with_logical_partitioning(nn.initializers.lecun_normal(), (axes.MLP, axes.EMBED)),
            (self.d_hidden, 8),
        )
        h = jnp.tanh(jnp.einsum("BD,DF->BF", x, w1) + b1)
        return jnp.einsum("BF,FD->BD", h, w2).sum(-1, keepdims=True)


class ToyTask:
    def __init__(self):
        self.model = ToyMLP()

    def init(self, rng, batch):
        return self.model.init(rng, jnp.asarray(batch["x"]))["params"]

    def loss(self, params, batch, rng, *, train, step=None):
        pred = self.model.apply({"params": params}, batch["x"])[:, 0]
        mask = batch["mask"].astype(jnp.float32)
        err = jnp.square(pred - batch["y"]) * mask
        n = jnp.maximum(mask.sum(), 1.0)
        return err.sum() / n, {"weight": n, "mae": (jnp.abs(pred - batch["y"]) * mask).sum() / n}


class ToySource:
    """Batch s is a pure function of (seed, s)."""

    def __init__(self, batch_size=16, seed=0):
        self.batch_size, self.seed = batch_size, seed
        rng = np.random.default_rng(1234)
        self.w = rng.normal(size=(16,)).astype(np.float32)

    def get_batch(self, step):
        rng = np.random.default_rng([self.seed, step])
        x = rng.normal(size=(self.batch_size, 16)).astype(np.float32)
        y = np.sin(x @ self.w).astype(np.float32)
        mask = (rng.uniform(size=self.batch_size) > 0.2).astype(np.int32)
        return {"x": x, "y": y, "mask": mask}

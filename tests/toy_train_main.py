"""Subprocess entry for the SIGKILL/SIGTERM tests: trains the toy task in a workdir."""

import os
import sys
import time

import ml_collections as mlc
from toy_task import ToySource, ToyTask

from jaxtts.train import loop


class SlowSource(ToySource):
    def get_batch(self, step):
        time.sleep(float(os.environ.get("TOY_SLEEP", "0")))
        return super().get_batch(step)


def config(steps=30, checkpoint_every=3, mesh=None):
    return mlc.ConfigDict(
        {
            "train": {
                "steps": steps,
                "learning_rate": 1e-2,
                "warmup_steps": 2,
                "log_every": 1,
                "checkpoint_every": checkpoint_every,
                "keep_checkpoints": 2,
                "tensorboard": False,
                "seed": 0,
            },
            "mesh": {"shape": mesh or {"data": -1}},
        }
    )


if __name__ == "__main__":
    workdir = sys.argv[1]
    res = loop.train_and_evaluate(config(), workdir, ToyTask(), SlowSource(), progress=False)
    print("FINAL", res.history[-1]["train/loss"] if res.history else None, flush=True)

"""Train any jaxtts model family from an ml-collections config.

  python train.py --config configs/car.py:small --workdir runs/car
  python train.py --config configs/car.py:tiny --workdir /tmp/car --config.train.steps=10

An existing --workdir resumes from its latest checkpoint. Multi-host: set
JAXTTS_DISTRIBUTED=1 (or pass --distributed) on every host; see README "Multi-host".
"""

from absl import app, flags
from ml_collections import config_flags

from jaxtts import cli
from jaxtts.train import run

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, e.g. configs/car.py:small", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, logs, samples).")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", None, "Call jax.distributed.initialize() (default: $JAXTTS_DISTRIBUTED)."
)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    run.maybe_initialize_distributed(_DISTRIBUTED.value)
    run.train(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    cli.run(main)

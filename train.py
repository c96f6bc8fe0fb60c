"""Train any jaxtts model family from an ml-collections config.

  python train.py --config configs/car.py:small --workdir runs/car
  python train.py --config configs/car.py:tiny --workdir /tmp/car --config.train.steps=10
  python train.py --config configs/car.py:small --print_config    # every key, value, meaning
  python train.py --list_configs                                   # config files + variants

An existing --workdir resumes from its latest checkpoint. Any config key can be overridden
with --config.<section>.<key>=<value>; an unknown key fails with its name. Multi-host: set
JAXTTS_DISTRIBUTED=1 (or pass --distributed) on every host; see README "Multi-host".
"""

import os

from absl import flags
from ml_collections import config_flags

from jaxtts import cli
from jaxtts.errors import ConfigError

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Config file and variant, e.g. configs/car.py:small (see --list_configs).",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Run directory (checkpoints, logs, samples); an existing one resumes."
)
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", None, "Call jax.distributed.initialize() (default: $JAXTTS_DISTRIBUTED)."
)
_PRINT_CONFIG = flags.DEFINE_bool(
    "print_config", False, "Print the resolved config (every key, its value and meaning) and exit."
)
_LIST_CONFIGS = flags.DEFINE_bool(
    "list_configs", False, "List the config files and their variants and exit."
)


def main(argv):
    from jaxtts import config_help

    if len(argv) > 1:
        raise ConfigError(f"unexpected arguments: {argv[1:]}")
    if _LIST_CONFIGS.value:
        print(config_help.list_configs())
        return
    flag = flags.FLAGS["config"]
    path = (flag.config_filename or "").split(":")[0] if flag.present else ""
    if path and not os.path.isfile(path):
        raise ConfigError(
            f"--config {path}: no such config file, expected e.g. configs/car.py:small "
            "(--list_configs shows them)"
        )
    if _CONFIG.value is None:
        raise ConfigError(
            "--config is required, e.g. --config configs/car.py:small (--list_configs shows them)"
        )
    if _PRINT_CONFIG.value:
        print(config_help.describe(_CONFIG.value, flags.FLAGS["config"].config_filename))
        return
    if not _WORKDIR.value:
        raise ConfigError("--workdir is required (the run folder; an existing one resumes)")
    if os.path.exists(_WORKDIR.value) and not os.path.isdir(_WORKDIR.value):
        raise ConfigError(
            f"--workdir {_WORKDIR.value}: a file, expected a run folder (new or existing)"
        )
    from jaxtts.train import run

    run.maybe_initialize_distributed(_DISTRIBUTED.value)
    run.train(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    cli.run(main)

"""Shared command-line plumbing for train.py / infer.py / jaxtts.evaluate: bad input ends in
one line on stderr ("error: <file/field>: <what was expected>") and exit code 2, not a trace."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable

from absl import app, flags

from jaxtts.errors import JaxttsError


def _flags_parser(argv: list[str]) -> list[str]:
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        _die(str(e))
    except (AttributeError, KeyError, ValueError, TypeError, FileNotFoundError) as e:
        # ml_collections' config_flags raise these for unknown keys / bad variants / types.
        msg = str(e).replace("\\n", " ").replace("\n", " ").replace("\\'", "'").strip("'\" ")
        key = re.fullmatch(r"'?(\w+)'?( Did you mean.*)?", msg)
        if key:  # unknown key: name the override that used it
            bad = [a.split("=")[0] for a in argv if a.startswith("--config.")]
            bad = [a for a in bad if a.split(".")[-1] == key.group(1)] or [key.group(1)]
            hint = re.search(r'Did you mean "(\w+)"', msg)
            mean = f" (did you mean '{hint.group(1)}'?)" if hint else ""
            _die(f"unknown config key {bad[0]}{mean}")
        _die(f"bad --config: {msg}")
    return argv


def _die(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def run(main: Callable[[list[str]], None]) -> None:
    """absl `app.run` with one-line errors for config and user-input problems."""

    def wrapped(argv):
        logging.getLogger("absl").setLevel(logging.ERROR)  # orbax chatter; ours use jaxtts.*
        try:
            main(argv)
        except JaxttsError as e:
            _die(str(e))

    app.run(wrapped, flags_parser=_flags_parser)

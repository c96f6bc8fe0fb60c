"""Shared command-line plumbing for train.py / infer.py / python -m jaxtts.evaluate.

- Bad input ends in one line on stderr ("error: <file/field>: <what was expected>") and exit
  code 2, never a traceback.
- `--help` / `-h` / `--helpfull` print the usage and exit 0.
- Logging is for users: one plain line per message, written through tqdm so progress bars stay
  intact (`setup_logging`); INFO only from jaxtts itself, warnings as `warning: <message>`
  (Python warnings too, without a source line); the backend probe's "Unable to initialize
  backend 'tpu'" and orbax/absl chatter are silenced.
- Host BLAS gets one thread (`limit_host_blas`): XLA runs the models on its own thread pool.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Callable

import threadpoolctl
from absl import app, flags
from absl import logging as absl_logging

from jaxtts.errors import JaxttsError

HELP_FLAGS = ("--help", "-h", "--helpshort", "--helpfull", "-?")
# Loggers whose INFO/WARNING lines are not for users (backend probing, checkpoint internals).
QUIET = {
    "jax._src.xla_bridge": logging.ERROR,
    "absl": logging.ERROR,
    "orbax": logging.ERROR,
    "jax._src.distributed": logging.WARNING,
}


class _TqdmHandler(logging.Handler):
    """Writes records with `tqdm.write`, so a line never lands inside a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm  # start-up: tqdm 30 ms on --help; only when logging

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage().strip().replace("\n", " ")
        if record.levelno >= logging.ERROR:
            return f"error: {msg}"
        if record.levelno >= logging.WARNING:
            return f"warning: {msg}"
        return msg


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return str(message).strip().replace("\n", " ")


def setup_logging(level: int = logging.INFO) -> None:
    """User-facing logging (see the module docstring). Idempotent."""
    root = logging.getLogger()
    try:
        root.removeHandler(absl_logging.get_absl_handler())
    except Exception:  # noqa: BLE001 - absl missing or not installed as a handler
        pass
    for h in list(root.handlers):
        if isinstance(h, _TqdmHandler):
            root.removeHandler(h)
    handler = _TqdmHandler()
    handler.setFormatter(_Format())
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("jaxtts").setLevel(level)
    for name, lvl in QUIET.items():
        logging.getLogger(name).setLevel(lvl)
    warnings.formatwarning = _one_line_warning
    logging.captureWarnings(True)  # warnings.warn -> "warning: <message>", one line


def limit_host_blas(threads: int | None = None) -> None:
    """numpy's BLAS (OpenBLAS: the token decoder, Griffin-Lim's NNLS, the evaluators' features)
    gets `threads` threads (default 1, or $JAXTTS_HOST_BLAS_THREADS). XLA runs the models on a
    thread pool of its own, and OpenBLAS workers spin while they wait: with 2 BLAS threads on 2
    cores that XLA (or a second process) keeps busy, a [130, 768] x [768, 256] product took
    17 ms instead of 0.9 ms, and a stream's mel + vocoder work per audio second went from 1.0 s
    to 0.1 s with one thread (benchmarks/RESULTS.md#host-audio). Idempotent."""
    if threads is None:
        threads = int(os.environ.get("JAXTTS_HOST_BLAS_THREADS", "1"))
    # the limit holds until restored, which nothing does: the returned limiter is not needed
    threadpoolctl.threadpool_limits(limits=threads, user_api="blas")


def _flags_parser(argv: list[str]) -> list[str]:
    if any(a in HELP_FLAGS for a in argv[1:]):
        app.usage(shorthelp="--helpfull" not in argv, writeto_stdout=True, exitcode=0)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        die(str(e))
    except (AttributeError, KeyError, ValueError, TypeError, FileNotFoundError) as e:
        # ml_collections' config_flags raise these for unknown keys / bad variants / types.
        msg = str(e).replace("\\n", " ").replace("\n", " ").replace("\\'", "'").strip("'\" ")
        key = re.fullmatch(r"'?(\w+)'?( Did you mean.*)?", msg)
        if key:  # unknown key: name the override that used it
            bad = [a.split("=")[0] for a in argv if a.startswith("--config.")]
            bad = [a for a in bad if a.split(".")[-1] == key.group(1)] or [key.group(1)]
            hint = re.search(r'Did you mean "(\w+)"', msg)
            mean = f" (did you mean '{hint.group(1)}'?)" if hint else ""
            die(f"unknown config key {bad[0]}{mean}")
        die(f"bad --config: {msg}")
    return argv


def die(msg: str, code: int = 2) -> None:
    """Print `error: <msg>` (one line) and exit."""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def run(main: Callable[[list[str]], None]) -> None:
    """absl `app.run` with one-line errors for config and user-input problems."""
    for name, lvl in QUIET.items():  # before anything initialises a backend
        logging.getLogger(name).setLevel(lvl)

    def wrapped(argv):
        setup_logging()
        limit_host_blas()
        try:
            main(argv)
        except JaxttsError as e:
            die(str(e))
        except KeyboardInterrupt:
            die("interrupted", 130)
        except BrokenPipeError:  # `... | head`: the reader left; not an error of ours
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)

    app.run(wrapped, flags_parser=_flags_parser)


def export_main(prog: str, doc: str, export: Callable[..., int], what: str) -> int:
    """`python -m <prog> export SRC DEST [--dtype float16]`: ship a run folder with `export`
    (returns the params file's size); a JaxttsError is one line on stderr, exit 2."""
    import argparse

    ap = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help=what)
    e.add_argument("src")
    e.add_argument("dest")
    e.add_argument("--dtype", default="float16")
    a = ap.parse_args()
    try:
        n = export(a.src, a.dest, a.dtype)
    except JaxttsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{a.dest}/params.msgpack: {n / 1e6:.1f} MB")
    return 0

"""Where a results JSON's numbers come from: the commit, the machine and the date, in the form
every `benchmarks/results/*.json` carries them (`benchmarks.tables` prints them in footers)."""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The repository's short HEAD commit ('' outside a git checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    except OSError:
        return ""


def provenance() -> dict:
    """{'commit', 'machine', 'date'} of a measurement made now."""
    return {
        "commit": commit(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "date": time.strftime("%Y-%m-%d"),
    }

"""The repository's layout is the formatter's: `ruff format --check` and `ruff check` pass
(the same checks as `make lint`; `make fmt` fixes what they report)."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("cmd", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_ruff(cmd):
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: `make setup` installs it (setup.py, extra 'dev')")
    out = subprocess.run([ruff, *cmd, "."], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, f"`ruff {' '.join(cmd)} .` failed (run `make fmt`):\n{out.stdout}"

"""docs/CLI.md is generated (scripts/cli_reference.sh): from the entry points' --help, the
strategy registry and the config files. It must match what they print now."""

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_is_up_to_date(tmp_path):
    out = tmp_path / "CLI.md"
    env = dict(os.environ, OUT=str(out), JAX_PLATFORMS="cpu")
    cmd = ["bash", "scripts/cli_reference.sh"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    want = (ROOT / "docs" / "CLI.md").read_text()
    assert out.read_text() == want, "docs/CLI.md is stale: run `bash scripts/cli_reference.sh`"


def test_every_strategy_is_in_the_help():
    from jaxtts.decode import registry

    text = (ROOT / "docs" / "CLI.md").read_text()
    for name in registry.names():
        assert f"`{registry._ENTRIES[name].syntax}`" in text, name

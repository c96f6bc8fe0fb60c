"""Every case of tests/bad_inputs.py: exit code 2, exactly one line on stderr that names what
was wrong, no traceback, nothing written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_inputs import CASES

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("label,argv,phrase", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(tmp_path, label, argv, phrase):
    file, missing = tmp_path / "a_file.txt", tmp_path / "missing"
    file.write_text("not a folder\n")
    sub = {"{file}": str(file), "{missing}": str(missing)}

    def fill(text):
        for k, v in sub.items():
            text = text.replace(k, v)
        return text

    args, phrase = [fill(a) for a in argv], fill(phrase)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (label, proc.returncode, proc.stderr[-2000:])
    assert len(err) == 1 and err[0].startswith("error: "), (label, err)
    assert "Traceback" not in proc.stderr and phrase in err[0], (label, err[0])
    assert not missing.exists(), f"{label}: wrote {missing}"

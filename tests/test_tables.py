"""The docs' generated tables agree with benchmarks/results/*.json, and a hand edit is caught."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "tables.py"


def _check(root: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--check", "--root", str(root)]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_generated_tables_match_their_json():
    r = _check(REPO)
    assert r.returncode == 0, r.stderr


def test_a_hand_edited_number_fails_the_check(tmp_path):
    shutil.copytree(REPO / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    row = "| natural voices, all | 128 | "
    assert row in text
    i = text.index(row) + len(row)
    edited = text[:i] + "1" + text[i:]  # 9.9 -> 19.9
    (tmp_path / "benchmarks" / "RESULTS.md").write_text(edited)
    r = _check(tmp_path)
    assert r.returncode == 1
    assert "benchmarks/RESULTS.md (natural_test_split) (python" in r.stderr
    assert r.stderr.count("\n") == 1

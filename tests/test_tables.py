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
    (tmp_path / "docs" / "history").mkdir(parents=True)
    shutil.copy(REPO / "docs/history/natural.md", tmp_path / "docs/history/natural.md")
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


def test_text_information_record_replaces_the_same_measurement(tmp_path):
    import json

    from benchmarks.diagnostics.text_conditioning import record
    from jaxtts.run_folder import RunFolder

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    cfg = {"task": "lm", "data": {"corpus_dir": "data/natural", "speakers": "spk00,spk01"}}
    (run / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "benchmarks" / "results" / "text_information.json"

    def measure(step, ce_other):
        m = {"workdir": str(run), "step": step, "split": "dev", "speakers": "awb"}
        m.update(text_parts="", tokens=10, ce_right=[2.0, 3.0], ce_other=[ce_other, 3.5])
        record(str(out), m, RunFolder(run), [0, 1, 2], "data/natural")

    measure(500, 2.5)
    measure(500, 2.25)  # the same run, step and slice: replaced
    measure(1000, 3.0)
    rows = json.loads(out.read_text())["values"]["rows"]
    assert [(r["step"], r["ce_other"][0]) for r in rows] == [(500, 2.25), (1000, 3.0)]
    assert rows[0]["training"]["speakers"] == "spk00,spk01" and rows[0]["utterances"] == 3

    from benchmarks.tables import text_information

    table = text_information(tmp_path).splitlines()
    assert table[2] == (
        "| r | natural: espeak voices (2), all text, kmeans | 500 | natural voices awb | 3 "
        "| 2.000 | 2.250 | +0.250 |"
    )


def test_a_claim_with_an_unknown_status_or_a_missing_field_is_one_line(tmp_path):
    import json

    shutil.copytree(REPO / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    (tmp_path / "docs" / "history").mkdir(parents=True)
    shutil.copy(REPO / "docs/history/natural.md", tmp_path / "docs/history/natural.md")
    shutil.copy(REPO / "benchmarks" / "RESULTS.md", tmp_path / "benchmarks" / "RESULTS.md")
    path = tmp_path / "benchmarks" / "results" / "claims.json"
    claims = json.loads(path.read_text())
    claims["values"]["rows"][2]["status"] = "maybe"
    path.write_text(json.dumps(claims))
    r = _check(tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "claims.json: row 2 status='maybe': expected one of" in r.stderr
    del claims["values"]["rows"][2]["status"], claims["values"]["rows"][0]["evidence"]
    path.write_text(json.dumps(claims))
    r = _check(tmp_path)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "claims.json: row 0 has no 'evidence': expected the text fields" in r.stderr


def test_natural_speed_table_per_run_and_target(tmp_path):
    """speed_record keeps each run's median and rounds' range; the table judges the batch-1
    target in every run and the WER allowance against FAR's natural_wer row."""
    import json

    from benchmarks import speed_record, tables

    def entry(strategy, rtf, ups):
        b1 = {"lm_rtf": rtf, "speed_vs_far": ups[1], "speed_vs_far_rounds": ups}
        return {
            "strategy": strategy,
            "folder": "pretrained/x",
            "b1": b1 | {"lm_rtf_rounds": [rtf] * 3, "tokens_per_step": 1.5},
        }

    runs = []
    for i, ups in enumerate(([1.3, 1.45, 1.5], [1.35, 1.38, 1.6])):
        path = tmp_path / f"run{i}.json"
        far = entry("far", 0.1, [1.0, 1.0, 1.0])
        path.write_text(json.dumps([far, entry("ssd:L=5,beta=0.4", 0.07, ups)]))
        runs.append(str(path))
    res = tmp_path / "benchmarks" / "results"
    res.mkdir(parents=True)
    speed_record.main(runs + ["--command", "c", "--out", str(res / "natural_speed.json")])
    wer = {
        "values": {
            "baseline": "FAR",
            "references": [],
            "systems": [
                {"system": "FAR", "row": "far@pretrained/x", "wer": {"all": 0.50}},
                {"system": "SSD", "row": "ssd:L=5,beta=0.4@pretrained/x", "wer": {"all": 0.52}},
            ],
        }
    }
    (res / "natural_wer.json").write_text(json.dumps(wer))
    table = tables.natural_speed(tmp_path)
    line = next(x for x in table.splitlines() if x.startswith("| ssd"))
    assert "| 52.0 | 1.45x (1.30-1.50); 1.38x (1.35-1.60) | 1.50 | 1.4x |" in line
    assert "speed 1 of 2 runs; WER within FAR + 3 pp" in line

"""Every notebook in notebooks/ runs top to bottom (tiny mode: JAXTTS_NOTEBOOK_TINY=1) in a real
Jupyter kernel; a cell that raises fails the test with the cell's error."""

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # integration / trained models: `make test-fast` skips it

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("JAXTTS_NOTEBOOK_TINY", "1")
    # one device, and the suite's other XLA flags (scripts/test.sh: the faster CPU compiles)
    other = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    monkeypatch.setenv("XLA_FLAGS", " ".join(["--xla_force_host_platform_device_count=1", *other]))
    monkeypatch.setenv("JAXTTS_DATA_DIR", str(tmp_path / "data"))  # tiny corpus, not data/
    monkeypatch.setenv("JAXTTS_NOTEBOOK_WORKDIR", str(tmp_path / "run"))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    client.execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, errors
    assert (tmp_path / "run" / "config.json").is_file()

"""examples/incident.ipynb runs top to bottom with nbclient on the bundled sample, draws its figures, and is
committed without outputs."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

NB = Path(__file__).resolve().parents[1] / "examples" / "incident.ipynb"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NB, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_executes():
    nb = nbformat.read(NB, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NB.parent)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pngs = [o for o in outputs if o.output_type in ("display_data", "execute_result") and "image/png" in o.get("data", {})]
    assert len(pngs) >= 5  # the five figures, inline
    last = nb.cells[-1].outputs[-1]["data"]["text/plain"]
    assert "report.html" in last and "timeline" in last

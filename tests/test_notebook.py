"""The example notebook (examples/fabrics.ipynb) runs top to bottom on the API, as a user's
Jupyter would run it, and says what the fabrics did."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat not installed (test extra)")
nbclient = pytest.importorskip("nbclient", reason="nbclient not installed (test extra)")
pytest.importorskip("ipykernel", reason="ipykernel not installed (test extra)")

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "fabrics.ipynb"


@pytest.mark.slow
def test_the_fabrics_notebook_runs_and_prices_every_fabric(tmp_path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        "commit the notebook without outputs"
    )
    nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    text = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    rows = [ln for ln in text.splitlines() if ln.endswith("analytical")]
    assert len(rows) == 8, text  # 2 steps x 4 fabrics, each priced by the analytical model
    it = {tuple(re.split(r"\s{2,}", r)[:2]): float(re.findall(r"([0-9.]+) ms", r)[0]) for r in rows}
    # 4x the bandwidth is faster; oversubscribed uplinks never help the all-to-all step
    assert it[("data-parallel", "switch 400G")] < it[("data-parallel", "switch 100G")]
    moe_ecmp = it[("mixture-of-experts", "leaf-spine 2:1, ECMP")]
    assert moe_ecmp >= it[("mixture-of-experts", "switch 100G")]
    png = Path(text.strip().splitlines()[-1])
    assert png.name == "fabrics.png" and png.stat().st_size > 10_000

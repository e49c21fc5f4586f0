"""``genie workload replicate`` says a problem every rank has once, not once per rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from genie.cli import main
from genie.workload import save_workload
from genie.workload.model import Workload
from tests.test_stream_rules import pytorch_rank


def test_replicate_prints_one_summary_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rg = pytorch_rank(0)
    rg.nodes[3].raw_ctrl_deps = rg.nodes[3].ctrl_deps = [rg.nodes[3].id]  # dropped on reading
    save_workload(Workload([rg], name="one"), tmp_path / "one")
    out = tmp_path / "many"
    assert (
        main(["workload", "replicate", str(tmp_path / "one"), "--ranks", "64", "--out", str(out)])
        == 0
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert err == [
        "note: ranks 0..63 run rank 0's graph",
        "note: ranks 0..63 (each): dropped 1 ctrl_deps (1 to the node itself)",
    ]

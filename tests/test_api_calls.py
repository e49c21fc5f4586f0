"""The API calls behind genie calibrate, runs compare, report and sweep: registered and documented
like the others, their specs plain data, their commands only parse, call and render."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import genie
from genie.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
CALLS = ("calibrate", "calibrate_compute", "compare_runs", "write_report", "run_sweep")
SPECS = ("CalibrateSpec", "CalibrateComputeSpec", "ReportSpec", "SweepSpec", "Axis")
RESULTS = ("Calibration", "ComputeCalibration", "RunComparison", "Report", "SweepResult")
COMMANDS = ("calibrate", "_calibrate_compute", "runs", "report", "sweep")


def test_every_call_is_registered_documented_and_loads_lazily() -> None:
    from genie.api import _WHERE

    for name in (*CALLS, *SPECS, *RESULTS):
        assert name in genie._API and name in _WHERE, name
        assert getattr(genie, name) is getattr(genie.api, name)
    doc = (REPO / "docs" / "api.md").read_text()
    calls = doc[doc.index("## Calls and results") : doc.index("## Errors")]
    specs = doc[doc.index("## Specs") : doc.index("## Calls and results")]
    for name in CALLS:
        assert re.search(rf"^\| `genie\.{name}\(", calls, re.M), name
    for name in SPECS:
        assert re.search(rf"^\| [^|]*`{name}`", specs, re.M), name
    code = (
        "import sys, genie\n"
        "assert callable(genie.run_sweep) and callable(genie.write_report)\n"
        "import genie.report, genie.sweep\n"  # the subpackages do not hide the calls
        "assert callable(genie.api.write_report) and callable(genie.run_sweep)\n"
        "print('genie.api.sweep' in sys.modules, 'genie.api.calibration' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


@pytest.mark.parametrize(
    "spec",
    [
        genie.CalibrateSpec(runs=("r1", "r2"), holdout="largest", save=False),
        genie.CalibrateComputeSpec(workload="w", out="o", memory_bandwidth="3TB/s"),
        genie.ReportSpec(out="o", runs=("r1",), sims=("s.json",), traces=("t.json",)),
        genie.SweepSpec(
            base=genie.SimulateSpec(workload="w"),
            axes=(genie.Axis(field="perturb.stragglers", values=(("1=2",), ("1=2", "2=3"))),),
            fixed=(genie.Axis(field="fabric.leaves", values=(4,)),),
            out="o",
        ),
    ],
    ids=lambda s: type(s).__name__,
)
def test_the_new_specs_are_plain_data_and_refuse_what_they_do_not_know(spec) -> None:
    assert type(spec).from_dict(spec.to_dict()) == spec
    with pytest.raises(UsageError, match=type(spec).__name__):
        type(spec).from_dict({**spec.to_dict(), "colour": "red"})


def test_a_sweep_point_shows_tuples_and_numbers_as_a_command_line_would() -> None:
    spec = genie.SweepSpec(
        base=genie.SimulateSpec(workload="w"),
        axes=(
            genie.Axis(field="perturb.stragglers", values=(("1=2", "2=3"),)),
            genie.Axis(field="fabric.latency", values=(1e-6, 2.5e-6)),
        ),
    )
    pts = spec.points()
    assert [p.label for p in pts] == [
        "stragglers 1=2,2=3, latency 1e-06",
        "stragglers 1=2,2=3, latency 2.5e-06",
    ]
    assert pts[0].spec.perturb.stragglers == ("1=2", "2=3")


@pytest.mark.parametrize("name", COMMANDS)
def test_the_commands_leave_the_work_to_the_library(name: str) -> None:
    """Short modules that import no store, fit, pool or report builder themselves."""
    path = REPO / "genie" / "commands" / f"{name}.py"
    text = path.read_text()
    assert len(text.splitlines()) < 300
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported |= {f"{node.module}.{a.name}" for a in node.names}
    work = {
        "genie.calibration.fit.fit",
        "genie.calibration.compute.rewrite",
        "genie.report.build_report",
        "genie.sweep.pool.run_all",
        "genie.api.simulation.simulate",
    }
    assert not imported & work, imported & work

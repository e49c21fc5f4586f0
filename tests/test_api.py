"""The Python API (genie.api): the documented example runs, results are the CLI's JSON, specs
hold their types, the top-level package loads lazily and shows the API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import genie
from genie.cli import main
from genie.errors import UsageError

REPO = Path(__file__).resolve().parents[1]


def _doc_example() -> str:
    text = (REPO / "docs" / "api.md").read_text()
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m, "docs/api.md has no python example"
    return m.group(1)


def test_the_api_doc_example_runs_and_prices_the_fabrics_apart(tmp_path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _doc_example()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines()[1:]:
        name, rest = line[:28].strip(), line[28:]
        ms = [float(x) for x in re.findall(r"([0-9.]+) ms", rest)]
        rows[name] = ms
    assert set(rows) == {"switch, 100 Gbit/s", "switch, 400 Gbit/s", "leaf-spine 2:1, 100 Gbit/s"}
    # four times the bandwidth: less exposed communication, a shorter iteration
    assert rows["switch, 400 Gbit/s"][0] < rows["switch, 100 Gbit/s"][0]
    assert rows["switch, 400 Gbit/s"][1] < rows["switch, 100 Gbit/s"][1]
    assert "analytical" in out.stdout


def _without_wall(doc: object) -> object:
    """A JSON document without the replays' wall-clock times (they differ run to run)."""
    if isinstance(doc, dict):
        return {k: _without_wall(v) for k, v in doc.items() if k != "wall_s"}
    if isinstance(doc, list):
        return [_without_wall(v) for v in doc]
    return doc


@pytest.fixture(scope="module")
def dp(tmp_path_factory) -> str:
    prefix = tmp_path_factory.mktemp("api") / "dp"
    gen = genie.generate(genie.DataParallel(ranks=4, layers=2, hidden=512), target="genie")
    genie.save_workload(gen.workload, prefix)
    return str(prefix)


def test_a_simulation_is_the_document_the_cli_prints(dp, capsys) -> None:
    argv = ["simulate", dp, "--topology", "leaf_spine", "--bandwidth", "100gbit"]
    assert main([*argv, "--straggler", "1=1.5", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    spec = genie.SimulateSpec(
        workload=dp,
        fabric=genie.Fabric(topology="leaf_spine", bandwidth="100gbit"),
        perturb=genie.Perturb(stragglers=("1=1.5",)),
    )
    sim = genie.simulate(spec)
    api = json.loads(json.dumps(sim.to_dict(), default=float))
    assert _without_wall(api) == _without_wall(cli)
    assert sim.iteration_s == pytest.approx(cli["reports"][0]["iteration_s"])
    assert sim.reports[0].stragglers["described"]  # the perturbation reached the replay


def test_specs_round_trip_and_refuse_what_they_do_not_know() -> None:
    spec = genie.SimulateSpec(
        workload="w", fabric=genie.Fabric(topology="ring", bandwidth="400gbit", latency=2e-6)
    )
    assert genie.SimulateSpec.from_dict(spec.to_dict()) == spec
    assert spec.replace(symmetry=False).symmetry is False and spec.symmetry is True
    with pytest.raises(UsageError, match="SimulateSpec"):
        genie.SimulateSpec.from_dict({"workload": "w", "fabrik": {}})
    with pytest.raises(UsageError, match="SimulateSpec"):
        genie.SimulateSpec.from_dict({"workload": "w", "fabric": {"topology": "torus"}})


def test_units_in_specs_are_read_and_checked(dp) -> None:
    fast = genie.simulate(
        genie.SimulateSpec(workload=dp, fabric=genie.Fabric(bandwidth=50e9, latency="1us"))
    )
    slow = genie.simulate(
        genie.SimulateSpec(workload=dp, fabric=genie.Fabric(bandwidth="10GB/s", latency=1e-6))
    )
    assert slow.iteration_s > fast.iteration_s
    with pytest.raises(genie.errors.GenieError, match="bandwidth"):
        genie.simulate(genie.SimulateSpec(workload=dp, fabric=genie.Fabric(bandwidth="fast")))
    with pytest.raises(UsageError, match="no workload"):
        genie.simulate(genie.SimulateSpec())


def test_import_genie_is_lazy_and_help_shows_the_api() -> None:
    code = (
        "import sys, genie\n"
        "print('genie.api.simulation' in sys.modules, 'numpy' in sys.modules)\n"
        "print(callable(genie.simulate), 'genie.api.simulation' in sys.modules)\n"
        "import pydoc; text = pydoc.render_doc(genie, renderer=pydoc.plaintext)\n"
        "print(all(n in text for n in ('simulate', 'SimulateSpec', 'Fabric', 'emulate')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True", "True", "True"]
    with pytest.raises(AttributeError, match="no attribute 'simulat'"):
        _ = genie.simulat


def test_simulate_and_emulate_take_the_same_placements(dp, capsys) -> None:
    from genie.cli import build_parser

    def choices(command: str) -> tuple:
        sub = build_parser(command)._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        (act,) = [a for a in sub._actions if "--placement" in a.option_strings]
        return tuple(act.choices)

    assert (
        choices("simulate")
        == choices("emulate")
        == choices("bench")
        == genie.api.place.__globals__["MODES"]
    )
    # simulate refuses what makes no sense for it, in one line
    assert main(["simulate", dp, "--placement", "testbed"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a testbed" in err[0]
    assert (
        main(["simulate", dp, "--placement", "round-robin", "--ranks-per-host", "2", "--json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["reports"][0]["n_ranks"] == 4

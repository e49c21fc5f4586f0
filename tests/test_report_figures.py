"""Figures a reviewer accepts, checked on their data (``figures.json``, ``genie.report.checks``):
every bar inside its axis, labels that name what differs, units that match the ticks, titles that
say what ran; and a headless Chromium screenshot of a sweep's report."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import msgspec
import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="genie report needs matplotlib (extra 'report')")

import genie
from genie.report.checks import figure_problems, report_problems
from genie.report.labels import distinct_labels, doc_facts
from genie.report.plots import draw
from genie.report.sweeps import sweep_figure

MS = 1e-3


def _write_json(path: Path, doc: dict) -> Path:
    def plain(o: object) -> object:
        return o.item() if isinstance(o, np.generic) else str(o)

    path.write_bytes(msgspec.json.encode(doc, enc_hook=plain))
    return path


def _rows(values: dict[tuple[str, str], float]) -> list[dict]:
    return [
        {"point": {"over": o, "routing": r}, "label": f"{o} {r}", "iteration_s": t,
         "exposed_comm_s": t * 0.6}
        for (o, r), t in values.items()
    ]  # fmt: skip


def test_every_panel_of_a_sweep_shows_every_bar_whole(tmp_path) -> None:
    # the tallest bars in the first panel: a limit taken from the last panel cut them off
    rows = _rows({("2:1", "ecmp"): 173.6 * MS, ("2:1", "spray"): 125.4 * MS,
                  ("1:1", "ecmp"): 58.2 * MS, ("1:1", "spray"): 47.2 * MS})  # fmt: skip
    fig = sweep_figure(rows, ["over", "routing"], "gpt: sweep", "genie simulate")
    draw(fig, tmp_path / "sweep.png")
    assert figure_problems(fig) == []
    assert len(fig["axes"]) == 2
    for ax in fig["axes"]:  # one shared scale, above the tallest bar of any panel
        assert ax["ylim"][1] >= 173.6 * MS and ax["ylim"][0] == 0.0
        assert ax["y_unit"] == "ms" and ax["ylabel"].endswith("(ms)")


def test_the_check_sees_a_clipped_bar_a_repeated_label_and_a_wrong_unit() -> None:
    axes = [{"ylim": [0.0, 0.1], "xlim": [-0.5, 1.5], "ylabel": "time (s)", "y_unit": "ms"}]
    fig = {
        "id": "f", "kind": "grouped_bars", "title": "t", "groups": ["iteration"], "axes": axes,
        "series": [{"label": "a", "y": [0.2]}, {"label": "a", "y": [0.05]}],
    }  # fmt: skip
    problems = figure_problems(fig)
    assert any("outside the axis" in p for p in problems)
    assert any("the same label twice: 'a'" in p for p in problems)
    assert any("ticks are in ms" in p for p in problems)
    assert figure_problems({**fig, "axes": []}) == ["f: no record of its axes (drawn by "
                                                    "genie.report.plots.draw?)"]  # fmt: skip


@pytest.fixture(scope="module")
def fabrics(tmp_path_factory) -> dict[str, Path]:
    """``genie simulate --json`` of one step on four fabrics: a star, a 1:1 leaf-spine with
    ECMP and with spraying, a 2:1 leaf-spine with ECMP (8 hosts, 100 Gbit/s)."""
    from genie.workload import save_workload
    from genie.workload.generators import data_parallel

    d = tmp_path_factory.mktemp("fabrics")
    save_workload(data_parallel(8, layers=2, hidden=512, seq=256, batch=1), d / "dp")
    out = {}
    for name, kw in (
        ("star", {"topology": "switch"}),
        ("ls11_ecmp", {"topology": "leaf_spine", "spines": 2, "routing": "ecmp"}),
        ("ls11_spray", {"topology": "leaf_spine", "spines": 2, "routing": "spray"}),
        ("ls21_ecmp", {"topology": "leaf_spine", "spines": 2, "routing": "ecmp",
                       "oversubscription": "2:1"}),
    ):  # fmt: skip
        fabric = genie.Fabric(bandwidth="100gbit", **kw)
        sim = genie.simulate(genie.SimulateSpec(workload=str(d / "dp"), fabric=fabric))
        out[name] = _write_json(d / f"{name}.json", sim.to_dict())
    return out


def _report(out: Path, *sims: Path) -> dict:
    spec = genie.ReportSpec(out=str(out), sims=tuple(str(s) for s in sims))
    genie.write_report(spec)
    return json.loads((out / "figures.json").read_text())


def test_two_simulations_differing_only_in_routing_get_labels_naming_it(fabrics, tmp_path):
    doc = _report(tmp_path / "r", fabrics["ls11_ecmp"], fabrics["ls11_spray"])
    assert report_problems(doc) == []
    figs = {f["id"]: f for f in doc["figures"]}
    cmp_ = figs["compare_iterations"]
    assert [s["label"] for s in cmp_["series"]] == ["ECMP routing", "spray routing"]
    # what both share is in the title: the hosts' link rate (not a spine link's), the ratio
    assert "hosts at 12.5 GB/s" in cmp_["title"] and "1:1 oversubscribed" in cmp_["title"]
    assert cmp_["title"].startswith("simulated:")
    where = figs["compare_where"]
    assert where["series"][0]["x"] == ["ECMP routing", "spray routing"]


def test_four_fabrics_side_by_side_keep_every_configuration_apart(fabrics, tmp_path):
    order = ("star", "ls11_ecmp", "ls11_spray", "ls21_ecmp")
    doc = _report(tmp_path / "r", *(fabrics[k] for k in order))
    assert report_problems(doc) == []
    figs = {f["id"]: f for f in doc["figures"]}
    names = figs["compare_where"]["series"][0]["x"]
    assert names == ["star", "leaf_spine, 1:1 oversubscribed, ECMP routing",
                     "leaf_spine, 1:1 oversubscribed, spray routing",
                     "leaf_spine, 2:1 oversubscribed, ECMP routing"]  # fmt: skip
    # each configuration's data-parallel share is its own document's (none drawn over another)
    dp = next(s for s in figs["compare_where"]["series"] if s["label"] == "DP")
    for k, v in zip(order, dp["y"], strict=True):
        rep = json.loads(fabrics[k].read_text())["reports"][0]
        assert v == pytest.approx(rep["exposed_by_dimension"]["DP"])
    html = (tmp_path / "r" / "report.html").read_text()
    assert "<h2>Simulated iterations</h2>" in html and "times in seconds" not in html
    note = "stream order:"  # said by every file: once
    assert sum(note in line for line in html.splitlines()) == 1


def test_labels_name_what_differs_and_never_repeat() -> None:
    a = {"workload": "gpt", "topology": "leaf_spine", "routing": "ECMP"}
    b = {**a, "routing": "spray"}
    assert distinct_labels([a, b]) == (["ECMP routing", "spray routing"], "gpt, leaf_spine")
    same, _ = distinct_labels([a, dict(a)], ["x/a.json", "y/b.json"])
    assert same == ["a.json", "b.json"]
    twice, _ = distinct_labels([a, dict(a)], ["a.json", "a.json"])
    assert len(set(twice)) == 2
    # older documents without ``configuration``: the network line says the rest
    old = {"workload": "w", "network": "leaf_spine topology: 8 hosts, 4 switches; routing ECMP "
           "per flow; links 11.642 GiB/s = 12.500 GB/s, 23.283 GiB/s = 25.000 GB/s, latency 5 ns",
           "reports": [{}]}  # fmt: skip
    assert doc_facts(old) == {"workload": "w", "topology": "leaf_spine", "hosts": "8",
                              "links": "12.5, 25 GB/s", "routing": "ECMP",
                              "collective model": "line-rate"}  # fmt: skip


def test_a_sweep_report_renders_in_headless_chromium(fabrics, tmp_path):
    """A screenshot of the four-fabric report as a reviewer opens it (looked at by hand when
    this was written: bars whole, four labelled configurations, the legend below the plot)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium not installed (Debian: apt-get install chromium)")
    _report(tmp_path / "r", *fabrics.values())
    shot = tmp_path / "report.png"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
           "--window-size=1400,1000", (tmp_path / "r" / "report.html").as_uri()]  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"chromium could not run: {exc}")
    if not shot.is_file():
        pytest.skip(f"chromium wrote no screenshot: {res.stderr.strip().splitlines()[-1:]}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_every_column_of_the_nccl_tests_table_with_a_number_says_its_unit() -> None:
    import io

    from genie.commands._bench_output import print_table
    from genie.controller.results import stats
    from genie.controller.sweep import SizeRow

    row = SizeRow(size=1 << 20, count=1 << 20, dtype="uint8", n_ranks=4,
                  stats=stats([1e-3, 2e-3]), algbw=1e9, busbw=1.5e9, modeled_s=1e-3)  # fmt: skip
    out = io.StringIO()
    print_table([row], "t", 2, 1, file=out)
    head = next(line for line in out.getvalue().splitlines() if "size" in line)
    cols = [c.strip() for c in head.strip("┃ ").split("┃")]
    numeric = [c for c in cols if c not in ("type", "meas/model")]  # a name; a ratio
    assert numeric and all("(" in c or "GB/s" in c for c in numeric), cols
    assert "time p50 (us)" in cols and "p99 (us)" in cols and "model (us)" in cols

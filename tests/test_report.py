"""Reports (``genie.write_report``, ``genie report``) of real runs: a local cluster measures, the
report plots and embeds it all."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import msgspec
import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="genie report needs matplotlib (extra 'report')")

import genie
from genie.api.benchmark import BenchSpec, bench
from genie.cli import main
from genie.controller.local import LocalCluster
from genie.errors import StoreError, UsageError

SIZES = (1024, 8192, 65536)
PNG_SIG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Real bench runs (all-reduce on 3 and 2 ranks, all-gather on 3) on 3 loopback agents."""
    d = tmp_path_factory.mktemp("report-runs")
    store = d / "runs.sqlite"
    cl = LocalCluster.start(3, d / "cluster", heartbeat_s=0.2)
    try:
        out = {}
        for key, ranks, coll in (
            (3, 3, "all_reduce"),
            (2, 2, "all_reduce"),
            ("ag", 3, "all_gather"),
        ):
            cfg = BenchSpec(
                testbed=str(cl.testbed_path),
                collective=coll,
                sizes=SIZES,
                iters=3,
                warmup=1,
                ranks=ranks,
                store=str(store),
                command=f"test bench {ranks} ranks",
                progress=False,
            )
            res = bench(cfg)
            run_id, rows = res.run_id, res.rows
            out[key] = (run_id, rows)
        out["emulate"] = _emulate(cl, d, store)
    finally:
        cl.stop()
    return store, out


def _emulate(cl, d: Path, store: Path) -> Path:
    """The emulate document (`genie emulate --json`) of a tiny data-parallel step on the live
    agents (a stored run)."""
    from genie.workload import save_workload
    from genie.workload.generators import data_parallel

    save_workload(data_parallel(3, layers=2, hidden=128), d / "small")
    spec = genie.EmulateSpec(
        testbed=str(cl.testbed_path),
        workload=str(d / "small"),
        store=str(store),
        iterations=2,
        warmup=1,
    )
    return _write_json(d / "emulate.json", genie.emulate(spec).doc())


@pytest.fixture(scope="module")
def sim_files(tmp_path_factory):
    """The simulate document (`genie simulate --json`) and its Chrome trace for a small
    data-parallel workload."""
    from genie.workload import save_workload
    from genie.workload.generators import data_parallel

    d = tmp_path_factory.mktemp("report-sim")
    save_workload(data_parallel(4, layers=3, hidden=256), d / "dp")
    sim = genie.simulate(genie.SimulateSpec(workload=str(d / "dp")))
    assert sim.write_trace(d / "trace.json") > 0
    return _write_json(d / "sim.json", sim.to_dict()), d / "trace.json"


def _write_json(path: Path, doc: dict) -> Path:
    """``doc`` as the JSON the CLI's --json prints (numpy numbers as numbers, NaN as null)."""

    def plain(o: object) -> object:
        return o.item() if isinstance(o, np.generic) else str(o)

    path.write_bytes(msgspec.json.encode(doc, enc_hook=plain))
    return path


def _report(out: Path, *runs: str, store: Path, sims=(), traces=()) -> dict:
    """``genie.write_report`` of ``runs`` (the first the main one) and files, as JSON data."""
    spec = genie.ReportSpec(
        out=str(out),
        runs=runs,
        store=str(store),
        sims=tuple(str(s) for s in sims),
        traces=tuple(str(t) for t in traces),
    )
    return json.loads(json.dumps(genie.write_report(spec).to_dict()))


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIG, path
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _check_pngs_and_html(doc: dict) -> None:
    html = Path(doc["html"]).read_text()
    for f in doc["figures"]:
        p = Path(f["file"])
        assert p.is_file() and p.stat().st_size > 5000, p
        w, h = _png_size(p)
        assert 400 <= w <= 3000 and 150 <= h <= 2000, (p, w, h)
        # embedded in the page, byte for byte, as a data URI (no server, no network)
        m = re.search(rf'<img src="data:image/png;base64,([^"]+)"[^>]*data-file="{p.name}"', html)
        assert m, p.name
        assert base64.b64decode(m.group(1)) == p.read_bytes()
    assert "http://" not in html and "https://" not in html


def test_report_of_a_real_run_has_valid_pngs_in_the_html(runs, tmp_path):
    store, out = runs
    run_id, _ = out[3]
    doc = _report(tmp_path / "rep", run_id, store=store)
    assert doc["runs"] == [run_id]
    ids = {f["id"] for f in doc["figures"]}
    assert ids == {"busbw_all_reduce", "time_all_reduce", "error_all_reduce"}
    _check_pngs_and_html(doc)
    html = Path(doc["html"]).read_text()
    # testbed and host facts of the run are in the page
    assert run_id in html and "loopback3" in html and "cpus_logical" not in html
    assert "CPUs logical/physical" in html and "127.0.0.1" in html


def test_json_figures_hold_the_numbers_of_the_run(runs, tmp_path):
    store, out = runs
    run_id, rows = out[3]
    doc = _report(tmp_path / "rep", run_id, store=store)
    figs = {f["id"]: f for f in doc["figures"]}
    meas = [s for s in figs["time_all_reduce"]["series"] if s["role"] == "measured"]
    assert len(meas) == 1 and meas[0]["run_id"] == run_id
    assert meas[0]["x"] == [r.size for r in rows] == list(SIZES)
    assert meas[0]["y"] == pytest.approx([r.stats.p50 for r in rows], rel=1e-12)
    bus = next(s for s in figs["busbw_all_reduce"]["series"] if s["role"] == "measured")
    assert bus["y"] == pytest.approx([r.busbw for r in rows], rel=1e-9)
    # the analytical curve passes through the model times the bench printed
    model = next(s for s in figs["time_all_reduce"]["series"] if s["role"] == "model")
    at = dict(zip(model["x"], model["y"], strict=True))
    assert len(model["x"]) > len(SIZES)
    for r in rows:
        assert r.modeled_s and at[r.size] == pytest.approx(r.modeled_s, rel=1e-9)
    # the model's error per size, as bench printed it (no calibration stored: nominal only)
    err = figs["error_all_reduce"]["series"]
    assert [x["role"] for x in err] == ["nominal"]
    want = [(r.modeled_s - r.stats.p50) / r.stats.p50 * 100 for r in rows]
    assert err[0]["y"] == pytest.approx(want, rel=1e-9)
    html = Path(doc["html"]).read_text()
    assert "How far the model is from the wire" in html and "MAPE: nominal" in html
    assert "no calibration of this testbed in the store" in html
    assert json.loads(Path(doc["html"]).with_name("figures.json").read_text()) == doc


def test_compare_overlays_two_runs_on_one_plot(runs, tmp_path):
    store, out = runs
    (a, _), (b, rows_b) = out[3], out[2]
    one = _report(tmp_path / "one", a, store=store)
    both = _report(tmp_path / "two", a[:-2], b, store=store)
    assert both["runs"] == [a, b]
    _check_pngs_and_html(both)
    fig = next(f for f in both["figures"] if f["id"] == "busbw_all_reduce")
    meas = {s["run_id"]: s for s in fig["series"] if s["role"] == "measured"}
    assert set(meas) == {a, b}
    assert meas[b]["y"] == pytest.approx([r.busbw for r in rows_b], rel=1e-9)
    # legends name what ran (the testbed; the run's order when both ran on one), not run ids
    assert not any(a in s["label"] or b in s["label"] for s in fig["series"])
    labels = {s["run_id"]: s["label"] for s in fig["series"] if s["role"] == "measured"}
    assert labels[a] != labels[b] and all("run 1 of 2" in x or "run 2 of 2" in x
                                          for x in labels.values())  # fmt: skip
    assert a not in fig["title"] and " on " in fig["title"]
    png_one = Path(next(f["file"] for f in one["figures"] if f["id"] == "busbw_all_reduce"))
    assert Path(fig["file"]).read_bytes() != png_one.read_bytes()
    html = Path(both["html"]).read_text()
    assert html.count("<h2>Run ") == 2


def test_each_collective_gets_its_own_plots_and_table(runs, tmp_path):
    store, out = runs
    (ar, _), (ag, rows) = out[3], out["ag"]
    doc = _report(tmp_path / "r", ag, ar, store=store)
    _check_pngs_and_html(doc)
    ids = {f["id"] for f in doc["figures"]}
    assert ids == {
        f"{m}_{c}" for m in ("busbw", "time", "error") for c in ("all_reduce", "all_gather")
    }
    fig = next(f for f in doc["figures"] if f["id"] == "time_all_gather")
    assert {s["run_id"] for s in fig["series"]} == {ag}
    table = next(t for t in doc["tables"] if t["collective"] == "all_gather")
    assert [r["size"] for r in table["rows"]] == list(SIZES)
    assert [len(r["times_s"]) for r in table["rows"]] == [3, 3, 3]  # warm-up left out
    assert [r["time_p50_s"] for r in table["rows"]] == pytest.approx([r.stats.p50 for r in rows])
    assert "all_gather / ring on 3 ranks" in Path(doc["html"]).read_text()


def test_simulated_iteration_breakdown_and_timelines(runs, sim_files, tmp_path):
    store, out = runs
    sim, trace = sim_files
    simdoc = json.loads(sim.read_text())
    doc = _report(tmp_path / "rep", out[3][0], store=store, sims=[sim], traces=[trace])
    _check_pngs_and_html(doc)
    figs = {f["id"]: f for f in doc["figures"]}
    rep = simdoc["reports"][0]
    it = figs["sim0_iteration"]["series"][0]
    assert it["x"] == [r["backend"] for r in simdoc["reports"]]
    assert it["y"] == [r["iteration_s"] for r in simdoc["reports"]]
    parts = {s["role"]: s["y"] for s in figs["sim0_breakdown0"]["series"]}
    assert set(parts) == {"compute", "exposed_comm", "wait", "idle"}
    assert parts["compute"] == [r["compute"] for r in rep["ranks"]]
    for k in range(rep["n_ranks"]):  # the stack reaches the iteration time on every rank
        total = sum(p[k] for p in parts.values())
        assert total == pytest.approx(rep["iteration_s"], rel=1e-6)
    lanes = figs["sim0_timeline"]["series"]
    assert sum(len(s["spans"]) for s in lanes) == len(rep["collectives"])
    tl = figs["trace0_timeline"]
    assert [s["rank"] for s in tl["series"]] == list(range(rep["n_ranks"]))
    assert tl["iteration_s"] == pytest.approx(rep["iteration_s"], rel=1e-6)
    assert {"compute", "comm"} <= set(tl["series"][0]["spans"])


def test_emulated_run_reports_measured_collectives_and_iterations(runs, tmp_path):
    store, out = runs
    emu = json.loads(out["emulate"].read_text())
    doc = _report(tmp_path / "rep", emu["run_id"], store=store, sims=[out["emulate"]])
    _check_pngs_and_html(doc)
    figs = {f["id"]: f for f in doc["figures"]}
    assert {"busbw_all_reduce", "sim0_iteration", "sim0_breakdown0", "sim0_timeline"} <= set(figs)
    it = figs["sim0_iteration"]["series"]
    # backends named by what they are: the testbed's name, not the run id
    on = f"measured on {emu['testbed']}"
    assert it[0]["x"] == [on if r["backend"].startswith("testbed:") else r["backend"]
                          for r in emu["reports"]]  # fmt: skip
    measured = [r["makespan_s"] for r in emu["runs"] if not r["warmup"]]
    assert len(measured) == 2
    assert it[1]["role"] == "measured_iterations" and it[1]["y"] == measured
    assert set(it[1]["x"]) == {on}
    html = Path(doc["html"]).read_text()
    assert f"small on {emu['testbed']}, line-rate model, overlapped ({on})" in html
    assert "exposed comm" in html and "<h2>Emulated iterations</h2>" in html
    assert all(emu["run_id"] not in f["title"] for f in doc["figures"])
    # the measured timeline is the median measured run; each rank's spans end where it ended
    tl = figs["sim0_measured_timeline"]
    k = tl["measured_run"]
    assert tl["iteration_s"] == sorted(x["intervals_s"][k][2] for x in emu["instances"])[-1]
    ends = {}
    for x in emu["instances"]:
        for rank, _start, end in x["rank_intervals_s"][k]:
            ends[rank] = max(ends.get(rank, 0.0), end)
    for lane in tl["series"]:
        last = max(s + d for s, d in lane["spans"]["comm"])
        assert last == pytest.approx(ends[lane["rank"]], abs=1e-12)
    tab = doc["tables"][0]
    stored = {i["size"] for i in emu["instances"]}
    assert {r["size"] for r in tab["rows"]} == stored
    # one measured time: the report's times are the ones `genie emulate --json` printed (each
    # instance from its last member's arrival to its last rank's end), to the microsecond
    printed: dict[int, list[float]] = {}
    for x in emu["instances"]:
        printed.setdefault(x["size"], []).extend(end - arrival for _, arrival, end in
                                                 x["intervals_s"])  # fmt: skip
    for row in tab["rows"]:
        assert sorted(row["times_s"]) == pytest.approx(sorted(printed[row["size"]]), abs=1e-6)
    for x in emu["instances"]:
        if [i["size"] for i in emu["instances"]].count(x["size"]) == 1:
            row = next(r for r in tab["rows"] if r["size"] == x["size"])
            assert row["time_p50_s"] == pytest.approx(x["measured_p50_s"], abs=1e-6)


def test_unknown_run_and_bad_inputs_are_one_line_errors(runs, tmp_path):
    store, _ = runs
    (tmp_path / "x.json").write_text('{"a": 1}')
    cases = [
        ({"runs": ("nosuchrun",)}, StoreError, "no run 'nosuchrun'"),
        ({"runs": ("r1",), "store": str(tmp_path / "none.sqlite")}, UsageError, "store not found"),
        ({}, UsageError, "nothing to report"),
        ({"sims": (str(store),)}, UsageError, "not JSON"),
        ({"sims": (str(tmp_path / "missing.json"),)}, UsageError, "file not found"),
        ({"sims": (str(tmp_path / "x.json"),)}, UsageError, "no 'reports'"),
        ({"traces": (str(tmp_path / "x.json"),)}, UsageError, "no 'traceEvents'"),
    ]
    for fields, error, msg in cases:
        spec = genie.ReportSpec.from_dict(
            {"out": str(tmp_path / "o"), "store": str(store), **fields}
        )
        with pytest.raises(error, match=msg) as exc:
            genie.write_report(spec)
        assert "\n" not in str(exc.value)
    assert not (tmp_path / "none.sqlite").exists()


def test_the_command_prints_the_report_or_one_line(runs, tmp_path, capsys):
    store, out = runs
    run_id = out[3][0]
    spec = genie.ReportSpec(out=str(tmp_path / "rep"), runs=(run_id,), store=str(store))
    rep = genie.write_report(spec)
    args = ["report", run_id, "--store", str(store), "--out", str(tmp_path / "rep")]
    assert main([*args, "--json"]) == 0  # the same report, drawn again into the same place
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(rep.to_dict()))
    assert main(args) == 0
    text = capsys.readouterr().out.strip()
    assert text == f"wrote {len(rep.files)} plots and {rep.html} (figure data: {rep.json_path})"
    for argv, msg in (
        (["nosuchrun", "--store", str(store)], "no run 'nosuchrun'"),
        (["--store", str(store)], "nothing to report"),
        (["--trace", str(store)], "not JSON"),
    ):
        assert main(["report", *argv, "--out", str(tmp_path / "o")]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("genie: error:") and msg in err[0], err


def test_a_run_without_instances_is_a_clear_error(tmp_path):
    from genie.store import RunStore

    with RunStore(tmp_path / "s.sqlite") as st:
        rid = st.start_run("genie bench (interrupted before any size)")
    spec = genie.ReportSpec(out=str(tmp_path / "o"), runs=(rid,), store=str(tmp_path / "s.sqlite"))
    with pytest.raises(UsageError, match=f"^run {rid} has no measured instances to plot$"):
        genie.write_report(spec)
    assert not (tmp_path / "o").exists()


def test_missing_matplotlib_says_how_to_install(runs, tmp_path, capsys, monkeypatch):
    import sys

    store, out = runs
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    rc = main(["report", out[3][0], "--store", str(store), "--out", str(tmp_path / "o")])
    assert rc == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "install '.[report]'" in err and "install 'matplotlib>=3.8'" in err  # clone, installed


_PROBE = """<script>
window.addEventListener('load', function () {
  var out = [];
  document.querySelectorAll('img').forEach(function (im) {
    out.push(im.getAttribute('data-file') + '=' + (im.complete ? im.naturalWidth : -1));
  });
  var pre = document.createElement('pre');
  pre.id = 'genie-probe';
  pre.textContent = 'PROBE[' + out.join(';') + ']PROBE';
  document.body.appendChild(pre);
});
</script>"""


def test_every_image_loads_in_headless_chromium(runs, sim_files, tmp_path):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium not installed (Debian: apt-get install chromium)")
    store, out = runs
    sim, trace = sim_files
    runs_ = (out[3][0], out[2][0])
    doc = _report(tmp_path / "rep", *runs_, store=store, sims=[sim], traces=[trace])
    page = tmp_path / "probe.html"
    page.write_text(Path(doc["html"]).read_text().replace("</body>", _PROBE + "</body>"))
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        page.as_uri(),
    ]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"chromium could not run: {exc}")
    m = re.search(r'<pre id="genie-probe">PROBE\[(.*?)\]PROBE</pre>', res.stdout)
    if res.returncode != 0 and not m:
        pytest.skip(f"chromium could not start: {res.stderr.strip().splitlines()[-1:]}")
    assert m, res.stdout[-500:]
    loaded = dict(item.split("=") for item in m.group(1).split(";"))
    want = {Path(f["file"]).name: _png_size(Path(f["file"]))[0] for f in doc["figures"]}
    assert {k: int(v) for k, v in loaded.items()} == want

"""``genie report`` of a ``genie bench --faults`` run on a netns star (root).

Two hosts at 200 Mbit/s run a ring all-reduce at two sizes, 30 iterations each after 2 warm-ups;
at 150 ms h0's link is cut to 40 Mbit/s for 300 ms. The report gets a "wire and faults" figure
(PNG, SVG, PDF): one series per size, each iteration at its start from the run's time origin,
and the iterations that slowed are the ones inside the cut's window (so the origin lines up the
store's instances with the applied faults). A bench run without faults on the same testbed gets
none of it. Prefix ``genie-rf-``; everything is removed afterwards.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="genie report needs matplotlib (extra 'report')")

import genie
from genie.cli import main
from genie.store import RunStore
from tests._agents import netns_unavailable
from tests.netns_helpers import star

PREFIX = "genie-rf-"
_WHY = netns_unavailable(f"{PREFIX}probe")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
SIZES = (256 * 1024, 512 * 1024)
ITERS = 30


def _bench(path, store, iters: int, faults: str | None = None) -> str:
    """A stored ``genie bench`` run of SIZES on ``path`` (2 warm-ups): its id."""
    spec = genie.BenchSpec(
        testbed=str(path),
        sizes=SIZES,
        iters=iters,
        warmup=2,
        calibration="none",  # as genie bench
        faults=faults,
        store=str(store),
        progress=False,
    )
    run_id = genie.bench(spec).run_id
    assert run_id is not None
    return run_id


def _report(run_id, store, out, capsys) -> dict:
    capsys.readouterr()
    assert main(["report", run_id, "--store", str(store), "--out", str(out), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_of_a_bench_with_faults_shows_them_on_the_wire(tmp_path, capsys) -> None:
    store = tmp_path / "r.sqlite"
    schedule = "at 150ms: h0 link rate 40mbit for 300ms"
    with star(tmp_path, "rf-star", PREFIX, 2, "200mbit") as path:
        faulty = _bench(path, store, ITERS, faults=schedule)
        clean = _bench(path, store, 5)
    with RunStore(store) as rs:
        meta = rs.run(faulty).meta["faults"]
        measured = rs.instances(faulty)
    # the warm-ups are stored flagged as such: only the measured iterations count
    assert sorted(np.unique([x["size"] for x in measured], return_counts=True)[1]) == [30, 30]
    assert isinstance(meta["origin_ns"], int)

    doc = _report(faulty, store, tmp_path / "rep", capsys)
    (fig,) = [f for f in doc["figures"] if f["kind"] == "fault_timeline"]
    png = tmp_path / "rep" / f"{fig['id']}.png"
    for ext in ("png", "svg", "pdf"):
        assert png.with_suffix(f".{ext}").stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # one series per size (measured, warm-ups apart), never two sizes in one
    sizes = {s["size"] for s in fig["series"] if s["role"] == "measured"}
    assert sizes == set(SIZES)
    assert {s["label"] for s in fig["series"] if s["role"] == "measured"} == {
        "256.0 KiB",
        "512.0 KiB",
    }
    assert all(len(s["x"]) == ITERS for s in fig["series"] if s["role"] == "measured")
    first = {s["size"]: min(s["x"]) for s in fig["series"] if s["role"] == "measured"}
    warm = {s["size"]: max(s["x"]) for s in fig["series"] if s["role"] == "warmup"}
    assert warm.keys() == first.keys() and warm[SIZES[0]] < 0 <= first[SIZES[0]] < 0.05
    assert all(warm[k] < first[k] for k in warm)  # each size's warm-ups before its measured
    (w,) = fig["windows"]
    cut = meta["applied"][0]
    assert w["from_s"] == cut["applied_s"] and 0.15 <= w["from_s"] < 0.2
    # the window is the cut as applied and restored (measured: 299-30x ms for a 300 ms plan)
    m = re.match(r"h0 link \(h0-eth0\) rate 40 Mbit/s for (\d+) ms from (\d+) ms", w["title"])
    assert m, w["title"]
    assert 290 <= int(m[1]) <= 400 and 150 <= int(m[2]) < 200
    assert abs(int(m[1]) - round((w["to_s"] - w["from_s"]) * 1e3)) <= 1
    # the iterations inside the window are the slow ones: the origin lines store and faults up
    inside, outside = [], []
    for s in fig["series"]:
        if s["role"] != "measured":
            continue
        p50 = float(np.median(s["y"]))
        for x, y in zip(s["x"], s["y"], strict=True):
            hit = x < w["to_s"] and w["from_s"] < x + y
            (inside if hit else outside).append(y / p50)
    print(f"inside the cut: {len(inside)} iterations, max {max(inside):.2f}x the size's p50")
    assert inside and max(inside) > 1.8 and float(np.median(outside)) < 1.2

    html = (tmp_path / "rep" / "report.html").read_text()
    assert "<h2>Wire and faults: rf-star</h2>" in html and "Faults as applied" in html
    assert "h0 link (h0-eth0) rate 40 Mbit/s" in html and "netem" in html
    by = {s["size"]: s for s in meta["by_size"]}
    ratio = by[SIZES[0]]["fault_vs_clean"]
    if ratio is not None:  # the effect table: clean p50 vs overlapping p50 and their ratio
        assert f"{ratio:.2f}x" in html
    assert "Every touched link was restored to the testbed file" in html

    doc = _report(clean, store, tmp_path / "clean", capsys)
    assert not [f for f in doc["figures"] if f["kind"] == "fault_timeline"]
    assert not list((tmp_path / "clean").glob("faults*"))
    html = (tmp_path / "clean" / "report.html").read_text()
    assert "Wire and faults" not in html and "netem" not in html

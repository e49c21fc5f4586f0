"""``genie report`` of stored runs with faults that no netns run here produces: a lab run whose
fault could not be confirmed and another applied late, and an old run that kept no time origin.

The rows are written with the store's public API (as ``genie bench --faults`` writes them); the
report is built by the real ``genie report`` command. The live path is
``tests/test_report_faults_netns.py``.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib", reason="genie report needs matplotlib (extra 'report')")

from genie.cli import main
from genie.collectives.registry import build_program
from genie.controller.results import Instance
from genie.store import RunStore

ORIGIN = 5_000_000_000
SIZE = 1 << 20


def _faults(origin: int | None) -> dict:
    """A lab run's faults: a rate cut applied 20 ms late, a down never confirmed by its host."""
    doc = {
        "schedule": ["at 100ms: a-d0 rate 50mbit for 200ms", "at 500ms: a-d1 down for 100ms"],
        "applied": [
            {"event": 0, "label": "a-d0 rate 50 Mbit/s", "planned_s": 0.1, "applied_s": 0.12,
             "restore": False, "ok": True, "error": ""},
            {"event": 0, "label": "a-d0 restored", "planned_s": 0.3, "applied_s": 0.32,
             "restore": True, "ok": True, "error": ""},
            {"event": 1, "label": "a-d1 down", "planned_s": 0.5, "applied_s": None,
             "restore": False, "ok": False, "error": "unconfirmed: host unreachable"},
        ],
        "not_applied": [{"event": 1, "label": "a-d1 restored", "planned_s": 0.6}],
        "restored": {"at_s": 1.0, "ok": False, "errors": ["a: unconfirmed"]},
        "time_origin": "the first measured Go of the first size (after its warm-ups)",
        "run_end_s": 0.99,
        "by_size": [
            {"size": SIZE, "clean_runs": 7, "clean_median_s": 0.05, "fault_runs": 3,
             "fault_median_s": 0.2, "fault_vs_clean": 4.0,
             "events": [{"event": 0, "label": "a-d0 rate 50 Mbit/s", "from_s": 0.12,
                         "to_s": 0.32, "runs": 3, "median_s": 0.2, "vs_clean": 4.0}]},
        ],
    }  # fmt: skip
    if origin is not None:
        doc["origin_ns"] = origin
    return doc


def _store(path, origin: int | None) -> str:
    """A stored bench run: 2 warm-ups before the origin, then 10 iterations of 100 ms each
    (slow ones, 250 ms, inside the cut), the first measured one starting 1 ms after the Go."""
    prog = build_program("all_reduce", "ring", 2, SIZE)
    with RunStore(path) as rs:
        rid = rs.start_run(
            "genie bench --faults ...", testbed_name="lab2", meta={"placement": ["a", "b"]}
        )
        xs = []
        t = ORIGIN - 200_000_000
        for k in range(12):
            dur = 250_000_000 if k in (3, 4) else 50_000_000
            start = t if k < 2 else ORIGIN + 1_000_000 + (k - 2) * 100_000_000
            xs.append(
                Instance(iteration=k, warmup=k < 2, start_ns=start, end_ns=start + dur,
                         time_s=dur / 1e9, rank_start_ns=[start] * 2,
                         rank_end_ns=[start + dur] * 2, ranks=[0, 1])
            )  # fmt: skip
            t += 100_000_000
        rs.add_instances(rid, prog.spec, xs)
        rs.update_run(rid, meta={"placement": ["a", "b"], "faults": _faults(origin)})
        rs.finish_run(rid)
    return rid


def _report(tmp_path, capsys, origin):
    store = tmp_path / f"s{origin}.sqlite"
    rid = _store(store, origin)
    out = tmp_path / f"rep{origin}"
    assert main(["report", rid, "--store", str(store), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (fig,) = [f for f in doc["figures"] if f["kind"] == "fault_timeline"]
    return fig, (out / "report.html").read_text(), out


def test_late_and_unconfirmed_faults_are_shown_as_such(tmp_path, capsys) -> None:
    fig, html, out = _report(tmp_path, capsys, ORIGIN)
    assert {p.name for p in out.glob("faults0.*")} == {"faults0.png", "faults0.svg", "faults0.pdf"}
    late, unsure = fig["windows"]
    # applied 20 ms late: shown where it was applied, with the planned window beside it
    assert (late["from_s"], late["to_s"]) == (0.12, 0.32) and late["shifted"]
    assert (late["planned_from_s"], late["planned_to_s"]) == (0.1, 0.3)
    assert late["title"] == "a-d0 rate 50 Mbit/s for 200 ms from 120 ms (planned 100 ms to 300 ms)"
    # never confirmed by its host: the planned window, said so
    assert not unsure["confirmed"] and (unsure["from_s"], unsure["to_s"]) == (0.5, 0.6)
    assert "unconfirmed" in unsure["title"]
    (meas,) = [s for s in fig["series"] if s["role"] == "measured"]
    assert meas["x"][0] == pytest.approx(0.001) and len(meas["x"]) == 10
    assert fig["origin_note"] == ""
    assert "unconfirmed: host unreachable" in html and "+20.0 ms" in html
    assert "Restoring the links FAILED" in html and "4.00x" in html


def test_an_old_run_without_its_origin_is_placed_from_its_first_measured_iteration(
    tmp_path, capsys
) -> None:
    fig, html, _ = _report(tmp_path, capsys, None)
    (meas,) = [s for s in fig["series"] if s["role"] == "measured"]
    assert meas["x"][0] == 0.0  # the origin: the first measured iteration's start
    assert "did not record its time origin" in fig["origin_note"]
    assert "did not record its time origin" in html

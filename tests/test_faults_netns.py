"""Link faults during ``genie emulate`` on a netns star (root).

Two hosts at 200 Mbit/s run a data-parallel step (one 1.5 MiB ring all-reduce, ~63 ms on the
wire) 30 times. At 300 ms h0's link is cut to 50 Mbit/s for 400 ms: the runs during the cut take
several times longer than those overlapping no fault. At 1.2 s switch port p1 (h1's link) goes
down for 50 ms. Both are recorded with when they were applied, on the Chrome trace and in the
stored run, and afterwards every touched link is back as the testbed file says (tc rate, up).
Prefix ``genie-pq-``; everything is removed afterwards.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from genie.cli import main
from genie.store import RunStore
from genie.workload import save_workload
from genie.workload.generators import data_parallel
from tests._agents import netns_unavailable
from tests.netns_helpers import star

PREFIX = "genie-pq-"
_WHY = netns_unavailable(f"{PREFIX}probe")
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
RATE_BPS = 200e6 / 8


def _tbf_rate(ns: str, dev: str) -> float:
    out = subprocess.run(
        ["tc", "-j", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True
    )
    (q,) = [q for q in json.loads(out.stdout) if q["kind"] == "tbf"]
    return float(q["options"]["rate"])


def _is_up(ns: str, dev: str) -> bool:
    out = subprocess.run(
        ["ip", "-j", "-n", ns, "link", "show", dev], capture_output=True, text=True
    )
    return "UP" in json.loads(out.stdout)[0]["flags"]


def test_a_rate_cut_slows_the_runs_during_it_and_every_fault_is_recorded_and_undone(
    tmp_path, capsys
) -> None:
    prefix = tmp_path / "dp"
    save_workload(data_parallel(2, layers=1, hidden=256, bucket_bytes=2**30), prefix)
    schedule = "at 300ms: h0 link rate 50mbit for 400ms; at 1200ms: sw0-p1 down for 50ms"
    store, trace = tmp_path / "r.sqlite", tmp_path / "t.json"
    with star(tmp_path, "pq-star2", PREFIX, 2, "200mbit") as path:
        args = ["emulate", str(prefix), "--testbed", str(path), "--store", str(store)]
        args += ["--iterations", "30", "--warmup", "1", "--json", "--faults", schedule]
        assert main([*args, "--trace", str(trace)]) == 0
        doc = json.loads(capsys.readouterr().out)
        # restored: both ends of h0's link at the declared rate, both ends of h1's link up
        rates = [_tbf_rate(f"{PREFIX}h0", "eth0"), _tbf_rate(f"{PREFIX}sw0", "p0")]
        ups = [_is_up(f"{PREFIX}sw0", "p1"), _is_up(f"{PREFIX}h1", "eth0")]
    f = doc["faults"]
    assert rates == [RATE_BPS, RATE_BPS] and ups == [True, True]
    assert f["restored"]["ok"] and f["not_applied"] == []
    applied = [(a["planned_s"], a["restore"], a["ok"]) for a in f["applied"]]
    assert applied == [
        (0.3, False, True),
        (0.7, True, True),
        (1.2, False, True),
        (1.25, True, True),
    ]
    for a in f["applied"]:  # applied when due, give or take the scheduler's wake-up
        assert a["planned_s"] <= a["applied_s"] < a["planned_s"] + 0.05
    cut, down = f["effect"]["events"]
    print(
        f"clean runs: {f['effect']['clean_runs']}, median {f['effect']['clean_median_s']:.4f} s; "
        f"rate cut: {cut['runs']} runs, {cut['vs_clean']:.2f}x; link down: {down['runs']} runs, "
        f"{down['vs_clean']:.2f}x"
    )
    # at a quarter of the rate, runs inside the cut take up to 4x; overlapping ones less
    assert cut["runs"] >= 1 and cut["vs_clean"] > 1.5
    assert f["effect"]["clean_runs"] >= 10
    assert down["runs"] >= 1 and down["vs_clean"] > 1.2  # TCP waits out a retransmit timeout
    # on the timeline: the fault windows and instants on the wire's row of the Chrome trace
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["name"] for e in events if e.get("ph") == "i"}
    assert "h0 link (h0-eth0) rate 50 Mbit/s" in names and "sw0-p1 down" in names
    # and in the stored run
    with RunStore(store) as rs:
        meta = rs.run(doc["run_id"]).meta
    assert [a["label"] for a in meta["faults"]["applied"]] == [a["label"] for a in f["applied"]]


def test_a_rate_cut_mid_bench_slows_the_iterations_during_it_and_is_undone(
    tmp_path, capsys
) -> None:
    """genie bench --faults: the clock starts at the first measured Go (warm-ups apart); the
    iterations overlapping a cut to a fifth of the rate take longer than those overlapping none
    (per size), the faults are in --json and the stored run, and h0's link is restored."""
    store = tmp_path / "r.sqlite"
    schedule = "at 150ms: h0 link rate 40mbit for 300ms"
    with star(tmp_path, "pq-bench", PREFIX, 2, "200mbit") as path:
        args = ["bench", "--testbed", str(path), "--sizes", "512KiB", "--store", str(store)]
        args += ["--iters", "40", "--warmup", "2", "--json", "--faults", schedule]
        assert main(args) == 0
        doc = json.loads(capsys.readouterr().out)
        rates = [_tbf_rate(f"{PREFIX}h0", "eth0"), _tbf_rate(f"{PREFIX}sw0", "p0")]
    f = doc["faults"]
    assert rates == [RATE_BPS, RATE_BPS] and f["restored"]["ok"]
    assert f["time_origin"].startswith("the first measured Go")
    applied = [(round(a["planned_s"], 6), a["restore"], a["ok"]) for a in f["applied"]]
    assert applied == [(0.15, False, True), (0.45, True, True)]
    (size,) = f["by_size"]
    print(
        f"512 KiB: {size['clean_runs']} clean iterations, p50 {size['clean_median_s']:.4f} s; "
        f"{size['fault_runs']} under the cut, p50 {size['fault_median_s']:.4f} s "
        f"({size['fault_vs_clean']:.2f}x)"
    )
    assert size["size"] == 512 * 1024 and size["clean_runs"] + size["fault_runs"] == 40
    assert size["fault_runs"] >= 1 and size["fault_vs_clean"] > 1.5
    assert size["clean_runs"] >= 10
    with RunStore(store) as rs:
        meta = rs.run(doc["run_id"]).meta
    assert meta["faults"]["by_size"] == f["by_size"]

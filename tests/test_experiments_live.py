"""Experiments on live agents (loopback): MoE all-to-all-v on the wire, a straggler on the wire."""

from __future__ import annotations

import json

import pytest

from genie.cli import main
from genie.controller.local import LocalCluster
from genie.workload import save_workload
from genie.workload.generators import data_parallel, moe
from genie.workload.generators.moe import expert_blocks


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    with LocalCluster.start(2, d) as cl:
        yield cl


def _emulate(cluster, prefix, tmp_path, capsys, *extra) -> dict:
    args = ["emulate", str(prefix), "--testbed", str(cluster.testbed_path), "--json"]
    args += ["--store", str(tmp_path / "r.sqlite"), "--iterations", "2", "--warmup", "0"]
    assert main([*args, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_skewed_moe_runs_its_uneven_all_to_alls_on_the_wire(cluster, tmp_path, capsys):
    prefix = tmp_path / "moe"
    save_workload(moe(2, layers=1, hidden=128, seq=128, batch=1, expert_skew=2.0), prefix)
    doc = _emulate(cluster, prefix, tmp_path, capsys)
    a2a = [x for x in doc["instances"] if x["collective"] == "all_to_all"]
    assert len(a2a) == 4 and all(x["measured_p50_s"] > 0 for x in a2a)
    # dispatch: rank 1 sends rank 0 (the popular experts) its big block b0, rank 0 sends rank 1
    # the small b1; combine sends them back: the agents moved exactly these per-peer bytes
    b0, b1 = expert_blocks(2, 2, 2.0, 128 * 2 * 128 * 2, 2)
    assert b0 > 3 * b1
    want = 4 * (b0 + b1)  # per pass: two dispatches and two combines
    dense = 2 * 2 * (4 * 128 * 128 * 2) // 2  # the dense-gradient ring all-reduce, 2 ranks
    for run in doc["runs"]:
        assert run["bytes_sent"] == want + dense
        assert run["messages_verified"] > 0
    measured = doc["reports"][0]
    uneven = [c for c in measured["collectives"] if c["uneven"] is not None]
    assert len(uneven) == 4 and all(c["uneven"] > 1 for c in uneven)


def test_a_straggler_on_the_wire_makes_the_others_wait(cluster, tmp_path, capsys):
    prefix = tmp_path / "dp"
    save_workload(data_parallel(2, layers=2, hidden=64, seq=64, batch=1), prefix)
    doc = _emulate(cluster, prefix, tmp_path, capsys, "--straggler", "1=400")
    s = doc["reports"][0]["stragglers"]
    assert s and s["cost_s"] > 0
    by = {x["rank"]: x for x in s["by_rank"]}
    assert by[0]["waited_most_on"] == 1 and by[0]["wait_s"] > 0
    assert by[1]["wait_s"] < by[0]["wait_s"]
    # the wire saw rank 1 arrive late: its first op starts after rank 0's
    first = min(doc["instances"], key=lambda x: x["iid"])
    (r0, s0, _), (r1, s1, _) = sorted(first["rank_intervals_s"][0])
    assert (r0, r1) == (0, 1) and s1 > s0

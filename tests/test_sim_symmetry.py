"""The symmetric shortcut: proven only when it holds, and it agrees with the full replay."""

from __future__ import annotations

import pytest

from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder
from genie.sim.network import AnalyticalBackend
from genie.sim.report import chrome_trace
from genie.sim.symmetry import representatives
from genie.sim.synthetic import data_parallel
from genie.sim.traffic import NetModel


def be(n):
    return AnalyticalBackend(NetModel(n, 50e9, 1e-6))


@pytest.mark.parametrize("n", [2, 8, 32])
def test_symmetric_and_full_replays_agree(n):
    cw = data_parallel(n, nodes_per_rank=300, layers_per_bucket=7, bucket_bytes=8 * 2**20)
    assert representatives(cw) == [0]
    sym, raw_sym = replay(cw, be(n), symmetry=True)
    full, raw_full = replay(cw, be(n), symmetry=False)
    assert sym.symmetric and not full.symmetric
    assert len(raw_sym.start) * n == len(raw_full.start)
    assert sym.iteration_s == pytest.approx(full.iteration_s, rel=1e-12)
    assert len(sym.collectives) == len(full.collectives) > 1
    for a, b in zip(sym.collectives, full.collectives, strict=True):
        assert (a.start, a.end) == (pytest.approx(b.start, rel=1e-12), pytest.approx(b.end))
    for a, b in zip(sym.ranks, full.ranks, strict=True):
        for f in ("compute", "exposed_comm", "wait", "idle"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9, abs=1e-15)
    # buckets overlap backward: some comm is hidden, so exposed < total comm
    r0 = full.ranks[0]
    assert r0.exposed_comm < r0.comm_total


def test_no_symmetry_when_ranks_differ():
    assert representatives(data_parallel(4, nodes_per_rank=50, jitter=0.2)) is None


def test_no_symmetry_with_send_recv_or_partial_groups():
    b = GraphBuilder(2)
    for r in range(2):
        b.compute(r, 1e-6)
    b.send(0, 1, 10)
    b.recv(1, 0, 10)
    assert representatives(b.build(), orbits=False) is None
    b = GraphBuilder(4)
    b.group("a", [0, 1])
    b.group("b", [2, 3])
    for r in range(4):
        b.collective(r, "all_reduce", 64, group=0 if r < 2 else 1)
    # graphs look alike (group ids differ), and no group holds everyone
    cw = b.build()
    assert representatives(cw, orbits=False) is None
    # alike up to a rotation, though: ranks 0, 1 stand for 2, 3 (genie.sim.orbits)
    assert representatives(cw) == [0, 1]


def test_chrome_trace_has_one_process_per_rank(tmp_path):
    import json

    cw = data_parallel(4, nodes_per_rank=40, layers_per_bucket=5)
    _, raw = replay(cw, be(4), symmetry=True)
    out = tmp_path / "t.json"
    chrome_trace(cw, raw, out)
    doc = json.loads(out.read_text())
    ev = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert names == {r: f"rank {r}" for r in range(4)}
    spans = [e for e in ev if e["ph"] == "X" and e["pid"] == 3]
    assert {e["tid"] for e in spans} >= {0, 1}  # compute and comm tracks
    assert len([e for e in spans if e["tid"] in (0, 1)]) == cw.ranks[3].n_nodes
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(raw.makespan * 1e6)


def test_chrome_trace_can_keep_the_first_ranks_only(tmp_path):
    import json

    cw = data_parallel(6, nodes_per_rank=20, layers_per_bucket=5)
    _, raw = replay(cw, be(6))
    out = tmp_path / "t.json"
    chrome_trace(cw, raw, out, max_ranks=2)
    doc = json.loads(out.read_text())
    assert {e["pid"] for e in doc["traceEvents"]} == {0, 1}
    assert doc["otherData"]["ranks_left_out"] == 4

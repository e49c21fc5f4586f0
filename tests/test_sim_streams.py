"""NCCL's stream order in the simulator: one process group's collectives in issue order."""

from __future__ import annotations

import pytest

import genie
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder
from genie.sim.network import AnalyticalBackend, Transfer
from genie.sim.streams import order_collectives
from genie.sim.traffic import NetModel
from genie.vocabulary import chakra_type
from genie.workload.generators import data_parallel

MS = 1e-3


def _alone(be, size, n):
    return be.alone(Transfer(0, chakra_type("all_reduce"), size, tuple(range(n)), 0))


def test_queued_buckets_each_take_their_standalone_time():
    n = 16
    cw = compile_workload(data_parallel(n, layers=8, hidden=2048, bucket_bytes=48 << 20))
    be = AnalyticalBackend(NetModel(n, 50e9, 1e-6))
    rep, _ = replay(order_collectives(cw, 1), be)
    for row in rep.collectives:
        assert row.time == pytest.approx(_alone(be, row.size, n), rel=1e-9)
    # without the order the buckets share the links: the later ones look several times slower
    free, _ = replay(order_collectives(cw, 0), AnalyticalBackend(NetModel(n, 50e9, 1e-6)))
    slowest = max(r.time / _alone(be, r.size, n) for r in free.collectives)
    assert slowest > 1.5


def _three_collectives(groups=("a", "a", "a")):
    b = GraphBuilder(2)
    for name in sorted(set(groups)):
        b.group(name)
    for r in range(2):
        c = b.compute(r, 1 * MS)
        for g in groups:  # all issued together after the compute
            b.collective(r, "all_reduce", 8 << 20, group=g, deps=[c])
    return b.build()


def test_concurrency_bounds_collectives_in_flight_per_group():
    cw = _three_collectives()
    be = AnalyticalBackend(NetModel(2, 10e9, 0.0))
    one = _alone(be, 8 << 20, 2)
    for k in (1, 2, 3, 0):
        rep, _ = replay(order_collectives(cw, k), AnalyticalBackend(NetModel(2, 10e9, 0.0)))
        ends = sorted(r.end for r in rep.collectives)
        assert ends[-1] == pytest.approx(1 * MS + 3 * one, rel=1e-9)  # same bytes either way
        starts = sorted(r.start for r in rep.collectives)
        in_flight_at_start = sum(s == pytest.approx(1 * MS) for s in starts)
        assert in_flight_at_start == (3 if k in (0, 3) else k)


def test_different_groups_run_concurrently():
    cw = _three_collectives(("a", "b", "c"))
    rep, _ = replay(order_collectives(cw, 1), AnalyticalBackend(NetModel(2, 10e9, 0.0)))
    assert all(r.start == pytest.approx(1 * MS) for r in rep.collectives)


def test_ordering_never_makes_a_cycle_when_deps_point_forward():
    # rank graphs whose node order is not topological: collective #1 (node 0) depends on node 2
    b = GraphBuilder(2)
    for r in range(2):
        b.collective(r, "all_reduce", 1024, deps=[2])
        b.collective(r, "all_reduce", 1024)
        b.compute(r, 1 * MS, deps=[1])
    cw = b.build()
    rep, _ = replay(order_collectives(cw, 1), AnalyticalBackend(NetModel(2, 10e9, 0.0)))
    assert rep.iteration_s > 1 * MS  # it ran to the end: no dependency cycle was added


def test_simulate_says_which_order_it_used(tmp_path):
    prefix = tmp_path / "dp"
    genie.save_workload(genie.generate(genie.DataParallel(ranks=4)).workload, prefix)
    runs = {}
    for k in (1, 0):
        model = genie.Model(comm_concurrency=k)
        rep = genie.simulate(genie.SimulateSpec(workload=str(prefix), model=model)).reports[0]
        runs[k] = rep
        assert any(n.startswith("stream order:") for n in rep.notes)
    assert "one at a time in issue order" in " ".join(runs[1].notes)
    assert runs[1].iteration_s != runs[0].iteration_s

"""Network backends and pricers: fair sharing, units, placements, topologies, measured tables."""

from __future__ import annotations

import json

import numpy as np
import pytest

from genie.errors import StoreError, TopologyError, UnitError
from genie.sim.measured import MeasuredBackend, MeasuredTable
from genie.sim.network import AnalyticalBackend, Demand, Transfer
from genie.sim.traffic import NetModel
from genie.units import parse_bandwidth
from genie.vocabulary import P2P, chakra_type, closed_form

US = 1e-6


class FixedPricer:
    """Explicit link loads per transfer id, for checking the sharing arithmetic by hand."""

    def __init__(self, caps, loads, latency=0.0):
        self.caps = np.asarray(caps, float)
        self.loads = loads
        self.latency = latency

    def capacity(self):
        return self.caps

    def price(self, tr):
        links, nbytes = zip(*self.loads[tr.iid], strict=True)
        return Demand(self.latency, np.asarray(links), np.asarray(nbytes, float))


def tr(iid, size=0, ranks=(0, 1)):
    return Transfer(iid, 0, size, ranks, 0)


def drain(be):
    out = {}
    while be.next_time() < float("inf"):
        t = be.next_time()
        for iid in be.pop(t):
            out[iid] = t
    return out


def test_two_equal_transfers_on_one_link_take_twice_as_long():
    be = AnalyticalBackend(FixedPricer([1e9], {0: [(0, 10_000)], 1: [(0, 10_000)]}))
    be.start(tr(0), 0.0)
    be.start(tr(1), 0.0)
    done = drain(be)
    assert done[0] == pytest.approx(20 * US) and done[1] == pytest.approx(20 * US)


def test_max_min_fair_rates_by_progressive_filling():
    # X on link 0; Y on links 0 and 1; Z on link 1 (4x capacity, 4x bytes). By hand: link 0
    # saturates at rate 1/2 (X, Y frozen); link 1 then has 4e9 - 0.5 * 5e9 = 1.5e9 left for Z
    # whose demand is 4e9, so Z runs at 0.5 + 1.5/4 = 0.875.
    loads = {0: [(0, 10_000)], 1: [(0, 10_000), (1, 10_000)], 2: [(1, 40_000)]}
    be = AnalyticalBackend(FixedPricer([1e9, 4e9], loads))
    for i in range(3):
        be.start(tr(i), 0.0)
    be.next_time()  # starts at one time re-fill once, when the next completion is asked
    rates = {iid: st[1] for iid, st in be._active.items()}
    assert rates == {0: pytest.approx(0.5), 1: pytest.approx(0.5), 2: pytest.approx(0.875)}
    done = drain(be)
    assert done[2] == pytest.approx(10 * US / 0.875)
    assert done[0] == pytest.approx(20 * US) and done[1] == pytest.approx(20 * US)


def test_latency_tail_does_not_hold_links():
    # A: 10 us of bytes + 5 us latency; B starts at 10 us on the same link and runs alone.
    be = AnalyticalBackend(FixedPricer([1e9], {0: [(0, 10_000)], 1: [(0, 10_000)]}, 5 * US))
    be.start(tr(0), 0.0)
    assert be.next_time() == pytest.approx(10 * US)
    assert be.pop(be.next_time()) == []  # bytes done, latency tail begins
    be.start(tr(1), 10 * US)
    done = drain(be)
    assert done == {0: pytest.approx(15 * US), 1: pytest.approx(25 * US)}


def test_tiny_transfers_sharing_a_link_late_in_the_step_finish():
    """Two 4 KiB transfers sharing a 1.2 TB/s link 1.3 s into the step: their rates change while
    their bytes take picoseconds, less than the clock can tell apart at 1.3 s. Every event must
    still pop (a dilated emulate replay spun forever here: bandwidth x4 made every transfer
    four times shorter)."""
    be = AnalyticalBackend(FixedPricer([1.2e12], {0: [(0, 4096)], 1: [(0, 4096)]}))
    be.start(tr(0), 1.3)
    be.next_time()  # the first runs alone for a picosecond
    be.start(tr(1), 1.3 + 1e-12)
    done: dict[int, float] = {}
    for _ in range(50):  # bounded: a stuck event fails here instead of hanging the suite
        t = be.next_time()
        if t == float("inf"):
            break
        for iid in be.pop(t):
            done[iid] = t
    assert sorted(done) == [0, 1]
    assert all(1.3 <= t < 1.3 + 1e-8 for t in done.values())


def test_parse_bandwidth_units_are_explicit():
    assert parse_bandwidth("50GiB/s") == 50 * 2**30
    assert parse_bandwidth("50GB/s") == 50e9
    assert parse_bandwidth("100Gb/s") == 100e9 / 8
    assert parse_bandwidth("400gbit") == 400e9 / 8
    for bad in ("50 furlongs/s", "fast", "-1GB/s"):
        with pytest.raises(UnitError):
            parse_bandwidth(bad)


@pytest.mark.parametrize(
    "coll,size",
    [
        ("all_reduce", 2**20),
        ("reduce_scatter", 3 * 2**20),
        ("all_gather", 4096),
        ("all_to_all", 2**22),
        ("broadcast", 2**20),
    ],
)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_switch_model_alone_equals_closed_form(coll, size, n):
    m = NetModel(n, 25e9, 2 * US)
    be = AnalyticalBackend(m)
    t = be.alone(Transfer(0, chakra_type(coll), size, tuple(range(n)), 0))
    assert t == pytest.approx(closed_form(coll, None, n, size, 25e9, 4 * US), rel=1e-12)  # 2 hops


def test_ranks_on_one_host_use_the_intra_host_bandwidth():
    m = NetModel(4, 10e9, 1 * US, ranks_per_host=2, intra_bandwidth=100e9, intra_latency=0.0)
    be = AnalyticalBackend(m)
    inside = be.alone(Transfer(0, chakra_type("all_reduce"), 2**20, (0, 1), 0))
    across = be.alone(Transfer(1, chakra_type("all_reduce"), 2**20, (0, 2), 1))
    assert inside == pytest.approx(2**20 / 100e9)  # 2 ranks: each sends S, no latency inside
    assert across == pytest.approx(2 * 2 * US + 2**20 / 10e9)  # 2 steps x 2 hops x 1 us
    # a 4-rank ring over 2 hosts: each host NIC carries one ring edge each way
    ring4 = be.alone(Transfer(2, chakra_type("all_reduce"), 2**20, (0, 1, 2, 3), 2))
    assert ring4 == pytest.approx(6 * 2 * US + 1.5 * 2**20 / 10e9)


def test_topology_pricer_on_a_star_matches_the_switch_model():
    from genie.collectives import topology
    from genie.sim.traffic import TopologyPricer

    topo = topology.switch(4, 50 * 2**30, 250e-9)  # 2 links per route: 500 ns per message
    be = AnalyticalBackend(TopologyPricer(topo, [0, 1, 2, 3]))
    t = be.alone(Transfer(0, chakra_type("all_reduce"), 2**20, (0, 1, 2, 3), 0))
    assert t == pytest.approx(closed_form("all_reduce", None, 4, 2**20, 50 * 2**30, 500e-9))


def test_oversubscribed_leaf_spine_slows_cross_leaf_traffic():
    from genie.collectives import topology
    from genie.sim.traffic import TopologyPricer

    topo = topology.leaf_spine(2, 1, 2, 1e9, 0.0, oversubscription=2.0)
    be = AnalyticalBackend(TopologyPricer(topo, [0, 1, 2, 3]))
    same_leaf = be.alone(Transfer(0, P2P, 10**6, (0, 1), -1))
    # two flows leave leaf 0 at once: its uplink (2 x 1e9 / 2 = 1e9) is shared
    be.start(Transfer(1, P2P, 10**6, (0, 2), -1), 0.0)
    be.start(Transfer(2, P2P, 10**6, (1, 3), -1), 0.0)
    done = drain(be)
    assert same_leaf == pytest.approx(1e-3)
    assert done[1] == pytest.approx(2e-3) and done[2] == pytest.approx(2e-3)


def test_placement_must_cover_the_ranks():
    from genie.collectives import topology
    from genie.sim.traffic import TopologyPricer

    with pytest.raises(TopologyError, match="placement covers 2 ranks"):
        TopologyPricer(topology.switch(2, 1e9, 0.0), [0, 1], n_ranks=4)


def test_measured_table_interpolates_log_log_and_flags_extrapolation(tmp_path):
    rows = [
        {"collective": "all_reduce", "n_ranks": 4, "size": 1024, "time_s": 10e-6},
        {"collective": "all_reduce", "n_ranks": 4, "size": 1024, "time_s": 30e-6},
        {"collective": "all_reduce", "n_ranks": 4, "size": 1024 * 16, "time_s": 80e-6},
    ]
    f = tmp_path / "run.json"
    f.write_text(json.dumps(rows))
    table = MeasuredTable.from_json(f)
    # median of 10 and 30 us at 1 KiB is 20 us; midpoint in log size is 4 KiB -> sqrt(20*80)
    assert table.lookup("all_reduce", 4, 1024) == (pytest.approx(20e-6), "measured")
    t, how = table.lookup("all_reduce", 4, 4096)
    assert how == "interpolated" and t == pytest.approx(40e-6)
    be = MeasuredBackend(table, model=lambda tr: tr.size * 1e-9)
    be.start(Transfer(0, chakra_type("all_reduce"), 4096, (0, 1, 2, 3), 0), 0.0)
    be.start(Transfer(1, chakra_type("all_reduce"), 32768, (0, 1, 2, 3), 0), 0.0)
    done = drain(be)
    assert done[0] == pytest.approx(40e-6)
    # outside: the model (1 ns/B) scaled to the measured point at 16 KiB: 80 us * 2
    assert done[1] == pytest.approx(160e-6)
    assert be.counts == {"interpolated": 1, "extrapolated": 1}
    assert "1 EXTRAPOLATED" in be.summary()


def test_measured_without_data_or_model_is_a_clear_error(tmp_path):
    f = tmp_path / "empty.json"
    f.write_text("[]")
    with pytest.raises(StoreError, match="no measured collective times"):
        MeasuredTable.from_json(f)
    table = MeasuredTable([("all_gather", 2, 100, 1e-6)])
    be = MeasuredBackend(table)
    with pytest.raises(StoreError, match="no measured times for all_reduce on 2 ranks"):
        be.start(Transfer(0, 0, 100, (0, 1), 0), 0.0)


def test_program_pricer_alone_equals_the_collectives_cost_model():
    from genie.collectives import build_program, topology
    from genie.collectives.cost import estimate

    topo = topology.switch(8, 10e9, 1 * US)
    from genie.sim.program_pricer import ProgramPricer

    for algo in ("ring", "halvingDoubling"):
        pricer = ProgramPricer(topo, list(range(8)), algorithms={"all_reduce": algo})
        be = AnalyticalBackend(pricer)
        t = be.alone(Transfer(0, chakra_type("all_reduce"), 3 * 2**20, tuple(range(8)), 0))
        prog = build_program("all_reduce", algo, 8, 3 * 2**20)
        assert t == pytest.approx(estimate(prog, topo).time_s, rel=1e-12)


def test_program_pricer_sharing_matches_estimate_concurrent_for_equal_programs():
    from genie.collectives import build_program, topology
    from genie.collectives.cost import estimate_concurrent
    from genie.sim.program_pricer import ProgramPricer

    topo = topology.switch(4, 10e9, 1 * US)
    be = AnalyticalBackend(ProgramPricer(topo, [0, 1, 2, 3]))
    for iid, g in ((0, 0), (1, 1)):
        be.start(Transfer(iid, chakra_type("all_reduce"), 2**20, (0, 1, 2, 3), g), 0.0)
    done = drain(be)
    prog = build_program("all_reduce", "ring", 4, 2**20)
    ref = estimate_concurrent([(prog, 0.0), (prog, 0.0)], topo)
    # two equal rings together: every step's bytes at half rate, latency unchanged
    assert done[0] == pytest.approx(ref[0].time_s, rel=1e-9)
    assert done[1] == pytest.approx(ref[1].time_s, rel=1e-9)
    assert done[0] == pytest.approx(6 * (2 * US + 2 * 2**20 / 4 / 10e9), rel=1e-9)


def test_program_pricer_falls_back_for_collectives_without_a_plan():
    from genie.collectives import topology
    from genie.sim.program_pricer import ProgramPricer

    pricer = ProgramPricer(topology.switch(4, 10e9, 1 * US), [0, 1, 2, 3])
    t = AnalyticalBackend(pricer).alone(Transfer(0, chakra_type("barrier"), 0, (0, 1, 2, 3), 0))
    assert t == pytest.approx(2 * 2 * US)  # dissemination: log2(4) steps x 2 hops x 1 us
    t = AnalyticalBackend(pricer).alone(Transfer(1, chakra_type("gather"), 4000, (0, 1, 2, 3), 0))
    assert t == pytest.approx(2 * US + 3000 / 10e9)
    assert pricer.fallbacks == {"gather": 1}


def test_measured_times_share_links_through_a_calibrated_pricer():
    # alone each all-reduce was measured at 100 us; the model puts all bytes on one link, so two
    # started together share it: each takes 200 us. Without a pricer they would not interact.
    table = MeasuredTable([("all_reduce", 2, 4096, 100e-6)])
    pricer = FixedPricer([1e9], {0: [(0, 5_000)], 1: [(0, 5_000)]})
    shared = MeasuredBackend(table, pricer=pricer)
    alone = MeasuredBackend(table)
    for be in (shared, alone):
        for iid in (0, 1):
            be.start(Transfer(iid, chakra_type("all_reduce"), 4096, (0, 1), iid), 0.0)
    assert drain(shared) == {0: pytest.approx(200e-6), 1: pytest.approx(200e-6)}
    assert drain(alone) == {0: pytest.approx(100e-6), 1: pytest.approx(100e-6)}
    assert shared.standalone == {0: pytest.approx(100e-6), 1: pytest.approx(100e-6)}


def test_hierarchical_all_reduce_uses_the_placement():
    from genie.collectives import build_program, topology
    from genie.collectives.cost import estimate
    from genie.sim.program_pricer import ProgramPricer, ranks_per_host

    assert ranks_per_host([0, 0, 1, 1]) == 2 and ranks_per_host([0, 1, 0, 1]) == 1
    assert ranks_per_host([0, 0, 0, 1]) == 1
    topo = topology.switch(2, 10e9, 1 * US, intra_bandwidth=200e9)
    pricer = ProgramPricer(
        topo, [0, 0, 0, 0, 1, 1, 1, 1], algorithms={"all_reduce": "hierarchical"}
    )
    t = AnalyticalBackend(pricer).alone(Transfer(0, 0, 2**22, tuple(range(8)), 0))
    prog = build_program("all_reduce", "hierarchical", 8, 2**22, ranks_per_host=4)
    assert t == pytest.approx(estimate(prog, topo, [0, 0, 0, 0, 1, 1, 1, 1]).time_s, rel=1e-12)
    assert not pricer.fallbacks
    flat = ProgramPricer(topo, [0, 0, 0, 0, 1, 1, 1, 1])
    assert t < AnalyticalBackend(flat).alone(Transfer(0, 0, 2**22, tuple(range(8)), 0))

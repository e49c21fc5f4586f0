"""What the scale work (issue 33) reuses gives what computing it afresh gives: the line-rate
twin's tables read from the topology, the pricing check's order and transfers per rotation, the
host work the batch compile counts per distinct node, and instances' members held as columns."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from genie.api.simulation import trace_facts
from genie.collectives import topology as T
from genie.sim.adapter import compile_reference, compile_workload
from genie.sim.api import replay
from genie.sim.compiled import MemberLists, _finish_loop
from genie.sim.network import AnalyticalBackend
from genie.sim.orbits import _transfers, check_pricing, find_orbits, link_permutation
from genie.sim.program_pricer import ProgramPricer
from genie.sim.streams import order_collectives
from genie.workload.generators import llm
from genie.workload.generators.pytorch_style import pytorch_style
from genie.workload.model import NodeKind


def _leaf_spine_pricer(n: int, spines: int = 1, canonical: bool = True) -> ProgramPricer:
    topo = T.leaf_spine(2 * spines, spines, n // (2 * spines), 50 * 2**30, 500e-9, 2.0)
    return ProgramPricer(topo, list(range(n)), n, canonical=canonical)


@pytest.mark.parametrize(("spines", "canonical"), [(1, True), (1, False), (2, True)])
def test_the_twin_prices_as_a_fresh_pricer_on_the_same_topology(spines, canonical):
    """The twin takes its leaf rows, link ids and link codes from the pricer it twins (the same
    topology object): every instance's demand equals a freshly made pricer's."""
    cw = order_collectives(compile_workload(llm(16, tp=2, pp=2, layers=2, micro_batches=2)), 1)
    a = _leaf_spine_pricer(16, spines, canonical)
    transfers = _transfers(cw, np.arange(len(cw.instances), dtype=np.int64))
    a.price_many(transfers)  # the pricer's link codes made where it renames canonical shapes
    assert (a._codes is not None) == (spines == 1 and canonical)
    twin = a.twin()
    fresh = ProgramPricer(a.topology, list(range(16)), 16)
    assert twin._lid is a._lid and twin._codes is a._codes
    assert twin._leaf_hosts == fresh._leaf_hosts and twin.canonical == fresh.canonical
    if canonical:
        assert twin._leaf_hosts is a._leaf_hosts
    got, want = twin.price_many(transfers), [fresh.price(t) for t in transfers]
    for x, y in zip(got, want, strict=True):
        assert x.latency == y.latency
        assert np.array_equal(x.links, y.links) and np.array_equal(x.nbytes, y.nbytes)


def test_the_pricing_checks_order_and_transfers_are_made_once_per_rotation():
    """The second pricer checked on a rotation reads the first one's transfers (one list)."""
    cw = order_collectives(compile_workload(llm(16, tp=2, pp=2, layers=2, micro_batches=2)), 1)
    a = ProgramPricer(T.switch(16, 50 * 2**30, 500e-9), list(range(16)), 16)
    found = find_orbits(cw)
    assert found is not None
    orb = found.candidates[0]
    pi = link_permutation(a, orb.perm)
    assert not isinstance(pi, str)
    assert check_pricing(a, cw, orb, pi) is None
    plan = orb.pricing_plan
    assert plan is not None and plan.transfers is not None and plan.order is not None
    first = plan.transfers
    assert check_pricing(a.twin(), cw, orb, pi) is None
    assert plan.transfers is first
    # the order: each key once, a pair's instance before its image, as first met
    want = list(dict.fromkeys(np.stack([plan.pair_a, plan.pair_b], axis=1).ravel().tolist()))
    assert plan.order == want
    assert [t.iid for t in first] == plan.keys[want].tolist()


@pytest.mark.parametrize("kind", ["pytorch", "llm"])
def test_the_batch_compile_counts_host_work_as_the_nodes_say(kind):
    """``host_work_nodes`` of the batch compile is the count of nodes whose kind is host work
    (none in a generated llm); the reference compile does not count (None), and the trace
    facts then ask the nodes: the same figure."""
    if kind == "pytorch":
        wl = pytorch_style(4, layers=4, steps=2, bucket_layers=2)
    else:
        wl = llm(8, tp=2, pp=2, layers=2, micro_batches=2)
    brute = sum(n.kind is NodeKind.HOST for rg in wl.ranks for n in rg.nodes)
    assert (brute > 0) == (kind == "pytorch")
    cw = compile_workload(wl)
    assert cw.host_work_nodes == brute
    ref = compile_reference(wl)
    assert ref.host_work_nodes is None
    assert trace_facts(wl, ref) == trace_facts(wl, cw)
    assert trace_facts(wl, cw)["host_work_nodes"] == brute


def test_member_lists_read_as_the_lists_they_stand_for(monkeypatch):
    """``MemberLists`` (members as columns): each read, a pass, slices, negative indices and
    the switch to Python lists after ``LISTS_AFTER`` reads give the lists of the node-by-node
    finish; out of range is an IndexError."""
    cw = compile_workload(llm(8, tp=2, pp=2, layers=2, micro_batches=2))
    members = cw.instances.members
    assert isinstance(members, MemberLists)
    want = _finish_loop(cw.ranks, cw.group_names, cw.group_ranks).instances.members
    assert isinstance(want, list) and len(members) == len(want)
    monkeypatch.setattr(MemberLists, "LISTS_AFTER", 3)
    fresh = MemberLists(members.rank, members.node, members.bounds)
    assert [fresh[i] for i in range(len(want))] == want  # past 3 reads: from Python lists
    assert fresh._lists is not None
    assert list(members) == want and members == want and want == members
    assert members[-1] == want[-1] and members[2:5] == want[2:5]
    with pytest.raises(IndexError):
        members[len(want)]


@pytest.mark.parametrize("symmetry", [True, False])
def test_a_replay_reads_member_columns_as_member_lists(symmetry):
    """The engine replays a workload whose members are columns exactly as one whose members
    are plain lists (every instance read in a full replay, the touched ones in an orbit one)."""
    cw = order_collectives(compile_workload(llm(16, tp=2, pp=2, layers=2, micro_batches=2)), 1)
    assert isinstance(cw.instances.members, MemberLists)
    plain = dataclasses.replace(
        cw, instances=dataclasses.replace(cw.instances, members=list(cw.instances.members))
    )
    topo = T.switch(16, 50 * 2**30, 500e-9)
    got = [
        replay(w, AnalyticalBackend(ProgramPricer(topo, list(range(16)), 16)), symmetry)[1]
        for w in (cw, plain)
    ]
    assert got[0].makespan == got[1].makespan
    for col in ("inst_start", "inst_end", "inst_first_arrival", "inst_last_arrival"):
        assert np.array_equal(getattr(got[0], col), getattr(got[1], col), equal_nan=True)


def test_the_twin_reads_the_transfers_layout_its_pricer_made():
    """``price_many`` works out what a tuple of transfers names (cache keys, ranks, canonical
    hosts and shapes) once; the twin pricing the same tuple reads it, and prices as a fresh
    pricer does. A list (which may change) is worked out afresh each time."""
    cw = order_collectives(compile_workload(llm(16, tp=2, pp=2, layers=2, micro_batches=2)), 1)
    a = _leaf_spine_pricer(16)
    listed = _transfers(cw, np.arange(len(cw.instances), dtype=np.int64))
    transfers = tuple(listed)
    a.price_many(listed)
    assert a._layouts == []  # a list: not remembered
    a.price_many(transfers)
    assert len(a._layouts) == 1 and a._layouts[0][0] is transfers
    lay = a._layouts[0][1]
    twin = a.twin()
    assert twin._layouts is a._layouts
    got = twin.price_many(transfers)
    assert len(twin._layouts) == 1 and twin._layouts[0][1] is lay  # read, not made again
    fresh = ProgramPricer(a.topology, list(range(16)), 16)
    for x, y in zip(got, fresh.price_many(listed), strict=True):
        assert x.latency == y.latency
        assert np.array_equal(x.links, y.links) and np.array_equal(x.nbytes, y.nbytes)
    assert twin.priced == fresh.priced


def test_an_orbit_replay_loads_no_numpy_ma(tmp_path):
    """A workload replayed by orbits (an llm: its pipeline's sends and receives keep ranks
    apart) runs the W3 check on member columns without ``np.isin`` (which loads numpy.ma,
    ~9 ms of a small run's start-up: ``tests/test_simulate_startup.py``)."""
    import subprocess
    import sys

    from genie.cli import main

    prefix = tmp_path / "w"
    gen = ["-q", "workload", "generate", "llm", "--ranks", "16", "--out", str(prefix)]
    assert main(gen) == 0
    probe = (
        "import io, sys, contextlib\n"
        "from genie.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(sys.argv[1:])\n"
        "print(rc, 'numpy.ma' in sys.modules, 'genie.sim.orbits' in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe, "-q", "simulate", str(prefix), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert r.stdout.split() == ["0", "False", "True"]

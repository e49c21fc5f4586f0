"""The simulator's fast paths against their reference paths (issue 21: exactness not traded).

* ``AnalyticalBackend`` (re-fills only the connected set an event touches, lazily, and starts at
  one time once) against ``ReferenceAnalyticalBackend`` (re-fills everything on every event);
* the engine resolving the network's next time lazily against asking after every start;
* ``ProgramPricer`` pricing each (collective, size, host pattern) once on relabel-symmetric
  topologies against pricing every group as itself;
* ``FlowSim``'s processor-sharing classes against one class per flow;
* end to end: generated llm and moe workloads simulated both ways to the nanosecond.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from genie.collectives import build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate_concurrent
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.engine import simulate
from genie.sim.network import AnalyticalBackend, Demand, ReferenceAnalyticalBackend, Transfer
from genie.sim.program_pricer import ProgramPricer
from genie.sim.streams import order_collectives
from genie.vocabulary import chakra_type
from genie.workload.generators import llm, moe

NS = 1e-9


class RandomPricer:
    """Fixed random link loads per transfer id (shapes repeat, as in real workloads)."""

    def __init__(self, n_links: int, shapes: list[tuple[np.ndarray, np.ndarray, float]]):
        self.caps = np.full(n_links, 1e9)
        self.caps[::3] = 4e9
        self.shapes = [Demand(lat, links, nbytes) for links, nbytes, lat in shapes]

    def capacity(self):
        return self.caps

    def price(self, tr):
        return self.shapes[tr.size]


def _drain(be, starts):
    """Start transfers at their times (several at one time), run to the end; iid -> end."""
    out = {}
    pending = sorted(starts, key=lambda s: (s[0], s[1].iid))
    while pending or be.next_time() < float("inf"):
        t_net = be.next_time()
        if pending and pending[0][0] < t_net:
            t, tr = pending.pop(0)
            be.start(tr, t)
            continue
        for iid in be.pop(t_net):
            out[iid] = t_net
    return out


@pytest.mark.parametrize("seed", range(12))
def test_component_backend_matches_the_reference(seed):
    rng = random.Random(seed)
    n_links = rng.choice([4, 9, 24])
    shapes = []
    for _ in range(rng.randint(2, 6)):
        k = rng.randint(1, min(6, n_links))
        links = np.array(sorted(rng.sample(range(n_links), k)), np.int64)
        shapes.append(
            (links, np.array([rng.uniform(1e3, 1e6) for _ in links]), rng.random() * 1e-6)
        )
    starts = []
    t = 0.0
    for iid in range(rng.randint(5, 60)):
        if rng.random() < 0.6:  # often several at one time, as ranks of a group arrive alike
            t += rng.uniform(0, 3e-4)
        starts.append((t, Transfer(iid, 0, rng.randrange(len(shapes)), (0, 1), 0)))
    fast = AnalyticalBackend(RandomPricer(n_links, shapes), track_links=True)
    ref = ReferenceAnalyticalBackend(RandomPricer(n_links, shapes), track_links=True)
    a, b = _drain(fast, starts), _drain(ref, starts)
    assert a.keys() == b.keys() == {tr.iid for _, tr in starts}
    assert max(abs(a[i] - b[i]) for i in a) < 1e-6 * NS
    np.testing.assert_allclose(fast.link_bytes, ref.link_bytes, rtol=1e-12)
    np.testing.assert_allclose(fast.link_saturated_s, ref.link_saturated_s, atol=1e-12)
    assert fast.standalone == ref.standalone


def _llm_cw(ranks=32):
    wl = llm(ranks, tp=2, pp=2, layers=4, micro_batches=2)
    return order_collectives(compile_workload(wl), 1)


def _star_pricer(n, canonical=True, kind="switch"):
    if kind == "switch":
        topo = T.switch(n, 50 * 2**30, 500e-9)
    else:
        topo = T.leaf_spine(4, 2, n // 4, 50 * 2**30, 500e-9, 2.0)
    return ProgramPricer(topo, list(range(n)), n, canonical=canonical)


class NoLazy:
    """A backend as the engine saw it before lazy_next: asked for its next time every start."""

    lazy_next = None
    per_member = False

    def __init__(self, inner):
        self.inner = inner
        self.name, self.notes = inner.name, inner.notes

    def start(self, tr, now):
        self.inner.start(tr, now)

    def next_time(self):
        return self.inner.next_time()

    def pop(self, now):
        return self.inner.pop(now)


def test_lazy_next_time_gives_the_same_replay():
    cw = _llm_cw()
    lazy = simulate(cw, AnalyticalBackend(_star_pricer(cw.n_ranks)))
    eager = simulate(cw, NoLazy(AnalyticalBackend(_star_pricer(cw.n_ranks))))
    assert np.array_equal(lazy.end, eager.end) and np.array_equal(lazy.start, eager.start)
    assert lazy.makespan == eager.makespan


@pytest.mark.parametrize("kind", ["switch", "leaf_spine"])
def test_llm_fast_paths_match_the_reference_to_the_nanosecond(kind):
    cw = _llm_cw()
    n = cw.n_ranks
    fast_pricer = _star_pricer(n, True, kind)
    fast, fast_raw = replay(cw, AnalyticalBackend(fast_pricer, track_links=True))
    ref, ref_raw = replay(cw, ReferenceAnalyticalBackend(_star_pricer(n, False, kind)))
    assert abs(fast.iteration_s - ref.iteration_s) < NS
    assert np.nanmax(np.abs(fast_raw.inst_end - ref_raw.inst_end)) < NS
    if kind == "switch":
        # every tp group of 2 and every dp group of the same size is one shape
        assert fast_pricer.canonical and len(fast_pricer._shapes) < len(cw.group_ranks)
    else:  # ECMP hashes ranks: no renaming of hosts
        assert not fast_pricer.canonical


def test_canonical_pricing_moves_link_bytes_onto_the_groups_own_hosts():
    n = 16
    fast, ref = _star_pricer(n, True), _star_pricer(n, False)
    ar = chakra_type("all_reduce")
    for ranks in [(3, 7, 11, 15), (0, 4, 8, 12), (5, 9), (2, 1, 14, 6)]:
        tr = Transfer(0, ar, 1 << 22, ranks, 1)
        a, b = fast._price(tr), ref._price(tr)
        assert a.links.tolist() == b.links.tolist()
        assert np.array_equal(a.nbytes, b.nbytes) and a.latency == pytest.approx(b.latency, 1e-12)
        hosts = {2 * r for r in ranks} | {2 * r + 1 for r in ranks}  # star: up 2h, down 2h+1
        assert set(a.links.tolist()) == hosts
    assert len(fast._shapes) == 2  # groups of 4 on 4 hosts, and of 2 on 2


def test_moe_fast_paths_match_the_reference_to_the_nanosecond():
    cw = order_collectives(compile_workload(moe(16, layers=2)), 1)
    n = cw.n_ranks
    fast, _ = replay(cw, AnalyticalBackend(_star_pricer(n)), symmetry=False)
    ref, _ = replay(cw, ReferenceAnalyticalBackend(_star_pricer(n, False)), symmetry=False)
    assert abs(fast.iteration_s - ref.iteration_s) < NS


def _flowsim_classes(monkeypatch, classes: bool):
    from genie.collectives import cost, flowsim

    class F(flowsim.FlowSim):
        def __init__(self, *a, **k):
            k["classes"] = classes
            super().__init__(*a, **k)

    monkeypatch.setattr(cost, "FlowSim", F)


@pytest.mark.parametrize(
    ("coll", "algo"),
    [("all_to_all", "direct"), ("all_reduce", "ring"), ("all_reduce", "halvingDoubling")],
)
@pytest.mark.parametrize("kind", ["switch", "leaf_spine", "ring"])
def test_flowsim_classes_match_one_class_per_flow(monkeypatch, coll, algo, kind):
    n = 8
    topo = {
        "switch": T.switch(n, 50e9, 5e-7),
        "leaf_spine": T.leaf_spine(2, 2, n // 2, 50e9, 5e-7, 2.0),
        "ring": T.ring(n, 50e9, 5e-7),
    }[kind]
    p = build_program(coll, algo, n, 1 << 20, chunks=2)
    items = [(p, 0.0), (p, 1e-5)]
    _flowsim_classes(monkeypatch, True)
    a = estimate_concurrent(items, topo)
    _flowsim_classes(monkeypatch, False)
    b = estimate_concurrent(items, topo)
    for x, y in zip(a, b, strict=True):
        assert abs(x.time_s - y.time_s) <= 1e-12 * y.time_s
        assert x.link_bytes == y.link_bytes and x.messages == y.messages

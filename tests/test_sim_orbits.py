"""Rank-orbit replay (genie.sim.orbits): proven only when it holds, and equal to the full replay."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from genie.collectives import topology as T
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.compiled import CompiledWorkload
from genie.sim.network import AnalyticalBackend, Demand, ReferenceAnalyticalBackend, Transfer
from genie.sim.orbits import Orbits, check_pricing, find_orbits, link_permutation, quotient_for
from genie.sim.program_pricer import ProgramPricer
from genie.sim.report import chrome_trace
from genie.sim.streams import order_collectives
from genie.sim.symmetry import representatives
from genie.workload.generators import data_parallel, llm, moe

NS = 1e-9


def _cw(wl) -> CompiledWorkload:
    return order_collectives(compile_workload(wl), 1)


def _llm(ranks=32, **kw):
    return _cw(llm(ranks, tp=2, pp=2, layers=4, micro_batches=2, **kw))


def _pricer(n, kind="switch", per_host=1, canonical=True):
    hosts = n // per_host
    if kind == "switch":
        topo = T.switch(hosts, 50 * 2**30, 500e-9)
    elif kind == "leaf_spine":  # one spine: no hash picks a path
        topo = T.leaf_spine(2, 1, hosts // 2, 50 * 2**30, 500e-9, 2.0)
    else:  # two spines: ECMP hashes host pairs onto them
        topo = T.leaf_spine(4, 2, hosts // 4, 50 * 2**30, 500e-9, 2.0)
    return ProgramPricer(topo, [r // per_host for r in range(n)], n, canonical=canonical)


def _same(cw, make, reference=False):
    """Orbit replay against the full replay: iteration, every instance, every rank, links."""
    fast_be = make()
    fast, fraw = replay(cw, fast_be, symmetry=True)
    full_be = make()
    if reference:
        full_be = ReferenceAnalyticalBackend(full_be.pricer, track_links=True)
    full, raw = replay(cw, full_be, symmetry=False)
    assert len(raw.sim_ranks) == cw.n_ranks
    assert abs(fast.iteration_s - full.iteration_s) < NS
    for col in ("inst_start", "inst_end", "inst_first_arrival", "inst_last_arrival"):
        a, b = getattr(fraw, col), getattr(raw, col)
        assert not np.isnan(a).any() and not np.isnan(b).any()
        assert np.max(np.abs(a - b)) < NS, col
    assert len(fast.ranks) == len(full.ranks) == cw.n_ranks
    for a, b in zip(fast.ranks, full.ranks, strict=True):
        assert a.rank == b.rank
        for f in ("compute", "exposed_comm", "wait", "idle", "finish", "comm_total"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-12, abs=1e-15), f
    assert len(fast.collectives) == len(full.collectives)
    for a, b in zip(fast.collectives, full.collectives, strict=True):
        assert abs(a.end - b.end) < NS and a.standalone == pytest.approx(b.standalone, rel=1e-12)
    for k in fast.exposed_by_collective:
        assert fast.exposed_by_collective[k] == pytest.approx(full.exposed_by_collective[k])
    fu, ru = fast_be.link_usage(), full_be.link_usage()
    if fu is not None and ru is not None:
        np.testing.assert_allclose(fu.nbytes, ru.nbytes, rtol=1e-12)
        np.testing.assert_allclose(fu.saturated_s, ru.saturated_s, atol=1e-12)
    return fraw


@pytest.mark.parametrize(("kind", "reps"), [("switch", 4), ("leaf_spine", 8)])
def test_llm_orbit_replay_matches_the_full_replay(kind, reps):
    cw = _llm(32)
    found = representatives(cw)
    assert isinstance(found, Orbits)
    raw = _same(cw, lambda: AnalyticalBackend(_pricer(32, kind), track_links=True))
    assert len(raw.sim_ranks) == reps  # one rank per (tp, pp) position (per leaf)
    # ranks 0-3 are the first data-parallel replica; on a leaf-spine each leaf has its own
    assert raw.sim_ranks[:4] == [0, 1, 2, 3]


def test_llm_orbit_replay_matches_the_reference_backend():
    cw = _llm(16)
    raw = _same(cw, lambda: AnalyticalBackend(_pricer(16), track_links=True), reference=True)
    assert len(raw.sim_ranks) == 4


def test_llm_with_zero_and_several_ranks_per_host():
    cw = _llm(64, zero=True)
    # 4 ranks a host: a rotation by one replica keeps hosts whole
    raw = _same(cw, lambda: AnalyticalBackend(_pricer(64, per_host=4), track_links=True))
    assert len(raw.sim_ranks) == 4
    # 8 ranks a host: one replica is half a host, so the rotation by two replicas is taken
    raw = _same(cw, lambda: AnalyticalBackend(_pricer(64, per_host=8), track_links=True))
    assert len(raw.sim_ranks) == 8


def test_ecmp_leaf_spine_takes_only_what_its_hashes_keep():
    cw = _llm(32)
    raw = _same(cw, lambda: AnalyticalBackend(_pricer(32, "ecmp"), track_links=True))
    # rotations across leaves move hashed paths (refused); swapping the two replicas within
    # each leaf happens to keep them here, which the pricing check (N2) confirms
    assert 4 < len(raw.sim_ranks) < 32


@pytest.mark.parametrize("kind", ["switch", "leaf_spine"])
def test_moe_and_dp_agree_with_the_full_replay(kind):
    for cw in (_cw(moe(16, layers=2)), _cw(data_parallel(16, layers=4))):
        _same(cw, lambda: AnalyticalBackend(_pricer(16, kind), track_links=True))


def test_one_slower_rank_breaks_the_orbits():
    cw = _llm(16)
    cr = cw.ranks[5]
    slow = dataclasses.replace(cr, duration=cr.duration * 1.01)
    ranks = list(cw.ranks)
    ranks[5] = slow
    bent = dataclasses.replace(cw, ranks=ranks)
    assert find_orbits(bent) is None
    assert representatives(bent) is None


def test_link_permutation_and_pricing_checks():
    cw = _llm(16)
    found = find_orbits(cw)
    assert found is not None
    orb = found.candidates[0]
    assert (orb.block, orb.shift) == (16, 4)
    pricer = _pricer(16)
    pi = link_permutation(pricer, orb.perm)
    assert not isinstance(pi, str)
    names = pricer.link_names()
    # host h's links go to host h + 4's (one replica on); intra ports follow their ranks
    for lid in range(len(names)):
        if names[lid].startswith("intra"):
            r = int(names[lid].split()[-1])
            assert names[int(pi[lid])] == f"intra-host port of rank {(r + 4) % 16}"
    assert check_pricing(pricer, cw, orb, pi) is None

    class Skewed(ProgramPricer):
        """Prices one tensor-parallel group's instances 1 byte heavier than its copies."""

        def price(self, transfer: Transfer) -> Demand:
            dem = super().price(transfer)
            if transfer.ranks == (4, 5):
                return Demand(dem.latency, dem.links, dem.nbytes + 1.0)
            return dem

    skewed = Skewed(pricer.topology, list(range(16)), 16)
    assert check_pricing(skewed, cw, orb, pi) is not None
    q, _ = quotient_for(found, skewed, cw)
    # the rotation by one replica is refused; a rotation the skew does not see may remain
    assert q is None or (q.orb.block, q.orb.shift) != (16, 4)
    raw = _same(cw, lambda: AnalyticalBackend(Skewed(pricer.topology, list(range(16)), 16)))
    assert len(raw.sim_ranks) > 4


def test_chrome_trace_of_an_orbit_replay_copies_each_ranks_representative(tmp_path):
    import json

    cw = _llm(16)
    _, fraw = replay(cw, AnalyticalBackend(_pricer(16)), symmetry=True)
    _, raw = replay(cw, AnalyticalBackend(_pricer(16)), symmetry=False)
    assert len(fraw.sim_ranks) == 4
    docs = []
    for i, r in enumerate((fraw, raw)):
        out = tmp_path / f"t{i}.json"
        chrome_trace(cw, r, out)
        docs.append(json.loads(out.read_text())["traceEvents"])
    for a, b in zip(*docs, strict=True):
        assert a.get("pid") == b.get("pid") and a.get("name") == b.get("name")
        if "ts" in a:
            assert abs(a["ts"] - b["ts"]) < 1e-3 and abs(a["dur"] - b["dur"]) < 1e-3  # us


def test_cycles_of_a_permutation():
    from genie.sim.orbits import _cycles

    rng = np.random.default_rng(3)
    p = rng.permutation(200)
    rep, pos, length = _cycles(p)
    for x in range(200):
        cyc = [x]
        while p[cyc[-1]] != x:
            cyc.append(int(p[cyc[-1]]))
        assert rep[x] == min(cyc) and length[x] == len(cyc)
        y = int(rep[x])
        for _ in range(int(pos[x])):
            y = int(p[y])
        assert y == x


def test_two_jobs_whose_copies_share_the_uplinks(tmp_path):
    """The rotation swaps two identical jobs; their rings' copies share the (fixed) uplinks, so
    one orbit's summed demand overloads a link on its own: rates must still be max-min fair."""
    import genie
    from genie.workload import save_workload

    prefix = tmp_path / "dp"
    save_workload(data_parallel(4, layers=2, hidden=1024, seq=512, batch=2), prefix)
    fab = genie.Fabric(topology="leaf_spine", leaves=2, oversubscription=4, bandwidth="100gbit")
    sims = []
    for sym in (True, False):
        jobs = tuple(genie.Job(workload=str(prefix), hosts=h) for h in ("0,1,4,5", "2,3,6,7"))
        sims.append(genie.simulate(genie.SimulateSpec(jobs=jobs, fabric=fab, symmetry=sym)))
    fast, full = (s.reports[0] for s in sims)
    assert fast.symmetric and not full.symmetric
    assert abs(fast.iteration_s - full.iteration_s) < NS
    for a, b in zip(fast.collectives, full.collectives, strict=True):
        assert abs(a.end - b.end) < NS
    for a, b in zip(fast.ranks, full.ranks, strict=True):
        assert a.finish == pytest.approx(b.finish, rel=1e-12)
    assert sims[0].jobs is not None and sims[1].jobs is not None
    for a, b in zip(sims[0].jobs["jobs"], sims[1].jobs["jobs"], strict=True):
        assert a["slowdown"] == pytest.approx(b["slowdown"], rel=1e-12) and a["slowdown"] > 1.5


def _verdicts(pricer, cw, orb, pi):
    """The fast and the reference N2 check's answers (None: holds; else the reason)."""
    from genie.sim.orbits import check_pricing_reference

    return check_pricing(pricer, cw, orb, pi), check_pricing_reference(pricer, cw, orb, pi)


@pytest.mark.parametrize(
    ("kind", "per_host", "canonical"),
    [
        ("switch", 1, True),
        ("switch", 1, False),
        ("leaf_spine", 1, True),
        ("ecmp", 1, True),
        ("switch", 4, True),
    ],
)
def test_pricing_check_agrees_with_its_reference_on_every_candidate(kind, per_host, canonical):
    cw = _llm(32, zero=per_host > 1)
    found = find_orbits(cw)
    assert found is not None
    pricer = _pricer(32, kind, per_host, canonical)
    held = refused = bent_refused = 0
    for orb in found.candidates:
        pi = link_permutation(pricer, orb.perm)
        if isinstance(pi, str):
            continue
        fast, ref = _verdicts(pricer, cw, orb, pi)
        assert fast == ref  # the same verdict, and the same instance named when refused
        held += fast is None
        refused += fast is not None
        # link maps with two links swapped: some move a demand wrongly, and are refused alike
        for a, b in ((0, 2), (0, len(pi) - 1), (1, len(pi) // 2)):
            bent = pi.copy()
            bent[[a, b]] = bent[[b, a]]
            fast, ref = _verdicts(pricer, cw, orb, bent)
            assert fast == ref
            bent_refused += fast is not None
    assert held and bent_refused
    if kind == "ecmp":
        assert refused  # hashed paths move with the hosts only for some rotations


def test_pricing_check_refuses_a_latency_or_a_byte_apart_as_its_reference_does():
    cw = _llm(16)
    found = find_orbits(cw)
    assert found is not None
    orb = found.candidates[0]
    base = _pricer(16)
    pi = link_permutation(base, orb.perm)
    assert not isinstance(pi, str)

    class Off(ProgramPricer):
        """One tensor-parallel group's demand off its copies' by ``what``."""

        what = "latency"

        def price(self, transfer: Transfer) -> Demand:
            dem = super().price(transfer)
            if transfer.ranks != (8, 9):
                return dem
            if self.what == "latency":
                return Demand(dem.latency * (1 + 1e-15) + 1e-18, dem.links, dem.nbytes)
            if self.what == "bytes":  # one link's bytes a ulp apart
                nb = dem.nbytes.copy()
                nb[-1] = np.nextafter(nb[-1], np.inf)
                return Demand(dem.latency, dem.links, nb)
            return Demand(dem.latency, dem.links[:-1], dem.nbytes[:-1])  # a link short

    for what in ("latency", "bytes", "links"):
        off = Off(base.topology, list(range(16)), 16)
        off.what = what
        fast, ref = _verdicts(off, cw, orb, pi)
        assert fast is not None and fast == ref, what


def test_the_workload_side_of_the_pricing_check_is_made_once_per_rotation():
    """The NCCL-like replay and the line-rate one beside it check one rotation on two pricers:
    the instances' keys and pairs are worked out once, the demands of each pricer checked."""
    cw = _llm(16)
    found = find_orbits(cw)
    assert found is not None
    orb = found.candidates[0]
    assert orb.pricing_plan is None
    a = _pricer(16)
    pi = link_permutation(a, orb.perm)
    assert not isinstance(pi, str)
    assert check_pricing(a, cw, orb, pi) is None
    plan = orb.pricing_plan
    assert plan is not None
    # every instance's key (type, size, group; a send/recv's ends too) is priced, once
    ins = cw.instances

    def key(i: int) -> tuple[int, ...]:
        g = int(ins.group[i])
        ends = (int(ins.src[i]), int(ins.dst[i])) if g < 0 else (-1, -1)
        return (int(ins.comm_type[i]), int(ins.size[i]), g, *ends)

    used = {key(i) for i in range(len(ins))}
    keys = plan.keys.tolist()
    assert {key(i) for i in keys} == used and len(keys) == len(used)
    assert any(int(ins.group[i]) < 0 for i in keys)  # send/recvs among them

    class Skewed(ProgramPricer):
        def price(self, transfer: Transfer) -> Demand:
            dem = super().price(transfer)
            if transfer.ranks == (4, 5):
                return Demand(dem.latency, dem.links, dem.nbytes + 1.0)
            return dem

    b = Skewed(a.topology, list(range(16)), 16)
    assert check_pricing(b, cw, orb, pi) is not None  # the second pricer's own verdict
    assert orb.pricing_plan is plan
    assert check_pricing(a, cw, orb, pi) is None


def test_the_link_map_is_worked_out_once_per_network():
    """N1 for the NCCL-like pricer and its line-rate twin (one topology object, one placement,
    the same capacities) is one answer; another network gets its own, as computed afresh."""
    from genie.sim.orbits import _link_side

    cw = _llm(16)
    found = find_orbits(cw)
    assert found is not None
    orb = found.candidates[0]
    a = _pricer(16)
    twin = ProgramPricer(a.topology, list(range(16)), 16)
    pa, ca = _link_side(a, orb)
    pt, ct = _link_side(twin, orb)
    assert len(orb.link_memo) == 1 and pa is pt and ca is ct
    assert np.array_equal(pa, link_permutation(twin, orb.perm))
    for other in (_pricer(16, "leaf_spine"), _pricer(16, "ecmp"), _pricer(16, per_host=4)):
        po, _ = _link_side(other, orb)
        fresh = link_permutation(other, orb.perm)
        assert (po == fresh) if isinstance(fresh, str) else np.array_equal(po, fresh)
    assert len(orb.link_memo) == 4
    q, _ = quotient_for(found, twin, cw)
    assert q is not None and q.pi is pa

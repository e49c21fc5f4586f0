"""One mirrored rank stands for a congestion-unaware collective's members (issue 33).

``--model astra-unaware`` runs a collective whose members start together for one rank, its
peers' messages mirrored from its own (``genie.sim.astra_mirror``), instead of every rank's
messages: O(steps), not O(ranks x steps). These tests hold it to the full per-rank simulation,
instance by instance and to the nanosecond, and check where it must decline.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from genie.api.workload import build
from genie.cli import build_parser
from genie.commands.workload import generate_spec
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.astra_config import load_network, load_system
from genie.sim.astra_mirror import RingGeometry
from genie.sim.astra_model import AstraBackend
from genie.workload.generators.builder import RankBuilder, finish
from genie.workload.model import CollectiveType

REF = Path(__file__).parent / "data" / "astra"


def one_collective(n: int, coll: str, size: int, groups: list[list[int]] | None = None):
    """Every rank runs one ``coll`` of ``size`` bytes (in its group of ``groups`` if given)."""
    named = {f"g{i}": tuple(g) for i, g in enumerate(groups or [])}
    builders = [RankBuilder(r) for r in range(n)]
    for b in builders:
        pg = next((k for k, g in named.items() if b.rank in g), None)
        if pg is None:
            b.collective(coll, CollectiveType[coll.upper()], size)
        else:
            b.collective(coll, CollectiveType[coll.upper()], size, pg=pg)
    return finish("micro", builders, named)


def generated(kind: str, ranks: int, *extra: str):
    """The workload ``genie workload generate KIND --ranks N ...`` writes."""
    argv = ["workload", "generate", kind, "--ranks", str(ranks), *extra, "--out", "unused"]
    ns = build_parser().parse_args(argv)
    return build(generate_spec(ns), ns.target, [])


def run(wl, net, system, mirror: bool, per_member: bool = True):
    """(instance ends in ns, the backend) of an unaware replay, with the cache and the mirror
    or with neither."""
    cw = compile_workload(wl, system.compute_model())
    be = AstraBackend(
        net, system, aware=False, group_names=list(cw.group_names), per_member=per_member
    )
    if not mirror:  # the reference: every instance simulated for every rank, no cache
        be._replay = lambda inst, order=None: False  # type: ignore[method-assign]
    _, raw = replay(cw, be)
    return [round(t * 1e9) for t in raw.inst_end], be


def configs(tmp_path: Path, net_text: str, algo: str, splits: int, chunks: int):
    """Network and system loaded from the given text and knobs."""
    (tmp_path / "n.yml").write_text(net_text)
    system = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": chunks,
        "preferred-dataset-splits": splits,
        "all-reduce-implementation": [algo],
        "all-gather-implementation": [algo],
        "reduce-scatter-implementation": [algo],
        "all-to-all-implementation": [algo],
        "collective-optimization": "localBWAware",
        "local-mem-bw": 1600,
    }
    (tmp_path / "s.json").write_text(json.dumps(system))
    return load_network(tmp_path / "n.yml"), load_system(tmp_path / "s.json")


def net1d(topo: str, n: int, lat: float, bw: float = 25.0) -> str:
    """A 1-D ASTRA-sim network file's text."""
    return f"topology: [ {topo} ]\nnpus_count: [ {n} ]\nbandwidth: [ {bw} ]\nlatency: [ {lat} ]\n"


@pytest.mark.parametrize("algo", ["ring", "direct", "halvingDoubling"])
@pytest.mark.parametrize("topo", ["Ring", "Switch"])
def test_mirrored_rank_equals_every_rank_simulated(tmp_path, algo, topo):
    """Every collective, sizes from tiny (ties) to large, splits and active chunks: the same
    instance ends as simulating every rank, and the mirror was taken for at least half (the
    rest: same-tick ties, mostly on a Ring with direct at 0-10 ns latency)."""
    used = total = 0
    for coll, size, lat, splits, chunks in itertools.product(
        ["all_reduce", "reduce_scatter", "all_gather", "all_to_all"],
        [64, 1 << 20],
        [0, 10, 500],
        [1, 4],
        [1, 2],
    ):
        if algo == "halvingDoubling" and coll == "all_to_all":
            continue
        net, system = configs(tmp_path, net1d(topo, 8, lat), algo, splits, chunks)
        wl = one_collective(8, coll, size)
        want, _ = run(wl, net, system, mirror=False)
        got, be = run(wl, net, system, mirror=True)
        assert got == want, (coll, size, lat, splits, chunks)
        used += be.mirrored
        total += 1
    assert used >= total // 2


def test_a_same_tick_tie_declines_the_mirror(tmp_path):
    """A zero-latency Ring with direct all-to-all of 64 B: a receive and a token meet in one
    tick on one chunk (obligation (d)), so every rank is simulated, with the same answer."""
    net, system = configs(tmp_path, net1d("Ring", 8, 0), "direct", 1, 1)
    wl = one_collective(8, "all_to_all", 64)
    got, be = run(wl, net, system, mirror=True)
    assert be.mirrored == 0 and be.simulated == 8
    assert got == run(wl, net, system, mirror=False)[0]


def test_uneven_ring_is_not_uniform():
    """A comm group's ring whose neighbours sit at different distances is simulated per rank."""
    geo = RingGeometry(load_network(REF / "net" / "Ring8.yml"))
    assert geo.uniform_ring((0, 2, 4, 6), "ring")  # every step 2 hops
    assert not geo.uniform_ring((0, 1, 2, 3), "ring")  # 1, 1, 1 and 3 hops
    assert geo.uniform_ring((0, 1, 2, 3), "halvingDoubling")  # partners 1 then 2 hops apart
    assert not geo.uniform_ring((0, 1, 2, 4), "halvingDoubling")  # 0<->1: 1 hop, 2<->4: 2
    assert geo.uniform_ring((0, 1, 2, 3, 4, 5, 6, 7), "direct")
    assert not geo.uniform_ring((0, 1, 2, 4), "direct")
    two_d = RingGeometry(load_network(REF / "net" / "Ring4_Switch2.yml"))
    assert two_d.uniform_ring((0, 4), "ring")  # the Switch dimension only
    # a message takes the first dimension where the two NPUs differ
    assert two_d.uniform_ring((0, 1, 4, 5), "ring")  # every step differs in dimension 0, 1 hop
    assert not two_d.uniform_ring((0, 4, 1, 5), "ring")  # 0 -> 4 on the Switch, 4 -> 1 the Ring
    switch = RingGeometry(load_network(REF / "net" / "Switch8.yml"))
    assert switch.uniform_ring((3, 0, 6), "direct")


def test_uneven_comm_groups_match_per_rank(tmp_path):
    """Groups {0,1,2,3} and {4,5,6,7} on a Ring of 8 (3 hops back round) and an even group on a
    2-D network: instance ends equal the full simulation's; the uneven ones are not mirrored."""
    net, system = configs(tmp_path, net1d("Ring", 8, 500), "ring", 1, 1)
    wl = one_collective(8, "all_reduce", 1 << 20, [[0, 1, 2, 3], [4, 5, 6, 7]])
    got, be = run(wl, net, system, mirror=True)
    assert be.mirrored == 0 and got == run(wl, net, system, mirror=False)[0]
    wl = one_collective(8, "all_reduce", 1 << 20, [[0, 2, 4, 6], [1, 3, 5, 7]])
    got, be = run(wl, net, system, mirror=True)
    assert be.mirrored == 2 and got == run(wl, net, system, mirror=False)[0]


@pytest.mark.parametrize(
    ("kind", "net", "system", "extra"),
    [
        ("llm", "Ring16.yml", "ring_s4_c2.json", ["--tp", "4"]),
        ("llm", "Switch16.yml", "direct_s4.json", []),
        ("llm", "FullyConnected2_Ring4_Switch2.yml", "halvingDoubling_s4_d3.json", []),
        ("moe", "Ring4_Switch2.yml", "ring_s4_d2.json", []),
        ("dp", "Switch8.yml", "direct_s4_c2.json", []),
        ("dp", "Ring4_Switch2.yml", "oneRing_s4_d2.json", []),
    ],
)
def test_generated_workloads_match_per_rank(kind, net, system, extra):
    """Generated workloads, per member and (where symmetric) whole instances: every instance
    ends where the full simulation ends it, and the mirror was used."""
    n = load_network(REF / "net" / net)
    s = load_system(REF / "sys" / system)
    wl = generated(kind, n.total_npus, *extra)
    for per_member in (True, False):
        want, _ = run(wl, n, s, mirror=False, per_member=per_member)
        got, be = run(wl, n, s, mirror=True, per_member=per_member)
        assert got == want
        assert be.mirrored > 0
        if net != "Ring16.yml":  # there the comm groups' rings are uneven: simulated per rank
            assert be.simulated == 0


def test_members_of_one_tick_are_replayed_and_stragglers_simulated(tmp_path):
    """Per member: members that reach a collective in one tick (in the engine's order, after the
    backend's events of that tick) are replayed; where rank 0 comes late (to the 2nd and 3rd
    all-reduce, by 1 and 2 us more compute) every share is simulated, each launched at its own
    tick; both as the reference simulation of every rank ends them."""
    net, system = configs(tmp_path, net1d("Switch", 8, 500), "ring", 4, 2)
    for late in (0.0, 1e-6):
        builders = [RankBuilder(r) for r in range(8)]
        for b in builders:
            last = None
            for k in range(3):
                delay = late * (k + 1) if b.rank == 0 else 1e-6
                c = b.compute(f"c{k}", delay, [last] if last is not None else [])
                last = b.collective(f"ar{k}", CollectiveType.ALL_REDUCE, 1 << 20, [c])
        wl = finish("micro", builders)
        want, _ = run(wl, net, system, mirror=False)
        got, be = run(wl, net, system, mirror=True)
        assert got == want
        if late:
            assert (be.simulated, be.mirrored, be.cached) == (16, 1, 1)  # 1st together
        else:
            assert (be.simulated, be.mirrored, be.cached) == (0, 1, 3)


def test_cost_is_one_ranks_messages(tmp_path):
    """512-rank world collectives: one rank's messages each (direct all-to-all 511, ring and
    direct all-reduce 1,022), not 512 times that, and no rank simulated on its own."""
    n = 512
    (tmp_path / "n.yml").write_text(net1d("Switch", n, 500, 50.0))
    net = load_network(tmp_path / "n.yml")
    for system, coll, kind, msgs in (
        ("direct_s1.json", "a2a", CollectiveType.ALL_TO_ALL, n - 1),
        ("direct_s1.json", "ar", CollectiveType.ALL_REDUCE, 2 * (n - 1)),
        ("ring_s1.json", "ar", CollectiveType.ALL_REDUCE, 2 * (n - 1)),
    ):
        builders = [RankBuilder(r) for r in range(n)]
        for b in builders:
            b.collective(coll, kind, 1 << 24)
            b.collective(coll, kind, 1 << 24)
        _, be = run(finish("micro", builders), net, load_system(REF / "sys" / system), True)
        assert (be.simulated, be.messages) == (0, 0)
        assert (be.mirrored, be.mirrored_messages, be.cached) == (1, msgs, 2)

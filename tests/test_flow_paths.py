"""The paths a fabric gives genie's connections, as the model prices them (no root needed).

The rules both sides share (source ports, parts, streams of a channel), ``FlowPaths`` and
``Topology.with_paths``, telling a job's connections apart by their source ports, walking
5-tuples through a routed netns testbed's switches (a fake ``ip``/``ss`` runner), and the cost
model serving a connection's messages in order.
"""

from __future__ import annotations

import json
import zlib

import pytest

from genie.collectives import build_program
from genie.collectives.connections import (
    SOURCE_PORT_BASE,
    SOURCE_PORT_SPAN,
    FlowPaths,
    channel_streams,
    pair_channels,
    part_count,
    part_streams,
    source_ports,
    split_parts,
)
from genie.collectives.cost import estimate
from genie.collectives.flowsim import FlowSim, Instance
from genie.collectives.program import Op, Step
from genie.collectives.topology import leaf_spine
from genie.testbed import loads_testbed
from genie.testbed.flows import connection_paths, has_choices, kernel_paths, match_connections
from genie.testbed.netns import Result
from genie.testbed.netns_plan import link_ports
from genie_agent.dataplane import tcp_wire

# -- the shared rules ---------------------------------------------------------------------


def test_the_agent_uses_the_shared_rules() -> None:
    assert tcp_wire.source_ports is source_ports and tcp_wire.split_parts is split_parts


def test_source_ports_are_fixed_per_flow_and_below_the_ephemeral_range() -> None:
    a = list(source_ports(0, 1, 0))
    assert a == list(source_ports(0, 1, 0)) and len(set(a)) == len(a)
    assert all(SOURCE_PORT_BASE <= p < SOURCE_PORT_BASE + SOURCE_PORT_SPAN for p in a)
    assert a[0] != next(source_ports(0, 1, 1)) or a[0] != next(source_ports(1, 0, 0))


def test_parts_and_streams_of_a_message() -> None:
    assert part_count(1 << 20, 2, 65536) == 2 and part_count(40_000, 2, 65536) == 1
    assert len(split_parts(1 << 20, 4, 65536)) == part_count(1 << 20, 4, 65536) == 4
    assert part_streams(3, 4, 7) == [0, 1, 2]  # cut: part k on stream k
    assert [part_streams(1, 2, s) for s in range(3)] == [[0], [1], [0]]  # whole: in turn
    assert list(channel_streams(1, 4, 2)) == [2, 3]


def test_pair_channels_names_the_sets_a_pairs_bytes_take() -> None:
    ring = build_program("all_reduce", "ring", 3, 3 << 20, ranks=(3, 4, 5))
    pairs = pair_channels([ring], [1])
    assert pairs == {(3, 4): {1}, (4, 5): {1}, (3, 5): {1}}


# -- the model on learned paths -----------------------------------------------------------


def _names(topo) -> dict[str, int]:
    return {topo.link_name(i): i for i in range(len(topo.links))}


def _via(topo, spine: str, a: str = "h0", b: str = "h1") -> tuple[int, ...]:
    """The link ids from host ``a`` through ``spine`` to host ``b`` (on another leaf)."""
    n = _names(topo)
    leaf = {lk.src: lk.dst for lk in topo.links if lk.src.startswith("h")}
    la, lb = leaf[a], leaf[b]
    return tuple(n[x] for x in (f"{a}->{la}", f"{la}->{spine}", f"{spine}->{lb}", f"{lb}->{b}"))


def test_learned_paths_override_the_policy_per_rank_pair() -> None:
    topo = leaf_spine(2, 2, 1, 1e9, 1e-6)
    s0, s1 = _via(topo, "spine0"), _via(topo, "spine1")
    fp = FlowPaths({(0, 1): ((s0, s1, s1, s1),)}, "test paths", min_part=1000)
    seen = topo.with_paths(fp)
    n = _names(topo)
    big = dict(seen.flow_route(0, 1, 0, 1, 1e6)[0])  # 4 parts: one per stream
    assert big[n["leaf0->spine0"]] == pytest.approx(0.25)
    assert big[n["leaf0->spine1"]] == pytest.approx(0.75)
    two = dict(seen.flow_route(0, 1, 0, 1, 2000)[0])  # 2 parts: streams 0 and 1
    assert two[n["leaf0->spine0"]] == pytest.approx(0.5)
    whole = dict(seen.flow_route(0, 1, 0, 1, 10)[0])  # sent whole: the streams in turn
    assert whole == big
    assert seen.flow_route(1, 0, 1, 0) == topo.flow_route(1, 0, 1, 0)  # not listed: ECMP
    assert topo.paths is None and seen.routes_by_rank and seen.symmetry is None
    assert "test paths (4 flows of 1 rank pairs)" in seen.describe()
    assert topo.with_paths(None).paths is None


def test_the_cost_model_prices_what_the_paths_load() -> None:
    topo = leaf_spine(2, 2, 1, 1e8, 0.0)
    prog = build_program("send_recv", None, 2, 8 << 20, oneway=True)
    s0, s1 = _via(topo, "spine0"), _via(topo, "spine1")
    spread = topo.with_paths(FlowPaths({(0, 1): ((s0, s1),)}, "spread"))
    stacked = topo.with_paths(FlowPaths({(0, 1): ((s0, s0),)}, "stacked"))
    up = leaf_spine(2, 2, 1, 1e8, 0.0).links[_names(topo)["leaf0->spine0"]].bandwidth
    t_spread = estimate(prog, spread, ["h0", "h1"]).time_s
    t_stacked = estimate(prog, stacked, ["h0", "h1"]).time_s
    assert t_stacked == pytest.approx((8 << 20) / up)  # both flows on one uplink
    assert t_spread == pytest.approx(t_stacked / 2)


def test_a_connections_messages_go_out_in_order() -> None:
    """Two messages 0 -> 1 ready at once, then 1 forwards the first to 2: served in order the
    first is through at 1 s and forwarded by 2 s (processor sharing: both at 2 s, then 3 s)."""
    steps = [
        [Step(Op.SEND, 1, 1000, 0), Step(Op.SEND, 1, 1000, 1)],
        [Step(Op.RECV, 0, 1000, 0), Step(Op.RECV, 0, 1000, 1),
         Step(Op.SEND, 2, 1000, 0, deps=(0,))],
        [Step(Op.RECV, 1, 1000, 0)],
    ]  # fmt: skip
    inst = Instance(
        steps,
        lambda r, st: ((((r, st.peer), 1.0),), 0.0),
        send_key=lambda r, st, k: (r, st.peer, st.tag, k),
        recv_key=lambda r, st, k: (st.peer, r, st.tag, k),
    )
    sim = FlowSim(lambda key: 1000.0)
    sim.add(inst)
    sim.run()
    assert inst.finish == pytest.approx([2.0, 2.0, 2.0])


# -- reading the paths from the switches (a fake runner) -----------------------------------

LEAFSPINE = """
[testbed]
name = "fp"
kind = "netns"
netns_prefix = "genie-fp-"
[topology]
shape = "leafspine"
leaves = 2
spines = 2
hosts_per_leaf = 1
rate = "1gbit"
"""


class FakeFabric:
    """``ss`` in host namespaces and ``ip route get`` in switches, as a routed fabric answers:
    a leaf picks a spine by a hash of the 5-tuple, a spine forwards to the leaf, a leaf to its
    host."""

    def __init__(self, tb, conns: list[tuple[str, int, str, int]]) -> None:
        from genie.testbed import fabric_routes

        self.tb = tb
        self.conns = conns
        self.rid = fabric_routes.router_ips(tb)
        self.addr = {h.name: h.data_addr for h in tb.hosts}
        self.port = {}  # (node, neighbour) -> its interface
        for i, (pa, pb) in link_ports(tb).items():
            lk = tb.links[i]
            self.port[(lk.a, lk.b)], self.port[(lk.b, lk.a)] = pa.ifname, pb.ifname
        self.calls: list[list[str]] = []

    def spine_of(self, src: str, sport: int, dst: str, dport: int) -> str:
        return f"spine{zlib.crc32(f'{src}{sport}{dst}{dport}'.encode()) % 2}"

    def __call__(self, argv, stdin):
        self.calls.append(list(argv))
        if argv[:3] == ["ip", "netns", "exec"]:
            ns = argv[3]
            host = ns.removeprefix("genie-fp-")
            lines = []
            for la, lp, pa, pp in self.conns:
                if la == self.addr[host]:
                    lines.append(f"0 0 {la}:{lp} {pa}:{pp}")
                if pa == self.addr[host]:
                    lines.append(f"0 0 {pa}:{pp} {la}:{lp}")
            return Result(0, "\n".join(lines) + "\n", "")
        assert argv[:2] == ["ip", "-j"] and argv[4] == "-batch"
        node = argv[3].removeprefix("genie-fp-")
        out = []
        for line in stdin.splitlines():
            w = line.split()
            dst, src, sport, dport = w[2], w[4], int(w[10]), int(w[12])
            host = {a: h for h, a in self.addr.items()}[dst]
            leaf = "leaf0" if host == "h0" else "leaf1"
            if node.startswith("spine"):
                nxt = {"gateway": self.rid[leaf], "dev": self.port[(node, leaf)]}
            elif node == leaf:
                nxt = {"dev": self.port[(node, host)]}
            else:
                spine = self.spine_of(src, sport, dst, dport)
                nxt = {"gateway": self.rid[spine], "dev": self.port[(node, spine)]}
            out.append(json.dumps([{"dst": dst, **nxt}]))
        return Result(0, "\n".join(out) + "\n", "")


def test_match_connections_tells_flows_apart_by_source_port() -> None:
    a, b = "198.18.0.1", "198.18.0.2"
    first = [next(source_ports(0, 1, s)) for s in range(2)]
    second = list(source_ports(0, 1, 2))[1]  # its first port was taken: the next one
    conns = [(a, first[0], b, 7001), (a, first[1], b, 7001), (a, second, b, 7001)]
    conns.append((a, 40000, b, 7001))  # a port of the kernel's choice: no flow's
    got = match_connections([*conns, (b, 7001, a, first[0])], [a, b], 3)
    assert got == {(0, 1, 0): conns[0], (0, 1, 1): conns[1], (0, 1, 2): conns[2]}


def test_kernel_paths_walk_each_connection_both_ways() -> None:
    tb = loads_testbed(LEAFSPINE, source="fp")
    assert has_choices(tb)
    topo = tb.to_topology()
    a, b = tb.hosts[0].data_addr, tb.hosts[1].data_addr
    ports = [next(source_ports(0, 1, s)) for s in range(4)]
    conns = [(a, p, b, 7001) for p in ports]
    fake = FakeFabric(tb, conns)
    paths = connection_paths(tb, topo, [conns[0]], fake)
    (path,) = paths.values()
    names = [topo.link_name(lid) for lid in path]
    spine = fake.spine_of(a, ports[0], b, 7001)
    assert names == ["h0->leaf0", f"leaf0->{spine}", f"{spine}->leaf1", "leaf1->h1"]
    fake.calls.clear()
    fp = kernel_paths(tb, topo, ["h0", "h1"], 4, channels=2, pair_channels={(0, 1): {1}},
                      runner=fake)  # fmt: skip
    (fwd,) = fp.paths[(0, 1)]  # channel 1 only: streams 2 and 3
    assert [topo.link_name(p[1]) for p in fwd] == [
        f"leaf0->{fake.spine_of(a, ports[s], b, 7001)}" for s in (2, 3)
    ]
    (back,) = fp.paths[(1, 0)]
    assert [topo.link_name(p[1]) for p in back] == [
        f"leaf1->{fake.spine_of(b, 7001, a, ports[s])}" for s in (2, 3)
    ]
    assert "ip route get" in fp.source
    # one ip -batch per switch and hop (2 per hop here), not one process per flow and hop
    batches = [c for c in fake.calls if "-batch" in c]
    assert len(batches) == 3 * 2


def test_jobs_links_are_the_run_togethers_and_paths_of_other_hosts_do_not_apply() -> None:
    """Two 2-rank jobs across the leaves; the paths learned for the run together put job A
    (global ranks 0, 1) on spine0 and B (ranks 2, 3) on spine1: no link carries both, though
    B alone (ranks 0, 1 on its own hosts) would not take A's learned paths."""
    from genie.sim.adapter import compile_workload
    from genie.sim.job_report import job_link_bytes
    from genie.sim.jobs import JobSpec, merge_jobs
    from genie.sim.program_pricer import ProgramPricer
    from genie.workload.generators import data_parallel

    topo = leaf_spine(2, 2, 2, 1e9, 0.0)  # h0, h1 on leaf0; h2, h3 on leaf1
    cw = compile_workload(data_parallel(2, layers=1, hidden=64, bucket_bytes=2**30))
    merged, jm = merge_jobs([JobSpec("A", cw, (0, 2)), JobSpec("B", cw, (1, 3))])
    paths = {}
    pairs = (((0, 1), ("h0", "h2"), "spine0"), ((2, 3), ("h1", "h3"), "spine1"))
    for (r, q), (a, b), spine in pairs:
        fwd, back = _via(topo, spine, a, b), _via(topo, spine, b, a)
        paths[(r, q)], paths[(q, r)] = ((fwd, fwd),), ((back, back),)
    seen = topo.with_paths(FlowPaths(paths, "learned"))
    per_job = job_link_bytes(jm, merged, ProgramPricer(seen, jm.placement, 4))
    n = _names(topo)
    for k, (mine, other) in enumerate((("spine0", "spine1"), ("spine1", "spine0"))):
        assert per_job[k][n[f"leaf0->{mine}"]] > 0 and per_job[k][n[f"leaf1->{mine}"]] > 0
        assert per_job[k][n[f"leaf0->{other}"]] == 0 == per_job[k][n[f"leaf1->{other}"]]
    # B alone is ranks 0 and 1 on hosts h1, h3: the paths learned for ranks 0, 1 ran h0 -> h2
    assert seen.flow_route(1, 3, 0, 1) == topo.flow_route(1, 3, 0, 1)


# -- a lab fabric's path map ----------------------------------------------------------------

LAB = """
[testbed]
name = "lab-ls"
kind = "static"
[routing]
paths = "paths.toml"
[[hosts]]
name = "h0"
control = "10.0.0.1:7000"
data_addr = "10.1.0.1"
[[hosts]]
name = "h1"
control = "10.0.0.2:7000"
data_addr = "10.1.0.2"
[[switches]]
name = "leaf0"
[[switches]]
name = "leaf1"
[[switches]]
name = "spine0"
[[switches]]
name = "spine1"
[[links]]
a = "h0"
b = "leaf0"
rate = "100gbit"
[[links]]
a = "h1"
b = "leaf1"
rate = "100gbit"
[[links]]
a = "leaf0"
b = "spine0"
rate = "50gbit"
[[links]]
a = "leaf0"
b = "spine1"
rate = "50gbit"
[[links]]
a = "leaf1"
b = "spine0"
rate = "50gbit"
[[links]]
a = "leaf1"
b = "spine1"
rate = "50gbit"
"""

PATHS = """
source = "port counters of leaf0 and leaf1"
[[pair]]
from = "h0"
to = "h1"
paths = [["leaf0", "spine1", "leaf1"], ["leaf0", "spine1", "leaf1"]]
"""


def test_a_lab_testbeds_path_map_routes_the_pairs_it_lists(tmp_path) -> None:
    from genie.testbed import load_testbed
    from genie.testbed.pathmap import load_path_map

    (tmp_path / "paths.toml").write_text(PATHS)
    (tmp_path / "lab.toml").write_text(LAB)
    tb = load_testbed(tmp_path / "lab.toml")
    assert tb.routing.paths == str((tmp_path / "paths.toml").resolve())
    topo = tb.to_topology()
    n = _names(topo)
    for a, b, up in ((0, 1, "leaf0->spine1"), (1, 0, "leaf1->spine1")):  # reverse: backwards
        w = dict(topo.flow_route(a, b, a, b)[0])
        assert w[n[up]] == pytest.approx(1.0) and n[up.replace("1", "0", 1)] not in w
    assert "path map" in topo.describe() and "path map" in tb.model_note()
    _, source = load_path_map(tb.routing.paths, topo)
    assert source == "port counters of leaf0 and leaf1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[pair]]\nfrom = "h0"\nto = "h9"\npaths = [["leaf0"]]\n', "unknown host"),
        ('[[pair]]\nfrom = "h0"\nto = "h1"\npaths = [["leaf0", "leaf1"]]\n',
         "no link leaf0->leaf1"),
        (PATHS + '[[pair]]\nfrom = "h1"\nto = "h0"\npaths = [["leaf1", "spine0", "leaf0"]]\n',
         "listed twice"),
        ('[[pair]]\nfrom = "h0"\nto = "h1"\npaths = []\n', "non-empty"),
        ("colour = 1\n", "unknown keys colour"),
    ],
)  # fmt: skip
def test_a_bad_path_map_is_one_line_naming_the_pair(tmp_path, body, message) -> None:
    from genie.errors import TestbedError
    from genie.testbed import load_testbed

    (tmp_path / "paths.toml").write_text(body)
    (tmp_path / "lab.toml").write_text(LAB)
    tb = load_testbed(tmp_path / "lab.toml")
    with pytest.raises(TestbedError, match=message) as err:
        tb.to_topology()
    assert "\n" not in str(err.value) and "paths.toml" in str(err.value)


def test_a_missing_path_map_is_refused_where_the_testbed_names_it(tmp_path) -> None:
    from genie.errors import TestbedError
    from genie.testbed import load_testbed

    (tmp_path / "lab.toml").write_text(LAB)
    with pytest.raises(TestbedError, match=r"lab.toml:\d+.*routing.paths.*does not exist"):
        load_testbed(tmp_path / "lab.toml")

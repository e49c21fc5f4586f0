"""The paths a netns fabric really gives a job's flows: read from the kernels, not guessed.

A routed netns fabric (``genie.testbed.fabric_routes``) hashes every flow's 5-tuple at each
switch. The model's ECMP hashes flows too, with a hash of its own, so the two pick different
spines for a given flow; with few flows per link that luck alone moves a collective's time.
The switches say which next hop they give an exact 5-tuple (``ip route get ... ipproto tcp sport
S dport D`` with the packet's incoming interface): with the fabric's hash policy over exactly
those fields (``fib_multipath_hash_policy`` 3) that is the forwarding decision, no traffic
needed. ``connection_paths`` walks each 5-tuple hop by hop (one ``ip -batch`` per switch and
hop). Read while a job's connections are up (after its Prepare):

* ``kernel_paths``: per rank pair, the path of each of its connections (both directions: a
  connection carries data both ways) as a ``genie.collectives.connections.FlowPaths`` for
  ``Topology.with_paths``; each connection is told apart by its fixed source port
  (``genie.collectives.connections.source_ports``);
* ``observed_paths``: the same per host pair, every established connection alike.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from genie.collectives.connections import FlowPaths, Path, channel_streams, source_ports
from genie.errors import TestbedError
from genie.testbed import fabric_routes
from genie.testbed.model import Testbed
from genie.testbed.netns import Runner, run_command
from genie.testbed.netns_plan import link_ports

Conn = tuple[str, int, str, int]  # source address, port, destination address, port (TCP)
MAX_HOPS = 16
DATA_PREFIX = "198.18."  # data addresses (the control network is 198.19)
KERNEL_SOURCE = "as the kernel's ECMP hash routes these flows (ip route get per 5-tuple)"


def established(netns: str, runner: Runner = run_command) -> list[Conn]:
    """Established TCP connections of ``netns`` between data addresses, as (local address,
    port, peer address, port)."""
    res = runner(["ip", "netns", "exec", netns, "ss", "-Htn", "state", "established"], None)
    if res.returncode != 0:
        raise TestbedError(f"ss in {netns} failed: {res.stderr.strip()}")
    out = []
    for line in res.stdout.splitlines():
        ends = line.split()[-2:]
        if len(ends) != 2:
            continue
        (la, lp), (pa, pp) = (e.rsplit(":", 1) for e in ends)
        if la.startswith(DATA_PREFIX) and pa.startswith(DATA_PREFIX):
            out.append((la, int(lp), pa, int(pp)))
    return out


def job_connections(tb: Testbed, runner: Runner = run_command) -> set[Conn]:
    """Every established data connection of ``tb``'s hosts, once per direction."""
    flows: set[Conn] = set()
    for h in tb.hosts:
        for la, lp, ra, rp in established(h.netns or "", runner):
            flows.add((la, lp, ra, rp))
            flows.add((ra, rp, la, lp))
    return flows


class _Fabric:
    """What walking a 5-tuple through ``tb`` needs: namespaces, ports, link ids."""

    def __init__(self, tb: Testbed, topology: Any) -> None:
        if fabric_routes.fabric_kind(tb) != "routed":
            raise TestbedError(f"testbed {tb.name} is not a routed fabric: its paths are fixed")
        self.addr_ep = {a: ep for ep, (a, _, _) in fabric_routes.endpoint_addrs(tb).items()}
        self.rid_sw = {ip: s for s, ip in fabric_routes.router_ips(tb).items()}
        self.ns_of = {s.name: s.netns or "" for s in tb.switches}  # a routed fabric is netns
        sw = set(self.ns_of)
        self.uplink: dict[str, str] = {}
        self.port_to: dict[tuple[str, str], str] = {}
        for i, (pa, pb) in link_ports(tb).items():
            lk = tb.links[i]
            self.port_to[(lk.a, lk.b)], self.port_to[(lk.b, lk.a)] = pa.ifname, pb.ifname
            if lk.b in sw and lk.a not in sw:
                self.uplink[lk.a] = lk.b
            elif lk.a in sw and lk.b not in sw:
                self.uplink[lk.b] = lk.a
        self.dev_to = {(node, dev): nbr for (node, nbr), dev in self.port_to.items()}
        self.link_id = {(lk.src, lk.dst): i for i, lk in enumerate(topology.links)}


def _by_switch(todo: dict[Conn, list[str]]) -> dict[str, list[Conn]]:
    """switch -> the 5-tuples now at it (each walk's last node)."""
    at: dict[str, list[Conn]] = {}
    for flow, nodes in todo.items():
        at.setdefault(nodes[-1], []).append(flow)
    return at


def _ask(ns: str, lines: list[str], runner: Runner) -> list[tuple[str, str]]:
    """(via address or "", output device) for each ``route get`` line, asked in one batch."""
    res = runner(["ip", "-j", "-n", ns, "-batch", "-"], "\n".join(lines) + "\n")
    if res.returncode != 0:
        raise TestbedError(f"`ip route get` in {ns} failed: {res.stderr.strip()}")
    out = []
    for text in res.stdout.splitlines():
        if not text.strip():
            continue
        (route,) = json.loads(text)
        out.append((route.get("gateway", ""), route["dev"]))
    if len(out) != len(lines):
        raise TestbedError(f"`ip route get` in {ns} answered {len(out)} of {len(lines)} lines")
    return out


def connection_paths(
    tb: Testbed, topology: Any, flows: Iterable[Conn], runner: Runner = run_command
) -> dict[Conn, Path]:
    """The link-id path through ``tb`` of each TCP 5-tuple (source address, port, destination
    address, port) whose ends are NICs of the testbed, as its switches route it."""
    fab = _Fabric(tb, topology)
    walks: dict[Conn, list[str]] = {}
    for flow in flows:
        src, dst = fab.addr_ep.get(flow[0]), fab.addr_ep.get(flow[2])
        if src is not None and dst is not None and src != dst:
            walks[flow] = [src, fab.uplink[src]]
    todo = {f: w for f, w in walks.items() if w[-1] != fab.addr_ep[f[2]]}
    for _ in range(MAX_HOPS):
        if not todo:
            break
        for here, at in _by_switch(todo).items():
            lines = []
            for src, sport, dst, dport in at:
                iif = fab.port_to[(here, todo[(src, sport, dst, dport)][-2])]
                lines.append(
                    f"route get {dst} from {src} iif {iif} ipproto tcp sport {sport} dport {dport}"
                )
            for flow, (via, dev) in zip(at, _ask(fab.ns_of[here], lines, runner), strict=True):
                nxt = fab.rid_sw.get(via) if via else fab.dev_to.get((here, dev))
                if nxt is None:
                    raise TestbedError(f"{here} sends {flow} to {via or dev}, not a testbed node")
                todo[flow].append(nxt)
        todo = {f: w for f, w in todo.items() if w[-1] != fab.addr_ep[f[2]]}
    if todo:
        flow = next(iter(todo))
        raise TestbedError(f"flow {flow} did not reach its destination in {MAX_HOPS} hops")
    return {f: tuple(fab.link_id[pair] for pair in itertools.pairwise(w)) for f, w in walks.items()}


def observed_paths(
    tb: Testbed, topology: Any, runner: Runner = run_command
) -> dict[tuple[int, int], list[Path]]:
    """(source endpoint, destination endpoint) -> the link-id path of each of its flows."""
    fab = _Fabric(tb, topology)
    paths = connection_paths(tb, topology, job_connections(tb, runner), runner)
    out: dict[tuple[int, int], list[Path]] = {}
    for flow in sorted(paths):
        key = (topology.host_index(fab.addr_ep[flow[0]]), topology.host_index(fab.addr_ep[flow[2]]))
        out.setdefault(key, []).append(paths[flow])
    return out


def match_connections(
    conns: Iterable[Conn], rank_addrs: Sequence[str], streams: int
) -> dict[tuple[int, int, int], Conn]:
    """(lower rank, higher rank, stream) -> its connection, as the lower rank opened it (from
    its address and a source port of ``source_ports``: the first of its sequence that is
    free, so the earliest place in a sequence wins); connections that match no flow (the
    kernel picked their port) are left out."""
    ranks_at: dict[str, list[int]] = {}
    for r, a in enumerate(rank_addrs):
        ranks_at.setdefault(a, []).append(r)
    rows = {c for c in conns if c[0] in ranks_at and c[2] in ranks_at}
    cand: dict[tuple[str, int, str], list[tuple[int, int, int, int]]] = {}
    for la, pa in {(c[0], c[2]) for c in rows}:
        for r, q in itertools.product(ranks_at[la], ranks_at[pa]):
            if r >= q:
                continue
            for s in range(streams):
                for j, port in enumerate(source_ports(r, q, s)):
                    cand.setdefault((la, port, pa), []).append((j, r, q, s))
    options = sorted(
        (j, c, (r, q, s)) for c in rows for (j, r, q, s) in cand.get((c[0], c[1], c[2]), ())
    )
    out: dict[tuple[int, int, int], Conn] = {}
    taken: set[Conn] = set()
    for _, c, flow in options:
        if flow not in out and c not in taken:
            out[flow] = c
            taken.add(c)
    return out


def has_choices(tb: Testbed) -> bool:
    """Whether ``tb`` is a routed netns fabric where some switch has several next hops towards
    a NIC (ECMP): only there do paths depend on the flow."""
    if tb.kind != "netns" or fabric_routes.fabric_kind(tb) != "routed":
        return False
    return any(len(h) > 1 for s in fabric_routes.next_hops(tb).values() for h in s.values())


def kernel_paths(
    tb: Testbed,
    topology: Any,
    rank_endpoints: Sequence[str],
    streams: int,
    channels: int = 1,
    pair_channels: Mapping[tuple[int, int], set[int]] | None = None,
    min_part: int | None = None,
    runner: Runner = run_command,
) -> FlowPaths:
    """The paths the fabric gives a job's connections, per rank pair, while they are up.

    ``rank_endpoints``: each global rank's NIC endpoint (``Testbed.rank_endpoints``);
    ``streams`` connections per rank pair in ``channels`` sets (``DataOptions``);
    ``pair_channels``: the sets each (lower, higher) rank pair's bytes take
    (``genie.collectives.connections.pair_channels``; None: all of them, evenly). A pair
    with a connection that cannot be told apart (its source port was not one of its sequence)
    is left to the model's own routing, and the source says how many.
    """
    addrs = fabric_routes.endpoint_addrs(tb)
    rank_addrs = [addrs[ep][0] for ep in rank_endpoints]
    conns = job_connections(tb, runner)
    mine = match_connections(conns, rank_addrs, streams)
    wanted = set(mine.values())
    paths = connection_paths(
        tb, topology, wanted | {(c[2], c[3], c[0], c[1]) for c in wanted}, runner
    )
    pairs = {(r, q) for r, q, _ in mine}
    out: dict[tuple[int, int], tuple[tuple[Path, ...], ...]] = {}
    missing = 0
    for r, q in sorted(pairs):
        used = sorted(pair_channels.get((r, q), ())) if pair_channels is not None else None
        sets = [channel_streams(c, streams, channels) for c in (used or range(channels))]
        conn = [[mine.get((r, q, s)) for s in ss] for ss in sets]
        if any(c is None for cs in conn for c in cs):
            missing += 1
            continue
        fwd = tuple(tuple(paths[c] for c in cs if c is not None) for cs in conn)
        back = tuple(
            tuple(paths[(c[2], c[3], c[0], c[1])] for c in cs if c is not None) for cs in conn
        )
        out[(r, q)], out[(q, r)] = fwd, back
    source = KERNEL_SOURCE
    if missing:
        source += f"; {missing} rank pair(s) with a connection on a port of the kernel's choice"
    return FlowPaths(out, source, **({"min_part": min_part} if min_part else {}))


def learn_paths(
    tb: Testbed,
    topology: Any,
    rank_endpoints: Sequence[str],
    streams: int,
    channels: int = 1,
    pair_channels: Mapping[tuple[int, int], set[int]] | None = None,
    min_part: int | None = None,
    runner: Runner = run_command,
) -> FlowPaths | None:
    """``kernel_paths`` where ``tb``'s paths depend on the flow (``has_choices``), else None
    (the model's routes are the fabric's)."""
    if not has_choices(tb):
        return None
    return kernel_paths(
        tb, topology, rank_endpoints, streams, channels, pair_channels, min_part, runner
    )


def spine_shares(paths: Sequence[Path], topology: Any, spines: Sequence[str]) -> list[float]:
    """The share of ``paths`` through each of ``spines`` (by name)."""
    counts = [0] * len(spines)
    for p in paths:
        for i, s in enumerate(spines):
            if any(topology.links[lid].dst == s for lid in p):
                counts[i] += 1
    return [c / max(1, len(paths)) for c in counts]

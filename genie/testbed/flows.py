"""The paths a netns fabric really gives a job's flows: read from the kernels, not guessed.

A routed netns fabric (``genie.testbed.fabric_routes``) hashes every flow's 5-tuple at each
switch. The model's ECMP hashes flows too, with a hash of its own, so the two pick different
spines for a given flow; with few flows per link that luck alone moves a collective's time.
``observed_paths`` removes the luck from a comparison: it lists the job's established data
connections in every host namespace (``ss``), asks each switch on the way which next hop it
gives that exact 5-tuple (``ip route get ... ipproto tcp sport S dport D``, both directions of
every connection: a connection carries data both ways), and returns the paths as topology link
ids, ready for ``Topology.with_observed_paths``. Read while the job's connections are up.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

from genie.errors import TestbedError
from genie.testbed import fabric_routes
from genie.testbed.model import Testbed
from genie.testbed.netns import Runner, run_command
from genie.testbed.netns_plan import link_ports

Conn = tuple[str, int, str, int]  # local address, port, peer address, port
MAX_HOPS = 16


def established(netns: str, runner: Runner = run_command) -> list[Conn]:
    """Established TCP connections of ``netns`` between data addresses (198.18.0.0/16)."""
    res = runner(["ip", "netns", "exec", netns, "ss", "-Htn", "state", "established"], None)
    if res.returncode != 0:
        raise TestbedError(f"ss in {netns} failed: {res.stderr.strip()}")
    out = []
    for line in res.stdout.splitlines():
        ends = line.split()[-2:]
        if len(ends) != 2:
            continue
        (la, lp), (pa, pp) = (e.rsplit(":", 1) for e in ends)
        if la.startswith("198.18.") and pa.startswith("198.18."):
            out.append((la, int(lp), pa, int(pp)))
    return out


def _next_hop(ns: str, iif: str, flow: Conn, runner: Runner) -> tuple[str, str]:
    """(via address or "", output device) a switch gives one 5-tuple arriving on ``iif``."""
    src, sport, dst, dport = flow
    argv = ["ip", "-j", "-n", ns, "route", "get", dst, "from", src, "iif", iif]
    argv += ["ipproto", "tcp", "sport", str(sport), "dport", str(dport)]
    res = runner(argv, None)
    if res.returncode != 0:
        raise TestbedError(f"`ip route get` in {ns} failed: {res.stderr.strip()}")
    (route,) = json.loads(res.stdout)
    return route.get("gateway", ""), route["dev"]


def observed_paths(
    tb: Testbed, topology, runner: Runner = run_command
) -> dict[tuple[int, int], list[tuple[int, ...]]]:
    """(source endpoint, destination endpoint) -> the link-id path of each of its flows."""
    if fabric_routes.fabric_kind(tb) != "routed":
        raise TestbedError(f"testbed {tb.name} is not a routed fabric: its paths are fixed")
    addr_ep = {a: ep for ep, (a, _, _) in fabric_routes.endpoint_addrs(tb).items()}
    rid_sw = {ip: s for s, ip in fabric_routes.router_ips(tb).items()}
    ns_of = {s.name: s.netns or "" for s in tb.switches}  # a routed fabric is netns
    sw = set(ns_of)
    uplink, port_to = {}, {}
    for i, (pa, pb) in link_ports(tb).items():
        lk = tb.links[i]
        port_to[(lk.a, lk.b)], port_to[(lk.b, lk.a)] = pa.ifname, pb.ifname
        if lk.b in sw and lk.a not in sw:
            uplink[lk.a] = lk.b
        elif lk.a in sw and lk.b not in sw:
            uplink[lk.b] = lk.a
    dev_to = {(node, dev): nbr for (node, nbr), dev in port_to.items()}
    link_id = {
        (topology.links[i].src, topology.links[i].dst): i for i in range(len(topology.links))
    }
    flows: set[Conn] = set()
    for h in tb.hosts:
        for la, lp, ra, rp in established(h.netns or "", runner):
            flows.add((la, lp, ra, rp))
            flows.add((ra, rp, la, lp))
    out: dict[tuple[int, int], list[tuple[int, ...]]] = {}
    for flow in sorted(flows):
        src, dst = addr_ep.get(flow[0]), addr_ep.get(flow[2])
        if src is None or dst is None:
            continue
        nodes = [src, uplink[src]]
        for _ in range(MAX_HOPS):
            here = nodes[-1]
            via, dev = _next_hop(ns_of[here], port_to[(here, nodes[-2])], flow, runner)
            nxt = rid_sw.get(via) if via else dev_to.get((here, dev))
            if nxt is None:
                raise TestbedError(f"{here} sends {flow} to {via or dev}, not a testbed node")
            nodes.append(nxt)
            if nxt == dst:
                break
        else:
            raise TestbedError(f"flow {flow} did not reach {dst} in {MAX_HOPS} hops")
        path = tuple(link_id[pair] for pair in itertools.pairwise(nodes))
        key = (topology.host_index(src), topology.host_index(dst))
        out.setdefault(key, []).append(path)
    return out


def spine_shares(paths: Sequence[tuple[int, ...]], topology, spines: Sequence[str]) -> list[float]:
    """The share of ``paths`` through each of ``spines`` (by name)."""
    counts = [0] * len(spines)
    for p in paths:
        for i, s in enumerate(spines):
            if any(topology.links[lid].dst == s for lid in p):
                counts[i] += 1
    return [c / max(1, len(paths)) for c in counts]

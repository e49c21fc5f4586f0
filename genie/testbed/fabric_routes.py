"""Routed netns fabrics, planned as data: router addresses, ECMP next hops, route lines.

A netns testbed whose switches are more than one bridge (several switches, as a leaf-spine or a
rail-optimised fabric, or hosts with several NICs) is built as a routed (L3) fabric, the way
data-centre fabrics are: every switch is a router namespace with forwarding on, an address of
its own on ``lo`` (its router id, in the testbed's data block after the NICs'), unnumbered
ports, and a /32 route to every NIC address in the testbed. Where several neighbours lie on
shortest paths to a NIC (a leaf towards a host behind another leaf: every spine) the route is a
multipath route over all of them, and the switch hashes each flow's 5-tuple (addresses,
protocol, ports) onto one, as a switch ASIC does, with a hash seed fixed per switch from the
testbed's routing seed (``fib_multipath_hash_seed``): so the fabric spreads flows as the
model's ECMP policy does, and a job's flows (fixed source ports, ``genie_agent.dataplane.tcp_wire``)
take the same paths every run. The hash is the kernel's custom policy over exactly those five
fields (``fib_multipath_hash_policy = 3``, ``fib_multipath_hash_fields = 0x37``): the L4
policy (1) would reuse the hash the sending socket stamped on the packet, which Linux draws at
random per connection (and redraws after a timeout), so the same 5-tuple could take another
spine on the next run.

A host reaches the fabric through its NIC's uplink switch; with several NICs, a source-address
rule per NIC sends what leaves from that NIC's address out of that NIC (rank connections are
bound to their NIC's address). Nothing here runs a command.
"""

from __future__ import annotations

from collections import deque

from genie.collectives.topology import flow_hash
from genie.testbed import addressing
from genie.testbed.model import Testbed

HASH_POLICY_CUSTOM = 3  # fib_multipath_hash_policy: the fields of fib_multipath_hash_fields
HASH_FIELDS_5TUPLE = 0x37  # source and destination address, protocol, source and dest. port
NIC_TABLE_BASE = 100  # routing table of NIC k of a multi-NIC host: 100 + k
NIC_RULE_PREF = 1000  # its rule's priority: 1000 + k


def fabric_kind(tb: Testbed) -> str:
    """How ``tb`` is built: ``ring`` (hosts forward), ``bridged`` (one switch, one NIC per
    host: a Linux bridge) or ``routed`` (switches are L3 routers with ECMP)."""
    switches = set(tb.switch_names())
    if any(lk.a not in switches and lk.b not in switches for lk in tb.links):
        return "ring"
    if len(switches) <= 1 and not any(h.nics for h in tb.hosts):
        return "bridged"
    return "routed"


def router_ips(tb: Testbed) -> dict[str, str]:
    """switch -> its router id, in the testbed's data block after every NIC's address."""
    n_nics = sum(h.n_nics for h in tb.hosts)
    return {
        s: addressing.data_ip(n_nics + j, tb.netns_prefix) for j, s in enumerate(tb.switch_names())
    }


def endpoint_addrs(tb: Testbed) -> dict[str, tuple[str, int, str]]:
    """NIC endpoint -> (address, NIC index, host name)."""
    out = {}
    for h in tb.hosts:
        for k, addr in enumerate(h.nic_addrs()):
            out[h.endpoint(k)] = (addr, k, h.name)
    return out


def hash_seed(tb: Testbed, index: int) -> int:
    """The multipath hash seed of switch ``index``: fixed by the routing seed, never 0 (which
    the kernel reads as "random per boot")."""
    return 1 + flow_hash(tb.routing.seed, index) % (2**32 - 1)


def next_hops(tb: Testbed) -> dict[str, dict[str, list[str]]]:
    """switch -> NIC endpoint -> the neighbours on shortest paths towards it ([] if attached).

    Distances are hops over switch-to-switch links from the switch the NIC is linked to.
    """
    switches = tb.switch_names()
    sw = set(switches)
    nbrs: dict[str, list[str]] = {s: [] for s in switches}
    attach: dict[str, str] = {}
    for lk in tb.links:
        if lk.a in sw and lk.b in sw:
            nbrs[lk.a].append(lk.b)
            nbrs[lk.b].append(lk.a)
        elif lk.b in sw:
            attach[lk.a] = lk.b
        elif lk.a in sw:
            attach[lk.b] = lk.a
    dist_from: dict[str, dict[str, int]] = {}
    for s in set(attach.values()):
        dist = {s: 0}
        todo = deque([s])
        while todo:
            v = todo.popleft()
            for u in nbrs[v]:
                if u not in dist:
                    dist[u] = dist[v] + 1
                    todo.append(u)
        dist_from[s] = dist
    out: dict[str, dict[str, list[str]]] = {s: {} for s in switches}
    for ep, leaf in attach.items():
        dist = dist_from[leaf]
        for s in switches:
            if s not in dist:
                continue  # no path: the loader refuses disconnected testbeds
            out[s][ep] = [] if s == leaf else [u for u in nbrs[s] if dist.get(u) == dist[s] - 1]
    return out


def switch_route_lines(tb: Testbed, port_to: dict[tuple[str, str], str]) -> dict[str, list[str]]:
    """switch -> ``ip -batch`` lines of its routes to every NIC address.

    ``port_to[(switch, neighbour)]``: the switch's interface towards a neighbour (a NIC
    endpoint or another switch).
    """
    rid = router_ips(tb)
    addrs = endpoint_addrs(tb)
    out: dict[str, list[str]] = {}
    for s, routes in next_hops(tb).items():
        lines = []
        for ep, hops in sorted(routes.items()):
            addr = addrs[ep][0]
            if not hops:
                lines.append(f"route add {addr}/32 dev {port_to[(s, ep)]} scope link")
            elif len(hops) == 1:
                (n,) = hops
                lines.append(f"route add {addr}/32 via {rid[n]} dev {port_to[(s, n)]} onlink")
            else:
                nh = " ".join(f"nexthop via {rid[n]} dev {port_to[(s, n)]} onlink" for n in hops)
                lines.append(f"route add {addr}/32 {nh}")
        out[s] = lines
    return out


def host_route_lines(tb: Testbed, port_to: dict[tuple[str, str], str]) -> dict[str, list[str]]:
    """host -> ``ip -batch`` lines: every NIC's address, its route into the fabric, and with
    several NICs a rule per NIC sending what leaves from its address out of it."""
    rid = router_ips(tb)
    data = f"{addressing.DATA_NET}"
    uplink: dict[str, str] = {}
    sw = set(tb.switch_names())
    for lk in tb.links:
        if lk.b in sw and lk.a not in sw:
            uplink[lk.a] = lk.b
        elif lk.a in sw and lk.b not in sw:
            uplink[lk.b] = lk.a
    out: dict[str, list[str]] = {}
    for h in tb.hosts:
        lines = []
        for k, addr in enumerate(h.nic_addrs()):
            ep = h.endpoint(k)
            dev = port_to[(ep, uplink[ep])]
            via = rid[uplink[ep]]
            lines.append(f"address add {addr}/32 dev {dev}")
            if k == 0:
                lines.append(f"route add {data} via {via} dev {dev} onlink src {addr}")
            if h.nics:
                table = NIC_TABLE_BASE + k
                lines.append(
                    f"route add {data} via {via} dev {dev} onlink src {addr} table {table}"
                )
                lines.append(f"rule add from {addr} table {table} pref {NIC_RULE_PREF + k}")
        out[h.name] = lines
    return out

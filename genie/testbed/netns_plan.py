"""Plan a netns testbed as data: the ``ip``/``tc`` argv lists that build it, in order.

Pure functions only: nothing here runs a command, so every plan is testable as strings without
root. ``genie.testbed.netns`` applies a plan in one place. Layout of what gets built:

- one namespace per host (``<prefix><host>``) and per switch (``<prefix><switch>``);
- a star (one switch, one NIC per host) has a Linux bridge ``br0`` as its switch; any other
  switched testbed (leaf-spine with any number of spines, rail-optimised, hosts with several
  NICs) is a routed fabric: switches are L3 routers with multipath routes and L4 hashing
  (``genie.testbed.fabric_routes``); a switch's links are ports ``p0``, ``p1`` ...;
- a host's NIC k is ``eth<k>`` (ring hosts: ``eth0``, ``eth1`` to their neighbours); its
  control link is ``ctl0``, a veth whose other end (``genie-<tag>c<i>``) is in the root
  namespace where the controller runs;
- every data link is a veth pair shaped at both ends with ``tc tbf`` (rate, burst, queue
  limit); a link with ``latency``, ``jitter`` or ``loss`` gets ``netem`` at each end as the
  root with the tbf under it (delay first, then the rate), where the kernel has sch_netem
  (``genie.testbed.netns`` refuses such a testbed in one line where it does not).
- ring testbeds (host-to-host links) route over neighbours: the data address sits on ``lo`` as
  a /32, hosts forward, and each host has /32 routes the short way round.
"""

from __future__ import annotations

import math

import msgspec

from genie.errors import TestbedError
from genie.testbed import addressing, fabric_routes
from genie.testbed.model import Link, Testbed

BRIDGE = "br0"
CONTROL_IF = "ctl0"
# A link passes no burst above its rate, like a switch port: every veth end sends GSO packets of
# at most GSO_MAX bytes and the bucket holds 1 ms of line rate, never below two such packets.
# With 64 KiB GSO packets the bucket had to be 5 ms (a bucket smaller than a packet splits it,
# and one serviced late loses tokens: 1 ms gave 1.8x the ideal time, 5 ms 1.03x), and a
# 256 KiB step passed at up to 2x line rate (measured/model 0.49-0.75). With 16 KiB packets
# and a 36 KB bucket (4-host star, 200 Mbit/s, 8 iterations): ring all-reduce 256 KiB 1.006,
# 4 MiB 1.009, 16 MiB 1.027; all-gather 1.011-1.031; all-to-all 4 and 16 MiB 1.02.
GSO_MAX = 16384
NETEM_HANDLE = "1:"  # a link end with delay or loss: netem at the root, tbf its child 10:
TBF_HANDLE = "10:"
NETEM_MIN_LIMIT = 1000  # packets (netem's own default)
TBF_BURST_SECONDS = 0.001
TBF_MIN_BURST = 2 * (GSO_MAX + 14)
# Default queue: 16 ms of line rate (4 ms dropped GSO bursts: one flow 0.88 vs 0.95 of the
# rate), and at least 4 MiB: a host sending to 3 peers at once (all-to-all) overflowed a
# 400 KB queue at 200 Mbit/s and TCP waited out retransmit timeouts (5.2x the model's time;
# 1.8x with 2 MB and no drops). Deep queues make links near-lossless, as the model assumes.
QUEUE_SECONDS = 0.016
QUEUE_MIN = 4 * 2**20


class Command(msgspec.Struct, frozen=True):
    """One command to run (argv, no shell), with what it is for and optional stdin."""

    argv: list[str]
    what: str
    stdin: str | None = None


class Port(msgspec.Struct, frozen=True):
    """One end of a data link: namespace, interface name, rate, MTU, queue."""

    netns: str
    ifname: str
    rate: float
    mtu: int
    queue_limit: int | None
    delay: float = 0.0  # s, netem at this end (0 with jitter and loss 0: no netem)
    jitter: float = 0.0  # s
    loss: float = 0.0  # fraction of packets

    @property
    def impaired(self) -> bool:
        """Whether this end needs netem."""
        return self.delay > 0 or self.jitter > 0 or self.loss > 0


class Plan(msgspec.Struct, frozen=True):
    """Everything ``up`` builds: the namespaces and root links it creates, and the commands."""

    testbed: str
    prefix: str
    namespaces: list[str]
    root_links: list[str]
    commands: list[Command]
    ports: list[Port]


ECN = {"off": "0", "on": "1", "passive": "2"}  # net.ipv4.tcp_ecn


def ip(netns: str | None, *args: str) -> list[str]:
    """``ip [-n NS] ARGS``."""
    return ["ip", *(["-n", netns] if netns else []), *args]


def netns_add(name: str) -> list[str]:
    """Create a namespace."""
    return ["ip", "netns", "add", name]


def netns_del(name: str) -> list[str]:
    """Delete a namespace (and with it every interface inside)."""
    return ["ip", "netns", "del", name]


def veth_pair(a_name: str, a_ns: str | None, b_name: str, b_ns: str | None) -> list[str]:
    """Create a veth pair with each end directly in its namespace (None: the root one)."""
    argv = ["ip", "link", "add", a_name]
    if a_ns:
        argv += ["netns", a_ns]
    argv += ["type", "veth", "peer", "name", b_name]
    if b_ns:
        argv += ["netns", b_ns]
    return argv


def tbf_params(rate: float, mtu: int, queue_limit: int | None) -> tuple[int, int, int]:
    """(rate bit/s, burst bytes, limit bytes) for a tbf shaping ``rate`` bytes/s."""
    bits = round(rate * 8)
    burst = max(TBF_MIN_BURST, 4 * (mtu + 14), round(rate * TBF_BURST_SECONDS))
    limit = queue_limit if queue_limit is not None else max(QUEUE_MIN, round(rate * QUEUE_SECONDS))
    limit = max(limit, 2 * (mtu + 14))
    return bits, burst, limit


def tbf(
    netns: str, dev: str, rate: float, mtu: int, queue_limit: int | None, under_netem: bool = False
) -> list[str]:
    """Shape ``dev``'s egress to ``rate`` bytes/s with a token bucket filter (the root qdisc,
    or with ``under_netem`` the child of the netem root)."""
    bits, burst, limit = tbf_params(rate, mtu, queue_limit)
    where = ["parent", f"{NETEM_HANDLE}1", "handle", TBF_HANDLE] if under_netem else ["root"]
    return [
        "tc", "-n", netns, "qdisc", "replace", "dev", dev, *where, "tbf",
        "rate", f"{bits}bit", "burst", str(burst), "limit", str(limit),
    ]  # fmt: skip


def netem_limit(rate: float, mtu: int, delay: float, jitter: float) -> int:
    """Packets netem holds: twice what the link carries over the delay at full-size frames."""
    return max(NETEM_MIN_LIMIT, math.ceil(2 * rate * (delay + jitter) / (mtu + 14)))


def netem(netns: str, dev: str, p: Port) -> list[str]:
    """The netem root of ``dev``: ``p``'s delay (and jitter) and loss, the rate left to tbf."""
    argv = [
        "tc", "-n", netns, "qdisc", "replace", "dev", dev, "root", "handle", NETEM_HANDLE,
        "netem", "limit", str(netem_limit(p.rate, p.mtu, p.delay, p.jitter)),
        "delay", f"{round(p.delay * 1e6)}us",
    ]  # fmt: skip
    if p.jitter > 0:
        argv.append(f"{round(p.jitter * 1e6)}us")
    if p.loss > 0:
        argv += ["loss", f"{p.loss * 100:.6g}%"]
    return argv


def shape(p: Port) -> list[list[str]]:
    """What puts ``p``'s end in the state its fields say: tbf, or netem with tbf under it."""
    if not p.impaired:
        return [tbf(p.netns, p.ifname, p.rate, p.mtu, p.queue_limit)]
    return [
        netem(p.netns, p.ifname, p),
        tbf(p.netns, p.ifname, p.rate, p.mtu, p.queue_limit, under_netem=True),
    ]


def sysctl(netns: str, key: str, value: str) -> list[str]:
    """Set a sysctl inside a namespace."""
    return ["ip", "netns", "exec", netns, "sysctl", "-qw", f"{key}={value}"]


def link_ports(tb: Testbed) -> dict[int, tuple[Port, Port]]:
    """Both ends of every link, with interface names assigned per namespace."""
    counters: dict[str, int] = {}
    switches = set(tb.switch_names())
    ns_of = {s.name: s.netns for s in tb.switches}
    nic_of: dict[str, int] = {}
    for h in tb.hosts:
        for k, ep in enumerate(h.endpoints()):
            ns_of[ep] = h.netns
            nic_of[ep] = k
    ring = fabric_routes.fabric_kind(tb) == "ring"
    out: dict[int, tuple[Port, Port]] = {}

    def port(node: str, lk: Link) -> Port:
        ns = ns_of[node]
        if ns is None:
            raise TestbedError(f"{node!r} has no namespace: not a netns testbed")
        k = counters.get(node, 0)
        counters[node] = k + 1
        # a host's NIC k is eth<k>; ring hosts number their neighbour links
        name = f"p{k}" if node in switches else f"eth{k if ring else nic_of[node]}"
        return Port(
            netns=ns,
            ifname=name,
            rate=lk.rate,
            mtu=lk.mtu,
            queue_limit=lk.queue_limit,
            delay=lk.latency,
            jitter=lk.jitter,
            loss=lk.loss,
        )

    for i, lk in enumerate(tb.links):
        out[i] = (port(lk.a, lk), port(lk.b, lk))
    return out


def ring_routes(tb: Testbed) -> dict[str, list[tuple[str, str, str]]]:
    """For host-to-host (ring) links: per host, (destination, via, dev) the short way round."""
    names = [h.name for h in tb.hosts]
    n = len(names)
    ports = link_ports(tb)
    nbr_dev: dict[tuple[str, str], str] = {}
    for i, lk in enumerate(tb.links):
        pa, pb = ports[i]
        nbr_dev[(lk.a, lk.b)] = pa.ifname
        nbr_dev[(lk.b, lk.a)] = pb.ifname
    addr = {h.name: h.data_addr for h in tb.hosts}
    routes: dict[str, list[tuple[str, str, str]]] = {}
    for i, src in enumerate(names):
        rs = []
        for j, dst in enumerate(names):
            if i == j:
                continue
            fwd = (j - i) % n
            step = 1 if fwd <= n - fwd else -1
            nxt = names[(i + step) % n]
            rs.append((addr[dst], addr[nxt], nbr_dev[(src, nxt)]))
        routes[src] = rs
    return routes


def plan_up(tb: Testbed, hash_seed: bool = False, allowed_cc: frozenset[str] = frozenset()) -> Plan:
    """The ordered commands that build ``tb`` as namespaces, veths, switches and tbf shapers.

    ``hash_seed``: the kernel has ``net.ipv4.fib_multipath_hash_seed`` (Linux 6.11+): routed
    switches then hash with seeds fixed by the testbed's routing seed, reproducible across boots
    (without it a boot's random seed holds until the next reboot). ``allowed_cc``: the
    congestion controls a namespace may take as its default
    (``net.ipv4.tcp_allowed_congestion_control``): the testbed's is set there when allowed (the
    agents set it per socket either way).
    """
    if tb.kind != "netns":
        raise TestbedError(f"testbed {tb.name!r} is kind {tb.kind!r}; only netns testbeds build")
    n_nics = sum(h.n_nics for h in tb.hosts)
    if n_nics + len(tb.switches) > addressing.MAX_HOSTS:
        raise TestbedError(
            f"{n_nics} NICs and {len(tb.switches)} switches; at most {addressing.MAX_HOSTS}"
        )
    kind = fabric_routes.fabric_kind(tb)
    is_ring = kind == "ring"
    cmds: list[Command] = []
    namespaces = [h.netns for h in tb.hosts if h.netns] + [s.netns for s in tb.switches if s.netns]
    root_links: list[str] = []

    def add(argv: list[str], what: str, stdin: str | None = None) -> None:
        cmds.append(Command(argv=argv, what=what, stdin=stdin))

    for ns in namespaces:
        add(netns_add(ns), f"namespace {ns}")
        add(ip(ns, "link", "set", "lo", "up"), f"loopback up in {ns}")
    tcp = tb.tcp
    for h in tb.hosts:  # the testbed's TCP stack in every host ([tcp]; default no slow start)
        ns = h.netns or ""
        sst = "1" if tcp.slow_start_after_idle else "0"
        add(sysctl(ns, "net.ipv4.tcp_slow_start_after_idle", sst), f"{h.name}: slow start")
        add(sysctl(ns, "net.ipv4.tcp_ecn", ECN[tcp.ecn]), f"{h.name}: ECN {tcp.ecn}")
        cc = next((c for c in tcp.congestion_control.split(",") if c in allowed_cc), None)
        if cc is not None:
            add(sysctl(ns, "net.ipv4.tcp_congestion_control", cc), f"{h.name}: TCP {cc}")
        if tcp.buffer_max is not None:  # min and initial as Linux's defaults, the max the file's
            for key, initial in (("tcp_rmem", 131072), ("tcp_wmem", 16384)):
                triple = f"4096 {min(initial, tcp.buffer_max)} {tcp.buffer_max}"
                add(sysctl(ns, f"net.ipv4.{key}", triple), f"{h.name}: {key} {triple} B")
    for i, h in enumerate(tb.hosts):
        ns = h.netns or ""
        root_if = addressing.root_control_ifname(tb.netns_prefix, i)
        if len(root_if) > addressing.IFNAMSIZ:
            raise TestbedError(f"interface name {root_if!r} longer than 15 characters")
        root_ip, host_ip = addressing.control_pair(i, tb.netns_prefix)
        if h.control_ip != host_ip:
            raise TestbedError(
                f"host {h.name!r}: netns control address must be {host_ip} (got {h.control_ip})"
            )
        root_links.append(root_if)
        add(veth_pair(root_if, None, CONTROL_IF, ns), f"control link of {h.name}")
        add(ip(None, "addr", "add", f"{root_ip}/30", "dev", root_if), "control address (root)")
        add(ip(None, "link", "set", root_if, "up"), "control link up (root)")
        add(ip(ns, "addr", "add", f"{host_ip}/30", "dev", CONTROL_IF), f"control address {h.name}")
        add(ip(ns, "link", "set", CONTROL_IF, "up"), f"control link up in {h.name}")
    if kind == "bridged":
        for s in tb.switches:
            add(
                ip(s.netns, "link", "add", BRIDGE, "type", "bridge", "stp_state", "0"),
                f"switch {s.name}",
            )
            add(ip(s.netns, "link", "set", BRIDGE, "up"), f"bridge up in {s.name}")
    ports = link_ports(tb)
    all_ports: list[Port] = []
    port_to: dict[tuple[str, str], str] = {}  # (node, neighbour) -> node's interface
    for i, lk in enumerate(tb.links):
        pa, pb = ports[i]
        port_to[(lk.a, lk.b)] = pa.ifname
        port_to[(lk.b, lk.a)] = pb.ifname
        add(veth_pair(pa.ifname, pa.netns, pb.ifname, pb.netns), f"link {lk.a}-{lk.b}")
        for p in (pa, pb):
            all_ports.append(p)
            add(ip(p.netns, "link", "set", p.ifname, "mtu", str(p.mtu)), f"mtu of {p.ifname}")
            add(
                ip(p.netns, "link", "set", p.ifname, "gso_max_size", str(GSO_MAX)),
                f"GSO packets of {p.ifname} at most {GSO_MAX} bytes",
            )
            if kind == "bridged" and p.netns in {s.netns for s in tb.switches}:
                add(ip(p.netns, "link", "set", p.ifname, "master", BRIDGE), f"port {p.ifname}")
            what = f"netem and shape {p.ifname}" if p.impaired else f"shape {p.ifname}"
            for argv in shape(p):
                add(argv, what)
            add(ip(p.netns, "link", "set", p.ifname, "up"), f"{p.ifname} up")
    ports_of: dict[str, list[str]] = {}
    for p in all_ports:
        ports_of.setdefault(p.netns, []).append(p.ifname)
    if kind == "routed":
        _routed(tb, port_to, ports_of, hash_seed, add)
    for h in tb.hosts:
        if kind == "routed":
            break
        ns = h.netns or ""
        if is_ring or ns not in ports_of:  # a lone host keeps its address on lo
            add(ip(ns, "addr", "add", f"{h.data_addr}/32", "dev", "lo"), f"data address {h.name}")
            if not is_ring:
                continue
            add(sysctl(ns, "net.ipv4.ip_forward", "1"), f"forwarding in {h.name}")
            # ties go clockwise both ways, so replies may arrive on the other link: no rp_filter
            for dev in ["all", *ports_of.get(ns, [])]:
                add(sysctl(ns, f"net.ipv4.conf.{dev}.rp_filter", "0"), f"rp_filter off {h.name}")
        else:
            dev = ports_of[ns][0]
            add(
                ip(ns, "addr", "add", f"{h.data_addr}/{addressing.DATA_PREFIXLEN}", "dev", dev),
                f"data address {h.name}",
            )
    if is_ring:
        for h in tb.hosts:
            for dst, via, dev in ring_routes(tb)[h.name]:
                add(
                    ip(h.netns, "route", "add", f"{dst}/32", "via", via, "dev", dev, "onlink",
                       "src", h.data_addr),
                    f"route {h.name} -> {dst}",
                )  # fmt: skip
    return Plan(
        testbed=tb.name,
        prefix=tb.netns_prefix,
        namespaces=namespaces,
        root_links=root_links,
        commands=cmds,
        ports=all_ports,
    )


def _routed(tb: Testbed, port_to, ports_of, hash_seed: bool, add) -> None:
    """The commands of a routed fabric: router ids, forwarding and ECMP hashing on switches,
    every switch's routes, and every host's NIC addresses, routes and rules."""
    rid = fabric_routes.router_ips(tb)
    switch_lines = fabric_routes.switch_route_lines(tb, port_to)
    for j, s in enumerate(tb.switches):
        ns = s.netns or ""
        add(ip(ns, "addr", "add", f"{rid[s.name]}/32", "dev", "lo"), f"router id of {s.name}")
        add(sysctl(ns, "net.ipv4.ip_forward", "1"), f"forwarding in {s.name}")
        policy = str(fabric_routes.HASH_POLICY_CUSTOM)
        fields = hex(fabric_routes.HASH_FIELDS_5TUPLE)
        add(sysctl(ns, "net.ipv4.fib_multipath_hash_fields", fields), f"ECMP 5-tuple {s.name}")
        add(sysctl(ns, "net.ipv4.fib_multipath_hash_policy", policy), f"ECMP hash of {s.name}")
        if hash_seed:
            seed = str(fabric_routes.hash_seed(tb, j))
            add(sysctl(ns, "net.ipv4.fib_multipath_hash_seed", seed), f"ECMP seed of {s.name}")
        for dev in ["all", "default", *ports_of.get(ns, [])]:
            add(sysctl(ns, f"net.ipv4.conf.{dev}.rp_filter", "0"), f"rp_filter off {s.name}")
        add(
            ip(ns, "-batch", "-"),
            f"routes of {s.name}",
            stdin="".join(line + "\n" for line in switch_lines[s.name]),
        )
    for h, lines in zip(
        tb.hosts, fabric_routes.host_route_lines(tb, port_to).values(), strict=True
    ):
        ns = h.netns or ""
        for dev in ["all", "default", *ports_of.get(ns, [])]:
            add(sysctl(ns, f"net.ipv4.conf.{dev}.rp_filter", "0"), f"rp_filter off {h.name}")
        add(ip(ns, "-batch", "-"), f"addresses and routes of {h.name}",
            stdin="".join(line + "\n" for line in lines))  # fmt: skip


def plan_down(namespaces: list[str], root_links: list[str]) -> list[Command]:
    """Commands that remove the given (existing) namespaces and root links."""
    cmds = [Command(argv=netns_del(ns), what=f"remove namespace {ns}") for ns in namespaces]
    cmds += [
        Command(argv=ip(None, "link", "del", ln), what=f"remove link {ln}") for ln in root_links
    ]
    return cmds

"""Network topologies for the cost model: named hosts and switches joined by directed links.

A link carries ``bandwidth`` bytes/s after ``latency`` seconds. Routes are shortest paths in
hops. Ranks placed on the same host talk over an intra-host path (``intra_bandwidth``,
``intra_latency``) that is modelled as one private egress port per sending rank.

The topology's "hosts" are the endpoints traffic leaves and enters by. A server with several NICs
is one endpoint per NIC (``servers`` names the server of each endpoint): a rank is placed on its
NIC's endpoint, so its traffic leaves through that NIC's link, and two ranks of one server talk
over the intra-host path whichever NICs they use (``same_server``).

How traffic spreads over equal-cost paths is the ``routing`` policy (``Routing``):

* ``ecmp`` (default): as a switch does it. Each *flow* is hashed, hop by hop, onto one of the
  equal-cost next hops; a flow is identified by (source rank, destination rank, flow index,
  seed) and every hop hashes it with its own node id, as switches hash with per-switch seeds.
  Between a pair of ranks there are ``flows`` flows (NCCL's channels x queue pairs per
  connection), each carrying an equal part of every message, so a rank pair spreads over
  spines as on a real fabric, and with one flow per pair ECMP collisions show.
* ``spray``: ideal per-packet spraying, the fluid optimum: at every hop the bytes split evenly
  over all equal-cost next hops.
* ``pinned``: one path per host pair from a linear function of the host numbers (the wave-1
  behaviour, kept for comparison; structured traffic can collide on one spine).

``flow_route`` gives the links a rank pair's traffic crosses with the fraction of its bytes on
each (the resources the fluid models share); ``route`` is one deterministic path per host pair.

Whatever the policy, paths learned from a real fabric override it for the flows they cover
(``with_paths``: a ``genie.collectives.connections.FlowPaths``, e.g. the kernel's multipath
hash read per flow on a netns fabric): a rank pair listed there loads the links its
connections really take, a message of a given size on as many of them as the agent cuts it
into; ``describe`` names where the paths came from.

Two software terms are zero unless a calibration sets them (``genie.calibration``; ``derive``
makes the calibrated copy): ``message_latency``, paid once by every message between hosts on top
of its route's link latencies, and ``step_overhead``, the time a rank's software spends on each
SEND, REDUCE and COPY step (the cost model runs a rank's steps' overheads one after another).
``model`` names what the numbers are ("" = as declared; else e.g. the calibration's id).
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, overload

import msgspec

from genie.errors import TopologyError

if TYPE_CHECKING:
    from genie.collectives.connections import FlowPaths


class Link(msgspec.Struct, frozen=True):
    """A directed link between two named nodes."""

    src: str
    dst: str
    bandwidth: float  # bytes/s
    latency: float  # s


LinkLike = Link | tuple[str, str, float, float]

ROUTING_POLICIES = ("ecmp", "spray", "pinned")
DEFAULT_CHANNELS = 2  # NCCL: rings (channels) per communicator over one NIC, typically 2+
DEFAULT_QPS = 1  # NCCL_IB_QPS_PER_CONNECTION's default


class Routing(msgspec.Struct, frozen=True, kw_only=True):
    """How traffic spreads over equal-cost paths (see the module docstring)."""

    policy: str = "ecmp"
    channels: int = DEFAULT_CHANNELS  # NCCL channels: each its own connection per rank pair
    qps: int = DEFAULT_QPS  # queue pairs (or sockets) per connection
    seed: int = 0
    # a path map file (``genie.testbed.pathmap``): the paths of the host pairs it lists, as the
    # user or the switches' counters say the fabric routes them; "" for none
    paths: str = ""

    def __post_init__(self) -> None:
        if self.policy not in ROUTING_POLICIES:
            raise TopologyError(
                f"routing {self.policy!r}: use one of {', '.join(ROUTING_POLICIES)}"
            )
        for name in ("channels", "qps"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 1 <= v <= 1024:
                raise TopologyError(f"routing {name} must be 1..1024: {v!r}")

    @property
    def flows(self) -> int:
        """Flows between a pair of ranks: channels x queue pairs."""
        return self.channels * self.qps

    def describe(self) -> str:
        """One phrase for reports."""
        if self.policy == "ecmp":
            text = (
                f"ECMP per flow ({self.channels} channels x {self.qps} QP = {self.flows} flows "
                f"per rank pair, seed {self.seed})"
            )
        elif self.policy == "spray":
            text = "per-packet spraying (ideal load balance)"
        else:
            text = "pinned paths per host pair (one path each, as in wave 1)"
        if self.paths:
            text += f"; the host pairs listed in path map {self.paths} on its paths"
        return text


_M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: every input bit flips about half the output bits."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def flow_hash(*parts: int) -> int:
    """A well-mixed 64-bit hash of integers (a switch's ECMP hash stands in for this)."""
    h = 0
    for p in parts:
        h = _mix(h ^ (p & _M64))
    return h


def _check_rate(what: str, bandwidth: float, latency: float) -> None:
    if not (isinstance(bandwidth, int | float) and math.isfinite(bandwidth) and bandwidth > 0):
        raise TopologyError(f"{what}: bandwidth must be a positive number of bytes/s: {bandwidth}")
    if not (isinstance(latency, int | float) and math.isfinite(latency) and latency >= 0):
        raise TopologyError(f"{what}: latency must be a non-negative number of seconds: {latency}")


class Topology:
    """Hosts, switches and directed links; routes between hosts are computed on demand."""

    def __init__(
        self,
        hosts: Sequence[str],
        switches: Sequence[str],
        links: Iterable[LinkLike],
        *,
        intra_bandwidth: float | None = None,
        intra_latency: float = 0.0,
        kind: str = "custom",
        routing: Routing | None = None,
        message_latency: float = 0.0,
        step_overhead: float = 0.0,
        servers: Sequence[str] | None = None,
    ) -> None:
        self.hosts: tuple[str, ...] = tuple(hosts)
        self.routing = routing or Routing()
        if servers is not None and len(servers) != len(self.hosts):
            raise TopologyError(f"{len(servers)} servers named for {len(self.hosts)} endpoints")
        names_of = list(dict.fromkeys(servers)) if servers is not None else list(self.hosts)
        index = {n: i for i, n in enumerate(names_of)}
        self.servers: tuple[str, ...] = tuple(names_of)
        # the server of each endpoint (host): ranks on one server use the intra-host path
        self.server_of: tuple[int, ...] = tuple(
            index[s] for s in (servers if servers is not None else self.hosts)
        )
        self.switches: tuple[str, ...] = tuple(switches)
        self.kind = kind
        if not self.hosts:
            raise TopologyError("a topology needs at least one host")
        names = self.hosts + self.switches
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise TopologyError(f"node names must be unique; repeated: {', '.join(dup)}")
        self._node_index = {name: i for i, name in enumerate(names)}
        self.links: tuple[Link, ...] = tuple(
            lk if isinstance(lk, Link) else Link(*lk) for lk in links
        )
        self._out: list[list[int]] = [[] for _ in names]
        self._in: list[list[int]] = [[] for _ in names]
        for lid, lk in enumerate(self.links):
            for end in (lk.src, lk.dst):
                if end not in self._node_index:
                    raise TopologyError(f"link {lk.src}->{lk.dst}: unknown node {end!r}")
            if lk.src == lk.dst:
                raise TopologyError(f"link {lk.src}->{lk.dst} loops to itself")
            _check_rate(f"link {lk.src}->{lk.dst}", lk.bandwidth, lk.latency)
            self._out[self._node_index[lk.src]].append(lid)
            self._in[self._node_index[lk.dst]].append(lid)
        if intra_bandwidth is None:
            intra_bandwidth = max((lk.bandwidth for lk in self.links), default=1e12)
        _check_rate("intra-host path", intra_bandwidth, intra_latency)
        self.intra_bandwidth = float(intra_bandwidth)
        self.intra_latency = float(intra_latency)
        _check_rate("per-message cost", 1.0, message_latency)
        _check_rate("per-step overhead", 1.0, step_overhead)
        self.message_latency = float(message_latency)
        self.step_overhead = float(step_overhead)
        self.model = ""
        self._dist_cache: dict[int, Sequence[int]] = {}
        self._route_cache: dict[tuple[int, int], tuple[int, ...]] = {}
        self._flow_cache: dict[tuple[int, int, int, int, int | None], tuple[tuple, float]] = {}
        # routing memos (links never change): next hops towards a switch's distances, the one
        # neighbour of a node, the links from a node to another
        self._hop_cache: dict[tuple[int, int], list[int]] = {}
        self._only_cache: dict[int, int | None] = {}
        self._pair_links: dict[tuple[int, int], list[int]] | None = None
        self._observed: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        self.paths: FlowPaths | None = None  # learned paths that override the policy

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_parts(
        cls,
        hosts: Sequence[str],
        switches: Sequence[str],
        links: Iterable[LinkLike],
        *,
        bidirectional: bool = True,
        intra_bandwidth: float | None = None,
        intra_latency: float = 0.0,
        routing: Routing | None = None,
        servers: Sequence[str] | None = None,
    ) -> Topology:
        """Build a topology from explicit hosts, switches and links (each link both ways);
        ``servers``: the server of each host (endpoint) where servers have several NICs."""
        out: list[Link] = []
        for lk in links:
            link = lk if isinstance(lk, Link) else Link(*lk)
            out.append(link)
            if bidirectional:
                out.append(Link(link.dst, link.src, link.bandwidth, link.latency))
        return cls(
            hosts,
            switches,
            out,
            intra_bandwidth=intra_bandwidth,
            intra_latency=intra_latency,
            routing=routing,
            servers=servers,
        )

    # -- queries -------------------------------------------------------------------------

    @property
    def n_hosts(self) -> int:
        """Number of hosts."""
        return len(self.hosts)

    def host_index(self, host: int | str) -> int:
        """The index of a host given by index or name."""
        if isinstance(host, str):
            idx = self._node_index.get(host)
            if idx is None or idx >= len(self.hosts):
                raise TopologyError(f"unknown host {host!r}")
            return idx
        if not 0 <= host < len(self.hosts):
            raise TopologyError(f"host index {host} outside 0..{len(self.hosts) - 1}")
        return int(host)

    def same_server(self, a: int, b: int) -> bool:
        """Whether endpoints (host indices) ``a`` and ``b`` are on one server."""
        return self.server_of[a] == self.server_of[b]

    @property
    def multi_nic(self) -> bool:
        """Whether some server has several endpoints (NICs)."""
        return len(self.servers) < len(self.hosts)

    def link_name(self, lid: int) -> str:
        """A readable name for link ``lid``, e.g. ``h0->sw0``."""
        lk = self.links[lid]
        return f"{lk.src}->{lk.dst}"

    def route(self, src_host: int | str, dst_host: int | str) -> tuple[int, ...]:
        """The link ids from one host to another (empty for the same host); deterministic."""
        s, d = self.host_index(src_host), self.host_index(dst_host)
        if s == d:
            return ()
        key = (s, d)
        r = self._route_cache.get(key)
        if r is None:
            r = self._compute_route(s, d)
            self._route_cache[key] = r
        return r

    def with_routing(self, routing: Routing) -> Topology:
        """This topology under another routing policy (same nodes and links)."""

        other = copy.copy(self)
        other.routing = routing
        other._flow_cache = {}
        return other

    def with_observed_paths(self, paths: dict[tuple[int, int], list[tuple[int, ...]]]) -> Topology:
        """This topology with the paths a real fabric gave the flows between host pairs
        (``genie.testbed.flows.observed_paths``): a listed pair's bytes split evenly over its
        flows' paths, whatever the routing policy; other pairs follow the policy."""
        import copy

        other = copy.copy(self)
        other._observed = {k: list(v) for k, v in paths.items() if v}
        other._flow_cache = {}
        return other

    def with_paths(self, paths: FlowPaths | None) -> Topology:
        """This topology with the paths a fabric gives genie's connections (per rank pair;
        ``None``: none): listed pairs take them whatever the routing policy, others follow it."""
        other = copy.copy(self)
        other.paths = paths if paths is not None and paths.paths else None
        other._flow_cache = {}
        return other

    @property
    def routes_by_rank(self) -> bool:
        """Whether two rank pairs of one host pair may take different links (ECMP per flow on
        a fabric with choices, or learned paths)."""
        if self.paths is not None:
            return True
        return self.routing.policy == "ecmp" and self.kind not in ("star", "full", "ring")

    def flow_route(
        self,
        src_host: int,
        dst_host: int,
        src_rank: int,
        dst_rank: int,
        nbytes: float | None = None,
    ) -> tuple[tuple[tuple[int, float], ...], float]:
        """((link id, fraction of the pair's bytes on it), ...) and the latency of the pair.

        With learned paths (``with_paths``) for the rank pair: its connections' paths, a message
        of ``nbytes`` (None: a large one) on as many as the agent cuts it into. Else under
        ``ecmp`` the pair's ``flows`` flows are hashed onto paths one by one, each with an equal
        part of the bytes; under ``spray`` the bytes split evenly at every hop; under ``pinned``
        the host pair's one ``route``. The latency is the slowest path's. Endpoints of one
        server (its NICs) use the intra-host path.
        """
        if self.server_of[src_host] == self.server_of[dst_host]:
            return (), self.intra_latency
        parts = None if self.paths is None else self.paths.parts(src_rank, dst_rank, nbytes)
        key = (src_host, dst_host, src_rank, dst_rank, parts)
        hit = self._flow_cache.get(key)
        if hit is not None:
            return hit
        pol = self.routing.policy
        weights: dict[int, float] = {}
        lat = 0.0
        seen = self._observed.get((src_host, dst_host))
        flows = (
            [] if parts is None else self._learned(src_host, dst_host, src_rank, dst_rank, parts)
        )
        if flows:
            for path, share in flows:
                for lid in path:
                    weights[lid] = weights.get(lid, 0.0) + share
                lat = max(lat, self.route_latency(path))
        elif seen:
            for path in seen:
                for lid in path:
                    weights[lid] = weights.get(lid, 0.0) + 1.0 / len(seen)
                lat = max(lat, self.route_latency(path))
        elif pol == "pinned" or self.kind in ("star", "full", "ring"):  # one path exists anyway
            path = self.route(src_host, dst_host)
            weights = {lid: 1.0 for lid in path}
            lat = self.route_latency(path)
        elif pol == "spray":
            lat = self._spray(src_host, dst_host, weights)
        else:
            nf = self.routing.flows
            for f in range(nf):
                path = self._hashed_path(src_host, dst_host, (src_rank, dst_rank, f))
                for lid in path:
                    weights[lid] = weights.get(lid, 0.0) + 1.0 / nf
                lat = max(lat, self.route_latency(path))
        hit = (tuple(sorted(weights.items())), lat)
        if len(self._flow_cache) < 1_000_000:
            self._flow_cache[key] = hit
        return hit

    def _learned(
        self, s: int, d: int, src_rank: int, dst_rank: int, parts: int
    ) -> list[tuple[tuple[int, ...], float]]:
        """The learned (path, share) of a message between the rank pair, [] unless every path
        runs from host ``s`` to host ``d`` (paths learned for other hosts do not apply)."""
        assert self.paths is not None
        flows = self.paths.shares(src_rank, dst_rank, parts)
        ends = (self.hosts[s], self.hosts[d])
        ok = all(p and (self.links[p[0]].src, self.links[p[-1]].dst) == ends for p, _ in flows)
        return flows if ok else []

    def _next_hops(self, v: int, dist: Sequence[int]) -> list[int]:
        """The links out of ``v`` one hop closer under ``dist``, in ``_out[v]``'s order.

        Towards a host reached only through its neighbour (``_Through``): from the neighbour,
        its links to the host; from elsewhere, the hops towards the neighbour, which are the
        same (the host is next to no other node) and remembered per (node, neighbour's search).
        """
        if type(dist) is _Through:
            base, dst = dist._base, dist._dst
            if base[v] == 0:
                return self._links_between(v, dst)
            key = (v, id(base))  # base is kept alive by _dist_cache
            hit = self._hop_cache.get(key)
            if hit is None:
                hit = self._hop_cache[key] = self._next_hops(v, base)
            return hit
        return [
            lid
            for lid in self._out[v]
            if dist[self._node_index[self.links[lid].dst]] == dist[v] - 1
        ]

    def _links_between(self, u: int, v: int) -> list[int]:
        """The links from node ``u`` to node ``v``, in ``_out[u]``'s order."""
        pairs = self._pair_links
        if pairs is None:
            pairs = {}
            for lid, lk in enumerate(self.links):
                key = (self._node_index[lk.src], self._node_index[lk.dst])
                pairs.setdefault(key, []).append(lid)
            self._pair_links = pairs
        return pairs.get((u, v), [])

    def _hashed_path(self, s: int, d: int, flow: tuple[int, int, int]) -> tuple[int, ...]:
        dist = self._dist_to(d)
        if dist[s] < 0:
            raise TopologyError(f"no path from host {self.hosts[s]} to host {self.hosts[d]}")
        path: list[int] = []
        v = s
        while v != d:
            cands = self._next_hops(v, dist)
            if len(cands) > 1:
                h = flow_hash(self.routing.seed, v, s, d, *flow)
                lid = cands[h % len(cands)]
            else:
                lid = cands[0]
            path.append(lid)
            v = self._node_index[self.links[lid].dst]
        return tuple(path)

    def _spray(self, s: int, d: int, weights: dict[int, float]) -> float:
        """Split one unit of bytes evenly over every equal-cost next hop, hop by hop."""
        dist = self._dist_to(d)
        if dist[s] < 0:
            raise TopologyError(f"no path from host {self.hosts[s]} to host {self.hosts[d]}")
        frontier = {s: 1.0}
        lat_at = {s: 0.0}
        while frontier:
            nxt: dict[int, float] = {}
            for v, w in frontier.items():
                if v == d:
                    continue
                cands = self._next_hops(v, dist)
                for lid in cands:
                    share = w / len(cands)
                    weights[lid] = weights.get(lid, 0.0) + share
                    u = self._node_index[self.links[lid].dst]
                    nxt[u] = nxt.get(u, 0.0) + share
                    lat_at[u] = max(lat_at.get(u, 0.0), lat_at[v] + self.links[lid].latency)
            frontier = {u: w for u, w in nxt.items() if u != d}
        return lat_at.get(d, 0.0) + self.message_latency

    def route_latency(self, route: Sequence[int]) -> float:
        """Sum of link latencies along a route plus the per-message cost (the intra-host
        latency for an empty one)."""
        if not route:
            return self.intra_latency
        return sum(self.links[i].latency for i in route) + self.message_latency

    def route_bandwidth(self, route: Sequence[int]) -> float:
        """The narrowest link bandwidth along a route (intra-host bandwidth for an empty one)."""
        if not route:
            return self.intra_bandwidth
        return min(self.links[i].bandwidth for i in route)

    @property
    def symmetry(self) -> str | None:
        """'star', 'full' or 'ring' when every host sees the same uniform network, else None
        (also with learned paths: they may tell rank pairs apart)."""
        if self.paths is not None:
            return None
        return self.kind if self.kind in ("star", "full", "ring") else None

    def describe(self) -> str:
        """One line: kind, counts, the routing where paths can differ, what calibrated it."""
        hosts = (
            f"{len(self.servers)} hosts ({len(self.hosts)} NICs)"
            if self.multi_nic
            else f"{len(self.hosts)} hosts"
        )
        text = (
            f"{self.kind} topology: {hosts}, {len(self.switches)} switches, {len(self.links)} links"
        )
        if self.kind not in ("star", "full", "ring"):
            text += f"; routing {self.routing.describe()}"
        if self.paths is not None:
            text += f"; paths {self.paths.describe()}, other pairs as the routing says"
        return f"{text}, {self.model}" if self.model else text

    def derive(
        self,
        *,
        link: Callable[[Link], Link] | None = None,
        intra_bandwidth: float | None = None,
        intra_latency: float | None = None,
        message_latency: float | None = None,
        step_overhead: float | None = None,
        model: str | None = None,
    ) -> Topology:
        """A copy with links mapped through ``link`` and the given fields replaced.

        Routes only depend on the wiring, so the copy keeps the same routes (and subclass).
        """
        new = copy.copy(self)
        if link is not None:
            new.links = tuple(link(lk) for lk in self.links)
            for lk in new.links:
                _check_rate(f"link {lk.src}->{lk.dst}", lk.bandwidth, lk.latency)
        for name, value in (
            ("intra_bandwidth", intra_bandwidth),
            ("intra_latency", intra_latency),
            ("message_latency", message_latency),
            ("step_overhead", step_overhead),
        ):
            if value is not None:
                setattr(new, name, float(value))
        _check_rate("intra-host path", new.intra_bandwidth, new.intra_latency)
        _check_rate("per-message cost", 1.0, new.message_latency)
        _check_rate("per-step overhead", 1.0, new.step_overhead)
        if model is not None:
            new.model = model
        new._dist_cache = self._dist_cache
        new._route_cache = self._route_cache
        new._flow_cache = {}  # flow latencies include the per-message cost
        return new

    # -- routing -------------------------------------------------------------------------

    def _dist_to(self, dst: int) -> Sequence[int]:
        """Hop counts from every node to node ``dst`` (-1: no path), breadth first.

        A host whose only links go to and come from one switch is reached through that switch
        only, so its distances are the switch's plus one (``_Through``): one search per switch
        instead of one per host (a leaf-spine of 16,384 hosts searched 16,384 times, quadratic).
        """
        dist = self._dist_cache.get(dst)
        if dist is not None:
            return dist
        via = self._only_neighbour(dst)
        if via is not None and self._only_neighbour(via) is None:  # (two nodes alone: search)
            through = _Through(self._dist_to(via), dst)
            self._dist_cache[dst] = through
            return through
        dist = [-1] * len(self._out)
        dist[dst] = 0
        queue = deque([dst])
        while queue:
            v = queue.popleft()
            for lid in self._in[v]:
                u = self._node_index[self.links[lid].src]
                if dist[u] < 0:
                    dist[u] = dist[v] + 1
                    queue.append(u)
        self._dist_cache[dst] = dist
        return dist

    def _only_neighbour(self, v: int) -> int | None:
        """The node ``v``'s every link goes to and comes from, if one (else None)."""
        if v in self._only_cache:
            return self._only_cache[v]
        outs, ins = self._out[v], self._in[v]
        one = None
        if outs and ins:
            nodes = {self._node_index[self.links[lid].dst] for lid in outs}
            nodes |= {self._node_index[self.links[lid].src] for lid in ins}
            one = nodes.pop() if len(nodes) == 1 else None
        self._only_cache[v] = one
        return one

    def _compute_route(self, s: int, d: int) -> tuple[int, ...]:
        dist = self._dist_to(d)
        if dist[s] < 0:
            raise TopologyError(f"no path from host {self.hosts[s]} to host {self.hosts[d]}")
        path: list[int] = []
        v = s
        spread = (s * 2654435761 + d * 40503) & 0xFFFFFFFF
        while v != d:
            cands = self._next_hops(v, dist)
            lid = cands[spread % len(cands)] if len(cands) > 1 else cands[0]
            path.append(lid)
            v = self._node_index[self.links[lid].dst]
        return tuple(path)


class _Through(Sequence[int]):
    """Hop counts to a host reached only through its one neighbour: the neighbour's plus one."""

    __slots__ = ("_base", "_dst")

    def __init__(self, base: Sequence[int], dst: int) -> None:
        self._base = base
        self._dst = dst

    def __len__(self) -> int:
        return len(self._base)

    @overload
    def __getitem__(self, u: int) -> int: ...
    @overload
    def __getitem__(self, u: slice) -> Sequence[int]: ...
    def __getitem__(self, u: int | slice) -> int | Sequence[int]:
        if isinstance(u, slice):
            return [self[i] for i in range(len(self))[u]]
        if u == self._dst:
            return 0
        b = self._base[u]
        return b + 1 if b >= 0 else -1


class _RingTopology(Topology):
    """A bidirectional ring of hosts; the shorter way round, clockwise on a tie."""

    def _compute_route(self, s: int, d: int) -> tuple[int, ...]:
        n = len(self.hosts)
        if n == 2:  # two hosts: one link each way (ids 0 and 1)
            return (s,)
        cw = (d - s) % n
        if cw <= n - cw:  # link 2i: i -> i+1, link 2i+1: i+1 -> i
            return tuple(2 * ((s + k) % n) for k in range(cw))
        return tuple(2 * ((s - k - 1) % n) + 1 for k in range(n - cw))


class _StarTopology(Topology):
    """One switch: host i's up link is 2i and its down link 2i+1."""

    def _compute_route(self, s: int, d: int) -> tuple[int, ...]:
        return (2 * s, 2 * d + 1)


class _FullTopology(Topology):
    """Every host linked to every other: link a*(n-1) + (b if b < a else b-1) is a -> b."""

    def _compute_route(self, s: int, d: int) -> tuple[int, ...]:
        return (s * (len(self.hosts) - 1) + (d if d < s else d - 1),)


def _hosts(n: int) -> list[str]:
    if not isinstance(n, int) or n < 1:
        raise TopologyError(f"number of hosts must be a positive integer: {n}")
    return [f"h{i}" for i in range(n)]


def switch(
    n_hosts: int,
    bandwidth: float,
    latency: float,
    *,
    intra_bandwidth: float | None = None,
    intra_latency: float = 0.0,
    routing: Routing | None = None,
) -> Topology:
    """One switch with every host attached by an up link (id 2i) and a down link (id 2i+1)."""
    hosts = _hosts(n_hosts)
    links: list[Link] = []
    for h in hosts:
        links.append(Link(h, "sw0", bandwidth, latency))
        links.append(Link("sw0", h, bandwidth, latency))
    return _StarTopology(
        hosts,
        ["sw0"],
        links,
        intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency,
        kind="star",
        routing=routing,
    )


def ring(
    n_hosts: int,
    bandwidth: float,
    latency: float,
    *,
    intra_bandwidth: float | None = None,
    intra_latency: float = 0.0,
    routing: Routing | None = None,
) -> Topology:
    """Hosts in a bidirectional ring: link 2i is h_i -> h_{i+1}, link 2i+1 is h_{i+1} -> h_i."""
    hosts = _hosts(n_hosts)
    if n_hosts < 2:
        raise TopologyError("a ring needs at least 2 hosts")
    links: list[Link] = []
    for i in range(n_hosts):
        a, b = hosts[i], hosts[(i + 1) % n_hosts]
        links.append(Link(a, b, bandwidth, latency))
        links.append(Link(b, a, bandwidth, latency))
    if n_hosts == 2:  # both "ways round" are the same pair of links
        links = links[:2]
    return _RingTopology(
        hosts,
        [],
        links,
        intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency,
        kind="ring",
        routing=routing,
    )


def fully_connected(
    n_hosts: int,
    bandwidth: float,
    latency: float,
    *,
    intra_bandwidth: float | None = None,
    intra_latency: float = 0.0,
    routing: Routing | None = None,
) -> Topology:
    """A direct link from every host to every other host."""
    hosts = _hosts(n_hosts)
    links = [Link(a, b, bandwidth, latency) for a in hosts for b in hosts if a != b]
    return _FullTopology(
        hosts,
        [],
        links,
        intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency,
        kind="full",
        routing=routing,
    )


def leaf_spine(
    leaves: int,
    spines: int,
    hosts_per_leaf: int,
    bandwidth: float,
    latency: float,
    oversubscription: float = 1.0,
    *,
    intra_bandwidth: float | None = None,
    intra_latency: float = 0.0,
    routing: Routing | None = None,
) -> Topology:
    """Two-level Clos: hosts on leaves, each leaf wired to every spine, uplinks oversubscribed.

    Each leaf's total uplink bandwidth is ``hosts_per_leaf * bandwidth / oversubscription``,
    split evenly over its ``spines`` uplinks.
    """
    for name, v in (("leaves", leaves), ("spines", spines), ("hosts_per_leaf", hosts_per_leaf)):
        if not isinstance(v, int) or v < 1:
            raise TopologyError(f"{name} must be a positive integer: {v}")
    if not (math.isfinite(oversubscription) and oversubscription > 0):
        raise TopologyError(f"oversubscription must be positive: {oversubscription}")
    hosts = _hosts(leaves * hosts_per_leaf)
    leaf_names = [f"leaf{i}" for i in range(leaves)]
    spine_names = [f"spine{i}" for i in range(spines)]
    up_bw = hosts_per_leaf * bandwidth / oversubscription / spines
    parts: list[Link] = []
    for i, h in enumerate(hosts):
        parts.append(Link(h, leaf_names[i // hosts_per_leaf], bandwidth, latency))
    if leaves > 1:
        for lf in leaf_names:
            for sp in spine_names:
                parts.append(Link(lf, sp, up_bw, latency))
    switches = leaf_names + (spine_names if leaves > 1 else [])
    topo = Topology.from_parts(
        hosts,
        switches,
        parts,
        intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency,
        routing=routing,
    )
    topo.kind = "leaf_spine"
    return topo


FACTORIES = {
    "switch": switch,
    "ring": ring,
    "fully_connected": fully_connected,
    "leaf_spine": leaf_spine,
}

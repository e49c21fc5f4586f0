"""The testbed description: hosts, switches, links and the intra-host fabric, as typed data.

A Testbed is plain, validated data (msgspec structs). Loading from TOML lives in
``genie.testbed.loader``, writing TOML in ``genie.testbed.emit``; building namespaces from it
in ``genie.testbed.netns``. Rates are bytes/s, latencies seconds, sizes bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from genie.collectives.topology import Routing
from genie.placement import Placement, place
from genie.wire.liveness import MISSED_BEATS_LIMIT
from genie.wire.messages import DEFAULT_INTRA_BW, DEFAULT_INTRA_LAT

Kind = Literal["static", "netns"]
DataPlaneKind = Literal["tcp", "rdma"]  # the data plane agents send on

DEFAULT_MTU = 1500
DEFAULT_NETNS_PREFIX = "genie-"
DEFAULT_CONTROL_PORT = 7000


class Nic(msgspec.Struct, frozen=True, kw_only=True):
    """One network interface of a host: its name in the testbed, address and devices."""

    name: str  # "nic0", ...; the host's endpoint in links is "<host>.<name>" (several NICs)
    data_addr: str
    device: str | None = None  # interface on a lab host (e.g. ens1f0)
    rdma_device: str | None = None


class Host(msgspec.Struct, frozen=True, kw_only=True):
    """One machine (or emulated machine) running one genie agent.

    A host has one NIC (``data_addr``, ``nic``, ``rdma_device``) unless ``nics`` lists several;
    then links name its NICs (``<host>.<nic>``), ``data_addr`` is the first NIC's, and rank i of
    the host uses NIC ``rank_nics[i]`` (default i mod the number of NICs).
    """

    name: str
    control: str  # "IP:PORT" the agent's control socket listens on
    data_addr: str  # IP the agent's data-plane listeners bind to (its first NIC's)
    ranks: int = 1
    nic: str | None = None
    rdma_device: str | None = None
    netns: str | None = None  # namespace name for netns testbeds
    nics: list[Nic] = msgspec.field(default_factory=list)  # two or more, else empty
    rank_nics: list[int] = msgspec.field(default_factory=list)  # per local rank; empty: i mod n
    faults: bool = False  # lab hosts: may genie apply link faults on its named interfaces

    @property
    def control_ip(self) -> str:
        """The IP part of ``control``."""
        return self.control.rsplit(":", 1)[0]

    @property
    def control_port(self) -> int:
        """The port part of ``control``."""
        return int(self.control.rsplit(":", 1)[1])

    @property
    def n_nics(self) -> int:
        """How many NICs the host has."""
        return max(1, len(self.nics))

    def endpoint(self, k: int = 0) -> str:
        """The topology node of NIC ``k``: the host's name, or ``<host>.<nic>`` with several."""
        return f"{self.name}.{self.nics[k].name}" if self.nics else self.name

    def endpoints(self) -> list[str]:
        """The topology nodes of every NIC, in order."""
        return [self.endpoint(k) for k in range(self.n_nics)]

    def rank_nic(self, i: int) -> int:
        """The NIC of the host's ``i``-th rank."""
        if self.rank_nics:
            return self.rank_nics[i % len(self.rank_nics)]
        return i % self.n_nics

    def nic_addrs(self) -> list[str]:
        """The data address of every NIC, in order."""
        return [n.data_addr for n in self.nics] if self.nics else [self.data_addr]


class Switch(msgspec.Struct, frozen=True, kw_only=True):
    """A switch: a Linux bridge in its own namespace for netns testbeds, else just a name."""

    name: str
    netns: str | None = None


class Link(msgspec.Struct, frozen=True, kw_only=True):
    """A full-duplex link between two endpoints (host or switch names)."""

    a: str
    b: str
    rate: float  # bytes/s, each direction
    mtu: int = DEFAULT_MTU
    queue_limit: int | None = None  # bytes queued at each end before drops; None: chosen by genie
    latency: float = 0.0  # s, per direction; priced per hop; netns: netem delay at each end
    jitter: float = 0.0  # s, netns: netem's delay variation at each end (not priced)
    loss: float = 0.0  # fraction of packets dropped per direction, netns: netem (not priced)

    @property
    def impaired(self) -> bool:
        """Whether a netns testbed needs netem for this link (delay, jitter or loss)."""
        return self.latency > 0 or self.jitter > 0 or self.loss > 0


class IntraHost(msgspec.Struct, frozen=True, kw_only=True):
    """The fabric between ranks on one host (NVLink-like): bandwidth bytes/s, latency s."""

    bandwidth: float = DEFAULT_INTRA_BW
    latency: float = DEFAULT_INTRA_LAT


# Linux's usual default, what lab hosts run; reno where the host does not let genie use cubic
# (a network namespace may only use net.ipv4.tcp_allowed_congestion_control)
CONGESTION_DEFAULT = "cubic,reno"
BUFFER_MIN = 64 * 1024  # [tcp] buffer_max bounds, bytes: a few MTUs of window at least,
BUFFER_MAX = 1 << 30  # at most what SO_SNDBUF accepts


class TcpSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The TCP stack every data connection of a job runs with (``[tcp]``), set by genie and
    recorded with each run: never silently the host's own default.

    ``congestion_control``: the algorithm of every data socket, or a preference list (the first
    the host accepts; default cubic, else reno), set per socket by the agents and read back into
    each run's conditions; ``ecn``: ``off``, ``on``
    or ``passive`` (``net.ipv4.tcp_ecn`` 0, 1, 2) in netns hosts; ``slow_start_after_idle``:
    whether an idle connection restarts from a small window (netns hosts; off: the model has
    no slow start); ``buffer_max``: the most bytes a data socket's send or receive buffer may
    grow to by autotuning (netns hosts: the max of ``net.ipv4.tcp_rmem`` and ``tcp_wmem``;
    None: the kernel's own).
    """

    congestion_control: str = CONGESTION_DEFAULT
    ecn: Literal["off", "on", "passive"] = "passive"
    slow_start_after_idle: bool = False
    buffer_max: int | None = None

    def describe(self) -> str:
        """One phrase for reports."""
        sst = "on" if self.slow_start_after_idle else "off"
        buf = "" if self.buffer_max is None else f", socket buffers at most {self.buffer_max} B"
        return f"TCP {self.congestion_control}, ECN {self.ecn}, slow start after idle {sst}{buf}"


MAX_QPS_PER_CONNECTION = 16  # NCCL_IB_QPS_PER_CONNECTION's range in genie (the agents' bound)


class RdmaSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How the RDMA data plane's queue pairs run on this testbed (``[rdma]``), given to every
    RDMA job and recorded with each run.

    ``qps_per_connection``: queue pairs per connection, a step split across them
    (NCCL_IB_QPS_PER_CONNECTION's role; more flows for ECMP to spread); ``stall_s``: the stall
    watchdog's bound, seconds without a completion while work is outstanding (None: the run's
    timeout); ``traffic_class``: the GRH traffic class of the queue pairs (NCCL_IB_TC's role,
    0..255; None sends 0, the verbs default). Under the common DSCP trust mapping DSCP =
    traffic_class >> 2 and priority = DSCP >> 3 (= traffic_class >> 5): 106 is DSCP 26,
    priority 3, RoCE's usual lossless class, the priority ``genie hosts check`` then checks.
    """

    qps_per_connection: int = 1
    stall_s: float | None = None
    traffic_class: int | None = None

    @property
    def priority(self) -> int | None:
        """The priority ``traffic_class`` lands on under DSCP trust (None: not set)."""
        return None if self.traffic_class is None else self.traffic_class >> 5


class Testbed(msgspec.Struct, frozen=True, kw_only=True):
    """A whole testbed: what runs where and how it is connected."""

    __test__ = False  # not a pytest test class

    name: str
    kind: Kind
    transport: DataPlaneKind = "tcp"
    hosts: list[Host] = msgspec.field(default_factory=list)
    switches: list[Switch] = msgspec.field(default_factory=list)
    links: list[Link] = msgspec.field(default_factory=list)
    intra_host: IntraHost = msgspec.field(default_factory=IntraHost)
    netns_prefix: str = DEFAULT_NETNS_PREFIX
    model: str = ""  # where the link rates come from ("" = declared by the file's author)
    # what the link rates are: "line" (a NIC's or a switch port's rate: the model takes each
    # packet's headers off) or "payload" (measured payload rates, e.g. a probe's: taken as is)
    rates: Literal["line", "payload"] = "line"
    routing: Routing = msgspec.field(default_factory=Routing)  # how flows spread over paths
    tcp: TcpSettings = msgspec.field(default_factory=TcpSettings)  # the data connections' TCP
    rdma: RdmaSettings = msgspec.field(default_factory=RdmaSettings)  # the queue pairs' settings
    # heartbeat intervals of silence after which the controller counts an agent lost (the agents'
    # own --missed-beats bounds the other direction)
    missed_beats: int = MISSED_BEATS_LIMIT

    @property
    def model_source(self) -> str:
        """Which fabric the cost model of this testbed prices, in words (for "model" columns)."""
        return self.model or f"the rates declared in testbed {self.name}"

    def with_flows(self, flows: int) -> Testbed:
        """This testbed with ``flows`` flows per rank pair in its routing (``flows`` channels of
        one QP each): what the wire opens when a job runs ``flows`` TCP streams per pair."""
        if flows == self.routing.flows:
            return self
        from msgspec.structs import replace

        return replace(self, routing=replace(self.routing, channels=flows, qps=1))

    def model_note(self) -> str:
        """Which fabric the model prices, what its rates are (payload after headers), and, where
        paths can differ, how flows take them."""
        from genie.testbed.to_topology import describe_wire

        switches = {lk.a for lk in self.links} | {lk.b for lk in self.links}
        several = len(set(self.switch_names()) & switches) > 1 or any(h.nics for h in self.hosts)
        text = f"{self.model_source}; {describe_wire(self)}"
        if any(lk.jitter > 0 or lk.loss > 0 for lk in self.links):
            text += "; latency priced per hop, the links' jitter and loss emulated but not priced"
        text = f"{text}; routing {self.routing.describe()}" if several else text
        return text

    @property
    def identity(self) -> str:
        """What a controller of this testbed names in its Hello; its netns agents serve only it."""
        return f"{self.netns_prefix}{self.name}" if self.kind == "netns" else self.name

    @property
    def n_ranks(self) -> int:
        """Total ranks: the sum of ranks over hosts."""
        return sum(h.ranks for h in self.hosts)

    def place(
        self, n_ranks: int | None = None, mode: str = "testbed", ranks_per_host: int = 1
    ) -> Placement:
        """Ranks on this testbed's hosts by the placement rule (``genie.placement.place``)."""
        slots = [h.ranks for h in self.hosts]
        return place(n_ranks or self.n_ranks, mode, slots=slots, ranks_per_host=ranks_per_host)

    def rank_host_names(self, placement: Placement | None = None) -> list[str]:
        """The host name of every rank of ``placement`` (default: the testbed's rank slots)."""
        return (placement or self.place()).names([h.name for h in self.hosts])

    def rank_hosts(self, placement: Sequence[str] | None = None) -> list[int]:
        """Map each global rank to its topology host (default: the testbed's rank slots).

        The index is into ``to_topology().hosts``, the testbed's endpoints: the host's index when
        every host has one NIC, else the endpoint of the rank's NIC. ``placement``: the host
        name of every rank (``rank_host_names``).
        """
        index = {e: i for i, e in enumerate(self.endpoint_names())}
        return [index[e] for e in self.rank_endpoints(placement)]

    def endpoint_names(self) -> list[str]:
        """Every host's NIC endpoints in order (the topology's hosts)."""
        return [e for h in self.hosts for e in h.endpoints()]

    def rank_nics(self, placement: Sequence[str] | None = None) -> list[tuple[Host, int]]:
        """Per global rank, (its host, its NIC index); ``placement``: the host of each rank
        (default: ranks fill hosts in order). The k-th rank placed on a host uses its NIC
        ``rank_nic(k)``."""
        if placement is None:
            placement = self.rank_host_names()
        seen: dict[str, int] = {}
        out = []
        for name in placement:
            h = self.host(name)
            k = seen.get(name, 0)
            seen[name] = k + 1
            out.append((h, h.rank_nic(k)))
        return out

    def rank_endpoints(self, placement: Sequence[str] | None = None) -> list[str]:
        """Per global rank, the topology endpoint of its NIC (see ``rank_nics``)."""
        return [h.endpoint(k) for h, k in self.rank_nics(placement)]

    def rank_nic_addrs(self, placement: Sequence[str]) -> list[str]:
        """Per global rank, its NIC's data address where its host has several NICs, else ""
        (the agent's own address); empty when no host has several."""
        if not any(h.nics for h in self.hosts):
            return []
        return [h.nics[k].data_addr if h.nics else "" for h, k in self.rank_nics(placement)]

    def host(self, name: str) -> Host:
        """The host called ``name`` (KeyError if none)."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def host_index(self, name: str) -> int:
        """The index of host ``name`` in ``hosts`` (KeyError if none)."""
        for i, h in enumerate(self.hosts):
            if h.name == name:
                return i
        raise KeyError(name)

    def switch_names(self) -> list[str]:
        """Names of all switches, in order."""
        return [s.name for s in self.switches]

    def to_topology(self, wire: str = "payload") -> Any:
        """This testbed as a ``genie.collectives.topology.Topology`` for the cost model: link
        bandwidths are the payload rate of its transport after headers (``wire`` "line": the
        declared line rates)."""
        from genie.testbed.to_topology import testbed_topology

        return testbed_topology(self, wire)

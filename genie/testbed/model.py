"""The testbed description: hosts, switches, links and the intra-host fabric, as typed data.

A Testbed is plain, validated data (msgspec structs). Loading from TOML lives in
``genie.testbed.loader``, writing TOML in ``genie.testbed.emit``; building namespaces from it
in ``genie.testbed.netns``. Rates are bytes/s, latencies seconds, sizes bytes.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from genie.collectives.topology import Routing

Kind = Literal["static", "netns"]
Transport = Literal["tcp", "rdma"]

DEFAULT_MTU = 1500
DEFAULT_INTRA_BW = 300e9  # bytes/s, one direction of an NVLink-class fabric
DEFAULT_INTRA_LAT = 1e-6  # s
DEFAULT_NETNS_PREFIX = "genie-"
DEFAULT_CONTROL_PORT = 7000


class Host(msgspec.Struct, frozen=True, kw_only=True):
    """One machine (or emulated machine) running one genie agent."""

    name: str
    control: str  # "IP:PORT" the agent's control socket listens on
    data_addr: str  # IP the agent's data-plane listeners bind to
    ranks: int = 1
    nic: str | None = None
    rdma_device: str | None = None
    netns: str | None = None  # namespace name for netns testbeds

    @property
    def control_ip(self) -> str:
        """The IP part of ``control``."""
        return self.control.rsplit(":", 1)[0]

    @property
    def control_port(self) -> int:
        """The port part of ``control``."""
        return int(self.control.rsplit(":", 1)[1])


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
    latency: float = 0.0  # s, per direction; for the cost model only (netns adds no delay)


class IntraHost(msgspec.Struct, frozen=True, kw_only=True):
    """The fabric between ranks on one host (NVLink-like): bandwidth bytes/s, latency s."""

    bandwidth: float = DEFAULT_INTRA_BW
    latency: float = DEFAULT_INTRA_LAT


class Testbed(msgspec.Struct, frozen=True, kw_only=True):
    """A whole testbed: what runs where and how it is connected."""

    __test__ = False  # not a pytest test class

    name: str
    kind: Kind
    transport: Transport = "tcp"
    hosts: list[Host] = msgspec.field(default_factory=list)
    switches: list[Switch] = msgspec.field(default_factory=list)
    links: list[Link] = msgspec.field(default_factory=list)
    intra_host: IntraHost = msgspec.field(default_factory=IntraHost)
    netns_prefix: str = DEFAULT_NETNS_PREFIX
    model: str = ""  # where the link rates come from ("" = declared by the file's author)
    routing: Routing = msgspec.field(default_factory=Routing)  # how flows spread over paths

    @property
    def model_source(self) -> str:
        """Which fabric the cost model of this testbed prices, in words (for "model" columns)."""
        return self.model or f"the rates declared in testbed {self.name}"

    @property
    def identity(self) -> str:
        """What a controller of this testbed names in its Hello; its netns agents serve only it."""
        return f"{self.netns_prefix}{self.name}" if self.kind == "netns" else self.name

    @property
    def n_ranks(self) -> int:
        """Total ranks: the sum of ranks over hosts."""
        return sum(h.ranks for h in self.hosts)

    def rank_hosts(self) -> list[int]:
        """Map each global rank to its host index (hosts in order, ranks contiguous per host)."""
        out: list[int] = []
        for i, h in enumerate(self.hosts):
            out.extend([i] * h.ranks)
        return out

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

    def to_topology(self, tcp_goodput: bool = False) -> Any:
        """This testbed as a ``genie.collectives.topology.Topology`` for the cost model.

        ``tcp_goodput``: link bandwidths are the TCP payload rate (headers taken off).
        """
        from genie.testbed.to_topology import testbed_topology

        return testbed_topology(self, tcp_goodput)

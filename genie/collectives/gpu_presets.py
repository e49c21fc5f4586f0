"""GPU server presets for the NCCL-like model: one word sets a node's GPUs, buses and NICs.

Each preset is a DGX/HGX-style server of 8 GPUs joined by NVLink/NVSwitch (NVIDIA) or by an
all-to-all xGMI mesh (AMD), with one NIC per GPU (rail-optimised). Rates are bytes/s per
direction. ``intra_bw`` is the rate NCCL's topology code counts for a GPU's NVLinks (links x
NCCL's per-link figure, ``src/graph/topo.h``: 20.0 GB/s SM80, 20.6 GB/s SM90, 40.1 GB/s SM100),
below the marketing line rate kept in ``intra_line_bw``; for AMD's xGMI the same from RCCL's
topology code (48 of 64 GB/s per link on MI300, ``XGMI_FRACTION``). Sources per preset are in
``source`` and in docs/nccl-model.md. ``tuning`` names the GPU generation whose NCCL constants
apply (AMD GPUs are priced with Hopper's: an assumption, RCCL's own tuning differs and is not
modelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from genie.errors import CollectiveError

GB = 1e9
#: PCIe x16 payload line rate per direction (128b/130b coding), bytes/s.
PCIE4_X16 = 16e9 * 16 * 128 / 130 / 8
PCIE5_X16 = 32e9 * 16 * 128 / 130 / 8

Tuning = Literal["volta", "ampere", "hopper", "blackwell"]
IntraLink = Literal["nvlink", "xgmi", "pci"]
NicKind = Literal["ib", "roce", "efa", "tcp"]
Cpu = Literal["intel", "amd"]


@dataclass(frozen=True)
class NodePreset:
    """One server model: its GPUs, their bus, its NICs and CPUs (rates bytes/s per direction)."""

    name: str
    vendor: Literal["nvidia", "amd"]
    tuning: Tuning  # whose NCCL constants price it
    gpus: int  # GPUs per node
    intra_link: IntraLink
    intra_bw: float  # per GPU, as NCCL counts it
    intra_line_bw: float  # per GPU, the line rate vendors quote
    nics: int
    nic_bw: float  # line rate of one NIC
    nic_kind: NicKind
    gpu_nic_bw: float  # a GPU's PCIe link to its NIC
    cpu: Cpu
    channels: int  # NCCL channels (rings) assumed on this node
    source: str
    nvls: bool = False  # its NVSwitch does NVLink SHARP (Hopper and later HGX/DGX)

    @property
    def net_bw(self) -> float:
        """The node's NICs together (line rate, bytes/s per direction)."""
        return self.nics * self.nic_bw


def _nvidia(
    name: str,
    tuning: Tuning,
    links: int,
    nccl_link: float,
    line_link: float,
    cpu: Cpu,
    channels: int,
    source: str,
    *,
    pcie: float = PCIE5_X16,
    nic_gbit: float = 400,
) -> NodePreset:
    return NodePreset(
        name=name,
        vendor="nvidia",
        tuning=tuning,
        gpus=8,
        intra_link="nvlink",
        intra_bw=links * nccl_link * GB,
        intra_line_bw=links * line_link * GB,
        nics=8,
        nic_bw=nic_gbit * 1e9 / 8,
        nic_kind="ib",
        gpu_nic_bw=pcie,
        cpu=cpu,
        channels=channels,
        source=source,
        nvls=tuning in ("hopper", "blackwell"),
    )


#: What RCCL's topology code counts of an xGMI link's line rate (RCCL 2.21.5,
#: ``src/graph/topo.h``): MI200 (gfx90a) 36 of 50 GB/s, MI300 (gfx94x) 48 of 64 GB/s; later
#: GPUs (gfx950) are not in that release: MI300's ratio is assumed for them.
XGMI_FRACTION_MI200 = 36.0 / 50.0
XGMI_FRACTION = 48.0 / 64.0


def _amd(name: str, link_gbps: float, channels: int, source: str) -> NodePreset:
    return NodePreset(
        name=name,
        vendor="amd",
        tuning="hopper",
        gpus=8,
        intra_link="xgmi",
        intra_bw=7 * link_gbps * XGMI_FRACTION * GB,  # 7 peers, one xGMI link each
        intra_line_bw=7 * link_gbps * GB,
        nics=8,
        nic_bw=400e9 / 8,
        nic_kind="roce",
        gpu_nic_bw=PCIE5_X16,
        cpu="amd",
        channels=channels,
        source=source,
    )


PRESETS: dict[str, NodePreset] = {
    p.name: p
    for p in (
        _nvidia(
            "a100",
            "ampere",
            12,
            20.0,
            25.0,
            "amd",
            16,
            "NVIDIA DGX A100 datasheet: 8x A100-SXM4, NVLink 3 (12 links, 600 GB/s per GPU both "
            "directions), 8x ConnectX-6 HDR 200 Gb/s, 2x AMD EPYC 7742, PCIe Gen4",
            pcie=PCIE4_X16,
            nic_gbit=200,
        ),
        _nvidia(
            "h100",
            "hopper",
            18,
            20.6,
            25.0,
            "intel",
            16,
            "NVIDIA DGX H100 datasheet: 8x H100-SXM5, NVLink 4 (18 links, 900 GB/s per GPU both "
            "directions), 8x ConnectX-7 400 Gb/s, 2x Xeon Platinum 8480C, PCIe Gen5",
        ),
        _nvidia(
            "h200",
            "hopper",
            18,
            20.6,
            25.0,
            "intel",
            16,
            "NVIDIA DGX H200 datasheet: 8x H200, NVLink 4 (900 GB/s per GPU both directions), "
            "8x ConnectX-7 400 Gb/s, 2x Xeon Platinum 8480C, PCIe Gen5",
        ),
        _nvidia(
            "b200",
            "blackwell",
            18,
            40.1,
            50.0,
            "intel",
            32,
            "NVIDIA DGX B200 datasheet: 8x B200, NVLink 5 (18 links, 1.8 TB/s per GPU both "
            "directions), 8x ConnectX-7 400 Gb/s, 2x Xeon Platinum 8570, PCIe Gen5",
        ),
        _amd(
            "mi300x",
            64.0,
            16,
            "AMD Instinct MI300X platform datasheet: 8 GPUs in an xGMI mesh, 7 links per GPU at "
            "128 GB/s both directions; 8x 400 Gb/s RoCE NICs and EPYC hosts assumed",
        ),
        _amd(
            "mi355x",
            76.8,
            16,
            "AMD Instinct MI355X datasheet: 8 GPUs in an xGMI mesh, 7 links per GPU at "
            "153.6 GB/s both directions (1075 GB/s); 8x 400 Gb/s RoCE NICs (Pollara 400) and "
            "EPYC hosts assumed",
        ),
    )
}


def preset(name: str) -> NodePreset:
    """The preset called ``name`` (case-insensitive); a one-line error names the others."""
    p = PRESETS.get(name.strip().lower())
    if p is None:
        raise CollectiveError(f"unknown GPU preset {name!r}: one of {', '.join(PRESETS)}")
    return p


def net_payload_fraction(kind: NicKind) -> float:
    """Payload per byte a NIC's line carries: InfiniBand 4096-byte MTU with LRH, BTH, ICRC and
    VCRC (26 B); RoCEv2 4096-byte path MTU in a 9000-byte Ethernet frame (Ethernet, IPv4, UDP,
    BTH, ICRC and FCS: 62 B; preamble and gap: 20 B); other Ethernet transports (EFA, TCP) are
    priced with RoCEv2's framing."""
    if kind == "ib":
        return 4096 / (4096 + 26)
    return 4096 / (4096 + 62 + 20)


#: Latency per network step (us) of transports whose NCCL network plugin publishes its own
#: cost model, and what a Simple step adds to it (the host's handling of the completion), by
#: ``nic_kind``. EFA: aws-ofi-nccl's model tuner (github.com/aws/aws-ofi-nccl at 2daf7d30,
#: ``src/tuner/nccl_ofi_model.cpp``: ``net_lat`` 20 us on P5/P5e, 18 us on P5en; the P5 figure
#: is taken for every EFA generation) plus ``TUNER_NET_COMP_OVERHEAD`` for Simple
#: (``include/nccl_ofi_param.h``: 3 us, "a ~2 us cost in the device and ~1 us cost to write that
#: completion up to the host stack"). Other kinds have none: NCCL's own (InfiniBand-derived)
#: network latencies price them (``src/graph/tuning.cc``), as NCCL's tuner does for its IB and
#: socket transports and for plugins that report no latency (GPUDirect-TCPX reports 0).
NET_STEP_LATENCY_US: dict[str, tuple[float, float]] = {"efa": (20.0, 3.0)}


def net_step_latency(kind: str) -> tuple[float, float] | None:
    """(seconds per network step, seconds a Simple step adds) of a transport that publishes its
    own, or None for one that NCCL's network latencies price."""
    lat = NET_STEP_LATENCY_US.get(kind.strip().lower())
    return None if lat is None else (lat[0] * 1e-6, lat[1] * 1e-6)

"""An NCCL-like cost model of one collective: algorithm, protocol, channels, latency, bandwidth.

NCCL picks, per collective and size, the (algorithm, protocol) pair its tuning model predicts
fastest: time = latency + bytes / bandwidth. This module prices the same pairs on a ``System``
(nodes x GPUs per node, each GPU's intra-node bus, each node's NICs) and picks the same way,
unless the caller forces algorithms or protocols as ``NCCL_ALGO`` / ``NCCL_PROTO`` do.

* Algorithms: ``ring`` (every collective) and ``tree`` (NCCL's double binary tree across nodes,
  a chain inside a node; all-reduce only, as in NCCL); on nodes whose NVSwitch does NVLink SHARP
  (``System.nvls``: Hopper and Blackwell HGX/DGX) ``nvls`` (one node: all-reduce, all-gather,
  reduce-scatter) and ``nvlstree`` (all-reduce over several nodes: NVLS inside, a tree across);
  ``pat`` (all-gather and reduce-scatter with one GPU per node, Simple only). CollNet (in-network
  reduction) is not modelled. All-to-all and send/recv run as NCCL's point-to-point sends
  (``p2p``).
* Protocols and their wire efficiency (payload per byte sent): ``LL`` 8-byte lines of 4 data
  and 4 flag bytes (1/2), ``LL128`` 128-byte lines of 120 data bytes (120/128), ``Simple`` (1).
* Latency (NCCL 2.30.7, ``src/graph/tuning.cc``; an older release's where ``System.nccl_release``
  names one, ``genie.collectives.nccl_releases``): a base latency per algorithm and protocol, plus
  a hardware latency per step by link type (NVLink, PCI, network; a network whose NCCL plugin
  publishes its own per-step cost, AWS EFA, ``System.net_step_s``, in place of NCCL's; on AMD
  GPUs, ``System.rccl``, RCCL's own network step, ``RCCL_NET_LATENCY_US``); a ring's
  network steps are those of its slowest chain of steps, which wraps round the ring
  (``ring_steps``: 2N for an all-reduce, not the tuner's 2(N-1)); ring steps inside a node cost
  at least the CPU's network post overhead when the ring leaves the node (x3 for Simple).
  NCCL's tuner counts one pass of a ring's steps; a Simple ring pays more flag waits at the
  intra-node latency: on one node one per slice of every pass (2 slices a chunk), across nodes
  one per step of each pass after the first (``_ring_pass_cost``).
* Bandwidth: the link the algorithm drives (a GPU's bus inside a node; across nodes the
  narrower of that and the node's NICs, or its GPUs' PCIe links to them), times the protocol's
  wire efficiency, capped by NCCL's published per-protocol limits (LL's maximum, LL128's and
  the tree's per-channel maxima x channels); then the bytes each link carries under the
  algorithm: ring all-reduce 2(n-1)/n S, all-gather and reduce-scatter (n-1)/n S, broadcast
  and reduce S; tree all-reduce S per direction on each node's NICs with two nodes, 2S with
  more (a double binary tree's inner node), 2S on each GPU's bus inside a node.
* Pipeline fill (``genie.collectives.nccl_pipeline``): a tree, NVLS and NVLSTree stream a
  channel's data through stages that forward whole chunks (NVLS: a chunk per NVLS head a
  loop); the first grain crosses every stage before the busiest paces the rest.

Kept from NCCL's tuner as published: the tree's rates (x 0.92; LL x 1/3.8; LL128 x 7/9 on a chain
of NVLink hops, which the chain inside each node is on any number of nodes, x 120/128 on the
network; x 0.85 with one GPU per node), its size-dependent correction table (below 512 MiB, as
NCCL) and the ring's multi-node "plateau" factor. Left
out: the ring LL128's 0.92 (NCCL's own note calls it 120/128, the wire efficiency used here),
PAT's 0.75; CollNet. NVLS's
efficiency per generation (0.85 Hopper, 0.74 Blackwell) is kept: it is what the switch's
reduction delivers, not a tuning knob. The choice is the pair with the lowest time as NCCL's
tuner sees it: the model's time less a Simple ring's flag waits beyond one pass, which NCCL's
tuner does not price (``_tuner_rank``); the reported time keeps them, so a chosen Simple ring
can be slower than a candidate NCCL ranks below it. The rest of the ranking is the model's own
(its fill, the ring's 2N wrap-round steps, its rates), not NCCL's tuner table.
Sizes are bytes as nccl-tests counts them (S: the whole buffer; all-gather's output,
all-to-all's per-rank buffer); times seconds; rates bytes/s.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Literal

from genie.collectives import gpu_presets as P
from genie.collectives import nccl_releases as R
from genie.collectives.nccl_pipeline import fill_seconds, ring_chunk_bytes
from genie.errors import CollectiveError
from genie.vocabulary import bus_factor, canonical_collective

ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvlstree", "pat")
#: Algorithms that run only with the Simple protocol (NCCL enables no other for them).
SIMPLE_ONLY = ("nvls", "nvlstree", "pat")
PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send_recv",
)
P2P = ("all_to_all", "send_recv")

#: Payload bytes per byte a protocol puts on the wire.
WIRE_EFFICIENCY: dict[str, float] = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}

# --- NCCL 2.30.7, src/graph/tuning.cc (ncclTunerConstantsDefaults) ---------------------------
#: Base latency (us) per algorithm and protocol (LL, LL128, Simple).
BASE_LATENCY_US: dict[str, tuple[float, float, float]] = {
    "tree": (6.8, 14.0, 8.4),
    "ring": (6.6, 14.0, 8.4),
    "nvls": (0.0, 0.0, 0.0),
    "nvlstree": (0.0, 0.0, 0.0),
    "pat": (8.0, 8.0, 8.0),
}
#: Hardware latency (us) per step, by link class, algorithm and protocol (LL, LL128, Simple).
HW_LATENCY_US: dict[str, dict[str, tuple[float, float, float]]] = {
    "nvlink": {
        "tree": (0.6, 1.25, 4.0),
        "ring": (0.6, 1.9, 3.4),
        "nvls": (0.0, 0.0, 25.0),
        "nvlstree": (0.0, 0.0, 25.0),
        "pat": (0.0, 0.0, 4.0),
    },
    "pci": {
        "tree": (1.0, 1.9, 4.0),
        "ring": (1.0, 2.5, 5.7),
        "nvls": (0.0, 0.0, 0.0),
        "nvlstree": (0.0, 0.0, 0.0),
        "pat": (0.0, 0.0, 4.0),
    },
    "net": {
        "tree": (5.0, 8.5, 14.0),
        "ring": (2.7, 4.0, 14.0),
        "nvls": (0.0, 0.0, 18.0),
        "nvlstree": (0.0, 0.0, 20.9),
        "pat": (0.0, 0.0, 14.0),
    },
}
# --- RCCL 2.21.5 (github.com/ROCm/rccl at 0cbce2a7), src/graph/tuning.cc ---------------------
#: RCCL's own latency per network step (us; LL, LL128, Simple): ``hwLat[NCCL_HW_NET]`` of
#: ``tuning_model_0``, the tuning model a node takes unless it matches one of RCCL's tuned
#: topologies (``src/graph/rome_models.cc``). RCCL prices a network step at about twice NCCL's
#: (tree LL 11.8 us where NCCL says 5.0). Only the network's steps are taken from it; RCCL's base
#: latencies and xGMI steps are not (measured worse on the one-node rows: docs/nccl-model.md).
RCCL_NET_LATENCY_US: dict[str, tuple[float, float, float]] = {
    "tree": (11.8, 18.2, 20.8),
    "ring": (9.5, 19.8, 15.1),
}
#: Network post overhead per ring step (us) by CPU vendor (getNetOverhead); x3 for Simple.
NET_OVERHEAD_US: dict[str, float] = {"intel": 1.0, "amd": 2.0}
#: LL's bandwidth limit (GB/s): one node by GPU generation; several nodes by CPU vendor, for
#: 2 and for more than 2 nodes (llMaxBws).
LL_MAX_ONE_NODE: dict[str, float] = {
    "volta": 39.0,
    "ampere": 87.7,
    "hopper": 141.0,
    "blackwell": 282.0,
}
LL_MAX_NODES: dict[str, tuple[float, float]] = {"intel": (39.0, 20.4), "amd": (22.5, 19.0)}
#: Per-channel limits (GB/s) by GPU generation for 1, 2 and more than 2 nodes.
RING_LL128_PER_CHANNEL: dict[str, tuple[float, float, float]] = {
    "volta": (20.0, 20.0, 20.0),
    "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 36.7),
    "blackwell": (40.0, 40.0, 40.0),
}
TREE_LL128_PER_CHANNEL: dict[str, tuple[float, float, float]] = {
    "volta": (20.0, 20.0, 20.0),
    "ampere": (20.0, 20.0, 20.0),
    "hopper": (36.7, 36.7, 29.0),
    "blackwell": (55.6, 31.67, 20.0),
}
TREE_PER_CHANNEL: dict[str, tuple[float, float, float]] = {
    "volta": (26.5, 18.5, 10.0),
    "ampere": (24.0, 23.6, 17.8),
    "hopper": (38.7, 41.4, 36.0),
    "blackwell": (70.0, 42.8, 24.0),
}
#: NVLS per-channel limit across nodes (perChMaxNVLSTreeBws, GB/s) for 1, 2, >2 nodes.
NVLSTREE_PER_CHANNEL: dict[str, tuple[float, float, float]] = {
    "volta": (26.5, 18.5, 10.0),
    "ampere": (24.0, 23.6, 17.8),
    "hopper": (0.0, 57.7, 45.5),
    "blackwell": (0.0, 96.0, 80.0),
}
#: What NVLink SHARP's reduction delivers of the NVLink rate (nvlsEfficiency).
NVLS_EFFICIENCY: dict[str, float] = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
#: NVLS channels (src/transport/nvls.cc): 16 on Hopper; Blackwell 24 on one node, 32 on more.
NVLS_CHANNELS: dict[str, tuple[int, int]] = {
    "volta": (16, 16),
    "ampere": (16, 16),
    "hopper": (16, 16),
    "blackwell": (24, 32),
}
#: The tree's bandwidth per protocol (LL, LL128, Simple) by log2(bytes / 64), 0..23: what NCCL's
#: tuner takes of the tree's rate at middle sizes (``treeCorrectionFactor``, tuning.cc); also
#: NVLSTree's on Blackwell.
TREE_CORRECTION: tuple[tuple[float, ...], ...] = (
    (
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.7,
        0.7,
        0.7,
        0.7,
        0.6,
        0.5,
        0.4,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
    ),
    (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        0.9,
        0.8,
        0.8,
        0.8,
        0.7,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.6,
        0.8,
        0.9,
        0.9,
        0.9,
        0.9,
        1.0,
        1.0,
        1.0,
    ),
    (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        0.9,
    ),
)
#: The tree all-reduce's bandwidth as NCCL's tuner prices it (``ncclTopoTuneModel``): the link
#: x 0.92 (capped per channel), then LL x 1/3.8 (not LL's 1/2: the tree's LL moves less) and
#: LL128 x 7/9 on one node (a chain of NVLink hops), x 120/128 across nodes. The model prices
#: the tree's two parts apart (the chain inside each node on a GPU's bus, the NICs across), so
#: each takes the factor NCCL gives its kind of path: the chain inside a node 7/9 on any number
#: of nodes, the network 120/128 (``_limit``'s ``chain``).
TREE_BW_FACTOR = 0.92
TREE_LL_FACTOR = 1 / 3.8
TREE_LL128_ONE_NODE = 7 / 9
#: A tree whose every NIC's traffic goes to and from one GPU (NCCL_TOPO_PATTERN_TREE: the only
#: pattern with one GPU per node, ``src/graph/search.cc``) runs at x 0.85 (``tuning.cc``).
TREE_PATTERN_ONE_GPU = 0.85
#: NCCL applies ``treeCorrectionFactor`` to the tree for log2(bytes / 64) below 23 and to
#: Blackwell's NVLSTree below 24 (``ncclTopoGetAlgoTime``).
TREE_CORRECTION_END = {"tree": 23, "nvlstree": 24}
#: A multi-node ring all-reduce with Simple: its latency x this once each channel's share of a
#: rank's data is 64 bytes or more (Volta 1.9, later 1.4: the ring's "plateau", tuning.cc).
RING_PLATEAU: dict[str, float] = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}
#: PAT's linear latency per rank (us) and its network latency divisor (tuning.cc).
PAT_PER_RANK_US = 2.8
PAT_NET_DIVISOR = 3.5
# --- NCCL 2.30.7, src/enqueue.cc: point-to-point uses LL up to this many bytes per peer -------
P2P_LL_THRESHOLD = 16384

US = 1e-6
GB = 1e9
#: Host time to launch one collective on one GPU (a kernel launch with NCCL's / RCCL's enqueue),
#: seconds, by GPU vendor (CUDA, HIP). One thread that drives several GPUs (nccl-tests ``-g N``)
#: launches them one after another, so back-to-back collectives cannot run faster than N launches
#: each; a graph (``-G``) launches them all at once, and NCCL's base latency, which holds one
#: launch, is then that much shorter. An assumption, one value per runtime for every system: the
#: medians of the single-process rows of docs/validation.md (8 GPUs: CUDA 25-42 us, 3.2-5.2 us
#: per GPU; HIP 34-56 us, 4.3-7.0 us per GPU).
HOST_LAUNCH_S: dict[str, float] = {"nvidia": 4.0e-6, "amd": 5.5e-6}
#: Slices a Simple ring's chunk is moved in (ALLREDUCE_CHUNKSTEPS / ALLREDUCE_SLICESTEPS = 4 / 2;
#: all-gather and reduce-scatter alike; src/include/collectives.h, NCCL 2.18.5-2.30.7, RCCL 2.21.5)
SLICES_PER_CHUNK = 2
#: A Simple slice's floor: 1/32 of two 512 KiB FIFO steps (``genericOp``, prims_simple.h)
SLICE_FLOOR = 32 << 10

#: The tables above as one release's constants; older releases are walked back from it.
LATEST_CONSTANTS = R.Constants(
    release=R.LATEST,
    base=BASE_LATENCY_US,
    hw=HW_LATENCY_US,
    ll_max_one_node=LL_MAX_ONE_NODE,
    ring_ll128=RING_LL128_PER_CHANNEL,
    tree_ll128=TREE_LL128_PER_CHANNEL,
    tree=TREE_PER_CHANNEL,
    nvlstree={k: (v[0], v[1], v[2]) for k, v in NVLSTREE_PER_CHANNEL.items()},
)


@functools.lru_cache(maxsize=64)
def _constants(release: R.Release | None) -> R.Constants:
    return R.at(release, LATEST_CONSTANTS)


@dataclass(frozen=True)
class System:
    """What the model prices on: nodes of GPUs, their buses and NICs (rates bytes/s/direction)."""

    nodes: int
    gpus_per_node: int
    intra_bw: float  # a GPU's bus to the other GPUs of its node
    net_bw: float  # a node's NICs together, payload rate
    gpu_net_bw: float = math.inf  # a GPU's link to its NIC(s) (PCIe)
    tuning: P.Tuning = "hopper"
    intra_link: P.IntraLink = "nvlink"
    cpu: P.Cpu = "intel"
    channels: int = 16
    nvls: bool = False  # the node's NVSwitch does NVLink SHARP (NCCL's NVLS algorithms)
    # the network transport's own latency per step across nodes and what a Simple step adds
    # (gpu_presets.net_step_latency); None: NCCL's InfiniBand-derived network latencies
    net_step_s: float | None = None
    net_simple_extra_s: float = 0.0
    # the library enables LL128 here unless NCCL_PROTO names protocols (``ll128_by_default``)
    ll128: bool = True
    # the NCCL release whose tuner constants price it (``nccl_releases``); None: the latest
    nccl_release: str | None = None
    # the library is RCCL (AMD GPUs): its network steps at RCCL's latency (RCCL_NET_LATENCY_US)
    rccl: bool = False

    def __post_init__(self) -> None:
        for what, v in (("nodes", self.nodes), ("gpus_per_node", self.gpus_per_node)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise CollectiveError(f"{what} must be a positive integer, got {v!r}")
        if isinstance(self.channels, bool) or not 1 <= self.channels <= 64:
            raise CollectiveError(f"channels must be 1..64, got {self.channels!r}")
        for what, bw in (
            ("intra_bw", self.intra_bw),
            ("net_bw", self.net_bw),
            ("gpu_net_bw", self.gpu_net_bw),
        ):
            if not bw > 0:
                raise CollectiveError(f"{what} must be a positive rate in bytes/s, got {bw!r}")
        if self.tuning not in TREE_PER_CHANNEL:
            raise CollectiveError(f"tuning {self.tuning!r}: one of {', '.join(TREE_PER_CHANNEL)}")
        if self.intra_link not in ("nvlink", "xgmi", "pci"):
            raise CollectiveError(f"intra_link {self.intra_link!r}: nvlink, xgmi or pci")
        if self.cpu not in NET_OVERHEAD_US:
            raise CollectiveError(f"cpu {self.cpu!r}: intel or amd")
        step, extra = self.net_step_s, self.net_simple_extra_s
        if (step is not None and not step >= 0) or not extra >= 0:
            raise CollectiveError(f"network step latency must be >= 0 s, got {step!r}, {extra!r}")
        if self.nccl_release is not None:
            R.parse_release(self.nccl_release)
            if self.rccl:  # the one place this is decided
                raise CollectiveError(
                    f"NCCL release {self.nccl_release!r}: RCCL (AMD GPUs) prices with its own "
                    "tuner constants; an NCCL release applies to NVIDIA GPUs"
                )

    @property
    def constants(self) -> R.Constants:
        """NCCL's tuner constants as the system's release has them (``nccl_releases``)."""
        rel = None if self.nccl_release is None else R.parse_release(self.nccl_release)
        return _constants(rel)

    @property
    def n_ranks(self) -> int:
        """GPUs in all."""
        return self.nodes * self.gpus_per_node

    @property
    def node_net_bw(self) -> float:
        """What a node's GPUs can put on its NICs: the NICs, or their PCIe links if narrower."""
        return min(self.net_bw, self.gpus_per_node * self.gpu_net_bw)

    @property
    def search_channels(self) -> int:
        """The channels of NCCL's topology search, which its per-channel maxima multiply
        (``graphs[a]->nChannels`` in ``ncclTopoTuneModel``, ``src/graph/tuning.cc``). NCCL runs
        twice as many: connecting the rings doubles them (``comm->nChannels = nChannels * 2``,
        ``src/graph/connect.cc``). Across nodes ``channels`` counts what NCCL runs (two per
        network device: one search channel per NIC, doubled), so the search found half; on one
        node it is the search's own count (the generation's rings, ``published_systems``).
        Running channels raised by NCCL_MIN_CTAS are copies (``copyChannels``): the search's
        count stays one per NIC there, which this half of the running count overstates."""
        return self.channels if self.nodes == 1 else max(1, self.channels // 2)

    def with_ranks(self, nodes: int, gpus_per_node: int) -> System:
        """The same hardware with another group shape."""
        return replace(self, nodes=nodes, gpus_per_node=gpus_per_node)

    def describe(self) -> str:
        """One line: shape, rates, generation."""
        return (
            f"{self.nodes} node(s) x {self.gpus_per_node} GPU(s), {self.intra_link} "
            f"{self.intra_bw / GB:.1f} GB/s per GPU, NICs {self.net_bw / GB:.1f} GB/s per node, "
            f"{self.tuning} constants, {self.cpu} CPUs, {self.channels} channels"
            + (", NVLink SHARP" if self.nvls else "")
            + ("" if self.ll128 else ", LL128 only if NCCL_PROTO names it")
            + (", RCCL network step latencies" if self.rccl and self.nodes > 1 else "")
            + f", {self.release_label}"
        )

    @property
    def release_label(self) -> str:
        """``NCCL 2.21.5 constants`` (what the model prices with, and why where it is not the
        release asked for)."""
        c = self.constants
        if self.nccl_release is None:
            return f"NCCL {R.release_text(R.LATEST)} constants"
        asked = R.release_text(R.parse_release(self.nccl_release))
        if c.clamped:
            return f"NCCL {R.release_text(R.EARLIEST)} constants (the oldest known; {asked} asked)"
        if R.parse_release(self.nccl_release) > R.LATEST:
            return f"NCCL {R.release_text(R.LATEST)} constants (the newest known; {asked} asked)"
        return f"NCCL {asked} constants"


def system_from_preset(
    name: str,
    nodes: int = 1,
    gpus_per_node: int | None = None,
    *,
    net_bw: float | None = None,
    intra_bw: float | None = None,
    channels: int | None = None,
    nccl_release: str | None = None,
) -> System:
    """A ``System`` of ``nodes`` servers of preset ``name`` (``net_bw``: line rate per node;
    ``nccl_release``: the NCCL release whose constants price it, None the latest)."""
    p = P.preset(name)
    line = p.net_bw if net_bw is None else net_bw
    return System(
        nodes=nodes,
        gpus_per_node=p.gpus if gpus_per_node is None else gpus_per_node,
        intra_bw=p.intra_bw if intra_bw is None else intra_bw,
        net_bw=line * P.net_payload_fraction(p.nic_kind),
        gpu_net_bw=p.gpu_nic_bw,
        tuning=p.tuning,
        intra_link=p.intra_link,
        cpu=p.cpu,
        channels=p.channels if channels is None else channels,
        nvls=p.nvls,
        nccl_release=nccl_release,
        rccl=p.vendor == "amd",
    )


@dataclass(frozen=True)
class Prediction:
    """One (algorithm, protocol) priced for one collective and size."""

    collective: str
    size: int  # bytes, nccl-tests' S
    n_ranks: int
    algorithm: str  # ring | tree | nvls | nvlstree | pat | p2p
    protocol: str  # LL | LL128 | Simple
    channels: int
    latency_s: float
    rate: float  # bytes/s of payload the busiest link carries under this protocol
    link_bytes: float  # payload bytes on the busiest link (per direction)
    time_s: float
    fill_s: float = 0.0  # of time_s: the pipeline's fill (tree, NVLS, NVLSTree; nccl_pipeline)

    @property
    def wire_bytes(self) -> float:
        """Bytes on the busiest link with the protocol's flag bytes."""
        return self.link_bytes / WIRE_EFFICIENCY[self.protocol]

    @property
    def algbw(self) -> float:
        """nccl-tests' algbw (bytes/s): S / t."""
        return self.size / self.time_s if self.time_s > 0 else math.inf

    @property
    def busbw(self) -> float:
        """nccl-tests' busbw (bytes/s)."""
        return self.algbw * bus_factor(self.collective, self.n_ranks)

    @property
    def label(self) -> str:
        """``ring/LL128``."""
        return f"{self.algorithm}/{self.protocol}"

    def to_dict(self) -> dict[str, object]:
        """Plain data (seconds, bytes, bytes/s)."""
        return {
            "collective": self.collective,
            "size": self.size,
            "n_ranks": self.n_ranks,
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "channels": self.channels,
            "latency_s": self.latency_s,
            "bandwidth": self.rate,
            "time_s": self.time_s,
            "pipeline_fill_s": self.fill_s,
            "wire_bytes": self.wire_bytes,
        }


def parse_choice(text: str | None, universe: tuple[str, ...], env: str) -> tuple[str, ...]:
    """What ``NCCL_ALGO`` / ``NCCL_PROTO``-style ``text`` allows: ``ring,tree``, ``^LL128``."""
    if text is None or not text.strip():
        return universe
    body = text.strip()
    exclude = body.startswith("^")
    names = [t.strip() for t in body.lstrip("^").split(",") if t.strip()]
    lower = {u.lower(): u for u in universe}
    picked: list[str] = []
    for t in names:
        if t.lower() not in lower:
            raise CollectiveError(f"{env}={text}: unknown {t!r} (one of {', '.join(universe)})")
        picked.append(lower[t.lower()])
    if exclude:
        return tuple(u for u in universe if u not in picked)
    if not picked:
        raise CollectiveError(f"{env}={text!r} names nothing")
    return tuple(u for u in universe if u in picked)


def canonical(name: str) -> str:
    """The collective's canonical name; a one-line error for one the model does not price."""
    try:
        coll = canonical_collective(name)
    except CollectiveError:
        coll = ""
    if coll not in COLLECTIVES:
        raise CollectiveError(f"collective {name!r}: one of {', '.join(COLLECTIVES)}")
    return coll


def _node_index(nodes: int) -> int:
    return 0 if nodes == 1 else 1 if nodes == 2 else 2


def _ll_max(sys: System) -> float:
    if sys.nodes == 1:
        c = sys.constants
        return c.ll_max_one_node[c.row(sys.tuning)] * GB
    return LL_MAX_NODES[sys.cpu][0 if sys.nodes == 2 else 1] * GB


def _limit(
    rate: float, sys: System, algo: str, proto: str, chain: bool = False, coll: str = "all_reduce"
) -> float:
    """``rate`` (line of the link) as the protocol and NCCL's per-protocol caps let it run;
    ``chain``: the tree's chain of GPUs inside a node (LL128 at NCCL's NVLink-chain factor).
    The per-channel maxima count the search's channels (``System.search_channels``)."""
    i, ch = _node_index(sys.nodes), sys.search_channels
    c = sys.constants
    gen = c.row(sys.tuning)
    if algo == "tree":  # NCCL's tree rates (tuning.cc), in NCCL's order
        r = min(rate * TREE_BW_FACTOR, ch * c.tree[gen][i] * GB)
        if proto == "LL":
            r = min(r * TREE_LL_FACTOR, _ll_max(sys))
        elif proto == "LL128":
            one_node = sys.nodes == 1 or chain
            eff = TREE_LL128_ONE_NODE if one_node else WIRE_EFFICIENCY["LL128"]
            r = min(r * eff, ch * c.tree_ll128[gen][i] * GB)
        return r * (TREE_PATTERN_ONE_GPU if sys.gpus_per_node == 1 else 1.0)
    r = rate * WIRE_EFFICIENCY[proto]
    if proto == "LL":
        if algo == "ring":  # NCCL's ring LL rate: x 1/2 (the wire) from 2.21.5, less before
            several = sys.nodes > 1 or coll in ("all_reduce", "reduce")
            r = rate * c.ring_ll_factor[0 if several else 1]
        r = min(r, _ll_max(sys))
    if algo == "ring" and proto == "LL128":
        r = min(r, ch * c.ring_ll128[gen][i] * GB)
    return r


def _hops(sys: System, algo: str, proto: str) -> tuple[float, float]:
    """(seconds per step inside a node, seconds per step between nodes)."""
    p = PROTOCOLS.index(proto)
    cls = "pci" if sys.intra_link == "pci" else "nvlink"
    hw = sys.constants.hw
    intra = hw[cls][algo][p]
    # one GPU per node: every step crosses the network, priced at the tree's network latency
    # (from NCCL 2.23.4; before, at the algorithm's own)
    ppn1 = sys.gpus_per_node == 1 and sys.constants.ppn1_tree_net_latency
    inter = hw["net"]["tree" if ppn1 else algo][p] * US
    if sys.rccl and algo in RCCL_NET_LATENCY_US:  # RCCL's own network step (2.21.5)
        inter = RCCL_NET_LATENCY_US[algo][p] * US
    if sys.net_step_s is not None:  # the transport's own figure replaces NCCL's (EFA)
        inter = sys.net_step_s + (sys.net_simple_extra_s if proto == "Simple" else 0.0)
    if algo == "ring" and sys.nodes > 1:
        intra = max(intra, NET_OVERHEAD_US[sys.cpu] * (3 if proto == "Simple" else 1))
    return intra * US, inter


def _latency(coll: str, algo: str, proto: str, sys: System) -> float:
    base = sys.constants.base[algo][PROTOCOLS.index(proto)] * US
    intra, inter = _hops(sys, algo, proto)
    n, nodes, g = sys.n_ranks, sys.nodes, sys.gpus_per_node
    if algo == "tree":
        return base + 2 * ((g - 1) * intra + tree_depth(nodes) * inter)
    if algo == "nvls":  # NCCL 2.18's 23 us sat in the base, later releases' on the NVLink step
        return base + intra + (inter if nodes > 1 else 0.0)
    if algo == "nvlstree":
        return base + intra + 2 * tree_depth(nodes) * inter
    if algo == "pat":
        return base + int(math.log2(nodes)) * inter / PAT_NET_DIVISOR + n * PAT_PER_RANK_US * US
    steps, net_steps = ring_steps(coll, n, nodes)
    return base + (steps - net_steps) * intra + net_steps * inter


def tree_depth(nodes: int) -> int:
    """Network hops from the root of NCCL's binary tree over ``nodes`` to its deepest leaf:
    ceil(log2 nodes). The root has one child, the highest power of two below ``nodes``, whose
    subtree halves down to the leaves (``ncclGetBtree``, ``src/graph/trees.cc``; the double
    tree's second tree is its mirror or shift, as deep). NCCL's tuner counts floor(log2 nodes),
    the same where ``nodes`` is a power of two, one hop short elsewhere (3 nodes: 0 - 2 - 1)."""
    return (nodes - 1).bit_length() if nodes > 1 else 0


def ring_steps(coll: str, n_ranks: int, nodes: int) -> tuple[int, int]:
    """(steps, of them network hops) on the slowest path through a ring's steps. A ring of
    ``n_ranks`` crosses each of ``nodes`` node boundaries once per turn (a channel's ring runs
    through a node's GPUs, then to the next node). Rank r's step s waits for rank r-1's step
    s-1, so the last step waits on a chain of 2(n-1) consecutive hops (all-reduce; n-1 for
    all-gather and reduce-scatter) that wraps round the ring, and the worst such chain crosses
    ceil(steps x nodes / n) boundaries: 2 x nodes for an all-reduce with 3 GPUs or more per node,
    where NCCL's tuner counts 2 (nodes - 1) (RCCL 2.21.5 counts 2 x nodes, ``tuning.cc``). With
    one GPU per node it is NCCL's count. Broadcast and reduce pipeline down one chain of n-1
    hops from the root, which enters the root's node nowhere: nodes - 1."""
    if nodes <= 1:
        return (2 * (n_ranks - 1) if coll == "all_reduce" else n_ranks - 1), 0
    if coll in ("all_reduce", "all_gather", "reduce_scatter"):
        steps = 2 * (n_ranks - 1) if coll == "all_reduce" else n_ranks - 1
        return steps, -(-steps * nodes // n_ranks)
    return n_ranks - 1, nodes - 1


def ring_loops(coll: str, size: int, sys: System, proto: str) -> int:
    """Passes a ring makes over its steps: NCCL moves ``channels x ranks`` chunks of the
    protocol's ring chunk per pass (``calcCollChunking``: ``loopSize``, ``nLoops``)."""
    if coll not in ("all_reduce", "all_gather", "reduce_scatter") or size <= 0:
        return 1
    chunk = ring_chunk_bytes(proto)
    return max(1, math.ceil(size / (sys.channels * sys.n_ranks * chunk)))


def ring_slices(coll: str, size: int, sys: System) -> int:
    """Slices a Simple ring's step moves its chunk in: ``SlicePerChunk`` = CHUNKSTEPS /
    SLICESTEPS = 2 for all-reduce, all-gather and reduce-scatter (``src/include/collectives.h``),
    one where the chunk is no larger than a slice's floor, 1/32 of two FIFO steps (32 KiB:
    ``sliceSize = max(divUp(nelem, 16 * SlicePerChunk) * 16, sliceSize / 32)`` in
    ``genericOp``, ``src/device/prims_simple.h``). The chunk is a pass's: the ring chunk, or
    ``size / (channels x ranks)`` when one pass holds the whole operation."""
    if coll not in ("all_reduce", "all_gather", "reduce_scatter") or size <= 0:
        return 1
    chunk = min(ring_chunk_bytes("Simple"), size / (sys.channels * sys.n_ranks))
    return SLICES_PER_CHUNK if chunk > SLICE_FLOOR else 1


def _ring_pass_cost(coll: str, size: int, sys: System, proto: str) -> float:
    """Seconds a Simple ring's flag waits add to NCCL's tuner, which prices one wait per step of
    one pass. With Simple, a step's every slice waits for its peer's flag, then posts its own,
    between its copies on the same threads (``genericOp``, ``src/device/prims_simple.h``:
    ``waitPeer``, copy, ``barrier``, ``postPeer`` once per slice): NCCL's per-step hardware
    latency inside a node. On one node every step is such a copy, which the copies of the
    channel's next slice cannot overlap: each slice of each pass pays it. Across nodes the
    ring runs at the NICs' pace; each pass after the first adds its steps once (the network's
    latency pipelines through the proxy's FIFO and is paid once). LL and LL128 carry a flag in
    every line and never wait for a whole step: nothing is added."""
    loops = ring_loops(coll, size, sys, proto)
    slices = ring_slices(coll, size, sys) if sys.nodes == 1 else 1
    waits = loops * slices - 1
    if waits <= 0:
        return 0.0
    n = sys.n_ranks
    steps = 2 * (n - 1) if coll == "all_reduce" else n - 1
    cls = "pci" if sys.intra_link == "pci" else "nvlink"
    hop = sys.constants.hw[cls]["ring"][PROTOCOLS.index(proto)] * US
    return waits * steps * hop


def _ring_link(sys: System) -> float:
    """The rate a ring's channels reach together: a GPU's bus on one node; across nodes the
    node's NICs, unless the GPUs' buses are narrower (each GPU leaves the node in 1/g of the
    rings, so its bus carries (g-1)/g of the ring's bytes)."""
    if sys.nodes == 1:
        return sys.intra_bw
    g = sys.gpus_per_node
    if g == 1:
        return sys.node_net_bw
    return min(sys.node_net_bw, sys.intra_bw * g / (g - 1))


def _nvls_channels(sys: System) -> int:
    return NVLS_CHANNELS[sys.tuning][0 if sys.nodes == 1 else 1]


def _nvls_time(coll: str, size: int, sys: System, algo: str) -> tuple[float, float, float]:
    """(seconds, bytes on the busiest link, its rate) of NVLS / NVLSTree moving ``size``.

    The bytes are what a GPU's NVLinks carry each way: an all-reduce reads its reduced shard
    through the switch (S/g out of each GPU's memory for every shard: S) and multicasts it (S/g
    out, S in): S (g+1)/g; an all-gather or reduce-scatter S (g-1)/g. They run at NVLink SHARP's
    efficiency of the GPU's NVLink rate (``NVLS_EFFICIENCY``). Across nodes (NVLSTree) the NICs
    carry a tree all-reduce's S (two nodes) or 2S, capped by NCCL's per-channel NVLSTree limit.
    NCCL's tuner counts the intra-node part as 2 (c-1)/c of the rate instead: a ranking of
    algorithms, 20 % above what nccl-tests measures on one H100 node."""
    g = sys.gpus_per_node
    per_gpu = size * ((g + 1) / g if coll == "all_reduce" else (g - 1) / g)
    rate = sys.intra_bw * NVLS_EFFICIENCY[sys.tuning]
    parts = [(per_gpu / rate, per_gpu, rate)]
    if algo == "nvlstree":
        c = _nvls_channels(sys)
        consts = sys.constants
        per_channel = consts.nvlstree[consts.row(sys.tuning)][_node_index(sys.nodes)]
        cap = math.inf if per_channel is None else c * per_channel * GB  # none before 2.28.3
        net_rate = min(sys.node_net_bw, cap)
        net = size * (1.0 if sys.nodes == 2 else 2.0)
        parts.append((net / net_rate, net, net_rate))
    return max(parts)


def _collective_time(coll: str, size: int, sys: System, algo: str, proto: str) -> Prediction:
    n = sys.n_ranks
    channels = sys.channels
    stage_rates = (math.inf, math.inf)  # the pipeline's stages inside a node and across
    if algo == "ring":
        load = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n}.get(coll, 1.0)
        if coll == "reduce_scatter":
            load = (n - 1) / n
        link_bytes = load * size
        rate = _limit(_ring_link(sys), sys, algo, proto, coll=coll)
        bw_time = link_bytes / rate
    elif algo in ("nvls", "nvlstree"):
        channels = _nvls_channels(sys)
        bw_time, link_bytes, rate = _nvls_time(coll, size, sys, algo)
        stage_rates = (sys.intra_bw * NVLS_EFFICIENCY[sys.tuning], rate)
    elif algo == "pat":
        # one GPU per node: the NICs carry it, at NCCL's PAT rate (no busbw conversion)
        rate = sys.node_net_bw
        link_bytes = float(size)
        bw_time = size / rate
    else:  # tree all-reduce: NICs carry S (two nodes) or 2S per direction; a GPU's bus 2S
        times: list[tuple[float, float, float]] = []
        r_net = _limit(sys.node_net_bw, sys, algo, proto)
        r_intra = _limit(sys.intra_bw, sys, algo, proto, chain=True)
        if sys.nodes > 1:
            net_load = (1.0 if sys.nodes == 2 else 2.0) * size
            times.append((net_load / r_net, net_load, r_net))
        if sys.gpus_per_node > 1:
            times.append((2.0 * size / r_intra, 2.0 * size, r_intra))
        bw_time, link_bytes, rate = max(times)
        stage_rates = (r_intra, r_net)
    lat = _latency(coll, algo, proto, sys)
    log_size = int(math.log2(size >> 6)) if size >> 6 else -1
    blackwell_nvlstree = sys.tuning == "blackwell" and sys.constants.nvlstree_correction
    tree_like = algo == "tree" or (algo == "nvlstree" and blackwell_nvlstree)
    if coll == "all_reduce" and tree_like and 0 <= log_size < TREE_CORRECTION_END[algo]:
        factor = TREE_CORRECTION[PROTOCOLS.index(proto)][log_size]
        bw_time, rate = bw_time / factor, rate * factor
        stage_rates = (stage_rates[0] * factor, stage_rates[1] * factor)
    plateau = size / (sys.channels * n) >= 64
    if algo == "ring" and proto == "Simple" and sys.nodes > 1 and coll == "all_reduce" and plateau:
        lat *= RING_PLATEAU[sys.tuning]
    if algo == "ring" and proto == "Simple":
        lat += _ring_pass_cost(coll, size, sys, proto)
    fill = fill_seconds(size, sys, algo, proto, channels, stage_rates, coll)
    t = lat + bw_time + fill
    return Prediction(coll, size, n, algo, proto, channels, lat, rate, link_bytes, t, fill)


def ll128_by_default(vendor: str, gpu: str) -> bool:
    """Whether the library runs LL128 on a node of ``gpu`` without NCCL_PROTO naming it. NCCL
    does on NVLink-class paths (``tuning.cc``). RCCL 2.21.5 (``src/graph/tuning.cc``) enables it
    by default only on MI200-series GPUs (gfx90a) whose node matches one of its tuned topologies
    that sets ``ll128Enabled`` (``src/graph/rome_models.cc``: 16-GCD nodes with 8 NICs), or with
    ``RCCL_LL128_FORCE_ENABLE``: an MI250X / MI210 node of the usual design runs without it.
    Later RCCL releases add gfx942 and gfx950 to that rule; MI300-class nodes keep LL128 here
    (their nccl-tests rows in docs/validation.md match it)."""
    if vendor.strip().lower() != "amd":
        return True
    return not gpu.strip().upper().startswith("MI2")


def _offered(coll: str, algo: str, sys: System) -> bool:
    """Whether NCCL runs ``algo`` for ``coll`` on ``sys`` (tuning.cc's enable rules)."""
    if algo == "ring":
        return True
    if algo == "tree":
        return coll == "all_reduce"
    if algo == "nvls":  # several nodes need CollNet as well: not modelled
        one_node = sys.nvls and sys.nodes == 1
        gathers = ("all_gather", "reduce_scatter") if sys.constants.nvls_gather else ()
        return one_node and coll in ("all_reduce", *gathers)  # gathers from NCCL 2.19.1
    if algo == "nvlstree":
        return sys.nvls and sys.nodes > 1 and sys.gpus_per_node > 1 and coll == "all_reduce"
    if algo == "pat":  # from NCCL 2.23.4
        one_gpu = sys.nodes > 1 and sys.gpus_per_node == 1 and sys.constants.pat
        return one_gpu and coll in ("all_gather", "reduce_scatter")
    return False


def _p2p_time(coll: str, size: int, sys: System, proto: str) -> Prediction:
    """All-to-all as n-1 concurrent sends per rank; send/recv as one."""
    n, g = sys.n_ranks, sys.gpus_per_node
    eff = WIRE_EFFICIENCY[proto]
    per_gpu_net = sys.node_net_bw / g
    if coll == "send_recv":
        intra_bytes, net_bytes = (float(size), 0.0) if sys.nodes == 1 else (0.0, float(size))
    else:
        block = size / n
        intra_bytes, net_bytes = block * (g - 1), block * (n - g)
    parts = [(intra_bytes / (sys.intra_bw * eff), intra_bytes, sys.intra_bw * eff)]
    if net_bytes:
        parts.append((net_bytes / (per_gpu_net * eff), net_bytes, per_gpu_net * eff))
    bw_time, link_bytes, rate = max(parts)
    intra, inter = _hops(sys, "ring", proto)
    base = sys.constants.base["ring"][PROTOCOLS.index(proto)] * US
    lat = base + (inter if sys.nodes > 1 else intra)
    return Prediction(
        coll, size, n, "p2p", proto, sys.channels, lat, rate, link_bytes, lat + bw_time
    )


def candidates(
    collective: str,
    size: int,
    system: System,
    algorithms: str | None = None,
    protocols: str | None = None,
) -> list[Prediction]:
    """Every (algorithm, protocol) NCCL would consider, allowed by the NCCL_ALGO/PROTO-style
    strings, priced, in the order the choice takes them (lowest time first, a Simple ring's
    flag waits beyond one pass not counted, as NCCL's tuner counts none: ``_tuner_rank``)."""
    coll = canonical(collective)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CollectiveError(f"size must be a whole number of bytes >= 0, got {size!r}")
    if coll == "send_recv" and system.n_ranks != 2:
        raise CollectiveError(f"send_recv is between 2 ranks, the system has {system.n_ranks}")
    if system.n_ranks < 2:
        raise CollectiveError(f"{coll} needs at least 2 ranks, the system has 1")
    algos = parse_choice(algorithms, ALGORITHMS, "NCCL_ALGO")
    protos = parse_choice(protocols, PROTOCOLS, "NCCL_PROTO")
    out: list[Prediction] = []
    if coll in P2P:
        per_peer = size if coll == "send_recv" else size / system.n_ranks
        default = "LL" if per_peer <= P2P_LL_THRESHOLD else "Simple"
        offered = [p for p in protos if p != "LL128"]
        if not offered:
            raise CollectiveError(f"{coll} runs as NCCL's send/recv: protocols LL or Simple")
        use = [default] if protocols is None else offered
        out = [_p2p_time(coll, size, system, p) for p in use]
    else:
        offered_algos = [a for a in algos if _offered(coll, a, system)]
        if not offered_algos:
            can = [a for a in ALGORITHMS if _offered(coll, a, system)]
            raise CollectiveError(
                f"NCCL_ALGO={algorithms}: {coll} on {system.nodes} node(s) x "
                f"{system.gpus_per_node} GPU(s) runs as {', '.join(can)}"
            )
        if system.intra_link == "pci":  # NCCL enables LL128 only on NVLink-class paths
            protos = tuple(p for p in protos if p != "LL128") or protos
        if not system.ll128 and protocols is None:  # off by default (``ll128_by_default``)
            protos = tuple(p for p in protos if p != "LL128")
        old_blackwell = system.tuning == "blackwell" and not system.constants.blackwell_rows
        if old_blackwell and protocols is None:  # before NCCL 2.25.1: no LL128 on SM100
            protos = tuple(p for p in protos if p != "LL128")
        out = [
            _collective_time(coll, size, system, a, p)
            for a in offered_algos
            for p in protos
            if a not in SIMPLE_ONLY or p == "Simple"
        ]
        if not out:
            raise CollectiveError(
                f"NCCL_ALGO={algorithms} NCCL_PROTO={protocols}: "
                f"{', '.join(offered_algos)} run with Simple only"
            )
    if size == 0:
        out = [replace(p, latency_s=0.0, time_s=0.0, link_bytes=0.0, fill_s=0.0) for p in out]
    return sorted(out, key=lambda p: _tuner_rank(coll, size, system, p))


def _tuner_rank(coll: str, size: int, system: System, p: Prediction) -> float:
    """What ``p`` is ranked by: its time less a Simple ring's flag waits beyond the first pass's
    steps (``_ring_pass_cost``), which NCCL's tuner does not price (``ncclTopoGetAlgoTime``
    prices one pass), so they do not steer its choice; they stay in ``p.time_s``."""
    if p.algorithm == "ring" and p.protocol == "Simple" and p.time_s > 0:
        return p.time_s - _ring_pass_cost(coll, size, system, "Simple")
    return p.time_s


def choose(
    collective: str,
    size: int,
    system: System,
    algorithms: str | None = None,
    protocols: str | None = None,
) -> Prediction:
    """NCCL's choice: the allowed (algorithm, protocol) for ``collective`` of ``size`` ranked first
    (lowest time less the flag waits NCCL's tuner does not price: ``candidates``)."""
    return candidates(collective, size, system, algorithms, protocols)[0]


def launch_bound(
    pred: Prediction, gpus_per_thread: int, vendor: str = "nvidia", graph: bool = False
) -> Prediction:
    """``pred`` as back-to-back collectives run when one host thread launches them on
    ``gpus_per_thread`` GPUs (no faster than that many launches, ``HOST_LAUNCH_S``), or, with
    ``graph``, from a graph (the launch NCCL's base latency holds is not paid per collective;
    never below the latency's hardware steps)."""
    launch = HOST_LAUNCH_S.get(vendor)
    if launch is None:
        raise CollectiveError(f"vendor {vendor!r}: one of {', '.join(HOST_LAUNCH_S)}")
    if graph:
        base = BASE_LATENCY_US.get(pred.algorithm, BASE_LATENCY_US["ring"])
        cut = min(launch, base[PROTOCOLS.index(pred.protocol)] * US, pred.latency_s)
        return replace(pred, latency_s=pred.latency_s - cut, time_s=pred.time_s - cut)
    floor = gpus_per_thread * launch if gpus_per_thread > 1 else 0.0
    return pred if pred.time_s >= floor else replace(pred, time_s=floor)


Convention = Literal["nccl", "astra-sim"]


def nccl_size(collective: str, size: int, n_ranks: int, convention: Convention) -> int:
    """nccl-tests' S for a size given in ``convention`` (astra-sim: all-gather's comm_size is
    the per-rank shard; everything else is already the whole buffer)."""
    if convention == "astra-sim" and canonical(collective) == "all_gather":
        return size * n_ranks
    return size

"""Pricer through the NCCL-like model: NCCL's algorithm and protocol choice per collective.

Each collective instance is priced by ``genie.collectives.nccl_model`` on its group's shape
(nodes = distinct hosts, GPUs per node) with the topology's rates: the time is the model's for
the (algorithm, protocol) NCCL would choose (or the one forced, as ``NCCL_ALGO`` /
``NCCL_PROTO``). The bytes the instance puts on each link are those of genie's step program
(as ``ProgramPricer``), scaled by the protocol's wire efficiency (LL's flag bytes travel too),
so collectives in flight together share the links they load. ``choices`` keeps, per distinct
(collective, group shape, size), what was chosen.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from genie.collectives import nccl_model as N
from genie.collectives.topology import Topology
from genie.errors import CollectiveError
from genie.sim.program_pricer import ProgramPricer
from genie.vocabulary import planned_name


@dataclass(frozen=True)
class Choice:
    """What the model chose for one collective shape."""

    collective: str
    n_ranks: int
    nodes: int
    size: int  # comm_size as in the trace
    prediction: N.Prediction
    note: str = ""  # why the forced algorithm/protocol was not used, when it was not
    runner_up: N.Prediction | None = None  # the candidate ranked next (NCCL's), if any

    def to_dict(self) -> dict[str, object]:
        """Plain data for ``--json``."""
        p = self.prediction
        return {
            "collective": self.collective,
            "ranks": self.n_ranks,
            "nodes": self.nodes,
            "size": self.size,
            "algorithm": p.algorithm,
            "protocol": p.protocol,
            "channels": p.channels,
            "latency_s": p.latency_s,
            "time_s": p.time_s,
            "runner_up": None if self.runner_up is None else self.runner_up.label,
            "runner_up_time_s": None if self.runner_up is None else self.runner_up.time_s,
            "note": self.note,
        }


class NcclPricer(ProgramPricer):
    """Prices instances with the NCCL-like model; link loads from genie's programs."""

    def __init__(
        self,
        topology: Topology,
        placement: Sequence[int | str],
        n_ranks: int | None,
        system: N.System,
        algorithms: str | None = None,
        protocols: str | None = None,
        chunks: int = 1,
        *,
        preset: str | None = None,
    ) -> None:
        super().__init__(topology, placement, n_ranks, None, chunks)
        N.parse_choice(algorithms, N.ALGORITHMS, "NCCL_ALGO")  # a bad option fails up front
        N.parse_choice(protocols, N.PROTOCOLS, "NCCL_PROTO")
        self.system = system
        self.preset = preset  # the GPU preset named, None: NCCL's Hopper constants, no NVLS
        self.nccl_algorithms = algorithms
        self.nccl_protocols = protocols
        self.choices: dict[tuple[str, int, int, int], Choice] = {}

    def describe(self) -> str:
        """The topology, placement and the model."""
        forced = ", ".join(
            f"{k}={v}"
            for k, v in (("NCCL_ALGO", self.nccl_algorithms), ("NCCL_PROTO", self.nccl_protocols))
            if v
        )
        gpu = f"GPU preset {self.preset}" if self.preset else "no GPU preset (--gpu)"
        return (
            f"{self.fallback.describe()}; collectives priced by the NCCL-like model "
            f"(genie.collectives.nccl_model, {self.system.release_label}: {gpu}, "
            f"{self.system.tuning} constants, "
            f"{self.system.cpu} CPUs, {self.system.channels} channels"
            f"{', NVLink SHARP' if self.system.nvls else ''}{'; ' + forced if forced else ''}; "
            f"--collective-model line-rate for step programs at line rate)"
        )

    def _group_system(self, hosts: tuple) -> N.System:
        """The system of one group: its hosts' count, GPUs per host, the network between them."""
        counts = Counter(hosts)
        nodes = len(counts)
        g = max(counts.values())
        net = self.system.net_bw
        if nodes > 1:  # the route between the group's first two hosts (a host's link)
            a, b = list(counts)[:2]
            net = self.topology.route_bandwidth(self.topology.route(a, b))
        # the system's every other fact (tuning, links, protocols, release, library) carried
        return replace(
            self.system,
            nodes=nodes,
            gpus_per_node=g,
            intra_bw=self.topology.intra_bandwidth,
            net_bw=net,
            nvls=self.system.nvls and g > 1,
        )

    def _cost(
        self, ctype: int, size: int, ranks: tuple, hosts: tuple, splits: tuple[int, ...] = ()
    ) -> tuple | None:
        """(time s, 'algorithm/protocol', link bytes, intra bytes), None if declined."""
        shape = super()._cost(ctype, size, ranks, hosts, splits)
        if shape is None or splits:  # an all-to-all-v stays with its program's price
            return shape
        coll = planned_name(ctype)
        n = len(hosts)
        sys = self._group_system(hosts)
        if sys.n_ranks != n:  # hosts with unequal rank counts: the mean shape, rounded down
            sys = sys.with_ranks(sys.nodes, max(1, n // sys.nodes))
        s = N.nccl_size(coll, int(size), n, "astra-sim")
        note = ""
        try:
            cands = N.candidates(coll, s, sys, self.nccl_algorithms, self.nccl_protocols)
        except CollectiveError as exc:  # forced where NCCL offers no such pair: its default
            cands, note = N.candidates(coll, s, sys), f"{exc}; NCCL's default used"
        pred = cands[0]
        key = (coll, n, sys.nodes, int(size))
        second = cands[1] if len(cands) > 1 else None
        self.choices.setdefault(key, Choice(coll, n, sys.nodes, int(size), pred, note, second))
        scale = 1.0 / N.WIRE_EFFICIENCY[pred.protocol]
        link_bytes = {lid: b * scale for lid, b in shape[2].items()}
        return pred.time_s, pred.label, link_bytes, shape[3] * scale

    def choices_doc(self) -> list[dict[str, object]]:
        """Every choice as plain data, in a stable order."""
        return [c.to_dict() for _, c in sorted(self.choices.items())]

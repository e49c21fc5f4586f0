"""``nccl_collective``: one collective over sizes priced by the NCCL-like model, as ``genie nccl``.

The spec names a GPU preset (``h100`` ...) and the cluster's shape (nodes, GPUs per node), with
optional overrides of its rates and channels, and forced algorithms or protocols as NCCL's
``NCCL_ALGO`` / ``NCCL_PROTO`` take them. The result has, per size, the (algorithm, protocol)
NCCL's rule picks and every candidate it weighed (``genie.collectives.nccl_model``).
"""

from __future__ import annotations

from dataclasses import dataclass

from genie.api.specs import Spec, bandwidth
from genie.collectives import nccl_model as N
from genie.errors import UsageError


class NcclSpec(Spec, frozen=True, kw_only=True):
    """One collective over sizes on ``nodes`` servers of preset ``gpu``.

    ``net_bandwidth``: line rate of a node's NICs together (default the preset's);
    ``intra_bandwidth``: a GPU's intra-node bus (default the preset's, as NCCL counts it).
    """

    collective: str = "all_reduce"
    sizes: tuple[int, ...] = (1 << 20,)
    gpu: str = "h100"
    nodes: int = 1
    gpus_per_node: int | None = None
    net_bandwidth: float | str | None = None
    intra_bandwidth: float | str | None = None
    channels: int | None = None
    algorithms: str | None = None  # as NCCL_ALGO
    protocols: str | None = None  # as NCCL_PROTO
    nccl_version: str | None = None  # the release whose tuner constants price it; None: latest


@dataclass
class NcclTable:
    """Per size: NCCL's choice and every candidate (in the order the choice ranks them)."""

    system: N.System
    choices: list[N.Prediction]
    candidates: list[list[N.Prediction]]

    def to_dict(self) -> dict[str, object]:
        """The document ``genie nccl --json`` prints (seconds, bytes, bytes/s)."""
        return {
            "system": self.system.describe(),
            "rows": [
                {**c.to_dict(), "candidates": [p.to_dict() for p in cands]}
                for c, cands in zip(self.choices, self.candidates, strict=True)
            ],
        }


def nccl_collective(spec: NcclSpec) -> NcclTable:
    """Price ``spec``'s collective at each size with the NCCL-like model."""
    if not spec.sizes:
        raise UsageError("no sizes to price")
    system = N.system_from_preset(
        spec.gpu,
        spec.nodes,
        spec.gpus_per_node,
        net_bw=bandwidth(spec.net_bandwidth) if spec.net_bandwidth is not None else None,
        intra_bw=bandwidth(spec.intra_bandwidth) if spec.intra_bandwidth is not None else None,
        channels=spec.channels,
        nccl_release=spec.nccl_version,
    )
    cands = [
        N.candidates(spec.collective, int(s), system, spec.algorithms, spec.protocols)
        for s in spec.sizes
    ]
    return NcclTable(system, [c[0] for c in cands], cands)

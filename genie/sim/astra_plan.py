"""How ASTRA-sim 2.0's system layer cuts a collective into chunks, phases and rings (pure).

What ``genie.sim.astra_model`` runs, planned once per (collective, size, group): a collective
of ``S`` bytes becomes ``ceil(S / c)`` chunks (``chunking``), each chunk a sequence of phases,
one per network dimension or one on a comm group's own ring (``CollectivePlan``), each phase
on a ring of NPUs (``Rings``) with its algorithm, data size, queue and direction
(``PhaseSpec``). See ``genie.sim.astra_model``'s docstring for the rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from genie.errors import CollectiveError, ConfigError
from genie.sim.astra_config import AstraNetwork, AstraSystem, Implementation
from genie.vocabulary import P2P, CollectiveType, chakra_name

AR, RS, AG, A2A = "all_reduce", "reduce_scatter", "all_gather", "all_to_all"
NETWORK_COLLECTIVES = {
    int(CollectiveType.ALL_REDUCE): AR,
    int(CollectiveType.REDUCE_SCATTER): RS,
    int(CollectiveType.ALL_GATHER): AG,
    int(CollectiveType.ALL_TO_ALL): A2A,
}
REPLAYED = int(CollectiveType.BROADCAST)  # ASTRA-sim replays the node's duration
CW, CCW = 1, -1
LOCAL_ENDPOINT_DELAY = 10  # ns: ASTRA-sim's memory hop on a comm group's own ring ("Fast")


@dataclass(frozen=True, slots=True)
class PhaseSpec:
    """One phase of a chunk as one rank runs it."""

    algorithm: str  # ring | direct | halvingDoubling
    collective: str  # AR, RS, AG, A2A
    members: tuple[int, ...]  # the ring, in ring order
    index: int  # this rank's position in ``members``
    data: int  # bytes entering the phase
    vnet: int  # the dimension's queue
    direction: int  # CW or CCW
    local: bool  # a comm group's ring (10 ns memory hop, longer packet windows)
    window: int  # direct: messages in flight (-1: n - 1)


def phase_output(collective: str, data: int, n: int) -> int:
    """Bytes a phase hands to the next one (ASTRA-sim's final_data_size)."""
    if collective == AG:
        return data * n
    if collective == RS:
        return data // n
    return data


def chunking(collective: str, size: int, splits: int, total_npus: int) -> tuple[int, int]:
    """(chunks, bytes per chunk) for a collective of ``size`` bytes (see the module docstring)."""
    chunk = size // splits
    if collective != AG and total_npus > chunk:
        chunk = total_npus
        size = splits * chunk
    if chunk <= 0:
        raise CollectiveError(
            f"ASTRA-sim cannot split a {size}-byte all-gather into {splits} chunks (0 bytes each)"
        )
    return math.ceil(size / chunk), chunk


@dataclass(frozen=True)
class _PhaseTemplate:
    collective: str
    dim: int  # -1: the group's own ring or the flat ring
    data: int
    direction: int
    impl: Implementation


class CollectivePlan:
    """The chunks and phases of one collective on one group (the same for every instance)."""

    def __init__(
        self,
        collective: str,
        size: int,
        group: tuple[int, ...],
        world: bool,
        net: AstraNetwork,
        system: AstraSystem,
    ) -> None:
        self.collective = collective
        self.group = group
        self.world = world
        self.net = net
        self.streams, chunk = chunking(collective, size, system.splits, net.total_npus)
        impls = system.implementation(collective, net.dims)
        self.local = not world
        self.flat = world and impls[0].flat
        if not world:
            # a group smaller than the network: one ring of its members (ASTRA-sim falls back to
            # ring when the system file names one algorithm per dimension of a multi-D network)
            impl = impls[0] if len(impls) == 1 else Implementation("ring")
            self.templates = self._phases(collective, chunk, [(-1, len(group), impl)], system)
        elif self.flat:
            self.templates = self._phases(
                collective, chunk, [(-1, net.total_npus, impls[0])], system
            )
        else:
            dims = [(d, net.npus[d], impls[d]) for d in range(net.dims)]
            self.templates = self._phases(collective, chunk, dims, system)
        for t in self.templates:
            n = len(group) if not world else (net.total_npus if t.dim < 0 else net.npus[t.dim])
            if t.impl.algorithm == "halvingDoubling":
                if collective == A2A:
                    raise ConfigError(
                        f"{system.path}: key 'all-to-all-implementation': ASTRA-sim's "
                        "halvingDoubling has no all-to-all"
                    )
                if n & (n - 1):
                    raise CollectiveError(
                        f"halvingDoubling needs a power-of-two ring; this "
                        f"{collective.upper()} runs on {n} NPUs"
                    )

    @staticmethod
    def _phases(
        collective: str, data: int, dims: list[tuple[int, int, Implementation]], system: AstraSystem
    ) -> list[_PhaseTemplate]:
        dims = [d for d in dims if d[1] > 1]
        out: list[_PhaseTemplate] = []
        if collective != AR or system.optimization == "baseline":
            order = list(reversed(dims)) if collective == AG else dims
            for dim, n, impl in order:
                out.append(_PhaseTemplate(collective, dim, data, CW, impl))
                data = phase_output(collective, data, n)
            return out
        # localBWAware all-reduce: RS up, AR on the last dimension, AG back down
        for dim, n, impl in dims[:-1]:
            out.append(_PhaseTemplate(RS, dim, data, CW, impl))
            data = phase_output(RS, data, n)
        if dims:
            dim, n, impl = dims[-1]
            out.append(_PhaseTemplate(AR, dim, data, CW, impl))
        for dim, n, impl in reversed(dims[:-1]):
            out.append(_PhaseTemplate(AG, dim, data, CCW, impl))
            data = phase_output(AG, data, n)
        return out

    def phases_for(self, rank: int, rings: Rings) -> list[PhaseSpec]:
        """The phases rank ``rank`` runs for each chunk."""
        out = []
        for t in self.templates:
            if self.local:
                members, idx = rings.group(self.group, rank)
            elif t.dim < 0:
                members, idx = rings.flat(), rank
            else:
                members, idx = rings.dimension(t.dim, rank)
            vnet = max(t.dim, 0)
            out.append(
                PhaseSpec(
                    t.impl.algorithm,
                    t.collective,
                    members,
                    idx,
                    t.data,
                    vnet,
                    t.direction,
                    self.local,
                    t.impl.window,
                )
            )
        return out


class Rings:
    """Ring member tuples, shared by the ranks of a ring."""

    def __init__(self, net: AstraNetwork) -> None:
        self.net = net
        self._dim: dict[tuple[int, int], tuple[int, ...]] = {}
        self._group: dict[tuple[int, ...], dict[int, int]] = {}
        self._flat: tuple[int, ...] | None = None

    def dimension(self, dim: int, rank: int) -> tuple[tuple[int, ...], int]:
        """The ring of ``rank`` in dimension ``dim`` and its position there."""
        off = math.prod(self.net.npus[:dim])
        n = self.net.npus[dim]
        coord = (rank // off) % n
        base = rank - coord * off
        ring = self._dim.get((dim, base))
        if ring is None:
            ring = self._dim[(dim, base)] = tuple(base + k * off for k in range(n))
        return ring, coord

    def flat(self) -> tuple[int, ...]:
        """Every NPU in one ring (the one* algorithms)."""
        if self._flat is None:
            self._flat = tuple(range(self.net.total_npus))
        return self._flat

    def group(self, members: tuple[int, ...], rank: int) -> tuple[tuple[int, ...], int]:
        """A comm group's ring (its listed order) and ``rank``'s position in it."""
        pos = self._group.get(members)
        if pos is None:
            pos = self._group[members] = {r: i for i, r in enumerate(members)}
        return members, pos[rank]


def check_collective(kind: int) -> None:
    """CollectiveError for a collective ASTRA-sim 2.0 cannot run."""
    if kind in (P2P, REPLAYED) or kind in NETWORK_COLLECTIVES:
        return
    raise CollectiveError(
        f"ASTRA-sim 2.0 cannot run {chakra_name(kind).upper()} (it runs all-reduce, "
        "reduce-scatter, all-gather, all-to-all and send/recv, and replays broadcast)"
    )

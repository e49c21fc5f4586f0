"""Symmetric ranks: replay one representative when every rank provably has the same timeline.

Proof condition (checked by ``representatives``): (a) every rank's compiled graph has the same
``CompiledRank.signature()``: node kinds, durations, deps, collective types, sizes, group ids
and lanes in the same order; (b) no rank has a SEND or RECV node; (c) every group a collective
uses holds every rank. Then all ranks have identical timelines. By induction over events in
time order: if every rank has finished the same nodes at the same times up to time t, its next
local event (compute, memory, a lane handing over) depends only on its own graph and state, so
it is the same on every rank; the
k-th collective of group g is the same node index on every rank (sequence numbers follow node
order in identical graphs), so every member arrives at the same time, the instance starts at the
representative's arrival, and by (c) it is priced for the same full group, with the backend seeing
the same starts at the same times in both replays, hence the same completions. No send/recv
means no rank-specific peer. When the condition fails, the full replay is used.

The step "the backend sees the same starts at the same times, hence the same completions" is a
property of the backend, not of the workload. It holds for genie's own models and for ASTRA-sim's
congestion-unaware model (a message's time is hops x latency + bytes / bandwidth, and the hop
counts of every algorithm are the same from every rank). ASTRA-sim's congestion-aware model adds
an obligation (checked by ``astra_symmetry_refusal``): (d) concurrent messages that share a link
delay each other, so the links each rank's messages use, and when, must look alike from every
rank: there must be a group of network automorphisms, transitive on the ranks, that maps every
algorithm's peer pattern onto itself. Switch and FullyConnected: every permutation of NPUs is an
automorphism, so any pattern qualifies. Ring: only rotations and reflections are; ring's
neighbours (r +- 1) and direct's peers (r + j) are rotation-invariant, but halvingDoubling's
partners (r XOR 2^k) are not (rotating 0<->1 by one gives 1<->2, not a pair), so the messages of
rank r and r + 1 meet other traffic on their links at different times and the ranks finish
apart (with 2 active chunks per dimension a moe iteration is 0.2 % longer on the one-rank replay
than on ASTRA-sim's or genie's per-rank one). There (d) fails and every rank is replayed. With one
chunk in flight the measured cases happen to agree, but nothing proves it (concurrent
collectives, other sizes), so they are replayed per rank too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from genie.sim.compiled import CompiledWorkload, Kind

if TYPE_CHECKING:
    from genie.sim.astra_config import AstraNetwork, AstraSystem

#: ASTRA-sim algorithms whose peer pattern is invariant under a Ring's rotations
RING_INVARIANT = frozenset({"ring", "direct"})


def representatives(cw: CompiledWorkload, orbits: bool = True) -> list[int] | None:
    """Ranks whose replay stands for all of them, or None when symmetry is not proven.

    ``[0]`` when every rank is alike (above); else, with ``orbits``, the representatives of a
    rank rotation the workload is invariant under (an ``genie.sim.orbits.Orbits``, whose
    network obligations the engine checks on its backend before it replays them).
    """
    if cw.n_ranks <= 1:
        return None
    if all_alike(cw):
        return [0]
    if not orbits:
        return None
    from genie.sim.orbits import find_orbits

    return find_orbits(cw)


def all_alike(cw: CompiledWorkload) -> bool:
    """Conditions (a)-(c) above: every rank has the same timeline."""
    everyone = set(range(cw.n_ranks))
    sig0 = None
    for cr in cw.ranks:
        if np.any((cr.kind == Kind.SEND) | (cr.kind == Kind.RECV)):
            return False
        sig = cr.signature()
        if sig0 is None:
            sig0 = sig
        elif sig != sig0:
            return False
    used = {int(g) for g in cw.instances.group.tolist() if g >= 0}
    return not any(set(cw.group_ranks[g]) != everyone for g in used)


def astra_symmetry_refusal(
    cw: CompiledWorkload, net: AstraNetwork, system: AstraSystem, aware: bool
) -> str | None:
    """Why obligation (d) fails for ASTRA-sim's model on ``net`` and ``system``, or None."""
    if not all_alike(cw):  # ranks alike up to a rotation only: the orbit replay is genie's
        return "ranks are alike only up to a rotation; ASTRA-sim's model replays every rank"
    # the aware model takes 1-D networks only (its backend refuses the others, with the reason)
    if not aware or net.topology != ("Ring",):
        return None
    from genie.sim.astra_plan import NETWORK_COLLECTIVES

    for kind in sorted(set(cw.instances.comm_type.tolist())):
        name = NETWORK_COLLECTIVES.get(int(kind))
        if name is None:
            continue
        (impl,) = system.implementation(name, 1)
        if impl.algorithm not in RING_INVARIANT:
            return (
                f"{name} runs {impl.name} on a Ring under the congestion-aware model: its peers "
                "(rank XOR 2^k) are not rotation-invariant, so ranks meet different contention; "
                "every rank is replayed"
            )
    return None

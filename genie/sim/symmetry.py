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
"""

from __future__ import annotations

import numpy as np

from genie.sim.compiled import CompiledWorkload, Kind


def representatives(cw: CompiledWorkload) -> list[int] | None:
    """Ranks whose replay stands for all of them, or None when symmetry is not proven."""
    if cw.n_ranks <= 1:
        return None
    everyone = set(range(cw.n_ranks))
    sig0 = None
    for cr in cw.ranks:
        if np.any((cr.kind == Kind.SEND) | (cr.kind == Kind.RECV)):
            return None
        sig = cr.signature()
        if sig0 is None:
            sig0 = sig
        elif sig != sig0:
            return None
    used = {int(g) for g in cw.instances.group.tolist() if g >= 0}
    if any(set(cw.group_ranks[g]) != everyone for g in used):
        return None
    return [0]

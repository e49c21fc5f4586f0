"""Discrete-event replay of every rank's DAG over a network backend.

Semantics:

* a node becomes ready when all its data deps have finished (time 0 for nodes without deps);
* a node that holds a lane (``CompiledRank.lane``; the rules are ``genie.sim.lanes``) then waits
  until its lane is free: each lane runs one node at a time, handing over in the order nodes
  became ready (ties in event order, which is deterministic). Lanes of a rank run in parallel.
  By default compute nodes share one lane and nothing else holds one: the rank's one compute
  stream, with communication overlapping it;
* COMPUTE nodes take their compiled duration; MEMORY and OTHER nodes are delays of their
  duration (holding no lane unless given one);
* a COLLECTIVE node *arrives* when ready (and holding its lane, if it has one); the instance
  starts on the network when every member rank has arrived (the arrival of each rank is kept,
  so the wait is reported as such; time queued for a lane counts as wait too); SEND and RECV
  pair (see ``compiled``) and start together when both have arrived (rendezvous); every
  participating node finishes, and frees its lane, when the backend says the instance completes.
  A backend with ``per_member`` set instead hears each member's arrival (``arrive``) and ends
  each member on its own (``pop_members`` yields ``(iid, rank)``), for models where ranks issue
  and finish a collective separately (the ASTRA-sim model);
* when no event is left but nodes are unfinished, the workload cannot progress: DeadlockError
  names, per stuck rank, the communication node it is blocked in and the ranks it waits for.

``simulate(cw, backend, ranks=...)`` may replay only a subset of ranks (see ``symmetry``): an
instance then starts when its members *in the subset* have arrived, and is still priced for its
whole group. Given an ``orbits.Orbits`` as ``ranks`` it replays one rank per orbit of a rank
rotation when the backend can price orbits and the network obligations hold (``genie.sim.orbits``;
else every rank), each instance standing for its orbit, and fills in every instance's times and
each rank's representative (``RawResult.rank_rep``). Runs of compute nodes that provably
behave as one node are replayed as one (``chains``) and every node's times restored afterwards.
Nodes are laid out node-major (node i of every rank side by side) because ranks advance together
in time.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from itertools import compress

import numpy as np

from genie.errors import DeadlockError
from genie.sim.chains import Collapsed, collapse, expand
from genie.sim.compiled import CompiledWorkload, Kind
from genie.sim.network import NetworkBackend, Transfer, is_per_member
from genie.sim.orbits import Orbits, Quotient, RankOrbits, quotient_for
from genie.vocabulary import P2P, chakra_name

log = logging.getLogger(__name__)

_COLL, _SEND, _RECV = int(Kind.COLLECTIVE), int(Kind.SEND), int(Kind.RECV)
#: nodes from which the engine keeps its per-node state in typed arrays (8 bytes a number)
#: instead of lists (8 bytes a reference plus, for ints past 256 and floats, a 28- or 24-byte
#: object each): slower to read, about a third of the memory (10 M nodes: ~1.9 GB less)
COMPACT_NODES = 1 << 22


@dataclass
class RawResult:
    """Per-node and per-instance times of one replay (seconds); flat over the simulated ranks."""

    sim_ranks: list[int]
    offsets: np.ndarray  # node index of rank sim_ranks[k] starts at offsets[k]
    ready: np.ndarray
    start: np.ndarray
    end: np.ndarray
    inst_first_arrival: np.ndarray
    inst_last_arrival: np.ndarray
    inst_start: np.ndarray
    inst_end: np.ndarray
    inst_last_rank: np.ndarray  # the rank whose arrival started the instance (the straggler)
    makespan: float
    wall_s: float
    events: int
    backend: str
    notes: list[str] = field(default_factory=list)
    # orbit replay (``genie.sim.orbits``): each rank's index into sim_ranks (the representative
    # whose times it has); None: ranks not replayed copy sim_ranks[0]
    rank_rep: np.ndarray | None = None

    def rank_slice(self, k: int) -> slice:
        """Slice of the flat arrays holding simulated rank number ``k``."""
        return slice(int(self.offsets[k]), int(self.offsets[k + 1]))


def _successors(dep_ptr: np.ndarray, dep_idx: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    counts = np.diff(dep_ptr)
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    order = np.argsort(dep_idx, kind="stable")
    succ = owner[order]
    sptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dep_idx, minlength=n), out=sptr[1:])
    return sptr, succ, counts


def simulate(
    cw: CompiledWorkload,
    backend: NetworkBackend,
    ranks: list[int] | None = None,
    merge_chains: bool = True,
    *,
    copy_standalone: bool = True,
) -> RawResult:
    """Replay ``cw`` (or only ``ranks`` of it) over ``backend``; see the module docstring.

    ``merge_chains`` replays runs of compute nodes as one node where that is exact
    (``genie.sim.chains``); the times of every node are the same either way. An orbit replay
    gives every copy its replayed instance's standalone time (``backend.standalone``, which
    the reports read) unless ``copy_standalone`` is off (``api.makespan`` reads no report).
    """
    t0 = time.perf_counter()
    orbit: RankOrbits | None = None
    if isinstance(ranks, Orbits):
        quotient, why = _quotient(ranks, backend, cw)
        if quotient is None:
            log.info("orbit replay refused (%s): every rank is replayed", why)
            ranks = None
        else:
            backend.use_orbits(quotient)  # type: ignore[attr-defined]
            orbit = quotient.orb
            ranks = orbit.reps
    sim_ranks = list(range(cw.n_ranks)) if ranks is None else sorted(ranks)
    offsets = np.zeros(len(sim_ranks) + 1, np.int64)  # of the replayed (collapsed) nodes
    out_offsets = np.zeros(len(sim_ranks) + 1, np.int64)  # of the original nodes
    kinds, durs, sptrs, succs, pend, insts, rank_of = [], [], [], [], [], [], []
    lanes: list[np.ndarray] = []
    lane_base = [0]  # global lane id of each simulated rank's lane 0
    collapsed: list[Collapsed | None] = []
    shapes: dict[bytes, Collapsed | None] = {}  # identical ranks collapse alike
    n_succ = 0
    for k, r in enumerate(sim_ranks):
        cr = cw.ranks[r]
        out_offsets[k + 1] = out_offsets[k] + cr.n_nodes
        c = None
        if merge_chains:
            sig = cr.signature()
            if sig not in shapes:
                shapes[sig] = collapse(cr)
            c = shapes[sig]
            if c is not None:
                c = dataclasses.replace(c, instance=cr.instance[c.keep])
        collapsed.append(c)
        src = c if c is not None else cr
        n = src.n_nodes
        off = int(offsets[k])
        offsets[k + 1] = off + n
        sptr, succ, counts = _successors(src.dep_ptr, src.dep_idx, n)
        kinds.append(src.kind)
        durs.append(src.duration)
        sptrs.append(sptr[:-1] + n_succ)
        succs.append(succ + off)
        n_succ += len(succ)
        pend.append(counts)
        insts.append(src.instance)
        rank_of.append(np.full(n, k, np.int64))
        ln = src.lane.astype(np.int64)
        lanes.append(np.where(ln >= 0, ln + lane_base[-1], -1))
        lane_base.append(lane_base[-1] + len(cr.lane_names))
    total = int(offsets[-1])
    cat = np.concatenate if sim_ranks else (lambda xs: np.zeros(0, np.int64))
    succ_all = cat(succs).astype(np.int64)
    sptr_old = np.append(cat(sptrs).astype(np.int64), len(succ_all))
    # node-major layout: node i of every rank side by side. Ranks advance together in time, so
    # the engine's memory accesses stay local (2-3x faster at 1,024 ranks than rank-major).
    rank_arr = cat(rank_of).astype(np.int64)
    local = np.arange(total, dtype=np.int64) - offsets[:-1].repeat(np.diff(offsets))
    order = np.lexsort((rank_arr, local))  # order[new] = old
    inv = np.empty(total, np.int64)
    inv[order] = np.arange(total, dtype=np.int64)
    counts = np.diff(sptr_old)[order]
    sptr_new = np.zeros(total + 1, np.int64)
    np.cumsum(counts, out=sptr_new[1:])
    gather = np.repeat(sptr_old[:-1][order] - sptr_new[:-1], counts) + np.arange(len(succ_all))
    # the hot loop reads and writes these by index and slice alike as lists or typed arrays
    seq = _typed if total >= COMPACT_NODES else _listed
    succ_l = seq("q", inv[succ_all[gather]]) if len(succ_all) else []
    del succ_all, sptr_old, gather, counts, succs, sptrs
    sptr_all = seq("q", sptr_new)
    del sptr_new
    kind_a = cat(kinds).astype(np.int64)[order]
    kind = seq("b", kind_a)
    not_net = (kind_a < _COLL) | (kind_a > _RECV)  # compute, memory and other nodes
    local_nodes = int(np.count_nonzero(not_net))
    dur = seq("d", cat(durs).astype(np.float64)[order])
    pending = seq("i", cat(pend).astype(np.int64)[order])
    inst = seq("q", cat(insts).astype(np.int64)[order])
    rnk = seq("i", rank_arr[order])
    lane_a = cat(lanes).astype(np.int64)[order]
    lane = seq("i", lane_a)  # global lane id held by each node, -1 for none
    # the lane of laned non-communication nodes (the engine's fast path), -1 otherwise
    flane = seq("i", np.where(not_net, lane_a, -1))
    # at 10 M nodes each array of one number per node is 80 MB: none outlives its use
    del kind_a, lane_a, not_net, local, rank_arr, kinds, durs, pend, insts, rank_of, lanes
    inv_l = seq("q", inv)

    ins = cw.instances
    n_inst = len(ins)
    pos = {r: k for k, r in enumerate(sim_ranks)}
    off_l = offsets.tolist()
    need = [0] * n_inst
    # an instance no replayed rank takes part in is never read: it shares one empty tuple
    members: list[list[int] | tuple[()]] = [()] * n_inst
    new_of: list[list[int] | None] = [None if c is None else c.new_of.tolist() for c in collapsed]
    # the instances the replayed ranks take part in (the others never start: none arrives)
    touched: list[int] | range = range(n_inst)
    if len(sim_ranks) < cw.n_ranks:
        ids = np.concatenate([cw.ranks[r].instance for r in sim_ranks] or [np.zeros(0, np.int64)])
        touched = sorted(set(ids[ids >= 0].tolist()))  # np.unique imports numpy.ma
    all_members = ins.members  # lists, or ``MemberLists`` (each read makes one: read once)
    # every instance: one pass (a ``MemberLists`` makes its lists at once); else those touched
    each = (
        zip(touched, all_members, strict=True)
        if isinstance(touched, range)
        else ((iid, all_members[iid]) for iid in touched)
    )
    # an instance missing a participant (a rank that never calls it, an unpaired send) never starts
    group_sizes = [len(g) for g in cw.group_ranks]
    inst_group = ins.group.tolist()
    for iid, mem in each:
        gm = []
        for r, nd in mem:
            slot = pos.get(r)
            if slot is not None:
                renum = new_of[slot]
                gm.append(inv_l[off_l[slot] + (nd if renum is None else renum[nd])])
        members[iid] = gm
        g = inst_group[iid]
        need[iid] = len(gm) if len(mem) >= (group_sizes[g] if g >= 0 else 2) else total + 1
    del inv_l

    inst_type = ins.comm_type.tolist()
    inst_size = ins.size.tolist()
    arrived = [0] * n_inst
    first_arr = [math.inf] * n_inst
    last_arr = [-math.inf] * n_inst
    istart = [math.nan] * n_inst
    last_rank = [-1] * n_inst
    iend = [math.nan] * n_inst

    nans = array("d", [math.nan]) * total if seq is _typed else [math.nan] * total
    ready, start, end = nans, nans[:], nans[:]
    holder = [-1] * lane_base[-1]  # node holding each lane, -1 when free
    queues: list[deque[int]] = [deque() for _ in range(lane_base[-1])]
    heap: list[tuple[float, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    net_next = backend.next_time()
    # a backend with ``lazy_next`` may leave its next time unresolved after a start: it then
    # gives a time the true one is strictly after, so local events up to it go first (as they
    # would anyway: the network wins only ties), and several starts at one time resolve once
    lazy_next = backend.lazy_next
    exact = True
    events = 0
    inf = math.inf
    # a per-member backend hears each member's arrival and ends each member on its own
    by_member = backend if is_per_member(backend) else None
    member_at: dict[int, dict[int, int]] = {}  # iid -> rank -> node (per-member backends)

    def transfer(iid: int) -> Transfer:
        grp = inst_group[iid]
        granks = cw.group_ranks[grp] if grp >= 0 else (int(ins.src[iid]), int(ins.dst[iid]))
        return Transfer(iid, inst_type[iid], inst_size[iid], granks, grp)

    # worklist of (node, time) that became ready
    work = [g for g in range(total) if pending[g] == 0]
    now = 0.0

    def release(g: int, t: float) -> None:
        """Mark ``g`` ready at ``t`` and start it if its lane (if any) is free."""
        ready[g] = t
        ln = lane[g]
        if ln >= 0:
            if holder[ln] >= 0:
                queues[ln].append(g)
                return
            holder[ln] = g
        begin(g, t)

    def begin(g: int, t: float) -> None:
        """Run ``g`` from ``t``: a delay on the heap, or an arrival at its instance."""
        nonlocal net_next, exact
        k = kind[g]
        if k in (_COLL, _SEND, _RECV):
            iid = inst[g]
            a = arrived[iid] + 1
            arrived[iid] = a
            if t < first_arr[iid]:
                first_arr[iid] = t
            last_arr[iid] = t
            if by_member is not None:
                start[g] = t
                by_member.arrive(transfer(iid), sim_ranks[rnk[g]], t)
                net_next = by_member.next_time()
                if a == need[iid]:
                    istart[iid] = t
                    last_rank[iid] = sim_ranks[rnk[g]]
                return
            if a == need[iid]:
                istart[iid] = t
                last_rank[iid] = sim_ranks[rnk[g]]
                for m in members[iid]:
                    start[m] = t
                backend.start(transfer(iid), t)
                if lazy_next is None:
                    net_next = backend.next_time()
                else:
                    net_next, exact = lazy_next()
        else:
            start[g] = t
            push(heap, (t + dur[g], g))

    def hand_over(ln: int, t: float) -> None:
        """Lane ``ln`` is free at ``t``: give it to the next node queued for it."""
        q = queues[ln]
        if q:
            nxt = q.popleft()
            holder[ln] = nxt
            begin(nxt, t)
        else:
            holder[ln] = -1

    for g in work:
        release(g, 0.0)

    def complete(g: int, t: float) -> None:
        """Finish a communication node at ``t``, free its lane and release its successors."""
        end[g] = t
        if lane[g] >= 0:
            hand_over(lane[g], t)
        for j in range(sptr_all[g], sptr_all[g + 1]):
            s = succ_l[j]
            p = pending[s] - 1
            pending[s] = p
            if p == 0:
                release(s, t)

    # hot loop: compute/memory completions come from the heap, comm ones from the backend
    net_events = 0
    while True:
        if heap and (heap[0][0] < net_next or (not exact and heap[0][0] <= net_next)):
            now, g = pop(heap)
        elif not exact:
            net_next, exact = backend.next_time(), True
            continue
        elif net_next < inf:  # the network's completion comes first (ties too)
            now = net_next
            if by_member is not None:
                for iid, r in by_member.pop_members(now):
                    iend[iid] = now
                    at = member_at.get(iid)
                    if at is None:
                        at = member_at[iid] = {sim_ranks[rnk[m]]: m for m in members[iid]}
                    complete(at.pop(r), now)
                    if not at:
                        del member_at[iid]
            else:
                for iid in backend.pop(now):
                    iend[iid] = now
                    for m in members[iid]:
                        complete(m, now)
            if exact:
                net_next = backend.next_time()
            net_events += 1
            continue
        else:
            break
        end[g] = now
        ln = lane[g]
        if ln >= 0:
            q = queues[ln]
            if q:
                nxt = q.popleft()
                holder[ln] = nxt
                if flane[nxt] >= 0:
                    start[nxt] = now
                    push(heap, (now + dur[nxt], nxt))
                else:
                    begin(nxt, now)
            else:
                holder[ln] = -1
        for s in succ_l[sptr_all[g] : sptr_all[g + 1]]:
            p = pending[s] - 1
            pending[s] = p
            if p:
                continue
            ln = flane[s]
            if ln >= 0:  # compute on a lane: the common case, inlined
                ready[s] = now
                if holder[ln] >= 0:
                    queues[ln].append(s)
                else:
                    holder[ln] = s
                    start[s] = now
                    push(heap, (now + dur[s], s))
            else:
                release(s, now)
    events = net_events + local_nodes

    def orig(g: int) -> int:
        """Flat rank-major index of the original node that engine node ``g`` stands for."""
        k = rnk[g]
        local = int(order[g]) - int(offsets[k])
        c = collapsed[k]
        return int(out_offsets[k]) + (local if c is None else int(c.keep[local]))

    # back to rank-major order, then every original node's times
    # (each emptied once read: a list's float objects cost 24 bytes each)
    end_a = np.asarray(end, dtype=np.float64)[inv]
    del end[:]
    ready_a = np.asarray(ready, dtype=np.float64)[inv]
    del ready[:]
    start_a = np.asarray(start, dtype=np.float64)[inv]
    del start[:]
    if any(c is not None for c in collapsed):
        parts = []
        for k, c in enumerate(collapsed):
            sl = slice(int(offsets[k]), int(offsets[k + 1]))
            if c is None:
                parts.append((ready_a[sl], start_a[sl], end_a[sl]))
            else:
                parts.append(expand(c, cw.ranks[sim_ranks[k]], ready_a[sl], start_a[sl], end_a[sl]))
        ready_a, start_a, end_a = (np.concatenate(x) for x in zip(*parts, strict=True))
    offsets = out_offsets
    total = int(offsets[-1])
    done = total - int(np.count_nonzero(np.isnan(end_a)))
    if done < total:
        inst_a = np.concatenate([cw.ranks[r].instance for r in sim_ranks]).tolist()
        waiting = {orig(q): orig(holder[ln]) for ln, dq in enumerate(queues) if dq for q in dq}
        raise DeadlockError(
            _deadlock_message(
                cw, sim_ranks, offsets, end_a.tolist(), ready_a.tolist(), inst_a, waiting
            )
        )
    # only instances a replayed rank takes part in moved from their initial values
    inst_first = _gather(first_arr, touched, math.inf, np.float64)
    inst_last = _gather(last_arr, touched, -math.inf, np.float64)
    inst_start = _gather(istart, touched, math.nan, np.float64)
    inst_rank = _gather(last_rank, touched, -1, np.int64)
    inst_end = _gather(iend, touched, math.nan, np.float64)
    if orbit is not None:  # every instance has the times of its orbit's replayed one
        rep = orbit.inst_rep
        inst_first, inst_last, inst_start, inst_end = (
            a[rep] for a in (inst_first, inst_last, inst_start, inst_end)
        )
        moved = inst_rank[rep]
        inst_rank = np.where(moved >= 0, orbit.rank_power(moved, orbit.inst_power), -1)
        alone = backend.standalone
        if copy_standalone and isinstance(alone, dict):  # each copy's the replayed one's
            _copy_standalone(alone, rep)
    return RawResult(
        sim_ranks=sim_ranks,
        offsets=offsets,
        ready=ready_a,
        start=start_a,
        end=end_a,
        inst_first_arrival=inst_first,
        inst_last_arrival=inst_last,
        inst_start=inst_start,
        inst_last_rank=inst_rank,
        inst_end=inst_end,
        makespan=float(end_a.max()) if total else 0.0,
        wall_s=time.perf_counter() - t0,
        events=events,
        backend=backend.name,
        notes=list(backend.notes),
        rank_rep=None if orbit is None else orbit.rank_rep,
    )


def _copy_standalone(alone: dict[int, float], rep: np.ndarray) -> None:
    """Give every copy ``i`` (``rep[i] != i``) whose replayed instance ``rep[i]`` has a
    standalone time that time (the same object), in ascending copy order; as arrays over the
    instances. A copy's replayed instance is its own representative (orbits: W3), never a
    copy: what the copies read is not what they write."""
    n = len(rep)
    held = np.fromiter(alone.keys(), np.int64, len(alone))
    if len(held) and (int(held.min()) < 0 or int(held.max()) >= n):  # not instance ids
        _copy_standalone_reference(alone, rep)
        return
    has = np.zeros(n, bool)
    has[held] = True
    value = np.empty(n, object)
    value[held] = np.fromiter(alone.values(), object, len(alone))
    copies = np.flatnonzero(rep != np.arange(n))
    src = rep[copies]
    keep = has[src]
    alone.update(zip(copies[keep].tolist(), value[src[keep]].tolist(), strict=True))


def _copy_standalone_reference(alone: dict[int, float], rep: np.ndarray) -> None:
    """``_copy_standalone`` one copy at a time: the reference it is tested against."""
    copies = np.flatnonzero(rep != np.arange(len(rep)))
    iids, reps = copies.tolist(), rep[copies].tolist()
    known = list(map(alone.__contains__, reps))
    to = list(compress(iids, known))
    alone.update(zip(to, map(alone.__getitem__, compress(reps, known)), strict=True))


def _listed(_code: str, a: np.ndarray) -> list:
    """``a`` as a list (the engine's fastest container)."""
    return a.tolist()


_DTYPE = {"b": np.int8, "i": np.int32, "q": np.int64, "d": np.float64}  # typecode -> dtype


def _typed(code: str, a: np.ndarray) -> array:
    """``a`` as a typed array of ``code`` (a key of ``_DTYPE``; values must fit), copied once."""
    out = array(code)
    out.frombytes(np.ascontiguousarray(a, _DTYPE[code]).data.cast("B"))
    return out


def _gather(values: list, touched: list[int] | range, initial: float, dtype: type) -> np.ndarray:
    """``np.array(values)`` where only the entries at ``touched`` may differ from ``initial``."""
    if isinstance(touched, range):
        return np.array(values, dtype=dtype)
    out: np.ndarray = np.full(len(values), initial, dtype=dtype)
    out[touched] = [values[i] for i in touched]
    return out


def _quotient(
    orbits: Orbits, backend: NetworkBackend, cw: CompiledWorkload
) -> tuple[Quotient | None, str]:
    """The quotient an orbit replay prices on ``backend``, or None and why (full replay)."""
    if backend.per_member or not hasattr(backend, "use_orbits"):
        return None, f"the {backend.name} backend does not price orbits"
    return quotient_for(orbits, backend.pricer, cw)  # type: ignore[attr-defined]


def _deadlock_message(cw, sim_ranks, offsets, end, ready, inst, waiting=None) -> str:
    """Name, per stuck rank, the node it is blocked in and what that node waits for.

    ``waiting`` maps a node queued for a lane to the node holding that lane (flat rank-major
    indices, as ``end`` and ``ready``).
    """
    waiting = waiting or {}
    lines = []
    ins = cw.instances
    stuck_ranks = []
    pos = {r: k for k, r in enumerate(sim_ranks)}

    def arrived(rr: int, nd: int) -> bool:
        if rr not in pos:
            return False
        g = int(offsets[pos[rr]]) + nd
        return not math.isnan(ready[g]) and g not in waiting

    def where(g: int) -> tuple[int, int]:
        k = int(np.searchsorted(offsets, g, side="right")) - 1
        return sim_ranks[k], g - int(offsets[k])

    for k, r in enumerate(sim_ranks):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        unfinished = [g for g in range(lo, hi) if math.isnan(end[g])]
        if not unfinished:
            continue
        stuck_ranks.append(r)
        cr = cw.ranks[r]
        blocked = [
            g for g in unfinished if not math.isnan(ready[g]) and (inst[g] >= 0 or g in waiting)
        ]
        parts = []
        for g in blocked[:3]:
            i = g - lo
            iid = inst[g]
            if g in waiting:
                hr, hi_ = where(waiting[g])
                lane_name = cr.lane_names[int(cr.lane[i])]
                parts.append(
                    f"node {cr.name(i)} is queued on lane {lane_name!r} behind node "
                    f"{cw.ranks[hr].name(hi_)}"
                )
            elif int(ins.comm_type[iid]) == P2P:
                s, d, tag = int(ins.src[iid]), int(ins.dst[iid]), int(ins.tag[iid])
                other = d if r == s else s
                what = "send to" if r == s else "recv from"
                theirs = [nd for rr, nd in ins.members[iid] if rr == other]
                queued = bool(theirs) and other in pos and not arrived(other, theirs[0])
                queued = queued and not math.isnan(ready[int(offsets[pos[other]]) + theirs[0]])
                why = (
                    f"its matching {'recv' if r == s else 'send'} on rank {other} is queued "
                    "for a lane"
                    if queued
                    else f"has no matching {'recv' if r == s else 'send'} reached on rank {other}"
                )
                parts.append(
                    f"node {cr.name(i)} ({what} rank {other}, tag {tag}, {int(ins.size[iid])} B) "
                    + why
                )
            else:
                grp = int(ins.group[iid])
                present = {rr for rr, nd in ins.members[iid] if arrived(rr, nd)}
                missing = [x for x in cw.group_ranks[grp] if x not in present]
                parts.append(
                    f"node {cr.name(i)} ({chakra_name(int(ins.comm_type[iid]))} "
                    f"#{int(ins.seq[iid])} of group {cw.group_names[grp]!r}) waits for ranks "
                    f"{_short(missing)}"
                )
        if not parts:
            first = unfinished[0] - lo
            parts.append(f"{len(unfinished)} nodes never ready, first {cr.name(first)}")
        lines.append(f"rank {r}: " + "; ".join(parts))
    head = (
        f"workload cannot progress: {len(stuck_ranks)} of {len(sim_ranks)} ranks stuck "
        f"({_short(stuck_ranks)})"
    )
    body = " | ".join(lines[:8])
    if len(lines) > 8:
        body += f" | ... {len(lines) - 8} more ranks"
    return f"{head}: {body}"


def _short(xs: list[int]) -> str:
    return "[" + ", ".join(map(str, xs[:8])) + (", ..." if len(xs) > 8 else "") + "]"

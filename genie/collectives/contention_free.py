"""Exact shortcut: a rotation-symmetric program whose flows never share a resource, in max-plus.

A large ring all-reduce on a leaf-spine (hosts spread over leaves, ring order contiguous per
leaf) puts every message on links no other connection uses: each host link carries one
neighbour's connection, each leaf uplink the one connection that leaves the leaf. Then no flow
ever shares a link with another, every flow runs at its route's bottleneck for its whole life,
and the fluid simulation (``genie.collectives.flowsim``) reduces to a max-plus recurrence over
the steps, evaluated here for all ranks of a step at once (numpy vectors over ranks) from rank
0's steps alone. The flow-by-flow simulation stays the reference (``cost.estimate(...,
contention_free=False)``; the tests compare both).

Proof obligations; each is checked at run time on the actual program and topology, and any that
fails returns None (the caller then simulates flow by flow):

O1 Rotation: rank r's steps are rank 0's with every peer p replaced by (p + r) mod n (the
   registry's rotation-symmetric algorithms with uniform shards, checked by the caller, and
   spot-checked here on ranks 1, n // 2 and n - 1: op, bytes, tag, deps, source, chunk, peer).
O2 Fixed routes: a rank pair's resources do not depend on the message (no learned paths), and
   every SEND between hosts has some (same-host ranks use the sender's intra-host port).
O3 No sharing: each resource (link or intra-host port) is on the route of one connection (rank,
   peer, channel) only. A connection carries one message at a time (flowsim's FIFO), so a
   resource never holds two flows: a flow of weight w on it alone gets capacity / w, its rate is
   the least of those over its route, and a SEND of b wire bytes started at t is through at
   t + b / rate (flowsim computes that same float: a new class, nothing served, b left).
O4 Order: on every connection the SENDs become ready in step order, with strictly increasing
   ready times on every rank (checked on the computed times), so flowsim's FIFO starts each at
   max(ready, the previous one's completion) whatever order same-time events run in.
O5 Acyclic quotient: the graph on rank 0's step indices (dep -> step, matching SEND -> RECV,
   previous SEND on the connection -> SEND) has no cycle; steps are evaluated in a topological
   order of it, so everything a step waits for is known when it is evaluated.
O6 No software overhead (``step_overhead`` 0): that chain would order a rank's steps by when
   they became ready, which this evaluation does not track.

The recurrence (start 0; ``ready`` is the latest finish of the step's deps, 0 without deps):
SEND ``start = max(ready, previous SEND on the connection's finish)``, ``finish = start + b /
rate`` (``start`` without bytes), arrival ``finish + latency``; RECV ``finish = max(ready,
arrival of its SEND)``; REDUCE/COPY ``finish = ready + nbytes / compute_bandwidth`` (``ready``
when compute is free). Equal-time events in flowsim change no value here (O3, O4), so every
time is the same float. Link bytes: a resource's total is its one connection's messages added
in step order, as flowsim's ``on_send`` adds them, so they are bit-exact too.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from genie.collectives.flowsim import Resources
from genie.collectives.nccl_wire import channel_fn, wire_fn
from genie.collectives.program import Op, Program, Step
from genie.collectives.registry import ROTATION_SYMMETRIC
from genie.collectives.topology import Topology

log = logging.getLogger(__name__)

Route = tuple[Resources, float]  # a rank pair's (resources, latency s)


@dataclass
class Priced:
    """What the shortcut computed for a program (``cost`` turns it into a ``Cost``)."""

    rank_finish: np.ndarray  # per group rank: the time its last step finished (s)
    link_bytes: dict[int, float]  # link id -> bytes carried (framing included)
    intra: dict  # intra-host port -> bytes carried (as flowsim's accounts: summed as they are)
    messages: int
    bytes_sent: int
    steps: int


def _rotated(base: Sequence[Step], other: Sequence[Step], r: int, n: int) -> bool:
    """O1 on one rank: ``other`` is ``base`` with every peer p moved to (p + r) mod n."""
    if len(base) != len(other):
        return False
    for a, b in zip(base, other, strict=True):
        if (a.op, a.nbytes, a.tag, a.deps, a.src, a.chunk) != (
            b.op,
            b.nbytes,
            b.tag,
            b.deps,
            b.src,
            b.chunk,
        ):
            return False
        if a.op in (Op.SEND, Op.RECV) and (a.peer + r) % n != b.peer:
            return False
    return True


def _why_not(program: Program, topology: Topology) -> str | None:
    """The first obligation that fails before any route is looked at, else None."""
    spec = program.spec
    n = spec.n_ranks
    if n < 2 or spec.splits or spec.options.get("oneway"):
        return "not a rotation-symmetric group"
    if (spec.collective, spec.algorithm) not in ROTATION_SYMMETRIC:
        return "algorithm not rotation-symmetric"
    if topology.step_overhead > 0:
        return "O6: per-step software overhead"
    if topology.paths is not None:
        return "O2: learned paths"
    base = program.steps(0)
    for r in sorted({1, n // 2, n - 1}):
        if not _rotated(base, program.steps(r), r, n):
            return f"O1: rank {r} is not rank 0 rotated"
    return None


class _Quotient:
    """Rank 0's steps as the quotient graph of O5: matches, connections, a topological order."""

    def __init__(self, steps: Sequence[Step], n: int, channel: Callable[[Step], Hashable] | None):
        self.n = n
        size = len(steps)
        self.match = [-1] * size  # RECV -> the index of its SEND (on the sending rank)
        self.prev = [-1] * size  # SEND -> the previous SEND on its connection
        self.conn: list[tuple[int, Hashable] | None] = [None] * size  # SEND -> (shift, channel)
        self.ok = True
        counts: dict[tuple[int, int, int], int] = {}
        sends: dict[tuple[int, int, int], int] = {}
        last: dict[tuple[int, Hashable], int] = {}
        for i, st in enumerate(steps):
            if st.op == Op.SEND:
                ck = (Op.SEND, st.peer, st.tag)
                k = counts.get(ck, 0)
                counts[ck] = k + 1
                sends[(st.peer % n, st.tag, k)] = i
                c = (st.peer % n, None if channel is None else channel(st))
                self.conn[i] = c
                self.prev[i] = last.get(c, -1)
                last[c] = i
        for i, st in enumerate(steps):
            if st.op == Op.RECV:
                ck = (Op.RECV, st.peer, st.tag)
                k = counts.get(ck, 0)
                counts[ck] = k + 1
                # rank p's k-th SEND to 0 with this tag is rank 0's k-th to -p (rotation)
                j = sends.get(((-st.peer) % n, st.tag, k))
                if j is None:
                    self.ok = False  # unmatched: flowsim reports the deadlock
                    return
                self.match[i] = j
        preds = [list(st.deps) for st in steps]
        for i in range(size):
            for j in (self.match[i], self.prev[i]):
                if j >= 0:
                    preds[i].append(j)
        kids: list[list[int]] = [[] for _ in range(size)]
        pending = [0] * size
        for i, ps in enumerate(preds):
            pending[i] = len(ps)
            for j in ps:
                kids[j].append(i)
        heap = [i for i in range(size) if pending[i] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            i = heapq.heappop(heap)
            order.append(i)
            for k in kids[i]:
                pending[k] -= 1
                if pending[k] == 0:
                    heapq.heappush(heap, k)
        self.order = order
        if len(order) != size:
            self.ok = False  # O5 fails: a cycle among step indices
        # how many later evaluations read each step's finish (deps, the next SEND on the
        # connection): a vector is dropped after its last reader
        self.readers = [0] * size
        for i, st in enumerate(steps):
            for d in st.deps:
                self.readers[d] += 1
            if self.prev[i] >= 0:
                self.readers[self.prev[i]] += 1


def _routes(
    program: Program, topology: Topology, hosts: Sequence[int], shifts: set[int]
) -> dict[int, list[Route]] | None:
    """Per shift s, per rank r: the resources and latency of r's messages to r + s (O2)."""
    spec = program.spec
    n = spec.n_ranks
    out: dict[int, list[Route]] = {}
    for s in shifts:
        row: list[Route] = []
        for r in range(n):
            a, b = hosts[r], hosts[(r + s) % n]
            route: Route
            if topology.same_server(a, b):
                route = (((("intra", spec.global_rank(r)), 1.0),), topology.intra_latency)
            else:
                g, h = spec.global_rank(r), spec.global_rank((r + s) % n)
                route = topology.flow_route(a, b, g, h)
            if not route[0]:
                return None
            row.append(route)
        out[s] = row
    return out


def price(
    program: Program,
    topology: Topology,
    hosts: Sequence[int],
    compute_bandwidth: float | None = None,
) -> Priced | None:
    """The program's times and bytes by the max-plus recurrence, or None where an obligation
    fails (see the module docstring); the caller checks uniform shards (O1) beforehand."""
    why = _why_not(program, topology)
    if why is not None:
        log.debug("contention-free shortcut declined for %r: %s", program, why)
        return None
    spec = program.spec
    n = spec.n_ranks
    steps = program.steps(0)
    channel = channel_fn(spec)
    wire = wire_fn(spec)
    q = _Quotient(steps, n, channel)
    if not q.ok:
        log.debug("contention-free shortcut declined for %r: O5 or unmatched", program)
        return None
    send_idx = [i for i, st in enumerate(steps) if st.op == Op.SEND]
    conns: dict[tuple[int, Hashable], list[int]] = {}
    for i in send_idx:
        c = q.conn[i]
        assert c is not None
        conns.setdefault(c, []).append(i)
    routes = _routes(program, topology, hosts, {c[0] for c in conns})
    if routes is None:
        log.debug("contention-free shortcut declined for %r: O2 (a route with no links)", program)
        return None
    # O3: every resource on one connection's route only
    owner: dict[Hashable, tuple[int, int, Hashable]] = {}
    for s, ch in conns:
        for r, (res, _lat) in enumerate(routes[s]):
            conn = (r, s, ch)
            for key, _w in res:
                if owner.setdefault(key, conn) != conn:
                    log.debug(
                        "contention-free shortcut declined for %r: O3 (%r shared)", program, key
                    )
                    return None
    links = topology.links
    intra_bw = topology.intra_bandwidth
    rate: dict[int, np.ndarray] = {}
    lat: dict[int, np.ndarray] = {}
    for s, row in routes.items():
        rs = []
        for res, _lat in row:
            best = float("inf")
            for key, w in res:  # flowsim: capacity / load, the load being this flow's weight
                cap = links[key].bandwidth if isinstance(key, int) else intra_bw
                share = cap / (0.0 + w)
                if share < best:
                    best = share
            rs.append(best)
        rate[s] = np.asarray(rs, np.float64)
        lat[s] = np.asarray([x for _, x in row], np.float64)
    finish = _evaluate(steps, q, rate, lat, wire, compute_bandwidth)
    if finish is None:
        log.debug("contention-free shortcut declined for %r: O4 (FIFO order)", program)
        return None
    link_bytes, intra = _bytes(steps, conns, routes, wire)
    return Priced(
        rank_finish=finish,
        link_bytes=link_bytes,
        intra=intra,
        messages=n * len(send_idx),
        bytes_sent=n * sum(steps[i].nbytes for i in send_idx),
        steps=n * len(steps),
    )


def _evaluate(
    steps: Sequence[Step],
    q: _Quotient,
    rate: dict[int, np.ndarray],
    lat: dict[int, np.ndarray],
    wire: Callable[[int], int] | None,
    compute_bandwidth: float | None,
) -> np.ndarray | None:
    """Every rank's finish time, each step evaluated for all ranks at once; None if O4 fails."""
    n = q.n
    zero = np.zeros(n)
    done = np.zeros(n)  # each rank's latest finish (flowsim: the instance starts at 0)
    fin: dict[int, np.ndarray] = {}
    ready_of: dict[int, np.ndarray] = {}  # SEND -> its ready times, for the next on its conn
    arrive: dict[int, np.ndarray] = {}  # SEND -> arrival times, by sending rank
    readers = list(q.readers)
    cb = compute_bandwidth

    def read(j: int) -> np.ndarray:
        v = fin[j]
        readers[j] -= 1
        if readers[j] == 0:
            del fin[j]
        return v

    for i in q.order:
        st = steps[i]
        deps = st.deps
        if deps:
            ready = read(deps[0])
            for d in deps[1:]:
                ready = np.maximum(ready, read(d))
        else:
            ready = zero
        op = st.op
        if op == Op.SEND:
            c = q.conn[i]
            assert c is not None
            s = c[0]
            p = q.prev[i]
            if p >= 0:
                if not (ready > ready_of.pop(p)).all():
                    return None
                start = np.maximum(ready, read(p))
            else:
                start = ready
            b = st.nbytes if wire is None else wire(st.nbytes)
            f = start if b == 0 else start + float(b) / rate[s]
            ready_of[i] = ready
            arrive[i] = f + lat[s]
        elif op == Op.RECV:
            j = q.match[i]
            # receiver r's message comes from rank r + peer: the sender-indexed vector rolled
            # (as np.roll(a, -k), without its per-call axis handling)
            a, k = arrive.pop(j), st.peer % n
            f = np.maximum(ready, np.concatenate((a[k:], a[:k])) if k else a)
        elif cb and st.nbytes:
            f = ready + st.nbytes / cb
        else:
            f = ready
        if q.readers[i]:
            fin[i] = f
        done = np.maximum(done, f)
    return done


def _bytes(
    steps: Sequence[Step],
    conns: dict[tuple[int, Hashable], list[int]],
    routes: dict[int, list[Route]],
    wire: Callable[[int], int] | None,
) -> tuple[dict[int, float], dict]:
    """Bytes per resource: its one connection's messages added in step order (O3, O4), as
    flowsim's ``on_send`` adds them (a zero-byte message adds 0.0 and names the resource)."""
    link_bytes: dict[int, float] = {}
    intra: dict = {}
    for (s, _ch), idx in conns.items():
        sizes = [steps[i].nbytes if wire is None else wire(steps[i].nbytes) for i in idx]
        folded: dict[float, float] = {}
        for res, _lat in routes[s]:
            for key, w in res:
                total = folded.get(w)
                if total is None:
                    acc: float = 0
                    for b in sizes:
                        acc = acc + b * w
                    total = folded[w] = acc
                if isinstance(key, int):
                    link_bytes[key] = total
                else:
                    intra[key] = total
    return link_bytes, intra

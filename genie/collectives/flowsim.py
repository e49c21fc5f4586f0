"""A fluid event simulation of step programs: flows share resources, steps wait on deps.

A SEND becomes a flow over a list of resources (links, or classes of links in the symmetric
shortcut); a resource of capacity C whose flows weigh W in total gives each of them C / W (equal
shares when every weight is 1; a weight is the fraction of the flow's bytes on that resource),
and a flow runs at its tightest share. A rank's messages to one peer over one route go out in
order, one after another, as on a connection: a SEND that becomes ready while an earlier one on
the same connection is on its way waits behind it (steps start in the order they became ready).
When the bytes are through the SEND completes (its buffer is free and the connection is the next
message's) and the message arrives after the route latency; the matching RECV completes then if
it is ready (a RECV that becomes ready later completes at once). So latency overlaps with the
next transmission, which is what pipelined chunks exploit. An instance may say which connection
(``channel``) of a rank pair a step takes (NCCL-style programs: one per channel; messages of
different channels do not wait for each other) and how many bytes a message puts on the wire
(``wire``: a protocol's framing; the flow carries those). REDUCE and COPY take ``nbytes /
compute_bandwidth`` (free when that is None). With a ``step_overhead`` every SEND, REDUCE and
COPY first spends that long on its rank's CPU, one step after another (a rank's software handles
one step at a time): the flow starts, or the compute begins, after it.

Flows with the same resources and weights always run at the same rate, so they are kept as one
*class* (processor sharing): the class tracks the bytes each of its flows has been served, and
its flows finish in order of their targets. Re-rating touches classes, not flows: a thousand
flows from one rank through one port (an all-to-all priced from rank 0) cost one re-rating per
event instead of a thousand. ``FlowSim(..., classes=False)`` keeps every flow in a class of its
own (each re-rated by itself), the reference the tests compare the classes against.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from genie.collectives.program import Op, Step
from genie.errors import CollectiveError, DeadlockError

Resources = tuple[tuple[Hashable, float], ...]  # (resource key, weight)
# route_of(rank, step) -> (resources, latency s); capacity_of(key) -> bytes/s
RouteFn = Callable[[int, Step], tuple[Resources, float]]
KeyFn = Callable[[int, Step, int], Hashable]  # (rank, step, k-th on its channel) -> message key

_FLOW_DONE, _ARRIVE, _COMPUTE, _START, _SEND = 0, 1, 2, 3, 4
_EPS_BYTES = 1e-9  # a flow with less than this fraction of its bytes left is done


class _Flow:
    __slots__ = ("inst", "lat", "nbytes", "rank", "res", "step", "target")

    def __init__(self, inst, rank, step, res, nbytes, lat) -> None:
        self.inst, self.rank, self.step, self.res = inst, rank, step, res
        self.lat = lat
        self.nbytes = nbytes
        self.target = 0.0  # the class's served bytes at which this flow is through


class _Class:
    """Flows on the same resources with the same weights: one rate, served alike."""

    __slots__ = ("due", "flows", "key", "rate", "res", "seq", "served", "t_last", "version")

    def __init__(self, key, res, now: float) -> None:
        self.key = key
        self.res = res
        self.rate = 0.0
        self.served = 0.0  # bytes each flow of the class has been served since it began
        self.t_last = now
        self.flows: list[tuple[float, int, _Flow]] = []  # heap of (target, seq, flow)
        self.version = 0
        self.seq = 0
        self.due = math.nan  # the target its pending completion event is for

    def advance(self, now: float) -> None:
        """Serve the class's flows up to ``now`` at the current rate."""
        if self.rate:
            self.served += self.rate * (now - self.t_last)
        self.t_last = now


class Instance:
    """One program placed in the simulation: its ranks' steps and how their messages route."""

    def __init__(
        self,
        rank_steps: Sequence[Sequence[Step]],
        route_of: RouteFn,
        send_key: KeyFn,
        recv_key: KeyFn,
        start: float = 0.0,
        name: str = "",
        wire: Callable[[int], int] | None = None,
        channel: Callable[[Step], Hashable] | None = None,
    ) -> None:
        self.rank_steps = rank_steps
        # data bytes -> bytes on the wire (a protocol's framing; None: the data alone)
        self.wire = wire
        # step -> the connection (channel) of its rank pair it goes on (None: one per pair)
        self.channel = channel
        self.route_of = route_of
        self.start = start
        self.name = name
        self.index = 0  # position among the instances of one simulation (set by the caller)
        self.finish = [start] * len(rank_steps)
        self.cpu_free = [start] * len(rank_steps)  # when each rank's software is next idle
        self.pending: list[list[int]] = []
        self.children: list[list[list[int]]] = []
        self.keys: list[list[Hashable]] = []
        for r, sts in enumerate(rank_steps):
            pend = [0] * len(sts)
            kids: list[list[int]] = [[] for _ in sts]
            keys: list[Hashable] = [None] * len(sts)
            counts: dict[tuple[int, int, int], int] = {}
            for i, st in enumerate(sts):
                pend[i] = len(st.deps)
                for d in st.deps:
                    kids[d].append(i)
                if st.op == Op.SEND or st.op == Op.RECV:
                    ck = (st.op, st.peer, st.tag)
                    k = counts.get(ck, 0)
                    counts[ck] = k + 1
                    keys[i] = (send_key if st.op == Op.SEND else recv_key)(r, st, k)
            self.pending.append(pend)
            self.children.append(kids)
            self.keys.append(keys)
        self.arrived: dict[Hashable, float] = {}
        self.waiting: dict[Hashable, tuple[int, int]] = {}
        self.done = 0
        self.total = sum(len(s) for s in rank_steps)
        self.messages = 0
        self.bytes_sent = 0


class FlowSim:
    """Runs instances to completion on shared resources."""

    def __init__(
        self,
        capacity_of: Callable[[Hashable], float],
        compute_bandwidth: float | None = None,
        on_send: Callable[[Instance, int, Step, Resources], None] | None = None,
        max_work: int = 10_000_000,
        step_overhead: float = 0.0,
        classes: bool = True,
    ) -> None:
        self.capacity_of = capacity_of
        self.step_overhead = float(step_overhead)
        self.compute_bandwidth = compute_bandwidth
        self.on_send = on_send
        self.now = 0.0
        # (time, seq, kind, payload); the payload by kind: _START the Instance, _FLOW_DONE
        # (class, its version), _ARRIVE / _COMPUTE / _SEND (instance, rank, step index)
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._load: dict[Hashable, float] = {}
        self._on: dict[Hashable, set[_Class]] = {}  # resource -> classes with flows on it
        self._cap: dict[Hashable, float] = {}
        self._classes: dict[Hashable, _Class] = {}
        self.classes = classes
        self.instances: list[Instance] = []
        self.events = 0
        self.work = 0  # flow re-ratings so far
        self.max_work = max_work
        # steps made ready, started in the order they became ready (a rank's messages on one
        # connection go out in that order)
        self._ready: deque[tuple[Instance, int, int]] = deque()
        # a connection (instance, rank, peer, route) with a message on its way -> the SENDs
        # waiting behind it (step index, route latency)
        self._line: dict[tuple, deque[tuple[int, float]]] = {}

    def add(self, inst: Instance) -> None:
        """Schedule an instance to start at ``inst.start``."""
        self.instances.append(inst)
        self._push(inst.start, _START, inst)

    def _push(self, t: float, kind: int, data: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, data))

    def run(self) -> None:
        """Process events until nothing is left; DeadlockError if an instance is stuck."""
        heap = self._heap
        inst: Instance
        cls: _Class
        version: int
        rank: int
        i: int
        while heap:
            t, _, kind, data = heapq.heappop(heap)
            self.now = t
            self.events += 1
            if kind == _FLOW_DONE:
                cls, version = data
                if version != cls.version:
                    continue
                self._end_flow(cls)
            elif kind == _ARRIVE:
                inst, rank, i = data
                self._arrive(inst, rank, i)
            elif kind == _COMPUTE:
                inst, rank, i = data
                self._finish(inst, rank, i)
            elif kind == _SEND:
                self._send(*data)
            else:
                inst = data
                for r, pend in enumerate(inst.pending):
                    for i, p in enumerate(pend):
                        if p == 0:
                            self._ready.append((inst, r, i))
            ready = self._ready
            while ready:  # steps made ready by this event, started without recursion
                self._start_step(*ready.popleft())
        for inst in self.instances:
            if inst.done != inst.total:
                raise DeadlockError(_stuck(inst))

    # -- steps ---------------------------------------------------------------------------

    def _start_step(self, inst: Instance, r: int, i: int) -> None:
        st = inst.rank_steps[r][i]
        op = st.op
        over = self.step_overhead
        if over > 0 and op != Op.RECV:  # the rank's software first spends its overhead on it
            t = max(self.now, inst.cpu_free[r]) + over
            inst.cpu_free[r] = t
            if op == Op.SEND:
                self._push(t, _SEND, (inst, r, i))
            else:
                cb = self.compute_bandwidth
                self._push(t + (st.nbytes / cb if cb else 0.0), _COMPUTE, (inst, r, i))
        elif op == Op.SEND:
            self._send(inst, r, i)
        elif op == Op.RECV:
            key = inst.keys[r][i]
            if key in inst.arrived:
                del inst.arrived[key]
                self._finish(inst, r, i)
            else:
                inst.waiting[key] = (r, i)
        else:
            cb = self.compute_bandwidth
            if cb and st.nbytes:
                self._push(self.now + st.nbytes / cb, _COMPUTE, (inst, r, i))
            else:
                self._finish(inst, r, i)

    def _send(
        self, inst: Instance, r: int, i: int, route: tuple[Resources, float] | None = None
    ) -> None:
        """Put a SEND's message on its route (a flow, or straight to its latency), or behind
        the message on the same connection (peer and route) still on its way."""
        st = inst.rank_steps[r][i]
        res, lat = route if route is not None else inst.route_of(r, st)
        key = (inst, r, st.peer, res, None if inst.channel is None else inst.channel(st))
        waiting = self._line.get(key)
        if waiting is not None:
            waiting.append((i, lat))
            return
        inst.messages += 1
        inst.bytes_sent += st.nbytes
        if self.on_send is not None:
            self.on_send(inst, r, st, res)
        nbytes = st.nbytes if inst.wire is None else inst.wire(st.nbytes)
        if nbytes == 0 or not res:
            self._finish(inst, r, i)
            self._push(self.now + lat, _ARRIVE, (inst, r, i))
            return
        flow = _Flow(inst, r, i, res, nbytes, lat)
        self._line[key] = deque()
        self._add_flow(flow)

    def _next_in_line(self, flow: _Flow) -> None:
        """``flow``'s message is through: send those that waited behind it on its connection."""
        inst, r = flow.inst, flow.rank
        st = inst.rank_steps[r][flow.step]
        key = (inst, r, st.peer, flow.res, None if inst.channel is None else inst.channel(st))
        waiting = self._line.pop(key)
        while waiting:
            i, lat = waiting.popleft()
            self._send(inst, r, i, (flow.res, lat))
            if key in self._line:  # that one is on its way: the rest wait behind it
                self._line[key].extend(waiting)
                return

    def _finish(self, inst: Instance, r: int, i: int) -> None:
        inst.done += 1
        if self.now > inst.finish[r]:
            inst.finish[r] = self.now
        pend = inst.pending[r]
        for k in inst.children[r][i]:
            pend[k] -= 1
            if pend[k] == 0:
                self._ready.append((inst, r, k))

    def _arrive(self, inst: Instance, r: int, i: int) -> None:
        key = inst.keys[r][i]  # the SEND completed when its bytes were through
        w = inst.waiting.pop(key, None)
        if w is None:
            inst.arrived[key] = self.now
        else:
            self._finish(inst, *w)

    # -- flows ---------------------------------------------------------------------------

    def _add_flow(self, flow: _Flow) -> None:
        """Put a flow on its resources and re-rate every class sharing them."""
        if self.work > self.max_work:
            raise CollectiveError(
                f"the simulation re-rated flows {self.work:,} times (limit "
                f"{self.max_work:,}) at t={self.now:.6g} s: too many concurrent flows "
                "per link; use fewer ranks, a smaller window or a symmetric topology"
            )
        now = self.now
        key = flow.res if self.classes else flow
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = _Class(key, flow.res, now)
        cls.advance(now)
        flow.target = cls.served + flow.nbytes
        cls.seq += 1
        heapq.heappush(cls.flows, (flow.target, cls.seq, flow))
        touched: set[_Class] = {cls}
        for key, w in flow.res:
            if key not in self._cap:
                self._cap[key] = self.capacity_of(key)
                self._on[key] = set()
                self._load[key] = 0.0
            self._load[key] += w
            on = self._on[key]
            on.add(cls)
            touched |= on
        self._rerate(touched)

    def _end_flow(self, cls: _Class) -> None:
        """The class's first flow is through: finish its SEND, re-rate what it shared."""
        _, _, flow = heapq.heappop(cls.flows)
        touched: set[_Class] = set()
        for key, w in flow.res:
            self._load[key] -= w
            on = self._on[key]
            if not cls.flows:
                on.discard(cls)
            touched |= on
        cls.due = math.nan  # its next flow needs an event of its own
        if cls.flows:
            touched.add(cls)
        else:
            cls.advance(self.now)
            cls.rate = 0.0
            cls.version += 1
            del self._classes[cls.key]
        self._finish(flow.inst, flow.rank, flow.step)
        self._push(self.now + flow.lat, _ARRIVE, (flow.inst, flow.rank, flow.step))
        self._rerate(touched)
        self._next_in_line(flow)

    def _rerate(self, classes: set[_Class]) -> None:
        now = self.now
        self.work += len(classes)
        for c in classes:
            rate = math.inf
            for key, _w in c.res:
                share = self._cap[key] / self._load[key]
                if share < rate:
                    rate = share
            c.advance(now)
            target, _, first = c.flows[0]
            if rate == c.rate and target == c.due:
                continue  # its pending completion still holds
            left = target - c.served
            if left < _EPS_BYTES * first.nbytes:  # float dust: it ends now, with its peers
                left = 0.0
            c.rate = rate
            c.due = target
            c.version += 1
            self._push(now + left / rate, _FLOW_DONE, (c, c.version))


def _stuck(inst: Instance) -> str:
    parts = []
    for _key, (r, i) in list(inst.waiting.items())[:8]:
        st = inst.rank_steps[r][i]
        parts.append(f"rank {r} step {i} RECV {st.nbytes} B from {st.peer} tag {st.tag}")
    ranks = sorted({r for r, pend in enumerate(inst.pending) if any(p > 0 for p in pend)})
    ranks = sorted(set(ranks) | {r for r, _ in inst.waiting.values()})
    return (
        f"deadlock in {inst.name or 'program'}: ranks {', '.join(map(str, ranks[:16]))} stuck; "
        + "; ".join(parts)
    )

"""ASTRA-sim 2.0's analytical pricing of collectives, re-expressed as a genie network backend.

``--model astra-unaware`` and ``--model astra-aware`` price every collective the way ASTRA-sim
2.0's system layer and analytical network backends do (read from its sources; this is genie's
own code), so that genie and ASTRA-sim agree on the same workload and configuration:

* **Per rank, one communication op at a time** (ASTRA-sim's hardware resource: one GPU comm op
  in flight per NPU; a send holds its sender, a receive holds nothing). Instances wait in the
  order they start here; collectives on one NPU run one after another.
* **Splits**: a collective of ``S`` bytes is cut into ``ceil(S / c)`` chunks of ``c = S //
  preferred-dataset-splits`` bytes each (``c`` raised to the NPU count when smaller, except for
  all-gather); at most ``active-chunks-per-dimension`` chunks run at once in each dimension's
  queue, the others wait in order.
* **Phases**: a chunk runs one phase per network dimension (all-gather from the last dimension
  down); with ``localBWAware`` an all-reduce is reduce-scatter up the dimensions, all-reduce on
  the last, all-gather back down. A comm group smaller than the network runs one phase on a ring
  of its members in the comm-group file's order.
* **Steps** of a phase: ring (``2(n-1)`` messages of ``S/n`` for all-reduce, ``n-1`` for
  reduce-scatter and all-gather, ``n(n-1)/2`` for all-to-all, one after another), direct (up to
  ``n-1`` messages in flight, all-reduce in two rounds) and halving-doubling (``log2 n`` partner
  exchanges per half). Each step waits for the previous one's message, then
  ``endpoint-delay`` ns (10 ns on a comm group's ring), plus ``3 floor(m / local-mem-bw)`` ns
  when it reduces ``m`` bytes.
* **Messages**: congestion-unaware, ``floor(hops x latency + m / bandwidth)`` ns on the
  dimension where the two NPUs differ (hops: shorter way round a Ring, 2 on a Switch, 1 on
  FullyConnected) and concurrent messages do not interact; congestion-aware (1-D networks only,
  as in ASTRA-sim), messages are stored and forwarded over each link of the route, one at a
  time per link in arrival order (``floor(latency + m / bandwidth)`` to cross, the link busy
  ``floor(m / bandwidth)``). Bandwidth is ASTRA-sim's "GB/s" = 2^30 B/s. A send/recv is one
  message with no endpoint delay.

The planning (chunks, phases, rings) is ``genie.sim.astra_plan``; this module runs it: the
event clock, the two networks, each phase's steps, the per-rank queues and the backend.

Time is integer nanoseconds inside (ASTRA-sim's tick) and seconds at the interface. In the
congestion-unaware model an instance whose members all start in one tick on idle lanes takes a
time that depends only on its type, size and group: it is simulated once and replayed from a
cache, and where its members provably run one timeline (``genie.sim.astra_mirror``) that once is
one rank's run with its peers' messages mirrored from its own (O(steps), not O(ranks x steps)).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from genie.errors import CollectiveError, ConfigError
from genie.sim.astra_config import AstraNetwork, AstraSystem
from genie.sim.astra_mirror import RingGeometry
from genie.sim.astra_plan import (
    A2A,
    AG,
    AR,
    CCW,
    CW,
    LOCAL_ENDPOINT_DELAY,
    NETWORK_COLLECTIVES,
    REPLAYED,
    RS,
    CollectivePlan,
    PhaseSpec,
    Rings,
    check_collective,
)
from genie.sim.network import LinkUsage, Transfer
from genie.vocabulary import P2P

# ---------------------------------------------------------------------------------------------
# the event queue and the two networks
# ---------------------------------------------------------------------------------------------


class _Clock:
    """Events in integer ns; same-time events run in the order they were scheduled."""

    __slots__ = ("heap", "now", "seq")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Callable[[Any], None], Any]] = []
        self.now = 0
        self.seq = 0

    def at(self, t: int, fn: Callable[[Any], None], arg: Any = None) -> None:
        """Run ``fn(arg)`` at ``t`` ns."""
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, arg))


def bytes_per_ns(bandwidth_gbps: float) -> float:
    """ASTRA-sim's "GB/s" (2^30 B/s) as bytes per ns, computed as ASTRA-sim computes it."""
    return bandwidth_gbps * (1 << 30) / 1_000_000_000


def ring_hops(src: int, dst: int, n: int) -> int:
    """Hops between two NPUs of a bidirectional ring: the shorter way round."""
    cw = (dst - src) % n
    return min(cw, n - cw)


class _Unaware:
    """Congestion-unaware: each message takes its own closed-form time."""

    def __init__(self, net: AstraNetwork, clock: _Clock) -> None:
        self.net = net
        self.clock = clock
        self.bpns = [bytes_per_ns(b) for b in net.bandwidth]
        self._addr = [net.address(i) for i in range(net.total_npus)]

    def delay(self, src: int, dst: int, size: int) -> int:
        """ns for ``size`` bytes from ``src`` to ``dst``."""
        a, b = self._addr[src], self._addr[dst]
        for d, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                kind = self.net.topology[d]
                if kind == "Ring":
                    hops = ring_hops(x, y, self.net.npus[d])
                else:
                    hops = 2 if kind == "Switch" else 1
                return int(hops * self.net.latency[d] + size / self.bpns[d])
        raise CollectiveError(f"a message from NPU {src} to itself")

    def send(self, src: int, dst: int, size: int, done: Callable[[Any], None], arg: Any) -> None:
        """Deliver ``done(arg)`` when the message has arrived."""
        self.clock.at(self.clock.now + self.delay(src, dst, size), done, arg)


class _Aware:
    """Congestion-aware: store and forward over each link, one message at a time per link."""

    def __init__(self, net: AstraNetwork, clock: _Clock) -> None:
        if net.dims != 1:
            raise ConfigError(
                f"{net.path}: key 'topology': the congestion-aware model takes 1-D networks only "
                f"(as ASTRA-sim 2.0's); this one has {net.dims} dimensions"
            )
        self.clock = clock
        self.kind = net.topology[0]
        self.n = net.npus[0]
        self.lat = net.latency[0]
        self.bpns = bytes_per_ns(net.bandwidth[0])
        self._link: dict[tuple[int, int], int] = {}
        self.busy: list[bool] = []
        self.waiting: list[deque] = []
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}

    def _link_id(self, u: int, v: int) -> int:
        lid = self._link.get((u, v))
        if lid is None:
            lid = self._link[(u, v)] = len(self.busy)
            self.busy.append(False)
            self.waiting.append(deque())
        return lid

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids from ``src`` to ``dst`` (switch = device ``n``; ring: shorter way, ties cw)."""
        key = (src, dst)
        r = self._routes.get(key)
        if r is None:
            if self.kind == "Switch":
                hops = [(src, self.n), (self.n, dst)]
            elif self.kind == "FullyConnected":
                hops = [(src, dst)]
            else:
                cw = (dst - src) % self.n
                step = -1 if self.n - cw < cw else 1
                hops, cur = [], src
                while cur != dst:
                    nxt = (cur + step) % self.n
                    hops.append((cur, nxt))
                    cur = nxt
            r = self._routes[key] = tuple(self._link_id(u, v) for u, v in hops)
        return r

    def send(self, src: int, dst: int, size: int, done: Callable[[Any], None], arg: Any) -> None:
        """Inject a message; ``done(arg)`` when it reaches ``dst``."""
        self._enter([self.route(src, dst), 0, size, done, arg])

    def _enter(self, msg: list) -> None:
        link = msg[0][msg[1]]
        if self.busy[link]:
            self.waiting[link].append(msg)
        else:
            self._transmit(link, msg)

    def _transmit(self, link: int, msg: list) -> None:
        self.busy[link] = True
        now, size = self.clock.now, msg[2]
        self.clock.at(now + int(self.lat + size / self.bpns), self._arrive, msg)
        self.clock.at(now + int(size / self.bpns), self._free, link)

    def _arrive(self, msg: list) -> None:
        msg[1] += 1
        if msg[1] == len(msg[0]):
            msg[3](msg[4])
        else:
            self._enter(msg)

    def _free(self, link: int) -> None:
        self.busy[link] = False
        if self.waiting[link]:
            self._transmit(link, self.waiting[link].popleft())


# ---------------------------------------------------------------------------------------------
# one phase of one chunk on one rank: ASTRA-sim's packet state machine
# ---------------------------------------------------------------------------------------------


class _Phase:
    """Packets, tokens and steps of one phase (ring, direct or halving-doubling) on one rank.

    A packet is made when the phase starts (``P`` of them) and on every message received; it
    passes the endpoint (plus the reduction when it carries one) and then yields a token; a token
    and a packet send the next message (to the packet's partner) and post the receive from the
    partner it names. The phase ends when every step is sent and all tokens are back.
    """

    __slots__ = (
        "algo",
        "coll",
        "count",
        "d",
        "direct_ar",
        "dpos",
        "e",
        "free",
        "i",
        "m",
        "members",
        "mult",
        "n",
        "nonzero",
        "nz_init",
        "offset",
        "p",
        "packets",
        "received",
        "size",
        "spos",
        "stream",
        "toggle",
        "zero",
    )

    def __init__(self, model: AstraBackend, stream: _Stream, spec: PhaseSpec) -> None:
        self.m = model
        self.stream = stream
        self.members = spec.members
        n = self.n = len(spec.members)
        self.i = spec.index
        self.d = spec.direction
        coll = self.coll = spec.collective
        self.algo = spec.algorithm
        self.e = LOCAL_ENDPOINT_DELAY if spec.local else model.system.endpoint_delay
        self.direct_ar = self.algo == "direct" and coll == AR
        self.zero = self.nonzero = 0
        self.toggle = False
        self.free = 0
        self.received = 0
        self.packets: deque[tuple[int, int, int]] = deque()
        data = spec.data
        self.offset, self.mult = 0, 0.0
        if self.algo == "halvingDoubling":
            steps = int(math.log2(n))
            self.p = 1
            self.count = 2 * steps if coll == AR else steps
            self.size = data if coll == AG else data // 2
            self.offset = n // 2 if coll == AG else 1
            self.mult = 0.5 if coll == AG else 2.0
            self.nz_init = steps - self.p
            self._partner()
            return
        self.size = data if coll == AG else data // n
        if coll == AR:
            self.count = 2 * (n - 1)
        elif coll == A2A:
            self.count = n * (n - 1) // 2
        else:
            self.count = n - 1
        self.dpos = (self.i + self.d) % n
        self.spos = (self.i - self.d) % n
        if self.algo == "direct":
            self.p = n - 1 if spec.window < 0 else min(spec.window, n - 1)
            if coll == A2A:
                self.count = n - 1
            self.nz_init = (n - 1) * self.p if spec.local else self.p
        else:
            self.p = 1
            self.nz_init = (n - 1) * self.p

    def _partner(self) -> None:
        off = self.offset
        direction = CW if off == 0 or (self.i // off) % 2 == 0 else CCW
        self.dpos = self.spos = (self.i + direction * off) % self.n

    def start(self) -> None:
        """The phase begins: its first ``P`` packets."""
        for _ in range(self.p):
            self._insert()

    def _insert(self) -> None:
        if self.zero == 0 and self.nonzero == 0:
            self.zero, self.nonzero = self.p, self.nz_init
            self.toggle = not self.toggle
        if self.zero > 0:
            self.zero -= 1
            reduce = False
        elif self.nonzero > 0:
            self.nonzero -= 1
            reduce = self.coll == RS or (self.coll == AR and self.toggle)
        else:  # ASTRA-sim panics here too ("should not inject nothing")
            raise CollectiveError("ASTRA-sim model: a packet with no step to carry")
        self.packets.append((self.members[self.dpos], self.members[self.spos], self.size))
        delay = self.e + (self.m.reduce_ns(self.size) if reduce else 0)
        clock = self.m.clock
        clock.at(clock.now + delay, self.stream.bundle_done)
        if self.algo == "halvingDoubling":
            self.offset = int(self.offset * self.mult)
            self.size = int(self.size / self.mult)
            if self.offset == self.n and self.coll == AR:
                self.mult = 0.5
                self.offset = int(self.offset * self.mult)
                self.size = int(self.size / self.mult)
            self._partner()
        elif self.algo == "direct":  # the next partners round the ring, skipping this rank
            n, d = self.n, self.d
            self.dpos = (self.dpos + d) % n
            if self.dpos == self.i:
                self.dpos = (self.dpos + d) % n
            self.spos = (self.spos - d) % n
            if self.spos == self.i:
                self.spos = (self.spos - d) % n

    def bundle_done(self) -> None:
        """A packet is through the endpoint: a token; send what can be sent."""
        self.free += 1
        if self.direct_ar and self.count <= self.n - 1:
            if self.received < self.n - 1:
                return
            for _ in range(self.p):
                self._send()
        else:
            self._send()
        if self.count == 0 and self.free == self.p:
            self.stream.phase_done()

    def _send(self) -> None:
        if not self.packets or self.count == 0 or self.free == 0:
            return
        dest, src, size = self.packets.popleft()
        self.m.post(self.stream, self.members[self.i], dest, src, size)
        self.count -= 1
        self.free -= 1

    def receive(self) -> None:
        """A message from the partner arrived: a new packet."""
        self.received += 1
        self._insert()


class _Stream:
    """One chunk on one rank: its phases, run one after another."""

    __slots__ = ("initialized", "k", "part", "phase", "phases", "priority", "tag", "vnet")

    def __init__(self, part: _Part, phases: list[PhaseSpec], tag: tuple, priority: int) -> None:
        self.part = part
        self.phases = phases
        self.tag = tag
        self.priority = priority
        self.k = -1
        self.vnet = -1
        self.initialized = False
        self.phase: _Phase | None = None

    def bundle_done(self, _: Any = None) -> None:
        """A packet bundle of the current phase is through."""
        assert self.phase is not None
        self.phase.bundle_done()

    def receive(self, _: Any = None) -> None:
        """A message for the current phase arrived."""
        assert self.phase is not None
        self.phase.receive()

    def phase_done(self) -> None:
        """The current phase is over: on to the next, or the chunk is done."""
        self.part.sched.proceed(self)


class _Part:
    """A rank's share of an instance: done when all its chunks are."""

    __slots__ = ("inst", "left", "rank", "sched")

    def __init__(self, inst: _Instance, rank: int, sched: _RankQueues, chunks: int) -> None:
        self.inst = inst
        self.rank = rank
        self.sched = sched
        self.left = chunks

    def chunk_done(self) -> None:
        """One chunk finished its last phase."""
        self.left -= 1
        if self.left == 0:
            self.sched.model.part_done(self.inst, self.rank)


class _RankQueues:
    """A rank's chunk queues, one per dimension: running chunks first, then waiting ones."""

    __slots__ = ("model", "priority", "queues", "running", "threshold")

    def __init__(self, model: AstraBackend, threshold: int) -> None:
        self.model = model
        self.queues: dict[int, list[_Stream]] = {}
        self.running: dict[int, int] = {}
        self.threshold = threshold
        self.priority = 0

    def next_priority(self) -> int:
        """ASTRA-sim's priority of a new collective's chunks (LIFO: newest first)."""
        policy = self.model.system.scheduling
        if policy == "EXPLICIT":
            return 0
        old = self.priority
        self.priority += 1 if policy == "LIFO" else -1
        return old

    def _insert(self, st: _Stream) -> None:
        q = self.queues.setdefault(st.vnet, [])
        i = 0
        while i < len(q) and (q[i].initialized or q[i].priority >= st.priority):
            i += 1
        q.insert(i, st)

    def _fill(self, vnet: int) -> None:
        q = self.queues.get(vnet, [])
        run = self.running.get(vnet, 0)
        i = run
        while i < len(q) and run < self.threshold:
            st = q[i]
            st.initialized = True
            st.phase = _Phase(self.model, st, st.phases[st.k])
            run += 1
            self.running[vnet] = run
            st.phase.start()
            i += 1

    def proceed(self, st: _Stream) -> None:
        """Move a chunk to its next phase (or retire it) and start what may start."""
        prev = st.vnet
        if st.k + 1 >= len(st.phases):
            st.part.chunk_done()
            self.queues[prev].remove(st)
            self.running[prev] -= 1
            self._fill(prev)
            return
        if prev >= 0:
            self.queues[prev].remove(st)
        st.k += 1
        st.vnet = st.phases[st.k].vnet
        st.initialized = False
        st.phase = None
        self._insert(st)
        if prev >= 0:
            self.running[prev] -= 1
            self._fill(prev)
        self._fill(st.vnet)


class _Mailbox:
    """Messages of collectives keyed (tag, src, dst, size): those that arrived before their
    receive was posted (counted) and receives posted before their message arrived (in order)."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self._boxes: dict[tuple, list] = {}  # key -> [arrived, deque of waiting streams]

    def expect(self, key: tuple, stream: _Stream) -> None:
        """``stream`` waits for message ``key``; one already here is delivered in this tick."""
        box = self._boxes.get(key)
        if box is None:
            self._boxes[key] = [0, deque([stream])]
        elif box[0] > 0:
            box[0] -= 1
            if box[0] == 0 and not box[1]:
                del self._boxes[key]
            self.clock.at(self.clock.now, stream.receive)
        else:
            box[1].append(stream)

    def arrive(self, key: tuple) -> _Stream | None:
        """Message ``key`` is here: the stream that waited for it (first come), or None."""
        box = self._boxes.get(key)
        if box is None:
            self._boxes[key] = [1, deque()]
            return None
        if not box[1]:
            box[0] += 1
            return None
        stream: _Stream = box[1].popleft()
        if box[0] == 0 and not box[1]:
            del self._boxes[key]
        return stream


class _Instance:
    """A collective or send/recv instance handed to the backend."""

    __slots__ = (
        "arrived",
        "done",
        "first",
        "ident",
        "iid",
        "key",
        "kind",
        "lanes",
        "left",
        "parked",
        "pending",
        "ranks",
        "recv_ready",
        "size",
        "started",
        "world",
    )

    def __init__(
        self,
        iid: int,
        kind: int,
        size: int,
        ranks: tuple[int, ...],
        key,
        world: bool,
        ident: int | tuple[int, ...] = -1,
    ) -> None:
        self.iid = iid
        self.ident = ident  # the group's id (a send/recv: its two ranks)
        self.kind = kind
        self.size = size
        self.ranks = ranks
        # a send holds its sender's lane; a receive holds nothing
        self.lanes = (ranks[0],) if kind == P2P else ranks
        self.left = len(ranks)
        self.key = key  # the congestion-unaware cache's key, None when not cacheable
        self.world = world  # the whole network's collective (not a smaller comm group's)
        self.started: dict[int, int] = {}  # rank -> ns its share began
        self.done: dict[int, int] = {}  # rank -> ns its share ended
        self.first = -1  # ns the first share began
        self.arrived = False  # send/recv: the message is at the receiver
        self.recv_ready = False  # send/recv: the receive was issued
        self.pending = False  # a cached start waits for the end of this tick
        self.parked: list[int] = []  # members whose shares wait for the end of this tick


# ---------------------------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------------------------


class AstraBackend:
    """ASTRA-sim 2.0's analytical model of the network as a genie ``NetworkBackend``.

    Two ways to drive it. With ``per_member`` (the exact one) the engine calls
    ``arrive(transfer, rank, now)`` as each member reaches the node and ``pop_members`` returns
    ``(iid, rank)`` as each member's share ends: every rank issues and finishes on its own, as
    in ASTRA-sim. Without it, the usual ``start``/``pop`` of whole instances: all members
    arrive together (true when every rank provably has the same timeline, which is when the
    engine replays one representative rank) and an instance ends with its last member.

    Congestion-unaware, either way, an instance whose members all start in one tick on free
    lanes replays a cached run (per member, shares are parked until the tick is over to see
    whether they do), and a missing entry is filled by one mirrored rank (``_MirrorRun``)
    where ``genie.sim.astra_mirror``'s obligations hold, by the full run otherwise.
    """

    lazy_next = None

    def __init__(
        self,
        net: AstraNetwork,
        system: AstraSystem,
        aware: bool,
        group_names: list[str] | None = None,
        durations: dict[tuple[int, int], int] | None = None,
        per_member: bool = True,
    ) -> None:
        self.net = net
        self.system = system
        self.aware = aware
        self.per_member = per_member
        self.name = "astra-aware" if aware else "astra-unaware"
        self.notes: list[str] = []
        self.clock = _Clock()
        self.transport: _Unaware | _Aware = (
            _Aware(net, self.clock) if aware else _Unaware(net, self.clock)
        )
        self.group_names = group_names or []
        self.durations = durations or {}
        self.standalone: dict[int, float] = {}
        self.rings = Rings(net)
        self._plans: dict[tuple, CollectivePlan] = {}
        self._lanes: list[deque[_Instance]] = [deque() for _ in range(net.total_npus)]
        threshold = system.active_chunks  # one queue per dimension
        self._ranks = [_RankQueues(self, threshold) for _ in range(net.total_npus)]
        self._mail = _Mailbox(self.clock)
        self._insts: dict[int, _Instance] = {}
        self._finished: list[int] = []  # whole instances ended (not per_member)
        self._finished_members: list[tuple[int, int]] = []  # (iid, rank) ended (per_member)
        # unaware: ns after the start -> the ranks whose shares end then
        self._cache: dict[tuple, dict[int, list[int]]] = {}
        self._groups: dict[int, tuple[tuple[int, ...], bool]] = {}  # id -> (ranks, world)
        self._geometry: RingGeometry | None = None
        # instances with parked shares (per member), by id, in the order they were parked
        self._parked: dict[int, _Instance] = {}
        self._park_t = -1  # the tick they were parked in
        self._park_wake = math.inf  # when the first of them would have had an event
        self.messages = 0
        self.simulated = 0
        self.cached = 0
        self.mirrored = 0  # instances run for one rank with mirrored peers
        self.mirrored_messages = 0

    # ---- the NetworkBackend interface --------------------------------------------------------

    def start(self, transfer: Transfer, now: float) -> None:
        """Every member has arrived: queue the instance on their lanes (whole-instance mode)."""
        inst = self._instance(transfer, now)
        if inst.kind == P2P:
            inst.recv_ready = True
        for r in inst.lanes:
            self._lanes[r].append(inst)
        if (
            inst.key is not None
            and all(self._lanes[r][0] is inst for r in inst.lanes)
            and self._replay(inst)
        ):
            return  # unaware and alone on free lanes: replayed
        for r in inst.lanes:
            if self._lanes[r][0] is inst:
                self._launch(inst, r)

    def arrive(self, transfer: Transfer, rank: int, now: float) -> None:
        """Member ``rank`` reached the node (per-member mode)."""
        if self._parked and round(now * 1e9) > self._park_t:
            self._unpark()
        inst = self._instance(transfer, now)
        if inst.kind == P2P and rank == inst.ranks[1]:
            inst.recv_ready = True
            if inst.arrived:
                self.clock.at(self.clock.now, self._share_at, (inst, rank))
            return
        lane = self._lanes[rank]
        lane.append(inst)
        if lane[0] is inst:
            self._head(inst, rank)

    def next_time(self) -> float:
        """The next event (seconds), ``inf`` when idle."""
        t = self.clock.heap[0][0] if self.clock.heap else math.inf
        if self._parked:
            t = min(t, self._park_wake)
        return t * 1e-9

    def _run_events(self) -> None:
        """Run the events of the earliest time on the clock."""
        heap = self.clock.heap
        if self._parked and (not heap or heap[0][0] > self._park_t):
            self._unpark()
        if heap:
            t = heap[0][0]
            while heap and heap[0][0] <= t:
                tt, _, fn, arg = heapq.heappop(heap)
                self.clock.now = tt
                fn(arg)

    def pop(self, now: float) -> list[int]:
        """Run the events at ``now``: instance ids that ended (whole-instance mode)."""
        self._run_events()
        done, self._finished = self._finished, []
        return done

    def pop_members(self, now: float) -> list[tuple[int, int]]:
        """Run the events at ``now``: ``(iid, rank)`` of each member that ended (per member)."""
        self._run_events()
        done, self._finished_members = self._finished_members, []
        return done

    def link_usage(self) -> LinkUsage | None:
        """None: ASTRA-sim's model reports no per-link record here."""
        return None

    # ---- checks and descriptions -------------------------------------------------------------

    def describe(self) -> str:
        """One line: the model, the network and the system settings."""
        which = "congestion-aware" if self.aware else "congestion-unaware"
        return (
            f"ASTRA-sim 2.0 analytical ({which}) model: {self.net.describe()}; "
            f"{self.system.describe()}"
        )

    def summary(self) -> str:
        """How much was simulated message by message and how much replayed from the cache."""
        how = "each rank issuing and finishing on its own" if self.per_member else "whole instances"
        out = (
            f"{self.name}: {self.simulated} rank shares of collectives simulated message by "
            f"message ({self.messages} messages; {how})"
        )
        if self.mirrored:
            out += (
                f", {self.mirrored} instances simulated for one rank whose peers provably mirror "
                f"it ({self.mirrored_messages} messages)"
            )
        if self.cached:
            out += f", {self.cached} instances replayed from the run of an identical one"
        return out

    def _is_world(self, transfer: Transfer) -> bool:
        g = transfer.group
        name = self.group_names[g] if 0 <= g < len(self.group_names) else ""
        return name in ("", "0", "world") or len(transfer.ranks) == self.net.total_npus

    # ---- instances, lanes and launches -------------------------------------------------------

    def _instance(self, transfer: Transfer, now: float) -> _Instance:
        t = round(now * 1e9)
        if t > self.clock.now:
            self.clock.now = t
        inst = self._insts.get(transfer.iid)
        if inst is not None:
            return inst
        kind = transfer.comm_type
        check_collective(kind)
        g = int(transfer.group)
        group = self._groups.get(g) if g >= 0 else None
        if group is None:
            ranks = tuple(int(r) for r in transfer.ranks)
            for r in ranks:
                if not 0 <= r < self.net.total_npus:
                    raise ConfigError(
                        f"{self.net.path}: key 'npus_count': the workload's rank {r} is beyond "
                        f"the network's {self.net.total_npus} NPUs"
                    )
            group = (ranks, self._is_world(transfer))
            if g >= 0:
                self._groups[g] = group
        ranks = group[0]
        world = kind != P2P and group[1]
        cacheable = kind in NETWORK_COLLECTIVES and not self.aware
        # a group by its id (hashing a 4,096-rank tuple per lookup costs); send/recv by its pair
        ident = g if g >= 0 else ranks
        key = (kind, int(transfer.size), ident, world) if cacheable else None
        inst = _Instance(transfer.iid, kind, int(transfer.size), ranks, key, world, ident)
        self._insts[transfer.iid] = inst
        return inst

    def _launch(self, inst: _Instance, rank: int) -> None:
        """Rank ``rank`` issues its share of ``inst`` now."""
        now = self.clock.now
        inst.started[rank] = now
        if inst.first < 0:
            inst.first = now
        if inst.kind == P2P:
            src, dst = inst.ranks
            self.messages += 1
            self.transport.send(src, dst, max(1, inst.size), self._p2p_arrived, inst)
            return
        if inst.kind == REPLAYED:
            dur = max(1, self.durations.get((inst.iid, rank), 1))
            self.clock.at(now + dur, self._share_at, (inst, rank))
            return
        plan = self._plan(inst)
        if len(inst.ranks) == 1 or not plan.templates:
            # nothing to send (ASTRA-sim itself would never finish such a node)
            self.clock.at(now, self._share_at, (inst, rank))
            return
        self.simulated += 1
        sched = self._ranks[rank]
        part = _Part(inst, rank, sched, plan.streams)
        phases = plan.phases_for(rank, self.rings)
        prio = sched.next_priority()
        for c in range(plan.streams):
            sched.proceed(_Stream(part, phases, (inst.iid, c), prio))

    def _plan(self, inst: _Instance) -> CollectivePlan:
        world = inst.world
        key = (inst.kind, inst.size, inst.ident, world)
        plan = self._plans.get(key)
        if plan is None:
            coll = NETWORK_COLLECTIVES[inst.kind]
            plan = self._plans[key] = CollectivePlan(
                coll, inst.size, inst.ranks, world, self.net, self.system
            )
            if (
                plan.templates
                and self.system.local_mem_bw is None
                and any(t.collective in (AR, RS) for t in plan.templates)
            ):
                raise ConfigError(
                    f"{self.system.path}: key 'local-mem-bw' is missing ({coll} reduces data)"
                )
        return plan

    def _p2p_arrived(self, inst: _Instance) -> None:
        inst.arrived = True
        self.part_done(inst, inst.ranks[0])
        if inst.recv_ready:
            self.part_done(inst, inst.ranks[1])

    def _share_at(self, arg: tuple[_Instance, int]) -> None:
        self.part_done(*arg)

    def part_done(self, inst: _Instance, rank: int) -> None:
        """Rank ``rank`` finished its share of ``inst``: free its lane, maybe end ``inst``."""
        now = self.clock.now
        inst.done[rank] = now
        inst.left -= 1
        if self.per_member:
            self._finished_members.append((inst.iid, rank))
        if inst.left == 0:
            del self._insts[inst.iid]
            self.standalone[inst.iid] = (now - inst.first) * 1e-9
            if not self.per_member:
                self._finished.append(inst.iid)
            self._remember(inst)
        if inst.kind != P2P or rank == inst.ranks[0]:  # rank in inst.lanes, without the scan
            lane = self._lanes[rank]
            lane.popleft()
            if lane:
                self._head(lane[0], rank)

    def _head(self, inst: _Instance, rank: int) -> None:
        """``inst`` now heads ``rank``'s lane: launch its share, or decide at the tick's end."""
        if inst.first < 0 and inst.key is not None:
            # other lanes may free (other members arrive) in this same tick: decide once they have
            if self.per_member:
                self._park(inst, rank)
            elif not inst.pending:
                inst.pending = True
                self.clock.at(self.clock.now, self._decide, inst)
        else:
            self._launch(inst, rank)

    def _park(self, inst: _Instance, rank: int) -> None:
        """Hold ``rank``'s share of ``inst`` (per member) while other members may arrive in this
        tick: the engine hands the backend its events of a tick before its own, whose nodes can
        bring the other members in the same tick. Replayed once every member is here; launched
        at this tick (``_unpark``) once time moves on. A share's first event comes an endpoint
        delay after its launch, so ``next_time`` wakes at the latest then."""
        plan = self._plan(inst)
        e = LOCAL_ENDPOINT_DELAY if plan.local else self.system.endpoint_delay
        if e <= 0 or len(inst.ranks) == 1 or not plan.templates:
            self._launch(inst, rank)
            return
        now = self.clock.now
        if not inst.parked:
            self._parked[inst.iid] = inst
        inst.parked.append(rank)
        self._park_t = now
        self._park_wake = min(self._park_wake, now + e)
        if len(inst.parked) == len(inst.lanes):  # everyone is here, in this tick
            del self._parked[inst.iid]
            order, inst.parked = inst.parked, []
            if not self._replay(inst, order):
                for r in order:
                    self._launch(inst, r)
            if not self._parked:
                self._park_wake = math.inf

    def _unpark(self) -> None:
        """Time moves past the tick of the parked shares: launch them at that tick."""
        assert self.clock.now == self._park_t
        parked, self._parked = self._parked, {}
        self._park_wake = math.inf
        for inst in parked.values():
            ranks, inst.parked = inst.parked, []
            for r in ranks:
                self._launch(inst, r)

    def _decide(self, inst: _Instance) -> None:
        """Replay ``inst`` if it heads every lane now, else start it on the free lanes."""
        inst.pending = False
        lanes = self._lanes
        heads = [
            r for r in inst.lanes if lanes[r] and lanes[r][0] is inst and r not in inst.started
        ]
        if inst.first < 0 and len(heads) == len(inst.lanes) and self._replay(inst):
            return
        for r in heads:
            self._launch(inst, r)

    def _replay(self, inst: _Instance, order: list[int] | None = None) -> bool:
        """Run ``inst``, whose members all start now on idle lanes, from the cache, filling it
        from one mirrored rank where that is exact; False: simulate every member. ``order``:
        the order the members came in (default: the group's)."""
        if inst.key not in self._cache:
            dt = self._mirrored(inst)
            if dt is None:
                return False
            self._cache[inst.key] = {dt: list(order or inst.ranks)}
        self._from_cache(inst)
        return True

    def _mirrored(self, inst: _Instance) -> int | None:
        """ns every member of ``inst`` takes, from one rank's run with mirrored peers; None
        where ``genie.sim.astra_mirror``'s obligations (b)-(d) do not hold."""
        plan = self._plan(inst)
        if len(inst.ranks) == 1 or not plan.templates:
            return None
        rank = inst.ranks[0]
        phases = plan.phases_for(rank, self.rings)
        if plan.local or plan.flat:  # a dimension's own ring is uniform by construction
            if self._geometry is None:
                self._geometry = RingGeometry(self.net)
            if not all(self._geometry.uniform_ring(p.members, p.algorithm) for p in phases):
                return None
        assert isinstance(self.transport, _Unaware)
        run = _MirrorRun(self, self.transport)
        dt = run.run(inst, rank, plan.streams, phases)
        if dt is not None:
            self.mirrored += 1
            self.mirrored_messages += run.messages
        return dt

    def _from_cache(self, inst: _Instance) -> None:
        self.cached += 1
        now = self.clock.now
        inst.first = now
        for dt, ranks in self._cache[inst.key].items():
            for r in ranks:
                inst.started[r] = now
            # one event per end time: its shares end in the order separate events would
            self.clock.at(now + dt, self._shares_at, (inst, ranks))

    def _shares_at(self, arg: tuple[_Instance, list[int]]) -> None:
        inst, ranks = arg
        for r in ranks:
            self.part_done(inst, r)

    def _remember(self, inst: _Instance) -> None:
        """Cache an unaware instance whose members all started at the same time."""
        if inst.key is None or inst.key in self._cache:
            return
        if len(set(inst.started.values())) == 1 and len(inst.started) == len(inst.ranks):
            ends: dict[int, list[int]] = {}  # ns after the start -> ranks (in the order they ended)
            for r in inst.done:
                ends.setdefault(inst.done[r] - inst.first, []).append(r)
            self._cache[inst.key] = ends

    # ---- messages of collectives --------------------------------------------------------------

    def reduce_ns(self, size: int) -> int:
        """ns to reduce ``size`` bytes in local memory: write plus two reads (ASTRA-sim)."""
        bw = self.system.local_mem_bw * 1000000000  # type: ignore[operator]
        return 3 * int(float(size) / bw * 1e9)

    def post(self, stream: _Stream, me: int, dest: int, src: int, size: int) -> None:
        """Send ``size`` bytes to ``dest`` and post the receive of the same size from ``src``."""
        self.messages += 1
        self.transport.send(me, dest, size, self._arrived, (stream.tag, me, dest, size))
        self._mail.expect((stream.tag, src, me, size), stream)

    def _arrived(self, key: tuple) -> None:
        stream = self._mail.arrive(key)
        if stream is not None:
            stream.receive()


def model_names() -> tuple[str, ...]:
    """The pricing models ``genie simulate --model`` offers."""
    return ("genie", "astra-unaware", "astra-aware")


class _MirrorRun:
    """One rank's share of a collective on a clock of its own, each message it awaits sent by
    its peer as the mirror image of its own message of the same step (``genie.sim.astra_mirror``).

    It plays the backend's part for ``_Phase``, ``_RankQueues`` and ``_Part`` (``system``,
    ``clock``, ``reduce_ns``, ``post``, ``part_done``) and watches for obligation (d): a chunk
    that receives and gets a token back in one tick.
    """

    def __init__(self, backend: AstraBackend, transport: _Unaware) -> None:
        self.system = backend.system
        self.reduce_ns = backend.reduce_ns
        self.delay = transport.delay
        self.clock = _Clock()
        self._mail = _Mailbox(self.clock)
        self.messages = 0
        self.finish = -1
        self._tick = -1
        self._received: set[int] = set()  # id of each stream that received in this tick
        self._tokens: set[int] = set()  # id of each stream whose bundle ended in this tick
        self.tie = False

    def run(self, inst: _Instance, rank: int, chunks: int, phases: list[PhaseSpec]) -> int | None:
        """ns from the start of ``rank``'s share to its end; None on a same-tick tie."""
        sched = _RankQueues(self, self.system.active_chunks)  # type: ignore[arg-type]
        part = _Part(inst, rank, sched, chunks)
        prio = sched.next_priority()
        for c in range(chunks):
            sched.proceed(_Stream(part, phases, (inst.iid, c), prio))
        heap = self.clock.heap
        bundle, receive = _Stream.bundle_done, _Stream.receive
        while heap and not self.tie:
            t, _, fn, arg = heapq.heappop(heap)
            self._at(t)
            self.clock.now = t
            f = getattr(fn, "__func__", None)
            if f is bundle:
                self._mark(fn.__self__, self._tokens, self._received)  # type: ignore[attr-defined]
            elif f is receive:
                self._mark(fn.__self__, self._received, self._tokens)  # type: ignore[attr-defined]
            fn(arg)
        if self.tie or self.finish < 0:
            return None
        return self.finish

    def _at(self, t: int) -> None:
        if t != self._tick:
            self._tick = t
            self._received.clear()
            self._tokens.clear()

    def _mark(self, stream: _Stream, mine: set[int], other: set[int]) -> None:
        if id(stream) in other:
            self.tie = True
        mine.add(id(stream))

    def part_done(self, inst: _Instance, rank: int) -> None:
        """The share's last chunk is done."""
        self.finish = self.clock.now

    def post(self, stream: _Stream, me: int, dest: int, src: int, size: int) -> None:
        """Send to ``dest``, and the peer ``src`` sends this rank the same step's message now."""
        self.messages += 1
        key = (stream.tag, src, me, size)
        self.clock.at(self.clock.now + self.delay(src, me, size), self._arrived, key)
        self._mail.expect(key, stream)

    def _arrived(self, key: tuple) -> None:
        stream = self._mail.arrive(key)
        if stream is not None:
            self._mark(stream, self._received, self._tokens)
            stream.receive()

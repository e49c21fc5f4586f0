"""The parts of ASTRA-sim 2.0's analytical model that ``genie.sim.astra_model`` drives: the
event clock, the congestion-unaware and -aware networks, one chunk's phase as ASTRA-sim's packet
state machine, the per-rank streams and queues, the mailbox that matches sends to receives, and
a collective instance's state. Times are integer nanoseconds (ASTRA-sim's tick)."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from genie.errors import CollectiveError, ConfigError
from genie.sim.astra_config import AstraNetwork
from genie.sim.astra_plan import (
    A2A,
    AG,
    AR,
    CCW,
    CW,
    LOCAL_ENDPOINT_DELAY,
    RS,
    PhaseSpec,
)
from genie.vocabulary import P2P

if TYPE_CHECKING:  # the backend drives these parts; they call back into it
    from genie.sim.astra_model import AstraBackend

# ---------------------------------------------------------------------------------------------
# the event queue and the two networks
# ---------------------------------------------------------------------------------------------


class Clock:
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


class Unaware:
    """Congestion-unaware: each message takes its own closed-form time."""

    def __init__(self, net: AstraNetwork, clock: Clock) -> None:
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


class Aware:
    """Congestion-aware: store and forward over each link, one message at a time per link."""

    def __init__(self, net: AstraNetwork, clock: Clock) -> None:
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


class Phase:
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

    def __init__(self, model: AstraBackend, stream: Stream, spec: PhaseSpec) -> None:
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


class Stream:
    """One chunk on one rank: its phases, run one after another."""

    __slots__ = ("initialized", "k", "part", "phase", "phases", "priority", "tag", "vnet")

    def __init__(self, part: Part, phases: list[PhaseSpec], tag: tuple, priority: int) -> None:
        self.part = part
        self.phases = phases
        self.tag = tag
        self.priority = priority
        self.k = -1
        self.vnet = -1
        self.initialized = False
        self.phase: Phase | None = None

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


class Part:
    """A rank's share of an instance: done when all its chunks are."""

    __slots__ = ("inst", "left", "rank", "sched")

    def __init__(self, inst: Instance, rank: int, sched: RankQueues, chunks: int) -> None:
        self.inst = inst
        self.rank = rank
        self.sched = sched
        self.left = chunks

    def chunk_done(self) -> None:
        """One chunk finished its last phase."""
        self.left -= 1
        if self.left == 0:
            self.sched.model.part_done(self.inst, self.rank)


class RankQueues:
    """A rank's chunk queues, one per dimension: running chunks first, then waiting ones."""

    __slots__ = ("model", "priority", "queues", "running", "threshold")

    def __init__(self, model: AstraBackend, threshold: int) -> None:
        self.model = model
        self.queues: dict[int, list[Stream]] = {}
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

    def _insert(self, st: Stream) -> None:
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
            st.phase = Phase(self.model, st, st.phases[st.k])
            run += 1
            self.running[vnet] = run
            st.phase.start()
            i += 1

    def proceed(self, st: Stream) -> None:
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


class Mailbox:
    """Messages of collectives keyed (tag, src, dst, size): those that arrived before their
    receive was posted (counted) and receives posted before their message arrived (in order)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._boxes: dict[tuple, list] = {}  # key -> [arrived, deque of waiting streams]

    def expect(self, key: tuple, stream: Stream) -> None:
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

    def arrive(self, key: tuple) -> Stream | None:
        """Message ``key`` is here: the stream that waited for it (first come), or None."""
        box = self._boxes.get(key)
        if box is None:
            self._boxes[key] = [1, deque()]
            return None
        if not box[1]:
            box[0] += 1
            return None
        stream: Stream = box[1].popleft()
        if box[0] == 0 and not box[1]:
            del self._boxes[key]
        return stream


class Instance:
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

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
backend; its parts (the event clock, the two networks, each phase's steps, the per-rank queues)
are ``genie.sim.astra_events``.

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

from genie.errors import ConfigError
from genie.sim.astra_config import AstraNetwork, AstraSystem
from genie.sim.astra_events import (
    Aware,
    Clock,
    Instance,
    Mailbox,
    Part,
    RankQueues,
    Stream,
    Unaware,
)
from genie.sim.astra_mirror import RingGeometry
from genie.sim.astra_plan import (
    AR,
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
        self.clock = Clock()
        self.transport: Unaware | Aware = (
            Aware(net, self.clock) if aware else Unaware(net, self.clock)
        )
        self.group_names = group_names or []
        self.durations = durations or {}
        self.standalone: dict[int, float] = {}
        self.rings = Rings(net)
        self._plans: dict[tuple, CollectivePlan] = {}
        self._lanes: list[deque[Instance]] = [deque() for _ in range(net.total_npus)]
        threshold = system.active_chunks  # one queue per dimension
        self._ranks = [RankQueues(self, threshold) for _ in range(net.total_npus)]
        self._mail = Mailbox(self.clock)
        self._insts: dict[int, Instance] = {}
        self._finished: list[int] = []  # whole instances ended (not per_member)
        self._finished_members: list[tuple[int, int]] = []  # (iid, rank) ended (per_member)
        # unaware: ns after the start -> the ranks whose shares end then
        self._cache: dict[tuple, dict[int, list[int]]] = {}
        self._groups: dict[int, tuple[tuple[int, ...], bool]] = {}  # id -> (ranks, world)
        self._geometry: RingGeometry | None = None
        # instances with parked shares (per member), by id, in the order they were parked
        self._parked: dict[int, Instance] = {}
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

    def _instance(self, transfer: Transfer, now: float) -> Instance:
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
        inst = Instance(transfer.iid, kind, int(transfer.size), ranks, key, world, ident)
        self._insts[transfer.iid] = inst
        return inst

    def _launch(self, inst: Instance, rank: int) -> None:
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
        part = Part(inst, rank, sched, plan.streams)
        phases = plan.phases_for(rank, self.rings)
        prio = sched.next_priority()
        for c in range(plan.streams):
            sched.proceed(Stream(part, phases, (inst.iid, c), prio))

    def _plan(self, inst: Instance) -> CollectivePlan:
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

    def _p2p_arrived(self, inst: Instance) -> None:
        inst.arrived = True
        self.part_done(inst, inst.ranks[0])
        if inst.recv_ready:
            self.part_done(inst, inst.ranks[1])

    def _share_at(self, arg: tuple[Instance, int]) -> None:
        self.part_done(*arg)

    def part_done(self, inst: Instance, rank: int) -> None:
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

    def _head(self, inst: Instance, rank: int) -> None:
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

    def _park(self, inst: Instance, rank: int) -> None:
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

    def _decide(self, inst: Instance) -> None:
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

    def _replay(self, inst: Instance, order: list[int] | None = None) -> bool:
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

    def _mirrored(self, inst: Instance) -> int | None:
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
        assert isinstance(self.transport, Unaware)
        run = _MirrorRun(self, self.transport)
        dt = run.run(inst, rank, plan.streams, phases)
        if dt is not None:
            self.mirrored += 1
            self.mirrored_messages += run.messages
        return dt

    def _from_cache(self, inst: Instance) -> None:
        self.cached += 1
        now = self.clock.now
        inst.first = now
        for dt, ranks in self._cache[inst.key].items():
            for r in ranks:
                inst.started[r] = now
            # one event per end time: its shares end in the order separate events would
            self.clock.at(now + dt, self._shares_at, (inst, ranks))

    def _shares_at(self, arg: tuple[Instance, list[int]]) -> None:
        inst, ranks = arg
        for r in ranks:
            self.part_done(inst, r)

    def _remember(self, inst: Instance) -> None:
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

    def post(self, stream: Stream, me: int, dest: int, src: int, size: int) -> None:
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

    It plays the backend's part for ``Phase``, ``RankQueues`` and ``Part`` (``system``,
    ``clock``, ``reduce_ns``, ``post``, ``part_done``) and watches for obligation (d): a chunk
    that receives and gets a token back in one tick.
    """

    def __init__(self, backend: AstraBackend, transport: Unaware) -> None:
        self.system = backend.system
        self.reduce_ns = backend.reduce_ns
        self.delay = transport.delay
        self.clock = Clock()
        self._mail = Mailbox(self.clock)
        self.messages = 0
        self.finish = -1
        self._tick = -1
        self._received: set[int] = set()  # id of each stream that received in this tick
        self._tokens: set[int] = set()  # id of each stream whose bundle ended in this tick
        self.tie = False

    def run(self, inst: Instance, rank: int, chunks: int, phases: list[PhaseSpec]) -> int | None:
        """ns from the start of ``rank``'s share to its end; None on a same-tick tie."""
        sched = RankQueues(self, self.system.active_chunks)  # type: ignore[arg-type]
        part = Part(inst, rank, sched, chunks)
        prio = sched.next_priority()
        for c in range(chunks):
            sched.proceed(Stream(part, phases, (inst.iid, c), prio))
        heap = self.clock.heap
        bundle, receive = Stream.bundle_done, Stream.receive
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

    def _mark(self, stream: Stream, mine: set[int], other: set[int]) -> None:
        if id(stream) in other:
            self.tie = True
        mine.add(id(stream))

    def part_done(self, inst: Instance, rank: int) -> None:
        """The share's last chunk is done."""
        self.finish = self.clock.now

    def post(self, stream: Stream, me: int, dest: int, src: int, size: int) -> None:
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

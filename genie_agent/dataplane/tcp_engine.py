"""The frame machinery of a TCP rank executor: one selector over a rank's non-blocking streams.

Both ways a rank runs (``RankExecutor.run``, one program for warmup+iters iterations, and
``run_ops``, a whole op list in one go) drive their steps through the same ``RankEngine``: a
started SEND queues its parts on its program's channel of streams (an NCCL-style program's step on
its own NCCL channel's streams, with its protocol's flag bytes) and writes what the sockets take;
readable streams are read into the RECV step a header names (by (src, tag, seq), into that step's
own scratch area), with the header fields and, with ``verify`` on, the CRC-32 of the bytes checked;
a step completes when all its parts are sent or received, which readies its dependents. Each run
state (``ProgRun``: one program in one iteration, or one op of an op list) keeps its own counters,
so the steps of several programs progress together over the same streams. Which run a frame belongs
to is decided by the run's ``match`` (it may park a frame of a later iteration: that stream is not
read until its iteration starts).

Steps between ranks of this agent take the intra-host model instead of a stream when the job
says so (``genie_agent.dataplane.intra``): their frames come through the rank's mailbox, and the
engine's timers complete them at the modelled times.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import selectors
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from genie.collectives.nccl_wire import wire_bytes
from genie.collectives.program import Op
from genie.errors import TransportError
from genie.wire.messages import LEAN_REGION, LEAN_SAMPLE, DataOptions
from genie_agent.dataplane.intra import LocalFrame, LocalHub, LocalPort, Mailbox, transfer_ns
from genie_agent.dataplane.pool import Budget, BufferPool
from genie_agent.dataplane.steps import local_step, set_realtime
from genie_agent.dataplane.tcp_wire import HDR, OutFrame, Stream, split_parts

if TYPE_CHECKING:
    from genie_agent.dataplane.tcp_wire import StepKey
from genie_agent.plan import RankPlan

POLL_S = 0.05  # how often a waiting executor re-checks abort
Peer = Stream | LocalPort  # where a frame comes from: a TCP stream, or a co-located rank
SPIN_BEFORE_NS = 1_000_000  # timers closer than this are waited for by polling, not sleeping
UNBOUNDED = 1 << 62  # a rank engine's memory bound when its plane gives none (tests)
EMPTY = np.empty(0, dtype=np.uint8)
Incoming = tuple["StepKey", memoryview | None, int, int, int, int]  # ``Stream.cur``
FLAG_BLOCK = 1 << 16  # bytes of the block LL / LL128 flag bytes are sent from and read into
FLAGS = memoryview(b"\xa5" * FLAG_BLOCK)


class ProgRun:
    """The state of one program while it runs: one iteration of it, or one op of an op list."""

    __slots__ = (
        "buf",
        "it",
        "left",
        "on_done",
        "op",
        "parts",
        "pending",
        "plan",
        "program",
        "remaining",
        "scratch",
        "st_end",
        "st_start",
        "started",
        "wire",
    )  # fmt: skip

    def __init__(
        self,
        program: int,
        it: int,
        plan: RankPlan,
        buf: np.ndarray,
        scratch: np.ndarray,
        parts: list[list[tuple[int, int]]],
        st_start: list[int] | None = None,
        st_end: list[int] | None = None,
        op: int = -1,
        on_done: Callable[[ProgRun], None] | None = None,
        wire: int | None = None,
    ) -> None:
        self.program = program  # the prepared program (plan, channel) it runs
        self.wire = program if wire is None else wire  # what its frames carry: program/instance
        self.it = it  # the iteration its frames carry
        self.op = op  # its index in the op list, -1 outside op-list mode
        self.on_done = on_done  # called when its last step completes
        self.plan = plan
        self.buf = buf
        self.scratch = scratch
        self.parts = parts
        n = len(plan.steps)
        self.pending = list(plan.n_deps)
        self.started = [False] * n
        self.left = [len(parts[i]) for i in range(n)]  # parts still to send / receive
        self.remaining = n
        self.st_start = st_start if st_start is not None else [0] * n
        self.st_end = st_end if st_end is not None else [0] * n


class RankEngine:
    """A rank's streams, buffers and selector, and the step machinery every run mode uses."""

    def __init__(
        self,
        rank: int,
        streams: dict[int, list[Stream]],
        plans: dict[int, RankPlan],
        opts: DataOptions,
        abort: threading.Event,
        hub: LocalHub | None = None,
        local_peers: frozenset[int] = frozenset(),
        budget: Budget | None = None,
    ) -> None:
        self.rank = rank
        self.streams = streams
        self.all_streams = [s for lst in streams.values() for s in lst]
        self.plans = plans  # program index -> plan
        self.opts = opts
        self.abort = abort
        # buffers by lifetime: taken when a program starts to run, given back when it ends
        self.pool = BufferPool(rank, budget if budget is not None else Budget(UNBOUNDED))
        # lean payloads: every SEND reads one pattern region, every RECV lands in one sink
        self.lean = opts.payload == "lean"
        self.region = self.sink = EMPTY
        if self.lean:
            biggest = max(
                (st.nbytes for pl in plans.values() for st in pl.steps if st.op <= Op.RECV),
                default=0,
            )
            size = max(1, min(LEAN_REGION, biggest))
            self.region = self.pool.take(size, fill=True)
            self.sink = self.pool.take(size)
        self.sel = selectors.DefaultSelector()
        for s in self.all_streams:
            s.sock.setblocking(False)
            s.mask = selectors.EVENT_READ
            self.sel.register(s.sock, s.mask, s)
        self.bytes_sent = 0
        self.bytes_received = 0
        self.verified = 0
        self.realtime = False  # under SCHED_FIFO until the first step starts
        self.ready: deque[tuple[ProgRun, int]] = deque()  # steps whose deps are done
        # the run a header belongs to (None: parked for a later iteration); set by each run
        self.match: Callable[[Peer, tuple], ProgRun | None] = self._no_run
        # co-located peers whose steps are modelled, not sent: one part each, via the mailbox
        self.local = local_peers if hub is not None else frozenset()
        self.hub = hub
        self.mailbox = hub.box(rank) if hub is not None and self.local else None
        if self.mailbox is not None:
            self.sel.register(self.mailbox, selectors.EVENT_READ, self.mailbox)
        self.ports = {q: LocalPort(q) for q in self.local}
        self.local_parked: list[LocalFrame] = []
        self.timers: list[tuple[int, int, Callable, tuple]] = []
        self._tick = itertools.count()
        self.port_free = 0  # when this rank's intra-host port is next free (monotonic ns)
        # each program's streams to a peer: its channel's set (``DataOptions.channels``), cut
        # once more into the program's own NCCL channels (``lanes`` streams each)
        self.flows = opts.streams // opts.channels
        chans = opts.program_channels
        self.first_stream = {p: (chans[p] if p < len(chans) else 0) * self.flows for p in plans}
        self.lanes = {p: self._lanes(plan) for p, plan in plans.items()}
        self.parts = {
            p: [
                (
                    [(0, st.nbytes)]
                    if plan.peer_global[i] in self.local
                    else split_parts(st.nbytes, self.lanes[p], opts.min_part)
                )
                if st.op in (Op.SEND, Op.RECV)
                else []
                for i, st in enumerate(plan.steps)
            ]
            for p, plan in plans.items()
        }
        # LL / LL128 framing: flag bytes sent from one read-only block, read into one sink
        self.flag_sink = bytearray(FLAG_BLOCK if any(pl.proto for pl in plans.values()) else 0)

    def _lanes(self, plan: RankPlan) -> int:
        """Streams per NCCL channel of ``plan`` (its set's streams when it has one channel)."""
        c = plan.channels
        if c > 1 and (self.flows % c or self.flows < c):
            raise TransportError(
                f"rank {self.rank}: a program of {c} NCCL channels needs a multiple of {c} "
                f"streams per rank pair and program; the job has {self.flows}"
            )
        return self.flows // c

    def flag_pieces(self, n: int) -> list[memoryview]:
        """``n`` framing bytes as pieces of the flag block."""
        whole, rest = divmod(n, FLAG_BLOCK)
        return [FLAGS] * whole + ([FLAGS[:rest]] if rest else [])

    def take_buffers(self, plan: RankPlan) -> tuple[np.ndarray, np.ndarray]:
        """(buffer, scratch) for one run of ``plan``: from the pool, the buffer pattern-filled
        when messages are verified (otherwise its bytes are whatever they were); none with
        lean payloads (the rank's fixed regions serve every run)."""
        if self.lean:
            return EMPTY, EMPTY
        verify = self.opts.verify
        return (
            self.pool.take(plan.buffer_bytes, fill=verify),
            self.pool.take(plan.scratch_bytes),
        )

    def give_buffers(self, ps: ProgRun) -> None:
        """Give a finished run's buffers back to the pool."""
        if not self.lean:
            self.pool.give(ps.buf)
            self.pool.give(ps.scratch)

    def lean_payload(self, ln: int) -> list[memoryview]:
        """``ln`` bytes of the pattern region as pieces (the region repeated)."""
        mv = memoryview(self.region.data)
        whole, rest = divmod(ln, len(mv))
        return [mv] * whole + ([mv[:rest]] if rest else [])

    def close(self) -> None:
        """Release the selector and buffers (sockets and mailboxes are closed by the plane)."""
        with contextlib.suppress(Exception):
            self.sel.close()
        self.pool.clear()
        self.timers.clear()
        self.local_parked.clear()

    def reset_counters(self) -> None:
        """Zero the byte and message counters (they are per Go)."""
        self.bytes_sent = self.bytes_received = self.verified = 0

    def end_realtime(self) -> None:
        """Back to normal scheduling if the start ran real-time."""
        if self.realtime:
            self.realtime = set_realtime(False) and False

    def _no_run(self, s: Peer, h: tuple) -> ProgRun | None:
        raise TransportError(f"rank {self.rank}: frame from {s.peer} while no program runs")

    # ---- interest management -------------------------------------------------------------
    def want(self, s: Stream) -> None:
        """Watch ``s`` for reading unless it is parked, and for writing while it has frames."""
        mask = 0 if s.parked is not None else selectors.EVENT_READ
        if s.out:
            mask |= selectors.EVENT_WRITE
        if mask == s.mask:
            return
        if s.mask and mask:
            self.sel.modify(s.sock, mask, s)
        elif mask:
            self.sel.register(s.sock, mask, s)
        else:
            self.sel.unregister(s.sock)
        s.mask = mask

    # ---- steps ---------------------------------------------------------------------------
    def complete(self, ps: ProgRun, i: int) -> None:
        """Mark step ``i`` of ``ps`` done and ready the steps that waited only for it."""
        ps.st_end[i] = time.monotonic_ns()
        ps.remaining -= 1
        pending = ps.pending
        for d in ps.plan.dependents[i]:
            pending[d] -= 1
            if pending[d] == 0:
                self.ready.append((ps, d))
        if ps.remaining == 0 and ps.on_done is not None:
            ps.on_done(ps)

    def start_step(self, ps: ProgRun, i: int) -> None:
        """Start step ``i`` of ``ps``: queue and write a SEND, complete a RECV that is in, or
        run a local step."""
        plan = ps.plan
        st = plan.steps[i]
        ps.st_start[i] = time.monotonic_ns()
        ps.started[i] = True
        if self.realtime:  # the first step has begun: back to normal scheduling at once
            self.realtime = set_realtime(False) and False
        if st.op == Op.SEND and plan.peer_global[i] in self.local:
            self.send_local(ps, i)
        elif st.op == Op.SEND:
            peer = plan.peer_global[i]
            lanes = self.lanes[ps.program]
            first = self.first_stream[ps.program]
            if plan.step_channel:  # an NCCL-style program: its channel's streams
                first += plan.step_channel[i] * lanes
            lst = self.streams[peer][first : first + lanes]
            parts = ps.parts[i]
            mv = ps.buf.data
            verify = self.opts.verify
            touched = []
            for k, (off, ln) in enumerate(parts):
                s = lst[k % len(lst)] if len(parts) > 1 else lst[plan.seq[i] % len(lst)]
                if self.lean:
                    pieces = self.lean_payload(ln)
                    crc = zlib.crc32(self.region.data[: min(LEAN_SAMPLE, ln)]) if verify else 0
                else:
                    pieces = [mv[st.offset + off : st.offset + off + ln]]
                    crc = zlib.crc32(pieces[0]) if verify else 0
                hdr = HDR.pack(
                    ps.wire, ps.it, self.rank, peer, st.tag, plan.seq[i], k, len(parts),
                    off, ln, crc,
                )  # fmt: skip
                if plan.proto:  # the protocol's flag bytes, before the data
                    pieces = [*self.flag_pieces(wire_bytes(plan.proto, ln) - ln), *pieces]
                s.out.append(OutFrame([memoryview(hdr), *pieces], (ps, i)))
                self.bytes_sent += ln
                touched.append(s)
            for s in touched:
                self.write(s)
                self.want(s)
        elif st.op == Op.RECV:
            if ps.left[i] == 0:
                self.complete(ps, i)
        else:
            if not self.lean:  # lean payloads carry no data to reduce
                local_step(st, ps.buf, ps.scratch, plan.scratch_offset[st.src])
            self.complete(ps, i)

    # ---- intra-host steps (genie_agent.dataplane.intra) ---------------------------------------
    def at(self, due_ns: int, fn: Callable, *args) -> None:
        """Call ``fn(*args)`` from the poll loop once ``due_ns`` (monotonic) has come."""
        heapq.heappush(self.timers, (due_ns, next(self._tick), fn, args))

    def run_timers(self) -> None:
        """Call every timer that is due."""
        now = time.monotonic_ns()
        while self.timers and self.timers[0][0] <= now:
            _, _, fn, args = heapq.heappop(self.timers)
            fn(*args)

    def send_local(self, ps: ProgRun, i: int) -> None:
        """Start a SEND to a rank of this agent: price it on this rank's intra-host port and
        hand the receiver its bytes; it completes when they are out and were taken."""
        plan = ps.plan
        st = plan.steps[i]
        peer = plan.peer_global[i]
        n = st.nbytes
        out = max(time.monotonic_ns(), self.port_free) + transfer_ns(n, self.opts.intra_bandwidth)
        self.port_free = out
        arrive = out + round(self.opts.intra_latency * 1e9)
        hdr = (ps.wire, ps.it, self.rank, peer, st.tag, plan.seq[i], 0, 1, 0, n, 0)
        payload = None if self.lean else ps.buf.data[st.offset : st.offset + n]
        ps.left[i] = 2  # its bytes out (a timer) and the receiver's copy taken (an ack)
        self.bytes_sent += n
        self._hub().post(peer, LocalFrame(hdr, payload, arrive, self.rank, (ps, i)))
        self.at(out, self.send_part_done, ps, i)

    def send_part_done(self, ps: ProgRun, i: int) -> None:
        """One of a local SEND's two conditions holds; complete it when both do."""
        ps.left[i] -= 1
        if ps.left[i] == 0:
            self.complete(ps, i)

    def _hub(self) -> LocalHub:
        """The intra-host hub (there is one whenever a co-located peer is modelled)."""
        if self.hub is None:
            raise TransportError(f"rank {self.rank}: intra-host step without a local hub")
        return self.hub

    def take_local(self, box: Mailbox) -> None:
        """Handle the mailbox: acks of this rank's local SENDs, frames for its RECVs."""
        for f in box.take():
            if f.ack:
                self.send_part_done(*f.key)
            else:
                self.on_local(f)

    def resume_local(self) -> None:
        """Take the local frames parked for a later iteration again (a new one has begun)."""
        parked, self.local_parked = self.local_parked, []
        for f in parked:
            self.on_local(f)

    def on_local(self, f: LocalFrame) -> None:
        """Copy a co-located peer's step into its RECV's scratch; it lands at the modelled time."""
        port = self.ports.get(f.src)
        if port is None:
            raise TransportError(f"rank {self.rank}: local frame from rank {f.src}, not a peer")
        ps = self.match(port, f.header)
        if ps is None:  # a later iteration's: kept until it begins
            port.parked = None
            self.local_parked.append(f)
            return
        _, _, src, _, tag, seq, _, _, _, ln, _ = f.header
        plan = ps.plan
        i = plan.recv_index.get((src, tag, seq))
        if i is None or len(ps.parts[i]) != 1 or ps.parts[i][0][1] != ln:
            raise TransportError(
                f"rank {self.rank}: local step from {src} tag {tag} seq {seq} matches no receive"
            )
        if not self.lean:
            if f.payload is None:
                raise TransportError(
                    f"rank {self.rank}: local frame from rank {f.src} without bytes"
                )
            base = plan.scratch_offset[i]
            ps.scratch.data[base : base + ln] = f.payload
        self._hub().post(f.src, LocalFrame(f.header, None, 0, self.rank, f.key, ack=True))
        self.at(f.arrive_ns, self.local_arrived, ps, i, ln)

    def local_arrived(self, ps: ProgRun, i: int, ln: int) -> None:
        """A local step's modelled transfer has landed: its RECV may complete."""
        self.bytes_received += ln
        ps.left[i] -= 1
        if ps.left[i] == 0 and ps.started[i]:
            self.complete(ps, i)

    def start_ready(self) -> None:
        """Start every step whose dependencies are done."""
        ready = self.ready
        while ready:
            self.start_step(*ready.popleft())

    # ---- frames --------------------------------------------------------------------------
    def on_header(self, s: Stream, h: tuple) -> None:
        """Point ``s`` at the scratch area of the RECV step a frame header names."""
        ps = self.match(s, h)
        if ps is None:  # parked
            return
        hprog, _, src, _, tag, seq, part, nparts, off, ln, crc = h
        plan = ps.plan
        i = plan.recv_index.get((src, tag, seq))
        if i is None or nparts != len(ps.parts[i]) or (off, ln) != ps.parts[i][part]:
            where, which = (f"program {hprog} ", "that") if ps.op >= 0 else ("", "this")
            raise TransportError(
                f"rank {self.rank}: frame from {src} {where}tag {tag} seq {seq} part {part} "
                f"matches no receive of {which} program"
            )
        if plan.proto:  # the protocol's flag bytes come first
            s.flags = wire_bytes(plan.proto, ln) - ln
        if self.lean:  # into the sink, over and over; the sample's CRC kept as it lands
            s.cur = ((ps, i), None, 0, ln, crc, 0)
        else:
            base = plan.scratch_offset[i] + off
            s.cur = ((ps, i), ps.scratch.data[base : base + ln], 0, ln, crc, 0)
        if ln == 0:
            self.finish_part(s, s.cur)

    def finish_part(self, s: Stream, cur: Incoming) -> None:
        """A part (``s.cur``) is in: check its CRC (with verify on) and complete its step when
        all are."""
        (ps, i), view, _, ln, crc, sample = cur
        s.cur = None
        if self.opts.verify:
            got = sample if view is None else zlib.crc32(view)
            if got != crc:
                where = (
                    f"program {ps.program}, step {i}"
                    if ps.op >= 0
                    else f"step {i}, tag {ps.plan.steps[i].tag}"
                )
                raise TransportError(
                    f"rank {self.rank}: CRC mismatch on {ln} bytes from rank {s.peer} ({where})"
                )
            self.verified += 1
        self.bytes_received += ln
        ps.left[i] -= 1
        if ps.left[i] == 0 and ps.started[i]:
            self.complete(ps, i)

    def read(self, s: Stream) -> None:
        """Read what ``s`` has (a bounded number of calls): headers, then payload bytes."""
        for _ in range(64):
            cur = s.cur
            if cur is None:
                view, have = memoryview(s.hdr)[s.hdr_got :], -1
            elif s.flags:  # framing bytes of the part: read and dropped
                view, have = memoryview(self.flag_sink)[: min(len(self.flag_sink), s.flags)], -2
            elif cur[1] is None:  # lean: the sink takes what fits, again and again
                have = cur[2]
                view = memoryview(self.sink.data)[: min(len(self.sink), cur[3] - have)]
            else:
                view, have = cur[1][cur[2] :], cur[2]
            try:
                got = s.sock.recv_into(view)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                raise TransportError(f"rank {self.rank}: link to {s.peer}: {exc}") from None
            if got == 0:
                raise TransportError(f"rank {self.rank}: rank {s.peer} closed the link")
            if have == -2:
                s.flags -= got
            elif cur is None:
                s.hdr_got += got
                if s.hdr_got == HDR.size:
                    s.hdr_got = 0
                    self.on_header(s, HDR.unpack(s.hdr))
                    if s.parked is not None:
                        return
            else:
                key, v, _, ln, crc, sample = cur
                if v is None and self.opts.verify and have < LEAN_SAMPLE:
                    sample = zlib.crc32(view[: min(got, LEAN_SAMPLE - have)], sample)
                s.cur = (key, v, have + got, ln, crc, sample)
                if have + got == ln:
                    self.finish_part(s, s.cur)

    def write(self, s: Stream) -> None:
        """Send queued frames of ``s`` while the socket takes them; complete finished SENDs."""
        while s.out:
            f = s.out[0]
            try:
                sent = s.sock.sendmsg(f.pieces)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                raise TransportError(f"rank {self.rank}: link to {s.peer}: {exc}") from None
            if f.advance(sent):
                s.out.popleft()
                ps, i = f.step
                ps.left[i] -= 1
                if ps.left[i] == 0:
                    self.complete(ps, i)

    def poll(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for streams to be ready (or the next timer), then write and
        read them and run the timers that are due."""
        if self.timers:  # the selector sleeps in whole milliseconds: poll for the last one
            left = self.timers[0][0] - time.monotonic_ns() - SPIN_BEFORE_NS
            timeout_s = max(0.0, min(timeout_s, left / 1e9))
        for key, ev in self.sel.select(timeout_s):
            s = key.data
            if isinstance(s, Mailbox):
                self.take_local(s)
                continue
            if ev & selectors.EVENT_WRITE:
                self.write(s)
            if ev & selectors.EVENT_READ and s.parked is None:
                self.read(s)
            self.want(s)
        if self.timers:
            self.run_timers()

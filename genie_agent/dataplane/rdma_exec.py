"""The RDMA rank executor: runs one rank's step programs over queue pairs, several per peer.

It talks to verbs only through ``RankVerbs`` (post a write/send/receive on a queue pair, poll,
wait), which ``genie_agent.dataplane.rdma`` implements with pyverbs; so this logic is the same
whatever provider is underneath (a ConnectX NIC, soft-RoCE), and needs no pyverbs to import.

Queue pairs, as NCCL lays them out (``qp_layout``): a rank pair has ``channels x qps`` RC queue
pairs, its *links* (peer, lane). A program sends on its channel's ``qps`` lanes
(``DataOptions.program_channels``: one connection set per process group, as on TCP), so a
small collective of one group never queues behind another group's large one in one queue pair;
a step is cut into parts across those lanes as the TCP plane cuts it across streams
(``split_parts`` / ``part_streams``: NCCL_IB_QPS_PER_CONNECTION's role), each part into
``segment``-byte work requests.

Per iteration (``run``), or per op of an op list (``run_ops``: several programs in flight, each
program at most once per list), steps whose dependencies are done start at once.

* SEND: each part's work requests are queued on its lane; at most ``window`` are in flight per
  queue pair, the next is posted as one completes. Mode ``write_imm``: RDMA WRITE WITH IMMEDIATE
  straight into the receiver's scratch slot for that step (address from the exchange); mode
  ``send``: SEND WITH IMMEDIATE into one of the receiver's posted bounce slots, which it copies
  into scratch. A SEND step is done when all its work requests have completed.
* RECV: done when it has started and every segment of every part has arrived (the immediate
  names the receiver's step; RC keeps one queue pair's segments in order).
* Credits: a rank writes a peer's scratch in iteration k > 0 only after that peer said
  "ready for k" (``imm_ready``), which it sends when its iteration k-1 is over.
* A work completion with an error status fails the run naming the peer and the verbs status.

No silent hang: an empty completion queue is polled a few times, then the rank sleeps in
growing slices (``Backoff``: never a pure busy-wait), or, with ``events``, on the completion
channel; every wait is bounded by the run's timeout, and a *stall watchdog* fails the run when
no completion has come for ``stall_s`` (at most the run's timeout) while work is outstanding,
naming each stuck queue pair (its qp_num), the peer and the work requests outstanding there.
(A peer in an op list's compute gap sends nothing: ``stall_s`` below the longest gap would name
it; the default, the run's timeout, never fires before the timeout would.)
"""

from __future__ import annotations

import heapq
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from genie.collectives.connections import part_streams, split_parts
from genie.collectives.program import Op
from genie.errors import TransportError
from genie.wire.messages import Go, OpItem, RankResult, RdmaOptions
from genie_agent.clock import sleep_until
from genie_agent.dataplane.rdma_conn import (
    IMM_ITER_MASK,
    decode_imm,
    imm_data,
    imm_ready,
    scratch_bases,
    segments,
    wc_status_name,
)
from genie_agent.dataplane.steps import local_step, pattern_fill, run_iterations, wait_for_start
from genie_agent.oplist import dependents, due_ns, waits
from genie_agent.plan import RankPlan

RECV_FLAG = 1 << 63
POLL_BATCH = 32
SPIN_POLLS = 64  # empty polls before the first sleep
SLEEP_MIN_S = 20e-6  # first sleep of an idle rank, doubled up to SLEEP_MAX_S
SLEEP_MAX_S = 1e-3
MIN_PART = 65536  # a step is cut across a connection's queue pairs in parts at least this big
Link = tuple[int, int]  # (peer global rank, lane): one queue pair


@dataclass
class Region:
    """A registered memory region and a numpy view of its bytes."""

    view: np.ndarray
    addr: int
    lkey: int
    rkey: int
    handle: object = None  # the verbs MR that keeps it registered


@dataclass(frozen=True)
class Completion:
    """One work completion, as the executor needs it."""

    wr_id: int
    status: int  # 0: success (enum ibv_wc_status)
    recv: bool
    imm: int
    byte_len: int
    vendor_err: int = 0


class RankVerbs(Protocol):
    """The verbs operations one rank's executor uses (pyverbs in production)."""

    def region(self, nbytes: int) -> Region:
        """Allocate and register ``nbytes`` (local write and remote write access)."""
        ...

    def post_write_imm(
        self, link: Link, wr_id: int, src: Region, off: int, n: int, raddr: int, imm: int
    ) -> None:
        """RDMA WRITE WITH IMMEDIATE of src[off:off+n] to the peer's ``raddr``."""
        ...

    def post_send_imm(
        self, link: Link, wr_id: int, src: Region | None, off: int, n: int, imm: int
    ) -> None:
        """SEND WITH IMMEDIATE of src[off:off+n] (no data when ``src`` is None)."""
        ...

    def post_recv(self, link: Link, wr_id: int, dst: Region | None, off: int, n: int) -> None:
        """Post a receive into dst[off:off+n] (no buffer when ``dst`` is None)."""
        ...

    def poll(self, n: int) -> list[Completion]:
        """Up to ``n`` completions of this rank's CQ (never blocks)."""
        ...

    def wait(self, timeout_s: float) -> None:
        """Block until a completion may be there (events mode), at most ``timeout_s``."""
        ...

    def qpn(self, link: Link) -> int:
        """The qp_num of the queue pair of ``link`` (negative: a modelled link, no QP)."""
        ...


def rank_peers(plans: dict[int, RankPlan]) -> list[int]:
    """The global ranks one rank's programs exchange steps with (their queue pairs)."""
    return sorted({q for pl in plans.values() for q in pl.peer_global if q >= 0})


def recv_depth(opts: RdmaOptions) -> int:
    """Receives a rank keeps posted per queue pair."""
    return opts.window + 4


def qp_layout(channels: int, qps: int) -> int:
    """Queue pairs per rank pair: ``qps`` per connection, one connection per channel."""
    return max(1, channels) * max(1, qps)


def rank_links(peers: Sequence[int], lanes: int) -> list[Link]:
    """Every queue pair of a rank: (peer, lane) for each peer and lane."""
    return [(q, k) for q in peers for k in range(lanes)]


def step_lanes(
    nbytes: int, seq: int, first: int, qps: int, segment: int, min_part: int = MIN_PART
) -> list[tuple[int, list[tuple[int, int]]]]:
    """Where a step's bytes go: per part, (lane, its (offset, length) work requests).

    The step is cut into parts over its connection's ``qps`` lanes from ``first`` as the TCP
    plane cuts a message over streams: part k on lane k, a message sent whole on lane
    ``seq % qps``; each part is cut into ``segment``-byte work requests (offsets from the
    step's start).
    """
    parts = split_parts(nbytes, qps, min_part)
    lanes = part_streams(len(parts), qps, max(0, seq))
    return [
        (first + lane, [(po + o, ln) for o, ln in segments(plen, segment)])
        for (po, plen), lane in zip(parts, lanes, strict=True)
    ]


class Backoff:
    """Waiting for completions without a busy-wait: spin a few polls, then sleep, growing."""

    def __init__(self) -> None:
        self.empty = 0
        self.sleep_s = SLEEP_MIN_S

    def reset(self) -> None:
        """A completion came: poll hot again."""
        self.empty = 0
        self.sleep_s = SLEEP_MIN_S

    def idle(self, limit_s: float) -> None:
        """An empty poll: return at once while spinning, else sleep (never past ``limit_s``)."""
        self.empty += 1
        if self.empty <= SPIN_POLLS:
            return
        time.sleep(max(0.0, min(self.sleep_s, limit_s)))
        self.sleep_s = min(SLEEP_MAX_S, self.sleep_s * 2)


@dataclass(eq=False)
class _Run:
    """One run of a program on this rank: an iteration of a Go, or an op of an op list."""

    prog: int
    plan: RankPlan
    it: int  # the iteration (0 for an op)
    bits: int  # what its immediates carry beside the step: iteration or program low bits
    pending: list[int]
    left: list[int]  # work requests (SEND) or segments (RECV) still to complete
    got: dict[tuple[int, int], int]  # (RECV step, lane) -> segments arrived
    st_start: list[int]
    st_end: list[int]
    remaining: int
    started: list[bool] = field(default_factory=list)
    on_done: Callable[[_Run], None] | None = None
    op: int = -1


class RdmaRankExecutor:
    """Runs one rank's programs over its queue pairs; one instance per rank."""

    def __init__(
        self,
        rank: int,
        verbs: RankVerbs,
        plans: dict[int, RankPlan],
        opts: RdmaOptions,
        verify: bool,
        abort: threading.Event,
        channels: int = 1,
        program_channels: Sequence[int] = (),
        min_part: int = MIN_PART,
    ) -> None:
        self.rank = rank
        self.v = verbs
        self.plans = plans
        self.opts = opts
        self.verify = verify
        self.abort = abort
        self.bases = scratch_bases(plans)
        self.peers = rank_peers(plans)
        self.lanes = qp_layout(channels, opts.qps)
        self.links = rank_links(self.peers, self.lanes)
        self.buffers: dict[int, Region] = {}
        self.scratch: Region | None = None
        self.bounce: dict[Link, Region] = {}
        self.targets: dict[tuple[int, int], tuple[int, int]] = {}  # (prog, step) -> (pstep, addr)
        self.recv_depth = recv_depth(opts)
        qps = max(1, opts.qps)
        self.first_lane = {
            p: (program_channels[p] if p < len(program_channels) else 0) * qps for p in plans
        }
        # per program and step: [(lane, [(offset, length), ...]) per part]
        self.work = {
            p: [
                step_lanes(st.nbytes, plan.seq[i], self.first_lane[p], qps, opts.segment, min_part)
                if st.op in (Op.SEND, Op.RECV)
                else []
                for i, st in enumerate(plan.steps)
            ]
            for p, plan in plans.items()
        }
        # per program, RECV step -> lane -> its segments in arrival order
        self.expect = {
            p: {i: dict(parts) for i, parts in enumerate(w) if plans[p].steps[i].op == Op.RECV}
            for p, w in self.work.items()
        }
        self.bytes_sent = self.bytes_received = self.verified = 0
        self._wr = 0
        self._sends: dict[int, tuple[Link, _Run | None, int]] = {}  # wr -> (link, run, step)
        # (peer, credit key) -> the use it may write: the key is the program's low bits in an
        # op list, 0 in a Go of one program (whose credits thus encode as before op lists)
        self.ready_for: dict[tuple[int, int], int] = {}
        self.inflight: dict[Link, int] = dict.fromkeys(self.links, 0)
        self.queues: dict[Link, deque] = {ln: deque() for ln in self.links}
        self.backoff = Backoff()
        self.last_progress = 0  # monotonic ns of the last completion (the watchdog's clock)
        self.polls = 0  # polls of the CQ (a busy-wait would make millions)
        self._waiting: list[tuple[_Run, int]] = []  # the running RECV steps (for the watchdog)
        self._bound_s = 0.0  # the watchdog's bound in the current loop
        self._timeout_s = 0.0  # the run's timeout in the current loop

    # ---- memory ---------------------------------------------------------------------------
    def scratch_region(self) -> Region:
        """The scratch region every peer writes into (TransportError before ``allocate``)."""
        if self.scratch is None:
            raise TransportError(f"rank {self.rank}: RDMA buffers used before they were allocated")
        return self.scratch

    def scratch_bytes(self) -> int:
        """Bytes of the scratch region every peer writes into."""
        return sum(pl.scratch_bytes for pl in self.plans.values())

    def needed_bytes(self) -> int:
        """Bytes ``allocate`` registers: every program's buffer, the scratch, bounce slots."""
        bounce = len(self.links) * self.recv_depth * self.opts.segment
        return (
            sum(max(1, pl.buffer_bytes) for pl in self.plans.values())
            + max(1, self.scratch_bytes())
            + (bounce if self.opts.mode == "send" else 0)
        )

    def allocate(self) -> int:
        """Register and pattern-fill buffers, the scratch region and (send mode) bounce slots."""
        total = 0
        for p, plan in self.plans.items():
            r = self.v.region(max(1, plan.buffer_bytes))
            pattern_fill(r.view[: plan.buffer_bytes], self.rank)
            self.buffers[p] = r
            total += plan.buffer_bytes
        self.scratch = self.v.region(max(1, self.scratch_bytes()))
        self.scratch.view[:] = 0
        total += self.scratch_bytes()
        if self.opts.mode == "send":
            for link in self.links:
                self.bounce[link] = self.v.region(self.recv_depth * self.opts.segment)
                total += self.recv_depth * self.opts.segment
        return total

    def post_receives(self) -> None:
        """Fill every queue pair's receive queue (once, after the QPs reach RTR)."""
        for link in self.links:
            for slot in range(self.recv_depth):
                self._post_recv(link, slot)

    def _post_recv(self, link: Link, slot: int) -> None:
        q, lane = link
        wr = RECV_FLAG | (lane << 40) | (q << 16) | slot
        if self.opts.mode == "send":
            seg = self.opts.segment
            self.v.post_recv(link, wr, self.bounce[link], slot * seg, seg)
        else:
            self.v.post_recv(link, wr, None, 0, 0)

    # ---- runs -----------------------------------------------------------------------------
    def _new_run(self, prog: int, it: int, bits: int, st_start: list[int], st_end: list[int]):
        plan = self.plans[prog]
        n = len(plan.steps)
        left = [
            sum(len(s) for _, s in self.work[prog][i]) if st.op in (Op.SEND, Op.RECV) else 0
            for i, st in enumerate(plan.steps)
        ]
        return _Run(
            prog, plan, it, bits, list(plan.n_deps), left, {}, st_start, st_end, n, [False] * n
        )

    def _complete(self, run: _Run, i: int, ready: deque) -> None:
        run.st_end[i] = time.monotonic_ns()
        run.remaining -= 1
        for d in run.plan.dependents[i]:
            run.pending[d] -= 1
            if run.pending[d] == 0:
                ready.append((run, d))
        if run.remaining == 0 and run.on_done is not None:
            run.on_done(run)

    def _start(self, run: _Run, i: int, ready: deque) -> None:
        plan, prog = run.plan, run.prog
        st = plan.steps[i]
        run.st_start[i] = time.monotonic_ns()
        run.started[i] = True
        if st.op == Op.SEND:
            q = plan.peer_global[i]
            pstep, raddr = self.targets[(prog, i)]
            imm = imm_data(pstep, run.bits)
            for lane, segs in self.work[prog][i]:
                qu = self.queues[(q, lane)]
                for off, ln in segs:
                    qu.append((run, i, st.offset + off, ln, raddr + off, imm))
            self.bytes_sent += st.nbytes
            for lane, _ in self.work[prog][i]:
                self._pump((q, lane))
        elif st.op == Op.RECV:
            if run.left[i] == 0:
                self._complete(run, i, ready)
        else:
            so = self.bases[prog] + plan.scratch_offset[st.src]
            local_step(st, self.buffers[prog].view, self.scratch_region().view, so)
            self._complete(run, i, ready)

    def _pump(self, link: Link) -> None:
        """Post queued work requests on ``link`` while its window and the peer's credit allow."""
        qu = self.queues[link]
        window = self.opts.window
        send_mode = self.opts.mode == "send"
        while qu and self.inflight[link] < window:
            run, i, off, ln, raddr, imm = qu[0]
            if run.it and self.ready_for.get((link[0], self._key(run)), 0) < run.it:
                return
            qu.popleft()
            wr = self._next_wr(link, run, i)
            src = self.buffers[run.prog]
            if send_mode:
                self.v.post_send_imm(link, wr, src, off, ln, imm)
            else:
                self.v.post_write_imm(link, wr, src, off, ln, raddr, imm)

    def _on_recv(self, c: Completion, find: Callable[[int, int], _Run], ready: deque) -> None:
        q, lane, slot = (c.wr_id >> 16) & 0xFFFFFF, (c.wr_id >> 40) & 0xFFFF, c.wr_id & 0xFFFF
        link = (q, lane)
        kind, hit, i = decode_imm(c.imm)
        if kind == "ready":  # hit: the program's low bits, i: the use it may write
            key = (q, hit)
            self.ready_for[key] = max(self.ready_for.get(key, 0), i)
            self._post_recv(link, slot)
            for k in range(self.lanes):
                self._pump((q, k))
            return
        run = find(hit, i)
        plan = run.plan
        segs = self.expect[run.prog].get(i, {}).get(lane)
        k = run.got.get((i, lane), 0)
        if segs is None or plan.peer_global[i] != q or k >= len(segs):
            raise TransportError(
                f"rank {self.rank}: unexpected data from rank {q} on lane {lane} (step {i}, "
                f"immediate bits {hit}) in iteration {run.it} of program {run.prog}"
            )
        off, ln = segs[k]
        if c.byte_len != ln:
            raise TransportError(
                f"rank {self.rank}: {c.byte_len} bytes from rank {q} for step {i} "
                f"lane {lane} segment {k}, expected {ln}"
            )
        if self.opts.mode == "send":
            dst = self.bases[run.prog] + plan.scratch_offset[i] + off
            seg = self.opts.segment
            scratch = self.scratch_region().view
            scratch[dst : dst + ln] = self.bounce[link].view[slot * seg : slot * seg + ln]
        self._post_recv(link, slot)
        run.got[(i, lane)] = k + 1
        self.verified += 1
        self.bytes_received += ln
        run.left[i] -= 1
        if run.left[i] == 0 and run.started[i]:
            self._complete(run, i, ready)

    def _on_send(self, c: Completion, ready: deque) -> None:
        link, run, i = self._sends.pop(c.wr_id, ((-1, -1), None, -1))
        if link[0] < 0:
            raise TransportError(f"rank {self.rank}: completion of unknown work request")
        self.inflight[link] -= 1
        if run is not None and i >= 0:
            run.left[i] -= 1
            if run.left[i] == 0:
                self._complete(run, i, ready)
        self._pump(link)

    # ---- the completion loop (bounded, watched) ---------------------------------------------
    def stall_bound_s(self, go: Go) -> float:
        """Seconds without a completion after which the watchdog fails the run (<= timeout)."""
        s = self.opts.stall_s
        return min(s, go.timeout_s) if s > 0 else go.timeout_s

    def _loop(
        self,
        go: Go,
        deadline: int,
        ready: deque,
        done: Callable[[], bool],
        find: Callable[[int, int], _Run],
        what: Callable[[], str],
        tick: Callable[[int], int] | None = None,
    ) -> None:
        """Start ready steps and dispatch completions until ``done()``; raise at the deadline
        or when the stall watchdog fires. ``tick(now)`` starts what is due, returns the next
        due time (0: none)."""
        self._bound_s = self.stall_bound_s(go)
        self._timeout_s = go.timeout_s
        stall_ns = int(self._bound_s * 1e9)
        self.last_progress = time.monotonic_ns()
        self.backoff.reset()
        while True:
            due = tick(time.monotonic_ns()) if tick is not None else 0
            while ready:
                run, i = ready.popleft()
                self._start(run, i, ready)
            if done():
                return
            if self.abort.is_set():
                raise TransportError(f"rank {self.rank}: aborted")
            self.polls += 1
            cs = self.v.poll(POLL_BATCH)
            if cs:
                self.backoff.reset()
                self.last_progress = time.monotonic_ns()
                for c in cs:
                    self._check(c)
                    if c.recv:
                        self._on_recv(c, find, ready)
                    else:
                        self._on_send(c, ready)
                continue
            now = time.monotonic_ns()
            if now - self.last_progress >= stall_ns and self._outstanding():
                raise TransportError(self.stall_report(now, what(), "stalled"))
            if now >= deadline:
                raise TransportError(self.stall_report(now, what(), "timed out"))
            limit = min(deadline, self.last_progress + stall_ns) - now
            if due:
                limit = min(limit, max(0, due - now))
            if self.opts.events and not due:
                self.v.wait(max(0.0, limit / 1e9))  # bounded: may flush the QPs at the bound
                if self.abort.is_set():  # another rank failed and flushed us awake
                    raise TransportError(f"rank {self.rank}: aborted")
                now = time.monotonic_ns()
                if now - self.last_progress >= stall_ns and self._outstanding():
                    raise TransportError(self.stall_report(now, what(), "stalled"))
                if now >= deadline:
                    raise TransportError(self.stall_report(now, what(), "timed out"))
            else:
                self.backoff.idle(limit / 1e9)

    def _outstanding(self) -> bool:
        return (
            any(self.inflight.values())
            or any(self.queues.values())
            or any(run.left[i] for run, i in self._waiting)
        )

    def stall_report(self, now: int, what: str, why: str) -> str:
        """One line: which queue pairs hold work, to whom, what is outstanding and waited for."""
        idle = (now - self.last_progress) / 1e9
        parts = []
        for link in self.links:
            n, qd = self.inflight[link], len(self.queues[link])
            wait = [
                f"{run.left[i]} segments of recv {i}"
                for run, i in self._waiting
                if run.left[i] and link[1] in self.expect[run.prog].get(i, {})
                and run.plan.peer_global[i] == link[0]
            ]  # fmt: skip
            head = self.queues[link][0][0] if qd else None
            credit = head is not None and head.it > self.ready_for.get(
                (link[0], self._key(head)), 0
            )
            if not (n or qd or wait):
                continue
            bits = []
            if n or qd:
                bits.append(f"{n} work requests outstanding, {qd} queued")
            if credit and head is not None:
                bits.append(f"waiting for its credit for use {head.it} of program {head.prog}")
            if wait:
                bits.append("waiting for " + ", ".join(wait))
            parts.append(f"{self._qp(link)} to rank {link[0]} (lane {link[1]}): {'; '.join(bits)}")
        shown = " | ".join(parts[:4]) + (f" | {len(parts) - 4} more QPs" if len(parts) > 4 else "")
        if why == "stalled":
            head = (
                f"stalled: no work completion for {idle:.3g} s in {what} "
                f"(stall bound {self._bound_s:.3g} s)"
            )
        else:
            head = f"{what} timed out after {self._timeout_s:.3g} s"
        return f"rank {self.rank}: {head}: {shown or 'nothing outstanding'}"

    def _qp(self, link: Link) -> str:
        """ "QP 0x1a2" by its qp_num, or "intra-host link" for a modelled one."""
        try:
            n = self.v.qpn(link)
        except Exception:  # naming must never hide the stall itself
            return "QP ?"
        return "intra-host link" if n < 0 else f"QP {n:#x}"

    # ---- one Go of one program ----------------------------------------------------------------
    def run(self, go: Go, start_local_ns: int) -> RankResult:
        """Run warmup+iters iterations of ``go.program`` from ``start_local_ns``."""
        plan = self.plans[go.program]
        total = go.iters + go.warmup
        self.bytes_sent = self.bytes_received = self.verified = 0
        self.ready_for = {}  # iteration 0 of a Go needs no credit
        starts, ends, sst, sen = run_iterations(
            go,
            self.abort,
            self.rank,
            len(plan.steps),
            start_local_ns,
            lambda it, st_start, st_end: self._iteration(go, it, total, st_start, st_end),
        )
        self._drain(go.timeout_s)
        buf = self.buffers[go.program].view[: plan.buffer_bytes]
        return RankResult(
            rank=self.rank,
            buffer_crc=zlib.crc32(buf.data) if self.verify else -1,
            start=starts,
            end=ends,
            step_start=sst,
            step_end=sen,
            bytes_sent=self.bytes_sent,
            bytes_received=self.bytes_received,
            messages_verified=self.verified,
        )

    def _iteration(
        self, go: Go, it: int, total: int, st_start: list[int], st_end: list[int]
    ) -> Generator[None, int, None]:
        """Set an iteration up, yield once (start time), then run it to the end."""
        prog = go.program
        run = self._new_run(prog, it, it & IMM_ITER_MASK, st_start, st_end)
        plan = run.plan
        n = len(plan.steps)
        ready: deque = deque((run, i) for i in range(n) if run.pending[i] == 0)
        senders = {plan.peer_global[i] for i, st in enumerate(plan.steps) if st.op == Op.RECV}
        recvs = [i for i, st in enumerate(plan.steps) if st.op == Op.RECV]

        def find(hit: int, i: int) -> _Run:
            if hit != run.bits or not 0 <= i < n:
                raise TransportError(
                    f"rank {self.rank}: unexpected data (step {i}, iteration bits {hit}) in "
                    f"iteration {it} of program {prog}"
                )
            return run

        def what() -> str:
            self._waiting = [(run, i) for i in recvs if run.started[i] and run.left[i]]
            waiting = [i for i in range(n) if st_end[i] == 0]
            desc = ", ".join(
                f"{plan.steps[i].op.name.lower()} {i} peer {plan.peer_global[i]}"
                for i in waiting[:6]
            )
            return f"iteration {it} of program {prog} ({len(waiting)} steps unfinished: {desc})"

        yield
        deadline = time.monotonic_ns() + int(go.timeout_s * 1e9)
        self._waiting = [(run, i) for i in recvs]
        for link in self.links:
            self._pump(link)
        self._loop(go, deadline, ready, lambda: run.remaining == 0, find, what)
        self._waiting = []
        if it + 1 < total:  # our scratch is free again: tell every sender it may write
            self._credit(prog, senders, it + 1, 0)

    def _credit(self, prog: int, senders: set[int], use: int, key: int) -> None:
        """Tell every rank that sends to us in ``prog`` that it may write its use ``use``."""
        first = self.first_lane[prog]
        for q in sorted(senders):
            link = (q, first)
            self.v.post_send_imm(
                link, self._next_wr(link, None, -1), None, 0, 0, imm_ready(use, key)
            )

    @staticmethod
    def _key(run: _Run) -> int:
        """The credit key of ``run``'s program (see ``ready_for``)."""
        return run.prog & IMM_ITER_MASK if run.op >= 0 else 0

    # ---- an op list (several programs in flight) -------------------------------------------------
    def run_ops(self, go: Go, ops: list[OpItem], start_local_ns: int) -> RankResult:
        """Run this rank's op list once: ops start when deps and gaps allow, several in flight
        (each on its program's channel); start/end of the result are per op.

        A program's buffers and landing slots are registered once, so the ops of one program
        run one after another on a rank (the n-th waits for the (n-1)-th), and a peer writes
        its n-th use only after this rank's credit for it; the ops of one program between two
        ranks come in the same order in both lists (a process group's issue order).
        """
        progs = [op.program for op in ops]
        if len({p & IMM_ITER_MASK for p in progs}) != len(set(progs)):
            raise TransportError(
                f"rank {self.rank}: over RDMA an op list takes at most {IMM_ITER_MASK + 1} "
                f"programs whose numbers differ in their low 10 bits"
            )
        self.bytes_sent = self.bytes_received = self.verified = 0
        self.ready_for = {}
        n_ops = len(ops)
        op_start, op_end, op_crc = [0] * n_ops, [0] * n_ops, [0] * n_ops
        op_pending = [waits(op) for op in ops]
        op_after = dependents(ops)
        uses = [0] * n_ops  # the n-th op of its program on this rank
        nxt = [-1] * n_ops  # the next op of the same program
        last: dict[int, int] = {}
        current: dict[int, deque[int]] = {}  # program bits -> its ops not yet ended, in order
        for j, p in enumerate(progs):
            current.setdefault(p & IMM_ITER_MASK, deque()).append(j)
            if p in last:
                k = last[p]
                uses[j], nxt[k] = uses[k] + 1, j
                op_pending[j] += 1  # after the previous op of its program
                op_after[k].append(j)
            last[p] = j
        senders = {
            p: {pl.peer_global[i] for i, st in enumerate(pl.steps) if st.op == Op.RECV}
            for p in set(progs)
            for pl in (self.plans[p],)
        }
        runs: dict[int, _Run] = {}
        timers: list[tuple[int, int]] = []
        ready: deque = deque()
        left = [n_ops]

        def op_done(run: _Run) -> None:
            j = run.op
            op_end[j] = time.monotonic_ns()
            left[0] -= 1
            current[run.prog & IMM_ITER_MASK].popleft()
            runs.pop(j, None)
            if self.verify:
                pl = run.plan
                op_crc[j] = zlib.crc32(self.buffers[run.prog].view[: pl.buffer_bytes].data)
            if nxt[j] >= 0:  # our slots of this program are free for its next use
                self._credit(run.prog, senders[run.prog], uses[j] + 1, self._key(run))
            for k in op_after[j]:
                op_pending[k] -= 1
                if op_pending[k] == 0:
                    heapq.heappush(timers, (due_ns(ops[k], op_end, start_local_ns), k))

        def state(j: int) -> _Run:
            run = runs.get(j)
            if run is None:
                p = progs[j]
                n = len(self.plans[p].steps)
                if uses[j] and self.verify:  # the working buffer afresh, as on TCP
                    pattern_fill(self.buffers[p].view[: self.plans[p].buffer_bytes], self.rank)
                run = runs[j] = self._new_run(p, uses[j], p & IMM_ITER_MASK, [0] * n, [0] * n)
                run.op, run.on_done = j, op_done
            return run

        def find(hit: int, i: int) -> _Run:
            cur = current.get(hit)
            j = cur[0] if cur else -1
            if j < 0 or not 0 <= i < len(self.plans[progs[j]].steps):
                raise TransportError(
                    f"rank {self.rank}: data for program bits {hit} step {i}, which is not a "
                    f"running op of this rank's list"
                )
            return state(j)

        def tick(now: int) -> int:
            while timers and timers[0][0] <= now:
                j = heapq.heappop(timers)[1]
                op_start[j] = time.monotonic_ns()
                run = state(j)
                if run.remaining == 0:
                    op_done(run)
                    continue
                ready.extend((run, i) for i in range(len(run.plan.steps)) if run.pending[i] == 0)
                self._waiting += [
                    (run, i) for i, st in enumerate(run.plan.steps) if st.op == Op.RECV
                ]
            return timers[0][0] if timers else 0

        def what() -> str:
            self._waiting = [
                (r, i) for r in runs.values() for i in range(len(r.plan.steps))
                if r.started[i] and r.left[i] and r.plan.steps[i].op == Op.RECV
            ]  # fmt: skip
            waiting = [j for j in range(n_ops) if op_end[j] == 0]
            first = waiting[0] if waiting else -1
            return (
                f"the op list ({len(waiting)} of {n_ops} ops unfinished, first: op {first}, "
                f"{'started' if first >= 0 and op_start[first] else 'not started'})"
            )

        wait_for_start(self.abort, self.rank, start_local_ns, go.spin_ns)
        for j, op in enumerate(ops):
            if op_pending[j] == 0:
                heapq.heappush(timers, (start_local_ns + op.gap_ns, j))
        sleep_until(start_local_ns, go.spin_ns)
        self._waiting = []
        deadline = time.monotonic_ns() + int(go.timeout_s * 1e9)
        self._loop(go, deadline, ready, lambda: left[0] == 0, find, what, tick)
        self._waiting = []
        self._drain(go.timeout_s)
        crc = 0
        for c in op_crc:
            crc = zlib.crc32(c.to_bytes(4, "little"), crc)
        return RankResult(
            rank=self.rank,
            buffer_crc=crc if self.verify else -1,
            start=op_start,
            end=op_end,
            bytes_sent=self.bytes_sent,
            bytes_received=self.bytes_received,
            messages_verified=self.verified,
        )

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _next_wr(self, link: Link, run: _Run | None, step: int) -> int:
        self._wr += 1
        self._sends[self._wr] = (link, run, step)
        self.inflight[link] += 1
        return self._wr

    def _check(self, c: Completion) -> None:
        if c.status == 0:
            return
        if c.recv:
            link = ((c.wr_id >> 16) & 0xFFFFFF, (c.wr_id >> 40) & 0xFFFF)
            what = "receive from"
        else:
            link = self._sends.get(c.wr_id, ((-1, -1), None, -1))[0]
            what = "work request to"
        raise TransportError(
            f"rank {self.rank}: {what} rank {link[0]} failed on {self._qp(link)}: "
            f"{wc_status_name(c.status)} (verbs status {c.status}, vendor error "
            f"{c.vendor_err:#x})"
        )

    def _drain(self, timeout_s: float) -> None:
        """Wait for the completions of credits still in flight (so a Go ends with none)."""
        deadline = time.monotonic() + min(timeout_s, 5.0)
        backoff = Backoff()
        while any(self.inflight.values()) and time.monotonic() < deadline:
            cs = self.v.poll(POLL_BATCH)
            if not cs:
                backoff.idle(deadline - time.monotonic())
                continue
            backoff.reset()
            for c in cs:
                self._check(c)
                if not c.recv:
                    link, _, _ = self._sends.pop(c.wr_id, ((-1, -1), None, -1))
                    if link[0] >= 0:
                        self.inflight[link] -= 1
                else:  # a receive here can only be a credit for a later Go: none are sent
                    raise TransportError(f"rank {self.rank}: data after the last iteration")

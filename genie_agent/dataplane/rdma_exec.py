"""The RDMA rank executor: runs one rank's step programs over queue pairs, one per peer.

It talks to verbs only through ``RankVerbs`` (post a write/send/receive, poll, wait), which
``genie_agent.dataplane.rdma`` implements with pyverbs; so this logic is the same whatever provider
is underneath (a ConnectX NIC, soft-RoCE), and needs no pyverbs to import.

Per iteration, like the TCP executor: steps whose dependencies are done start at once.

* SEND: the step is cut into ``segment``-byte work requests (``segments``) queued on the peer's
  queue pair; at most ``window`` are in flight per queue pair, the next is posted as one
  completes. Mode ``write_imm``: RDMA WRITE WITH IMMEDIATE straight into the receiver's scratch
  slot for that step (address from the exchange); mode ``send``: SEND WITH IMMEDIATE into one
  of the receiver's posted bounce slots, which it copies into scratch. A SEND step is done when
  all its work requests have completed (the peer acknowledged them).
* RECV: done when it has started and every segment's immediate has arrived (the immediate
  names the receiver's step; RC keeps a queue pair's segments in order).
* Credits: a rank writes a peer's scratch in iteration k > 0 only after that peer said
  "ready for k" (``imm_ready``), which it sends when its iteration k-1 is over; so a fast
  sender never overwrites scratch a slow receiver is still reducing.
* A work completion with an error status fails the run naming the peer and the verbs status.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from genie.collectives.program import Op
from genie.errors import TransportError
from genie.wire.messages import Go, RankResult, RdmaOptions
from genie_agent.dataplane.rdma_conn import (
    IMM_ITER_MASK,
    decode_imm,
    imm_data,
    imm_ready,
    scratch_bases,
    segments,
    wc_status_name,
)
from genie_agent.dataplane.steps import local_step, pattern_fill, run_iterations
from genie_agent.plan import RankPlan

RECV_FLAG = 1 << 63
POLL_BATCH = 32


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
        self, peer: int, wr_id: int, src: Region, off: int, n: int, raddr: int, imm: int
    ) -> None:
        """RDMA WRITE WITH IMMEDIATE of src[off:off+n] to the peer's ``raddr``."""
        ...

    def post_send_imm(self, peer: int, wr_id: int, src: Region | None, off: int, n: int, imm: int):
        """SEND WITH IMMEDIATE of src[off:off+n] (no data when ``src`` is None)."""
        ...

    def post_recv(self, peer: int, wr_id: int, dst: Region | None, off: int, n: int) -> None:
        """Post a receive into dst[off:off+n] (no buffer when ``dst`` is None)."""
        ...

    def poll(self, n: int) -> list[Completion]:
        """Up to ``n`` completions of this rank's CQ (never blocks)."""
        ...

    def wait(self, timeout_s: float) -> None:
        """Block until a completion may be there (events mode) or ``timeout_s`` passes."""
        ...


def rank_peers(plans: dict[int, RankPlan]) -> list[int]:
    """The global ranks one rank's programs exchange steps with (one queue pair each)."""
    return sorted({q for pl in plans.values() for q in pl.peer_global if q >= 0})


def recv_depth(opts: RdmaOptions) -> int:
    """Receives a rank keeps posted per queue pair."""
    return opts.window + 4


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
    ) -> None:
        self.rank = rank
        self.v = verbs
        self.plans = plans
        self.opts = opts
        self.verify = verify
        self.abort = abort
        self.bases = scratch_bases(plans)
        self.peers = rank_peers(plans)
        self.buffers: dict[int, Region] = {}
        self.scratch: Region | None = None
        self.bounce: dict[int, Region] = {}
        self.targets: dict[tuple[int, int], tuple[int, int]] = {}  # (prog, step) -> (pstep, addr)
        self.recv_depth = recv_depth(opts)
        self.segs = {
            p: [segments(st.nbytes, opts.segment) for st in plan.steps] for p, plan in plans.items()
        }
        self.bytes_sent = self.bytes_received = self.verified = 0
        self._wr = 0
        self._sends: dict[int, tuple[int, int]] = {}  # wr_id -> (peer, step or -1 for a credit)
        self.ready_for: dict[int, int] = dict.fromkeys(self.peers, 0)
        self.inflight: dict[int, int] = dict.fromkeys(self.peers, 0)

    # ---- memory ---------------------------------------------------------------------------
    def scratch_region(self) -> Region:
        """The scratch region every peer writes into (TransportError before ``allocate``)."""
        if self.scratch is None:
            raise TransportError(f"rank {self.rank}: RDMA buffers used before they were allocated")
        return self.scratch

    def scratch_bytes(self) -> int:
        """Bytes of the scratch region every peer writes into."""
        return sum(pl.scratch_bytes for pl in self.plans.values())

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
            for q in self.peers:
                self.bounce[q] = self.v.region(self.recv_depth * self.opts.segment)
                total += self.recv_depth * self.opts.segment
        return total

    def post_receives(self) -> None:
        """Fill every queue pair's receive queue (once, after the QPs reach RTR)."""
        for q in self.peers:
            for slot in range(self.recv_depth):
                self._post_recv(q, slot)

    def _post_recv(self, q: int, slot: int) -> None:
        wr = RECV_FLAG | (q << 16) | slot
        if self.opts.mode == "send":
            seg = self.opts.segment
            self.v.post_recv(q, wr, self.bounce[q], slot * seg, seg)
        else:
            self.v.post_recv(q, wr, None, 0, 0)

    # ---- one run ----------------------------------------------------------------------------
    def run(self, go: Go, start_local_ns: int) -> RankResult:
        """Run warmup+iters iterations of ``go.program`` from ``start_local_ns``."""
        plan = self.plans[go.program]
        total = go.iters + go.warmup
        self.bytes_sent = self.bytes_received = self.verified = 0
        self.ready_for = dict.fromkeys(self.peers, 0)  # iteration 0 of a Go needs no credit
        starts, ends, sst, sen = run_iterations(
            go,
            self.abort,
            self.rank,
            len(plan.steps),
            start_local_ns,
            lambda it, st_start, st_end: self._iteration(go, plan, it, total, st_start, st_end),
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
        self, go: Go, plan: RankPlan, it: int, total: int, st_start: list[int], st_end: list[int]
    ) -> Generator[None, int, None]:
        """Set an iteration up, yield once (start time), then run it to the end."""
        steps = plan.steps
        n = len(steps)
        prog = go.program
        segs = self.segs[prog]
        pending = list(plan.n_deps)
        started = [False] * n
        left = [len(segs[i]) if st.op in (Op.SEND, Op.RECV) else 0 for i, st in enumerate(steps)]
        got = [0] * n  # segments of a RECV that arrived
        remaining = n
        ready = deque(i for i in range(n) if pending[i] == 0)
        queues: dict[int, deque] = {q: deque() for q in self.peers}
        scratch = self.scratch_region()
        base = self.bases[prog]
        send_mode = self.opts.mode == "send"
        senders = {plan.peer_global[i] for i, st in enumerate(steps) if st.op == Op.RECV}

        def complete(i: int) -> None:
            nonlocal remaining
            st_end[i] = time.monotonic_ns()
            remaining -= 1
            for d in plan.dependents[i]:
                pending[d] -= 1
                if pending[d] == 0:
                    ready.append(d)

        def start(i: int) -> None:
            st = steps[i]
            st_start[i] = time.monotonic_ns()
            started[i] = True
            if st.op == Op.SEND:
                q = plan.peer_global[i]
                pstep, raddr = self.targets[(prog, i)]
                imm = imm_data(pstep, it)
                for off, ln in segs[i]:
                    queues[q].append((i, st.offset + off, ln, raddr + off, imm))
                self.bytes_sent += st.nbytes
                pump(q)
            elif st.op == Op.RECV:
                if left[i] == 0:
                    complete(i)
            else:
                so = base + plan.scratch_offset[st.src]
                local_step(st, self.buffers[prog].view, scratch.view, so)
                complete(i)

        def pump(q: int) -> None:
            """Post queued work requests to ``q`` while the window and the credit allow."""
            if self.ready_for[q] < it:
                return
            qu = queues[q]
            src = self.buffers[prog]
            while qu and self.inflight[q] < self.opts.window:
                i, off, ln, raddr, imm = qu.popleft()
                wr = self._next_wr(q, i)
                if send_mode:
                    self.v.post_send_imm(q, wr, src, off, ln, imm)
                else:
                    self.v.post_write_imm(q, wr, src, off, ln, raddr, imm)

        def on_recv(c: Completion) -> None:
            q, slot = (c.wr_id >> 16) & 0xFFFFF, c.wr_id & 0xFFFF
            kind, hit, i = decode_imm(c.imm)
            if kind == "ready":
                self.ready_for[q] = max(self.ready_for[q], hit)
                self._post_recv(q, slot)
                pump(q)
                return
            if (
                not 0 <= i < n
                or steps[i].op != Op.RECV
                or plan.peer_global[i] != q
                or hit != it & IMM_ITER_MASK
                or got[i] >= len(segs[i])
            ):
                raise TransportError(
                    f"rank {self.rank}: unexpected data from rank {q} (step {i}, iteration "
                    f"bits {hit}) in iteration {it} of program {prog}"
                )
            off, ln = segs[i][got[i]]
            if c.byte_len != ln:
                raise TransportError(
                    f"rank {self.rank}: {c.byte_len} bytes from rank {q} for step {i} "
                    f"segment {got[i]}, expected {ln}"
                )
            if send_mode:
                dst = base + plan.scratch_offset[i] + off
                seg = self.opts.segment
                scratch.view[dst : dst + ln] = self.bounce[q].view[slot * seg : slot * seg + ln]
            self._post_recv(q, slot)
            got[i] += 1
            self.verified += 1
            self.bytes_received += ln
            left[i] -= 1
            if left[i] == 0 and started[i]:
                complete(i)

        def on_send(c: Completion) -> None:
            q, i = self._sends.pop(c.wr_id, (-1, -1))
            if q < 0:
                raise TransportError(f"rank {self.rank}: completion of unknown work request")
            self.inflight[q] -= 1
            if i >= 0:
                left[i] -= 1
                if left[i] == 0:
                    complete(i)
            pump(q)

        yield
        deadline = time.monotonic_ns() + int(go.timeout_s * 1e9)
        for q in self.peers:
            pump(q)
        while True:
            while ready:
                start(ready.popleft())
            if remaining == 0:
                break
            if self.abort.is_set():
                raise TransportError(f"rank {self.rank}: aborted")
            cs = self.v.poll(POLL_BATCH)
            if not cs:
                now = time.monotonic_ns()
                if now >= deadline:
                    waiting = [i for i in range(n) if st_end[i] == 0]
                    desc = ", ".join(
                        f"{steps[i].op.name.lower()} {i} peer {plan.peer_global[i]}"
                        for i in waiting[:6]
                    )
                    raise TransportError(
                        f"rank {self.rank}: iteration {it} timed out after {go.timeout_s:.3g} s "
                        f"with {len(waiting)} steps unfinished ({desc})"
                    )
                if self.opts.events:
                    self.v.wait(min(0.05, (deadline - now) / 1e9))
                continue
            for c in cs:
                self._check(c)
                if c.recv:
                    on_recv(c)
                else:
                    on_send(c)
        if it + 1 < total:  # our scratch is free again: tell every sender it may write
            for q in sorted(senders):
                self.v.post_send_imm(q, self._next_wr(q, -1), None, 0, 0, imm_ready(it + 1))

    def _next_wr(self, q: int, step: int) -> int:
        self._wr += 1
        self._sends[self._wr] = (q, step)
        self.inflight[q] += 1
        return self._wr

    def _check(self, c: Completion) -> None:
        if c.status == 0:
            return
        if c.recv:
            q = (c.wr_id >> 16) & 0xFFFFF
            what = "receive from"
        else:
            q = self._sends.get(c.wr_id, (-1, -1))[0]
            what = "work request to"
        raise TransportError(
            f"rank {self.rank}: {what} rank {q} failed: {wc_status_name(c.status)} "
            f"(verbs status {c.status}, vendor error {c.vendor_err:#x})"
        )

    def _drain(self, timeout_s: float) -> None:
        """Wait for the completions of credits still in flight (so a Go ends with none)."""
        deadline = time.monotonic() + min(timeout_s, 5.0)
        while any(self.inflight.values()) and time.monotonic() < deadline:
            for c in self.v.poll(POLL_BATCH):
                self._check(c)
                if not c.recv:
                    q, _ = self._sends.pop(c.wr_id, (-1, -1))
                    if q >= 0:
                        self.inflight[q] -= 1
                else:  # a receive here can only be a credit for a later Go: none are sent
                    raise TransportError(f"rank {self.rank}: data after the last iteration")

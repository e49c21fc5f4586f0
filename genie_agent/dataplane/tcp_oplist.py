"""Op-list mode of the TCP rank executor: one rank runs a whole list of programs in one go.

See ``genie_agent.oplist`` for what an op list is. Each op starts when its deps and compute gap
allow (a timer heap of due times), and the steps of every started op progress together over the same
streams (``genie_agent.dataplane.tcp_engine``): frames carry their program, each program has its own
buffers, so a frame of an op that has not started yet on this rank lands in that op's scratch at
once and its RECV completes when the op starts. The result's start/end are per op.
"""

from __future__ import annotations

import heapq
import time
import zlib
from collections import deque

from genie.errors import TransportError
from genie.wire.messages import Go, OpItem, RankResult
from genie_agent.clock import sleep_until
from genie_agent.dataplane.steps import set_realtime, wait_for_start
from genie_agent.dataplane.tcp_engine import POLL_S, Peer, ProgRun, RankEngine
from genie_agent.oplist import dependents, due_ns, waits


def run_ops(ex: RankEngine, go: Go, ops: list[OpItem], start_local_ns: int) -> RankResult:
    """Run rank ``ex``'s op list once from ``start_local_ns``: ops start when their deps and
    compute gaps allow, several in flight at once; start/end of the result are per op."""
    ex.reset_counters()
    rank = ex.rank
    n_ops = len(ops)
    by_prog = {op.program: j for j, op in enumerate(ops)}
    op_start = [0] * n_ops
    op_end = [0] * n_ops
    op_pending = [waits(op) for op in ops]
    op_after = dependents(ops)
    states: dict[int, ProgRun] = {}
    timers: list[tuple[int, int]] = []
    timeout_ns = int(go.timeout_s * 1e9)
    ops_left = n_ops

    def op_done(ps: ProgRun) -> None:
        nonlocal ops_left
        j = ps.op
        op_end[j] = time.monotonic_ns()
        ops_left -= 1
        for k in op_after[j]:
            op_pending[k] -= 1
            if op_pending[k] == 0:
                heapq.heappush(timers, (due_ns(ops[k], op_end, start_local_ns), k))

    def state(p: int) -> ProgRun:
        ps = states.get(p)
        if ps is None:
            buf, scratch = ex.buffers[p]
            ps = ProgRun(p, 0, ex.plans[p], buf, scratch, ex.parts[p], op=by_prog[p])
            ps.on_done = op_done
            states[p] = ps
        return ps

    def match(s: Peer, h: tuple) -> ProgRun:
        hprog, hit, src, dst = h[0], h[1], h[2], h[3]
        if hprog not in by_prog or hit != 0 or src != s.peer or dst != rank:
            raise TransportError(
                f"rank {rank}: unexpected frame from {s.peer}: program {hprog} "
                f"iteration {hit} src {src} dst {dst} (not in this rank's op list)"
            )
        return state(hprog)

    def start_op(j: int) -> None:
        op_start[j] = time.monotonic_ns()
        ex.end_realtime()
        ps = state(ops[j].program)
        if ps.remaining == 0:
            op_done(ps)
            return
        for i in range(len(ps.plan.steps)):
            if ps.pending[i] == 0:
                ex.ready.append((ps, i))

    ex.ready = deque()
    ex.match = match
    wait_for_start(ex.abort, rank, start_local_ns, go.spin_ns)
    for j, op in enumerate(ops):
        if op_pending[j] == 0:
            heapq.heappush(timers, (start_local_ns + op.gap_ns, j))
    ex.realtime = go.rt_start and set_realtime(True)
    sleep_until(start_local_ns, go.spin_ns)
    ex.end_realtime()
    deadline = time.monotonic_ns() + timeout_ns
    while True:
        now = time.monotonic_ns()
        while timers and timers[0][0] <= now:
            start_op(heapq.heappop(timers)[1])
        ex.start_ready()
        if ops_left == 0:
            break
        if ex.abort.is_set():
            raise TransportError(f"rank {rank}: aborted")
        now = time.monotonic_ns()
        if now >= deadline:
            waiting = [j for j in range(n_ops) if op_end[j] == 0]
            raise TransportError(
                f"rank {rank}: op list timed out after {go.timeout_s:.3g} s with "
                f"{len(waiting)} of {n_ops} ops unfinished (first: op {waiting[0]}, "
                f"program {ops[waiting[0]].program}, "
                f"{'started' if op_start[waiting[0]] else 'not started'})"
            )
        wait_ns = deadline - now
        if timers:
            wait_ns = min(wait_ns, timers[0][0] - now)
        ex.poll(max(0.0, min(POLL_S, wait_ns / 1e9)))
    crc = 0
    for p in sorted(by_prog):
        crc = zlib.crc32(ex.buffers[p][0].data, crc)
    return RankResult(
        rank=rank,
        buffer_crc=crc if ex.opts.verify else -1,
        start=op_start,
        end=op_end,
        bytes_sent=ex.bytes_sent,
        bytes_received=ex.bytes_received,
        messages_verified=ex.verified,
    )

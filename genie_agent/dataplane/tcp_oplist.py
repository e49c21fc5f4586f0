"""Op-list mode of the TCP rank executor: one rank runs a whole list of programs in one go.

See ``genie_agent.oplist`` for what an op list is. Each op starts when its deps and compute gap
allow (a timer heap of due times), and the steps of every started op progress together over the
same streams (``genie_agent.dataplane.tcp_engine``). Frames carry their op's instance. An op's
buffers are taken from the rank's pool when it starts, or when a peer's first frame for it
arrives (that frame lands in the op's scratch at once and its RECV completes when the op starts),
and given back when it ends: a rank holds what its ops in flight need, whatever the length of
its list. The result's start/end are per op; with verify on, its buffer CRC combines each op's
final buffer in list order.
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
    by_key = {op.key: j for j, op in enumerate(ops)}
    op_start = [0] * n_ops
    op_end = [0] * n_ops
    op_crc = [0] * n_ops
    op_pending = [waits(op) for op in ops]
    op_after = dependents(ops)
    states: dict[int, ProgRun] = {}  # op -> its run, from its start or first frame to its end
    timers: list[tuple[int, int]] = []
    timeout_ns = int(go.timeout_s * 1e9)
    ops_left = n_ops
    verify = ex.opts.verify

    def op_done(ps: ProgRun) -> None:
        nonlocal ops_left
        j = ps.op
        op_end[j] = time.monotonic_ns()
        ops_left -= 1
        if verify:
            op_crc[j] = zlib.crc32(ps.buf.data)
        del states[j]
        ex.give_buffers(ps)
        for k in op_after[j]:
            op_pending[k] -= 1
            if op_pending[k] == 0:
                heapq.heappush(timers, (due_ns(ops[k], op_end, start_local_ns), k))

    def state(j: int) -> ProgRun:
        ps = states.get(j)
        if ps is None:
            if op_end[j]:
                raise TransportError(
                    f"rank {rank}: a frame for instance {ops[j].key} after its op {j} ended"
                )
            p = ops[j].program
            plan = ex.plans[p]
            buf, scratch = ex.take_buffers(plan)
            ps = ProgRun(p, 0, plan, buf, scratch, ex.parts[p], op=j, wire=ops[j].key)
            ps.on_done = op_done
            states[j] = ps
        return ps

    def match(s: Peer, h: tuple) -> ProgRun:
        key, hit, src, dst = h[0], h[1], h[2], h[3]
        j = by_key.get(key)
        if j is None or hit != 0 or src != s.peer or dst != rank:
            raise TransportError(
                f"rank {rank}: unexpected frame from {s.peer}: instance {key} "
                f"iteration {hit} src {src} dst {dst} (not in this rank's op list)"
            )
        return state(j)

    def start_op(j: int) -> None:
        op_start[j] = time.monotonic_ns()
        ex.end_realtime()
        ps = state(j)
        if ps.remaining == 0:
            op_done(ps)
            return
        for i in range(len(ps.plan.steps)):
            if ps.pending[i] == 0:
                ex.ready.append((ps, i))

    # the first ops' buffers before the start: their pages are faulted in off the clock
    first = [ops[j].program for j in range(n_ops) if op_pending[j] == 0 and not ex.lean]
    ex.pool.warm(
        [n for p in first for n in (ex.plans[p].buffer_bytes, ex.plans[p].scratch_bytes) if n]
    )
    ex.ready = deque()
    ex.match = match
    wait_for_start(ex.abort, rank, start_local_ns, go.spin_ns)
    for j, op in enumerate(ops):
        if op_pending[j] == 0:
            heapq.heappush(timers, (start_local_ns + op.gap_ns, j))
    ex.realtime = go.rt_start and set_realtime(True)
    sleep_until(start_local_ns, go.spin_ns)
    ex.end_realtime()
    cpu0 = time.thread_time_ns()
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
                f"instance {ops[waiting[0]].key}, "
                f"{'started' if op_start[waiting[0]] else 'not started'})"
            )
        wait_ns = deadline - now
        if timers:
            wait_ns = min(wait_ns, timers[0][0] - now)
        ex.poll(max(0.0, min(POLL_S, wait_ns / 1e9)))
    crc = 0
    for c in op_crc:
        crc = zlib.crc32(c.to_bytes(4, "little"), crc)
    return RankResult(
        rank=rank,
        buffer_crc=crc if ex.opts.verify and not ex.lean else -1,
        cpu_ns=time.thread_time_ns() - cpu0,
        start=op_start,
        end=op_end,
        bytes_sent=ex.bytes_sent,
        bytes_received=ex.bytes_received,
        messages_verified=ex.verified,
    )

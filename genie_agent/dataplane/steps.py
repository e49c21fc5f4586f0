"""What every rank executor (TCP and RDMA) shares: buffer patterns, the start, local steps.

A rank waits for a synchronized start by sleeping in short abort-checked slices until the start
is near (``wait_for_start``), then ``genie_agent.clock.sleep_until`` spins to it; optionally only
that wait and the launch of the first steps run under SCHED_FIFO (``set_realtime``).
``run_iterations`` runs a Go's warmup+iters iterations of one program and keeps their times.
REDUCE adds bytes (uint8, wrapping) and COPY copies, with numpy (``local_step``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Generator

import numpy as np

from genie.collectives.program import Op, Step
from genie.errors import TransportError
from genie.wire.messages import Go
from genie_agent.clock import sleep_until


def pattern_fill(buf: np.ndarray, rank: int) -> None:
    """Fill ``buf`` with a deterministic per-rank byte pattern (so every message differs)."""
    block = min(len(buf), 1 << 20)
    if block == 0:
        return
    pat = ((np.arange(block, dtype=np.uint32) * 2654435761 + rank * 40503) >> 13).astype(np.uint8)
    for off in range(0, len(buf), block):
        n = min(block, len(buf) - off)
        buf[off : off + n] = pat[:n]


def set_realtime(on: bool) -> bool:
    """Put the calling thread under SCHED_FIFO (on) or back to SCHED_OTHER; False if refused.

    Only the wait for a synchronized start and the launch of the first steps run real-time, so
    a crowded host wakes its ranks on time without any long real-time stretch.
    """
    try:
        if on:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        else:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return True
    except (OSError, AttributeError):
        return False


def wait_for_start(abort: threading.Event, rank: int, start_local_ns: int, spin_ns: int) -> None:
    """Sleep until the start is near (the spin is left to ``sleep_until``); raise on abort."""
    while start_local_ns - time.monotonic_ns() > 2 * spin_ns + 100_000_000:
        if abort.wait(0.05):  # an abort must not wait for a far-off start
            raise TransportError(f"rank {rank}: aborted before the start")


def local_step(st: Step, buf: np.ndarray, scratch: np.ndarray, scratch_off: int) -> None:
    """Run a REDUCE (add, uint8 wrapping) or COPY step from ``scratch`` into ``buf``."""
    dst = buf[st.offset : st.offset + st.nbytes]
    src = scratch[scratch_off : scratch_off + st.nbytes]
    if st.op == Op.REDUCE:
        np.add(dst, src, out=dst)
    else:
        dst[:] = src


def run_iterations(
    go: Go,
    abort: threading.Event,
    rank: int,
    n_steps: int,
    start_local_ns: int,
    iteration: Callable[[int, list[int], list[int]], Generator[None, int, None]],
    on_start: Callable[[], None] | None = None,
) -> tuple[list[int], list[int], list[list[int]], list[list[int]]]:
    """Run ``go``'s warmup+iters iterations, the first at ``start_local_ns``.

    ``iteration(it, step_start, step_end)`` is a generator that sets iteration ``it`` up, yields
    once, then runs it from the start time sent in: so the work between waking and the first
    step is as small as it can be. ``on_start`` runs just before the wait for the first start.
    Returns (iteration starts, iteration ends, step starts, step ends), all local ns; the step
    lists only with ``go.record_steps``.
    """
    starts, ends, sst, sen = [], [], [], []
    wait_for_start(abort, rank, start_local_ns, go.spin_ns)
    for it in range(go.iters + go.warmup):
        step_start = [0] * n_steps
        step_end = [0] * n_steps
        runner = iteration(it, step_start, step_end)
        next(runner)
        if it == 0:
            if on_start is not None:
                on_start()
            sleep_until(start_local_ns, go.spin_ns)
        t0 = time.monotonic_ns()
        with contextlib.suppress(StopIteration):
            runner.send(t0)
        starts.append(t0)
        ends.append(max(step_end) if step_end else t0)
        if go.record_steps:
            sst.append(step_start)
            sen.append(step_end)
    return starts, ends, sst, sen

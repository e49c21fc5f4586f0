"""Working buffers by lifetime: each rank takes a buffer when an op starts and gives it back when
the op ends, so an agent holds what its in-flight ops need, never one buffer per instance.

``BufferPool`` keeps the buffers ranks gave back, by exact size (a step's instances repeat a
few sizes: the same layer's all-reduce, micro-batch after micro-batch), so a repeated op reuses
pages already faulted in instead of paying the page faults again on the critical path; what it
keeps idle is bounded (``idle_bytes``), the largest dropped first. ``Budget`` is the agent's
memory bound shared by all its ranks' pools: taking beyond it is a ``TransportError`` that names
the need and the bound, never an OOM kill. A taken buffer's content is only defined when it is
pattern-filled (``verify`` on: the bytes are checked); otherwise it is whatever was there.
"""

from __future__ import annotations

import threading

import numpy as np

from genie.errors import TransportError
from genie_agent.dataplane.steps import pattern_fill

PAGE = 4096
MIN_IDLE = 64 << 20  # idle buffers a pool may always keep (bytes)


class Budget:
    """Bytes an agent may hold in buffers, shared by all its ranks (thread-safe)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int, rank: int) -> None:
        """Count ``nbytes`` more held, or refuse with one line when it would pass the limit."""
        with self._lock:
            if self.held + nbytes > self.limit:
                raise TransportError(
                    f"rank {rank}: buffers of the ops in flight need {self.held + nbytes} bytes "
                    f"on this agent, beyond its memory bound of {self.limit} bytes"
                )
            self.held += nbytes
            self.peak = max(self.peak, self.held)

    def give(self, nbytes: int) -> None:
        """Count ``nbytes`` fewer held."""
        with self._lock:
            self.held -= nbytes


class BufferPool:
    """One rank's reusable buffers (see the module docstring); used by its thread only."""

    def __init__(self, rank: int, budget: Budget) -> None:
        self.rank = rank
        self.budget = budget
        self._idle: dict[int, list[np.ndarray]] = {}
        self.idle_bytes = 0
        self.in_use = 0

    def take(self, nbytes: int, fill: bool = False) -> np.ndarray:
        """A buffer of ``nbytes`` bytes (pattern-filled with ``fill``)."""
        free = self._idle.get(nbytes)
        if free:
            buf = free.pop()
            self.idle_bytes -= nbytes
        else:
            self.budget.take(nbytes, self.rank)
            buf = np.empty(nbytes, dtype=np.uint8)
        self.in_use += nbytes
        if fill:
            pattern_fill(buf, self.rank)
        return buf

    def give(self, buf: np.ndarray) -> None:
        """Take ``buf`` back for reuse; drop idle buffers beyond the idle bound."""
        n = buf.nbytes
        self.in_use -= n
        self._idle.setdefault(n, []).append(buf)
        self.idle_bytes += n
        keep = max(MIN_IDLE, self.in_use)
        while self.idle_bytes > keep:
            size = max(s for s, lst in self._idle.items() if lst)
            self._idle[size].pop()
            self.idle_bytes -= size
            self.budget.give(size)

    def warm(self, sizes: list[int]) -> None:
        """Allocate buffers of ``sizes`` now and touch their pages (before a timed start), kept
        idle for the first ops; stops quietly at the memory bound."""
        for n in sizes:
            if self.idle_bytes + n > MIN_IDLE and self.idle_bytes:
                return
            try:
                self.budget.take(n, self.rank)
            except TransportError:
                return
            buf = np.empty(n, dtype=np.uint8)
            buf[::PAGE] = 0  # fault every page in now, not on the critical path
            self._idle.setdefault(n, []).append(buf)
            self.idle_bytes += n

    def clear(self) -> None:
        """Drop every idle buffer (the job ended); buffers still in use stay counted."""
        for size, lst in self._idle.items():
            self.budget.give(size * len(lst))
        self._idle.clear()
        self.idle_bytes = 0

"""Clocks both sides share: the injectable clock and NTP-style offset estimation.

All times are integers in nanoseconds of a monotonic clock. The offset of an agent is
``agent_clock - controller_clock``; a sample is (t0 controller send, t1 agent receive, t2 agent
send, t3 controller receive), and the sample with the smallest round trip is the best estimate
(min-RTT filter): offset = ((t1 - t0) + (t2 - t3)) / 2, uncertainty = rtt / 2.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import msgspec

# Busy-wait this long before a start instead of sleeping; 0 = sleep only. Measured on the 2-core
# shared VM (bench/start_skew.py, 2 agents): sleeping with 1 ns timer slack gave a p50 start
# spread of 13-29 us, spinning the last 200 us gave 205-222 us (a spinner is CPU-bound, so the
# scheduler preempts it; a sleeper gets wake-up priority). Spin only on dedicated cores.
SPIN_NS = 0


class Clock(Protocol):
    """A source of monotonic nanoseconds (injected, so state machines are testable)."""

    def now(self) -> int:
        """Current time in ns."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic_ns``."""

    def now(self) -> int:
        """Current monotonic time in ns."""
        return time.monotonic_ns()


class FakeClock:
    """A clock that moves only when told to (for tests); ``skew`` shifts what it reports."""

    def __init__(self, start: int = 1_000_000_000, skew: int = 0) -> None:
        self.t = start
        self.skew = skew

    def now(self) -> int:
        """Current fake time in ns."""
        return self.t + self.skew

    def advance(self, ns: int) -> None:
        """Move time forward by ``ns``."""
        self.t += max(0, int(ns))


class ClockEstimate(msgspec.Struct, kw_only=True):
    """Result of clock sync with one agent."""

    offset_ns: int  # agent clock - controller clock
    uncertainty_ns: int  # half the best round trip: the offset is right within this
    rtt_min_ns: int
    rtt_p50_ns: int
    samples: int


def sample_offset(t0: int, t1: int, t2: int, t3: int) -> tuple[int, int]:
    """Return (offset, rtt) of one NTP-style sample."""
    rtt = (t3 - t0) - (t2 - t1)
    offset = ((t1 - t0) + (t2 - t3)) // 2
    return offset, max(0, rtt)


def estimate_offset(samples: Sequence[tuple[int, int, int, int]]) -> ClockEstimate:
    """Min-RTT estimate of the offset from samples (t0, t1, t2, t3)."""
    if not samples:
        raise ValueError("no clock samples")
    pairs = sorted((sample_offset(*s)[1], sample_offset(*s)[0]) for s in samples)
    rtt_min, offset = pairs[0]
    rtts = [p[0] for p in pairs]
    return ClockEstimate(
        offset_ns=offset,
        uncertainty_ns=(rtt_min + 1) // 2,
        rtt_min_ns=rtt_min,
        rtt_p50_ns=rtts[len(rtts) // 2],
        samples=len(samples),
    )

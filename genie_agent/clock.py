"""Precise waiting on the agent's host (timer slack, sleep until an instant).

The shared clock pieces (``Clock``, ``MonotonicClock``, ``FakeClock``, offset estimation) live
in ``genie.wire.clock``.
"""

from __future__ import annotations

import time

from genie.wire.clock import SPIN_NS


def tighten_timer_slack() -> bool:
    """Ask Linux for 1 ns timer slack (default 50 us) so sleeps end on time; False if not."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(29, 1, 0, 0, 0) == 0  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        return False


def sleep_until(target_ns: int, spin_ns: int = SPIN_NS) -> int:
    """Wait until monotonic time ``target_ns`` (sleep, then spin the last ``spin_ns``)."""
    while True:
        now = time.monotonic_ns()
        left = target_ns - now
        if left <= 0:
            return now
        if left > spin_ns:
            time.sleep((left - spin_ns) / 1e9)

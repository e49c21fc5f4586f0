"""The one warning for repeated measurements that lie too far apart (bench's repeats, emulate's
runs)."""

from __future__ import annotations

from genie.controller.results import SPREAD_WARN


def unsteady(spread: float) -> str:
    """The warning for repeats ``spread`` apart ('' while within ``SPREAD_WARN``)."""
    if spread <= SPREAD_WARN:
        return ""
    return (
        f"; more than {SPREAD_WARN:.0%}: the wire or the hosts were not steady (other traffic, "
        "CPU load), so compare these figures with care"
    )

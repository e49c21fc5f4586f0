"""Placement of global ranks on agents: from the testbed's ranks per host, or round-robin."""

from __future__ import annotations

from collections.abc import Sequence

from genie.errors import UsageError


def place_ranks(
    hosts: Sequence[tuple[str, int]], n_ranks: int | None = None, mode: str = "testbed"
) -> list[str]:
    """Return the agent of each global rank; ``hosts`` is (name, ranks on that host) in order.

    ``testbed``: ranks fill hosts in order, as many per host as the testbed says (contiguous);
    ``round-robin``: rank r goes to host r mod H.
    """
    if not hosts:
        raise UsageError("no hosts to place ranks on")
    total = sum(k for _, k in hosts)
    n = total if n_ranks is None else n_ranks
    if n < 1:
        raise UsageError(f"need at least one rank, got {n}")
    if mode == "round-robin":
        return [hosts[r % len(hosts)][0] for r in range(n)]
    if mode != "testbed":
        raise UsageError(f"unknown placement {mode!r}; use testbed or round-robin")
    if n > total:
        raise UsageError(f"{n} ranks but the testbed has {total} rank slots (use round-robin)")
    out = [name for name, k in hosts for _ in range(k)]
    return out[:n]

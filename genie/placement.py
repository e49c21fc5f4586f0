"""Where ranks run: the one rule that puts global ranks on hosts, for every command and layer.

A ``Placement`` is the host index of every global rank, plus a note when the rule had to
deviate from what was asked. ``place`` is the rule; its modes are the same everywhere
(``genie simulate``, ``genie emulate``, ``genie bench``, several jobs, the testbed, the
controller):

* ``testbed``: the testbed's rank slots, hosts in order, as many ranks per host as it declares;
  when the slots do not cover the workload, ``packed`` over the same hosts (said in the note);
* ``packed``: ``ranks_per_host`` consecutive ranks to a host (more where the hosts given are too
  few to hold the ranks at that many each: said in the note);
* ``round-robin``: rank r on host r mod H.

Several jobs give each job a block of hosts (``job_blocks``) or the hosts named
(``parse_hosts``), and ``place_on`` fills them in order. Pure: hosts are indices; a testbed maps
them to names and NICs (``genie.testbed.model.Testbed.rank_nics``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import msgspec

from genie.errors import UsageError

Mode = Literal["testbed", "packed", "round-robin"]
MODES: tuple[str, ...] = ("testbed", "packed", "round-robin")


class Placement(msgspec.Struct, frozen=True):
    """The host index of every global rank, and how the rule got there."""

    hosts: tuple[int, ...]
    mode: str = "packed"
    note: str = ""  # what the rule changed from what was asked ("" when nothing)

    @property
    def n_ranks(self) -> int:
        """Number of ranks placed."""
        return len(self.hosts)

    @property
    def n_hosts(self) -> int:
        """Hosts used (the highest index + 1)."""
        return max(self.hosts, default=-1) + 1

    def ranks_on(self, host: int) -> list[int]:
        """The global ranks on ``host``."""
        return [r for r, h in enumerate(self.hosts) if h == host]

    def names(self, host_names: Sequence[str]) -> list[str]:
        """The host name of every rank, given the names of hosts 0..H-1."""
        if self.n_hosts > len(host_names):
            raise UsageError(
                f"host {self.n_hosts - 1} named, but there are {len(host_names)} hosts "
                f"(0..{len(host_names) - 1})"
            )
        return [host_names[h] for h in self.hosts]

    def one_per_host(self) -> bool:
        """True when no two ranks share a host."""
        return len(set(self.hosts)) == len(self.hosts)


def check_mode(mode: str) -> str:
    """``mode`` if it is a placement mode, else a UsageError naming the modes."""
    if mode not in MODES:
        raise UsageError(f"unknown placement {mode!r}; use {', '.join(MODES)}")
    return mode


def place(
    n_ranks: int,
    mode: str = "packed",
    *,
    n_hosts: int | None = None,
    slots: Sequence[int] | None = None,
    ranks_per_host: int = 1,
) -> Placement:
    """Place ``n_ranks`` ranks by ``mode`` (see the module docstring).

    ``slots``: ranks each host declares (a testbed), which also fixes the number of hosts;
    ``n_hosts``: the hosts available without slots (default: as many as ``packed`` needs).
    """
    check_mode(mode)
    if n_ranks < 1:
        raise UsageError(f"need at least one rank, got {n_ranks}")
    if ranks_per_host < 1:
        raise UsageError(f"ranks per host must be at least 1, got {ranks_per_host}")
    if slots is not None:
        if not slots:
            raise UsageError("no hosts to place ranks on")
        n_hosts = len(slots)
    if mode == "testbed":
        if slots is None:
            raise UsageError("placement 'testbed' needs a testbed (its hosts' rank slots)")
        if sum(slots) >= n_ranks and ranks_per_host == 1:
            hosts = [h for h, k in enumerate(slots) for _ in range(k)]
            return Placement(tuple(hosts[:n_ranks]), "testbed")
        return _packed(n_ranks, len(slots), ranks_per_host, "testbed", slots_short=True)
    if n_hosts is not None and n_hosts < 1:
        raise UsageError("no hosts to place ranks on")
    if mode == "round-robin":
        h = n_hosts if n_hosts is not None else math.ceil(n_ranks / ranks_per_host)
        return Placement(tuple(r % h for r in range(n_ranks)), "round-robin")
    if n_hosts is None:
        n_hosts = math.ceil(n_ranks / ranks_per_host)
    return _packed(n_ranks, n_hosts, ranks_per_host, "packed")


def _packed(
    n_ranks: int, n_hosts: int, k: int, mode: str, *, slots_short: bool = False
) -> Placement:
    """``k`` consecutive ranks to a host, more where ``n_hosts`` cannot hold them at ``k``."""
    need = math.ceil(n_ranks / n_hosts)
    note = ""
    if need > k or slots_short:
        k = max(k, need)
        note = (
            f"placement: {n_ranks} ranks, {k} per host on the testbed's {n_hosts} hosts (its "
            "rank slots do not cover the workload, or --ranks-per-host was given)"
            if mode == "testbed"
            else f"placement: {n_ranks} ranks, {k} per host on {n_hosts} hosts (fewer per host "
            "do not fit)"
        )
    return Placement(tuple(min(r // k, n_hosts - 1) for r in range(n_ranks)), mode, note)


def parse_hosts(text: str) -> tuple[int, ...]:
    """Host indices from ``0-3``, ``0,2,4`` or ``0-3,8-11`` (in the order given, no repeats)."""
    out: list[int] = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise UsageError(f"hosts {text!r}: use host indices like 0-3 or 0,2,4") from None
        if a < 0 or b < a or b - a > 65535:
            raise UsageError(f"hosts {text!r}: {part!r} is not a range of host indices")
        out.extend(range(a, b + 1))
    if not out or len(set(out)) != len(out):
        raise UsageError(f"hosts {text!r}: name each host once")
    return tuple(out)


def place_on(n_ranks: int, hosts: Sequence[int], ranks_per_host: int | None = None) -> Placement:
    """``n_ranks`` ranks on the given ``hosts`` in order, ``k`` to a host.

    ``k`` defaults to the fewest that fit (ceil(n_ranks / len(hosts))); a given ``k`` that does
    not fit is a UsageError.
    """
    if not hosts:
        raise UsageError("a job needs at least one host")
    k = ranks_per_host or math.ceil(n_ranks / len(hosts))
    if k * len(hosts) < n_ranks:
        raise UsageError(
            f"{n_ranks} ranks do not fit on {len(hosts)} hosts at {k} per host "
            f"(hosts {_short(hosts)})"
        )
    return Placement(tuple(int(hosts[r // k]) for r in range(n_ranks)), "packed")


def job_blocks(sizes: Sequence[int], ranks_per_host: int = 1) -> list[tuple[int, ...]]:
    """Disjoint host blocks for jobs of ``sizes`` ranks, one after another (the default)."""
    out, nxt = [], 0
    for n in sizes:
        m = math.ceil(n / ranks_per_host)
        out.append(tuple(range(nxt, nxt + m)))
        nxt += m
    return out


def _short(xs: Sequence[int]) -> str:
    """At most eight indices, then '...'."""
    return "[" + ", ".join(map(str, list(xs)[:8])) + (", ..." if len(xs) > 8 else "") + "]"

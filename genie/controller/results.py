"""Turn agents' per-rank times into per-collective completion times, on the controller's clock.

For iteration i: start = earliest rank start, end = last rank end, both converted from each
agent's monotonic clock with its estimated offset (controller = agent - offset). Its time is
from its start, or from the previous iteration's end when that is later, to its end: a Go runs
its iterations back to back, and a rank whose sends the kernel has taken begins the next
iteration while its peers still finish this one, so start to end would count that skew twice
(an all-to-all on a shaped link measured 100 ms per iteration while iterations ended every
64 ms). Summed, the times are the Go's elapsed time, as nccl-tests reports it. Warm-up
iterations are kept but flagged, and left out of the statistics.

An agent's numbers are not trusted: ``check_result`` refuses a Result whose ranks, counts or
times do not fit the Go it answers, before anything is computed or stored from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec
import numpy as np

from genie.errors import RuntimeFault
from genie.wire.messages import Result

CLOCK_SLACK_NS = 2 * 10**9  # agent times may stray this far outside the Go's window (offsets)


def check_result(
    agent: str,
    res: Result,
    ranks: Sequence[int],
    iterations: int | Mapping[int, int],
    steps: int,
    window: tuple[int, int],
    program: int = 0,
    warmup: int | None = 0,
) -> None:
    """Refuse (RuntimeFault, one line) a Result that does not answer the Go it should.

    ``ranks``: the global ranks placed on ``agent`` that ran; ``iterations``: entries per rank
    (one count, or per rank: op-list mode); ``steps``: most step times per iteration (0: none
    recorded); ``window``: (Go's start, now) on the agent's clock, ns; ``program``/``warmup``
    must echo the Go's (``warmup`` None: op lists).
    """

    def bad(why: str) -> RuntimeFault:
        return RuntimeFault(f"agent {agent} sent a malformed result: {why}")

    got = [rr.rank for rr in res.ranks]
    if sorted(got) != sorted(ranks):
        shown = got[:8] + (["..."] if len(got) > 8 else [])
        raise bad(f"ranks {shown}, expected {sorted(ranks)}")
    if warmup is not None and (res.program != program or res.warmup != warmup):
        raise bad(f"program {res.program} warm-up {res.warmup}, expected {program} and {warmup}")
    lo, hi = window[0] - CLOCK_SLACK_NS, window[1] + CLOCK_SLACK_NS
    for rr in res.ranks:
        n = iterations if isinstance(iterations, int) else iterations.get(rr.rank, 0)
        if len(rr.start) != n or len(rr.end) != n:
            raise bad(f"rank {rr.rank} has {len(rr.start)} starts and {len(rr.end)} ends, not {n}")
        for i, (s, e) in enumerate(zip(rr.start, rr.end, strict=True)):
            if not lo <= s <= e <= hi:
                raise bad(f"rank {rr.rank} iteration {i}: times {s}..{e} ns outside the run")
        rows = (rr.step_start, rr.step_end)
        if not steps:
            if any(rows):
                raise bad(f"rank {rr.rank} has step times nobody asked for")
            continue
        if any(len(r) not in (0, n) for r in rows) or len(rr.step_start) != len(rr.step_end):
            raise bad(f"rank {rr.rank} has step times for the wrong number of iterations")
        for i, (ss, ee) in enumerate(zip(*rows, strict=True)):
            if len(ss) != len(ee) or len(ss) > steps:
                raise bad(f"rank {rr.rank} iteration {i}: {len(ss)} step times (at most {steps})")
            if any(not lo <= a <= b <= hi for a, b in zip(ss, ee, strict=True)):
                raise bad(f"rank {rr.rank} iteration {i}: step times outside the run")


class Instance(msgspec.Struct, kw_only=True):
    """One run of one collective (one iteration), controller clock, ns."""

    iteration: int
    warmup: bool
    start_ns: int
    end_ns: int
    time_s: float
    rank_start_ns: list[int]  # by global rank order of ``ranks``
    rank_end_ns: list[int]
    ranks: list[int]
    step0_spread_ns: int = -1  # max - min over ranks of the first step's start, when recorded


class Stats(msgspec.Struct, kw_only=True):
    """Percentiles of completion time over the measured (non-warm-up) instances, seconds."""

    n: int
    p50: float
    p99: float
    min: float
    max: float
    mean: float


def completion_times(results: Mapping[str, Result], offsets: Mapping[str, int]) -> list[Instance]:
    """Per-iteration completion times from every agent's Result of one Go."""
    per_rank: list[tuple[int, list[int], list[int], list[int]]] = []
    warmup = 0
    for agent, res in results.items():
        off = offsets.get(agent, 0)
        warmup = res.warmup
        for rr in res.ranks:
            s0 = [row[0] - off for row in rr.step_start if row] if rr.step_start else []
            per_rank.append((rr.rank, [t - off for t in rr.start], [t - off for t in rr.end], s0))
    per_rank.sort()
    if not per_rank:
        return []
    n_it = min(len(s) for _, s, _, _ in per_rank)
    out = []
    prev_end: int | None = None
    for i in range(n_it):
        starts = [s[i] for _, s, _, _ in per_rank]
        ends = [e[i] for _, _, e, _ in per_rank]
        firsts = [f[i] for _, _, _, f in per_rank if len(f) > i]
        spread = max(firsts) - min(firsts) if len(firsts) == len(per_rank) else -1
        st, en = min(starts), max(ends)
        began = st if prev_end is None else max(st, prev_end)
        prev_end = en
        out.append(
            Instance(
                iteration=i,
                warmup=i < warmup,
                start_ns=st,
                end_ns=en,
                time_s=max(0, en - began) / 1e9,
                rank_start_ns=starts,
                rank_end_ns=ends,
                ranks=[r for r, _, _, _ in per_rank],
                step0_spread_ns=spread,
            )
        )
    return out


def stats(times: Sequence[float]) -> Stats:
    """p50/p99/min/max/mean of ``times`` (seconds)."""
    if not times:
        return Stats(
            n=0,
            p50=float("nan"),
            p99=float("nan"),
            min=float("nan"),
            max=float("nan"),
            mean=float("nan"),
        )
    a = np.asarray(times, dtype=float)
    return Stats(
        n=len(a),
        p50=float(np.percentile(a, 50)),
        p99=float(np.percentile(a, 99)),
        min=float(a.min()),
        max=float(a.max()),
        mean=float(a.mean()),
    )


SPREAD_WARN = 0.10  # repeats further apart than this (max / min - 1): the run was not steady


def spread(times: Sequence[float]) -> float | None:
    """How far repeated measurements lie apart: max / min - 1 (None for fewer than two)."""
    if len(times) < 2 or min(times) <= 0:
        return None
    return max(times) / min(times) - 1


def measured(instances: Sequence[Instance]) -> list[float]:
    """Completion times of the non-warm-up instances."""
    return [x.time_s for x in instances if not x.warmup]


def step_times(
    results: Mapping[str, Result], offsets: Mapping[str, int], iteration: int = 0
) -> dict[int, list[tuple[int, int]]]:
    """Per rank, the (start, end) of every step of one iteration on the controller clock, ns.

    Needs a Go with ``record_steps``; ranks without step records are left out.
    """
    out: dict[int, list[tuple[int, int]]] = {}
    for agent, res in results.items():
        off = offsets.get(agent, 0)
        for rr in res.ranks:
            if len(rr.step_start) > iteration:
                out[rr.rank] = [
                    (s - off, e - off)
                    for s, e in zip(rr.step_start[iteration], rr.step_end[iteration], strict=True)
                ]
    return dict(sorted(out.items()))

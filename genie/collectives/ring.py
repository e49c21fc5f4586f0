"""Ring algorithms: reduce-scatter and all-gather around a ring, all-reduce as the two in a row.

Phases work on any ring of ``members`` (group ranks, in ring order) and any shard layout
(``shards[i]`` is the list of byte ranges of member i's shard), so the hierarchical algorithms
reuse them on sub-rings. Member i ends a reduce-scatter holding reduced shard i.
"""

from __future__ import annotations

from collections.abc import Sequence

from genie.collectives.emit import Emit
from genie.collectives.layout import Range, chunk_segments
from genie.collectives.program import ProgramSpec

Shards = Sequence[Sequence[Range]]


def _ring_phase(
    e: Emit,
    members: Sequence[int],
    me: int,
    shards: Shards,
    after: Sequence[int],
    shift: int,
    reduce: bool,
) -> list[int]:
    """m-1 ring rounds: round k sends shard (me-k-shift) right, receives shard (me-k-shift-1)."""
    m = len(members)
    if m < 2:
        return list(after)
    start = len(e.steps)
    right, left = members[(me + 1) % m], members[(me - 1) % m]
    prev: list[int] = list(after)
    for k in range(m - 1):
        for rng in shards[(me - k - shift) % m]:
            e.send(right, rng, prev)
        prev = e.recv_into(left, shards[(me - k - shift - 1) % m], prev, reduce=reduce)
    # a phase of empty shards emits nothing: its tail is then what it waited for
    return e.sinks(start) if start < len(e.steps) else list(after)


def reduce_scatter_phase(
    e: Emit, members: Sequence[int], me: int, shards: Shards, after: Sequence[int]
) -> list[int]:
    """Ring reduce-scatter; returns the phase's tail (steps later phases must wait for)."""
    return _ring_phase(e, members, me, shards, after, shift=1, reduce=True)


def all_gather_phase(
    e: Emit, members: Sequence[int], me: int, shards: Shards, after: Sequence[int]
) -> list[int]:
    """Ring all-gather (member i starts with shard i); returns the phase's tail."""
    return _ring_phase(e, members, me, shards, after, shift=0, reduce=False)


def _ring_shards(spec: ProgramSpec, c: int) -> list[list[Range]]:
    return [[seg] for seg in chunk_segments(spec, c)]


def all_reduce(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Ring all-reduce of chunk ``e.chunk``: reduce-scatter then all-gather."""
    members = range(spec.n_ranks)
    sh = _ring_shards(spec, e.chunk)
    tail = reduce_scatter_phase(e, members, rank, sh, ())
    all_gather_phase(e, members, rank, sh, tail)


def reduce_scatter(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Ring reduce-scatter of chunk ``e.chunk``."""
    reduce_scatter_phase(e, range(spec.n_ranks), rank, _ring_shards(spec, e.chunk), ())


def all_gather(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Ring all-gather of chunk ``e.chunk``."""
    all_gather_phase(e, range(spec.n_ranks), rank, _ring_shards(spec, e.chunk), ())

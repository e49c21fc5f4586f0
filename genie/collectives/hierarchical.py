"""Two-level algorithms for k ranks per host: rings inside hosts, rings across hosts.

Group rank r = i*k + l sits on host i as local rank l. All-reduce: intra-host reduce-scatter
(local rank l gets block l of the chunk summed over its host), inter-host all-reduce of block l
among the ranks with local index l, intra-host all-gather. Reduce-scatter and all-gather use the
same two levels with shards laid out so that rank r still ends with (or starts from) shard r.
"""

from __future__ import annotations

from genie.collectives.emit import Emit
from genie.collectives.layout import chunk_range, chunk_segments, split
from genie.collectives.program import ProgramSpec
from genie.collectives.ring import all_gather_phase, reduce_scatter_phase
from genie.errors import CollectiveError


def _levels(spec: ProgramSpec, rank: int) -> tuple[int, int, list[int], list[int]]:
    k = spec.ranks_per_host
    n = spec.n_ranks
    if k < 1 or n % k:
        raise CollectiveError(
            f"hierarchical needs the group size ({n}) to be a multiple of ranks_per_host ({k})"
        )
    i, li = divmod(rank, k)
    local = [i * k + j for j in range(k)]
    across = [h * k + li for h in range(n // k)]
    return i, li, local, across


def all_reduce(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Hierarchical all-reduce of chunk ``e.chunk``."""
    i, li, local, across = _levels(spec, rank)
    off, nb = chunk_range(spec, e.chunk)
    elem = spec.options.get("elem", 1)
    blocks = split(off, nb, len(local), elem)
    intra = [[b] for b in blocks]
    tail = reduce_scatter_phase(e, local, li, intra, ())
    sub = [[s] for s in split(*blocks[li], len(across), elem)]
    tail = reduce_scatter_phase(e, across, i, sub, tail)
    tail = all_gather_phase(e, across, i, sub, tail)
    all_gather_phase(e, local, li, intra, tail)


def _shard_sets(spec: ProgramSpec, c: int):
    k = spec.ranks_per_host
    h = spec.n_ranks // k
    segs = chunk_segments(spec, c)
    intra = [[segs[x * k + j] for x in range(h)] for j in range(k)]  # local l: shards i*k+l
    return segs, intra


def reduce_scatter(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Hierarchical reduce-scatter: rank r ends with shard r reduced over all ranks."""
    i, li, local, across = _levels(spec, rank)
    segs, intra = _shard_sets(spec, e.chunk)
    tail = reduce_scatter_phase(e, local, li, intra, ())
    k = spec.ranks_per_host
    reduce_scatter_phase(e, across, i, [[segs[x * k + li]] for x in range(len(across))], tail)


def all_gather(spec: ProgramSpec, rank: int, e: Emit) -> None:
    """Hierarchical all-gather: across hosts first, then inside each host."""
    i, li, local, across = _levels(spec, rank)
    segs, intra = _shard_sets(spec, e.chunk)
    k = spec.ranks_per_host
    tail = all_gather_phase(e, across, i, [[segs[x * k + li]] for x in range(len(across))], ())
    all_gather_phase(e, local, li, intra, tail)

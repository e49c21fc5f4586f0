"""Collective microbenchmarks: each chosen collective type over a sweep of sizes, all ranks."""

from __future__ import annotations

from collections.abc import Sequence

from genie.workload.generators.builder import RankBuilder, finish, need
from genie.workload.model import CollectiveType, Workload

DEFAULT_TYPES = (
    CollectiveType.ALL_REDUCE,
    CollectiveType.ALL_GATHER,
    CollectiveType.REDUCE_SCATTER,
    CollectiveType.ALL_TO_ALL,
    CollectiveType.BROADCAST,
    CollectiveType.REDUCE,
)


def microbench(
    ranks: int,
    sizes: Sequence[int] = (1 << 20,),
    types: Sequence[CollectiveType] = DEFAULT_TYPES,
    iterations: int = 1,
) -> Workload:
    """For each type and size, ``iterations`` back-to-back collectives over all ranks.

    comm_size follows ASTRA-sim: the whole buffer, except the per-rank shard for all-gather.
    """
    need(ranks >= 2, f"microbench needs at least 2 ranks, got {ranks}")
    need(bool(sizes) and all(s >= 0 for s in sizes), "sizes must be non-negative")
    need(iterations >= 1, "iterations must be >= 1")
    protos: dict = {}  # nodes the ranks repeat, made once (RankBuilder)
    builders = [RankBuilder(r, protos) for r in range(ranks)]
    for b in builders:
        prev = None
        for t in types:
            for size in sizes:
                s = 0 if t == CollectiveType.BARRIER else size
                for it in range(iterations):
                    prev = b.collective(f"{t.name.lower()}_{s}B_it{it}", t, s, [prev])
    params = {
        "types": "/".join(t.name for t in types),
        "sizes": "/".join(str(s) for s in sizes),
        "iterations": iterations,
    }
    return finish("microbench", builders, {}, params)

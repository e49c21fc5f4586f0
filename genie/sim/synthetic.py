"""Synthetic data-parallel graphs built straight in compiled form, for benchmarks and tests.

Forward compute of every layer, then backward compute in reverse with a gradient all-reduce per
bucket of layers that overlaps the rest of backward, then an optimizer step after all buckets.
``jitter`` makes rank durations differ (so no symmetry can be proven) without changing sizes.
"""

from __future__ import annotations

import numpy as np

from genie.sim.compiled import CompiledWorkload, Kind, finish, make_rank
from genie.vocabulary import chakra_type


def data_parallel(
    n_ranks: int,
    nodes_per_rank: int = 2000,
    layers_per_bucket: int = 20,
    layer_time: float = 50e-6,
    bucket_bytes: int = 25 * 2**20,
    jitter: float = 0.0,
    seed: int = 0,
) -> CompiledWorkload:
    """A DP step of about ``nodes_per_rank`` nodes per rank on one all-rank group."""
    # nodes: L forward + L backward + B all-reduce + 1 optimizer = nodes_per_rank
    per_layer = 2 + 1 / layers_per_bucket
    layers = max(1, int((nodes_per_rank - 1) / per_layer))
    rng = np.random.default_rng(seed)
    ar = chakra_type("all_reduce")
    ranks = []
    for _ in range(n_ranks):
        cols: tuple[list, ...] = ([], [], [], [], [], [])
        kind, dur, deps, ct, cs, grp = cols

        def add(k, d, dp, c=-2, s=0, g=-1, cols=cols):
            for col, v in zip(cols, (k, d, dp, c, s, g), strict=True):
                col.append(v)
            return len(cols[0]) - 1

        scale = 1.0 + (jitter * rng.random() if jitter else 0.0)
        prev: list[int] = []
        for _layer in range(layers):
            prev = [add(Kind.COMPUTE, layer_time * scale, prev)]
        buckets = []
        for i in range(layers):
            prev = [add(Kind.COMPUTE, 2 * layer_time * scale, prev)]
            if (i + 1) % layers_per_bucket == 0 or i == layers - 1:
                buckets.append(add(Kind.COLLECTIVE, 0.0, prev, ar, bucket_bytes, 0))
        add(Kind.COMPUTE, layer_time * scale, [*prev, *buckets])
        ranks.append(make_rank(kind, dur, deps, ct, cs, grp))
    return finish(ranks, ["dp"], [tuple(range(n_ranks))], name=f"synthetic-dp-{n_ranks}")

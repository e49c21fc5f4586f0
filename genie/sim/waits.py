"""Who waited on whom: the wait each rank spent at collectives, charged to the last arrival.

A collective (or send/recv) starts when its last member arrives (``RawResult.inst_last_rank``);
every other member waited from its own arrival (its node ready) until then. ``who_waited``
charges that wait to the last-arriving rank: per rank the seconds it waited and the rank it
waited on most, per rank the seconds it made the others wait, and the heaviest (waiter, culprit)
pairs. Direct blame only: if the culprit itself had waited on someone earlier, that earlier wait
is charged to that someone on its own instance. With a baseline replay of the same workload
without stragglers, ``straggler_cost`` says how much longer the iteration got.
"""

from __future__ import annotations

import math
from collections import defaultdict

from genie.sim.compiled import CompiledWorkload
from genie.sim.engine import RawResult


def who_waited(cw: CompiledWorkload, raw: RawResult, top: int = 10) -> dict:
    """Waits at communication, by rank and by (waiter, culprit) pair (seconds; see above)."""
    pos = {r: k for k, r in enumerate(raw.sim_ranks)}
    waited: dict[int, float] = defaultdict(float)
    caused: dict[int, float] = defaultdict(float)
    pairs: dict[tuple[int, int], float] = defaultdict(float)
    for iid, mem in enumerate(cw.instances.members):
        last = int(raw.inst_last_rank[iid])
        start = float(raw.inst_start[iid])
        if last < 0 or math.isnan(start):
            continue
        for r, node in mem:
            if r == last or r not in pos:
                continue
            g = int(raw.offsets[pos[r]]) + node
            w = start - float(raw.ready[g])
            if w > 0:
                waited[r] += w
                caused[last] += w
                pairs[(r, last)] += w
    most: dict[int, tuple[int, float]] = {}
    for (w, c), s in pairs.items():
        if s > most.get(w, (-1, 0.0))[1]:
            most[w] = (c, s)
    it = raw.makespan or 1.0
    by_rank = [
        {
            "rank": r,
            "wait_s": waited.get(r, 0.0),
            "share": waited.get(r, 0.0) / it,
            "waited_most_on": most[r][0] if r in most else None,
            "made_others_wait_s": caused.get(r, 0.0),
        }
        for r in raw.sim_ranks
    ]
    heavy = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {
        "by_rank": by_rank,
        "pairs": [{"waiter": w, "waited_on": c, "wait_s": s} for (w, c), s in heavy],
        "total_wait_s": float(sum(waited.values())),
    }


def straggler_cost(iteration_s: float, baseline_s: float) -> dict:
    """The iteration with stragglers against the same workload without them."""
    delta = iteration_s - baseline_s
    return {
        "iteration_s": iteration_s,
        "baseline_s": baseline_s,
        "cost_s": delta,
        "cost_share": delta / baseline_s if baseline_s > 0 else float("nan"),
    }


def slowest(by_rank: list[dict]) -> int | None:
    """The rank that made the others wait longest (None when nobody waited)."""
    if not by_rank:
        return None
    best = max(by_rank, key=lambda x: (x["made_others_wait_s"], -x["rank"]))
    return best["rank"] if best["made_others_wait_s"] > 0 else None

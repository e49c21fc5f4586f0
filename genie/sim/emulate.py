"""Hardware in the loop, isolated mode: every distinct collective of a workload run on the agents.

``genie emulate`` takes the communication instances of a compiled workload, groups them by
(collective, size, group), plans each as a step program (the same planner as ``genie bench``;
the size as the trace gives it, ASTRA-sim convention), runs it on the live testbed's agents
(warm-up plus ``iterations`` measured, all ranks starting together), keeps every instance in
the run store, and replays the workload with each instance taking the median measured time of
its own (collective, size, group) on its own ranks and hosts.

Not yet: running the whole trace on the agents with compute gaps honoured, so that collectives
that overlap in the trace overlap on the wire; here each collective is measured alone, which is
exact when nothing overlaps; when collectives overlap in the trace, the replay shares links
between them as the analytical model does, scaled to the measured standalone times.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genie.errors import StoreError
from genie.sim.compiled import P2P, CompiledWorkload, coll_name
from genie.sim.network import AnalyticalBackend, CalibratedPricer, Pricer, Transfer

Key = tuple[int, int, tuple[int, ...]]  # (comm_type, size, global ranks)


@dataclass
class Measured:
    """One distinct collective measured on the testbed."""

    key: Key
    collective: str
    algorithm: str
    count: int  # instances of it in the workload
    times: list[float] = field(default_factory=list)  # measured (non-warm-up) seconds
    modeled_s: float | None = None

    @property
    def p50(self) -> float:
        """Median measured time (seconds)."""
        return float(np.median(self.times)) if self.times else math.nan


def distinct_transfers(cw: CompiledWorkload) -> dict[Key, int]:
    """Each distinct (comm_type, size, ranks) of the workload with how often it occurs."""
    out: dict[Key, int] = {}
    ins = cw.instances
    for iid in range(len(ins)):
        key = (int(ins.comm_type[iid]), int(ins.size[iid]), tuple(cw.instance_ranks(iid)))
        out[key] = out.get(key, 0) + 1
    return out


def plan(key: Key, algorithms: dict[str, str] | None = None, chunks: int = 1) -> Any:
    """The step program of one distinct transfer (group-local ranks 0..n-1)."""
    from genie.collectives import build_program

    ctype, size, ranks = key
    name = "send_recv" if ctype == P2P else coll_name(ctype)
    name = "reduce_scatter" if name == "reduce_scatter_block" else name
    algo = (algorithms or {}).get(name)
    return build_program(name, algo, len(ranks), size, chunks=chunks)


def measure_all(
    ctl: Any,
    keys: dict[Key, int],
    rank_agents: Sequence[str],
    *,
    iters: int,
    warmup: int,
    algorithms: dict[str, str] | None = None,
    chunks: int = 1,
    options: Any = None,
    topology: Any = None,
    on_done: Callable[[Measured, Any, list], None] | None = None,
) -> dict[Key, Measured]:
    """Run every distinct transfer on the agents in turn; ``on_done`` sees each as measured."""
    from genie.collectives.cost import estimate
    from genie.controller.bench import run_size
    from genie.controller.results import measured
    from genie.errors import GenieError

    out: dict[Key, Measured] = {}
    for key, count in keys.items():
        prog = plan(key, algorithms, chunks)
        placement = [rank_agents[r] for r in key[2]]
        instances = run_size(ctl, prog, placement, iters=iters, warmup=warmup, options=options)
        m = Measured(
            key=key,
            collective=prog.spec.collective,
            algorithm=prog.spec.algorithm,
            count=count,
            times=[float(t) for t in measured(instances)],
        )
        if topology is not None:
            try:
                m.modeled_s = float(estimate(prog, topology, placement).time_s)
            except GenieError:
                m.modeled_s = None
        out[key] = m
        if on_done:
            on_done(m, prog, instances)
    return out


class TestbedBackend:
    """Each instance takes the median time measured for its own (collective, size, group).

    With a ``pricer``, instances in flight together share links as the analytical model says,
    each scaled to its measured standalone time; without one, they do not slow each other.
    """

    __test__ = False

    def __init__(
        self, table: dict[Key, Measured], name: str = "testbed", pricer: Pricer | None = None
    ) -> None:
        self.name = name
        self.table = table
        self._heap: list[tuple[float, int]] = []
        self.standalone: dict[int, float] = {}
        self._inner = None
        how = "do not slow each other"
        if pricer is not None:
            self._inner = AnalyticalBackend(CalibratedPricer(pricer, self.alone), name)
            self.standalone = self._inner.standalone
            how = "share links as the analytical model says"
        self.notes = [
            "testbed (isolated): each collective measured alone on the agents; collectives in "
            f"flight together {how}, they were not on the wire together"
        ]

    def alone(self, transfer: Transfer) -> float:
        """The measured median of this transfer's (collective, size, ranks)."""
        key = (transfer.comm_type, transfer.size, tuple(transfer.ranks))
        m = self.table.get(key)
        if m is None or not m.times:
            raise StoreError(f"no measured time for {coll_name(transfer.comm_type)} {key[1:]}")
        return m.p50

    def start(self, transfer: Transfer, now: float) -> None:
        """Begin the instance: its measured median, shared links when a pricer is given."""
        if self._inner is not None:
            self._inner.start(transfer, now)
            return
        t = self.alone(transfer)
        self.standalone[transfer.iid] = t
        heapq.heappush(self._heap, (now + t, transfer.iid))

    def next_time(self) -> float:
        """Earliest completion."""
        if self._inner is not None:
            return self._inner.next_time()
        return self._heap[0][0] if self._heap else math.inf

    def pop(self, now: float) -> list[int]:
        """Instances completing at ``now``."""
        if self._inner is not None:
            return self._inner.pop(now)
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[1])
        return out

"""An orbit replay gives every copy its replayed instance's standalone time (what the reports
read): ``engine._copy_standalone`` does it as arrays over the instances, checked against the
one-at-a-time reference (same keys, same order, the same value objects), also where a replayed
instance has no time and where the keys are not instance ids (it then is the reference); and
``api.makespan``, which skips it, gives the replay's iteration time."""

from __future__ import annotations

import numpy as np

from genie.collectives import topology as T
from genie.sim.adapter import compile_workload
from genie.sim.api import makespan, replay
from genie.sim.engine import _copy_standalone, _copy_standalone_reference
from genie.sim.network import AnalyticalBackend
from genie.sim.program_pricer import ProgramPricer
from genie.sim.streams import order_collectives
from genie.workload.generators import llm


def _both(alone: dict, rep: np.ndarray) -> tuple[dict, dict]:
    fast, ref = dict(alone), dict(alone)
    _copy_standalone(fast, rep)
    _copy_standalone_reference(ref, rep)
    return fast, ref


def test_copies_get_the_replayed_instances_times_as_the_reference_gives_them():
    rep = np.array([0, 0, 2, 2, 2, 5, 0, 5, 8, 8, 10])
    alone = {0: 1.5, 2: np.float64(2.5), 5: 3.5, 10: 4.0}  # 8 has no time: its copy gets none
    fast, ref = _both(alone, rep)
    assert list(fast.items()) == list(ref.items())
    assert [type(v) for v in fast.values()] == [type(v) for v in ref.values()]
    assert all(a is b for a, b in zip(fast.values(), ref.values(), strict=True))
    assert 9 not in fast and fast[7] is alone[5]
    # keys that are not instance ids: the reference path, the same answer
    odd = {-1: 9.0, 0: 1.0, 2: 2.0}
    fast, ref = _both(odd, np.array([0, 0, 2, 2]))
    assert list(fast.items()) == list(ref.items())
    fast, ref = _both({}, rep)
    assert fast == ref == {}


def test_makespan_without_the_copies_is_the_replays_iteration_time():
    cw = order_collectives(compile_workload(llm(32, tp=2, pp=2, layers=4, micro_batches=2)), 1)
    topo = T.leaf_spine(2, 1, 16, 50 * 2**30, 500e-9, 2.0)

    def backend() -> AnalyticalBackend:
        return AnalyticalBackend(ProgramPricer(topo, list(range(32)), 32))

    rep, raw = replay(cw, backend())
    assert raw.rank_rep is not None  # an orbit replay
    assert makespan(cw, backend()) == rep.iteration_s == raw.makespan

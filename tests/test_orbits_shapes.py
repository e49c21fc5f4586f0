"""W1's per-rank ids (``orbits._shapes``): a dict of each rank's bytes, checked against the
digest reference (``_shapes_reference``) id for id on generated workloads, on one whose ranks
all differ, and past the byte budget (where it is the reference)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from genie.sim import orbits
from genie.sim.adapter import compile_workload
from genie.sim.compiled import CompiledWorkload
from genie.workload.generators import data_parallel, llm, moe


def _workloads() -> list[CompiledWorkload]:
    out = [
        compile_workload(llm(32, tp=2, pp=2, layers=4, micro_batches=2)),
        compile_workload(data_parallel(16, layers=4)),
        compile_workload(moe(16, layers=2)),
    ]
    cw = out[0]  # every rank a little slower than the one before: no two alike
    slow = [
        dataclasses.replace(cr, duration=cr.duration * (1 + r * 1e-3))
        for r, cr in enumerate(cw.ranks)
    ]
    out.append(dataclasses.replace(cw, ranks=slow))
    return out


@pytest.mark.parametrize("budget", [orbits._W1_BYTES, 1000])
def test_rank_ids_are_the_digest_references(budget: int, monkeypatch) -> None:
    monkeypatch.setattr(orbits, "_W1_BYTES", budget)
    reference = orbits._shapes_reference
    hashed: list[int] = []

    def spy(cw: CompiledWorkload) -> np.ndarray:
        hashed.append(cw.n_ranks)
        return reference(cw)

    monkeypatch.setattr(orbits, "_shapes_reference", spy)
    kinds = []
    for cw in _workloads():
        ids = orbits._shapes(cw)
        assert ids.dtype == np.int64
        assert np.array_equal(ids, reference(cw))
        kinds.append(len(set(ids.tolist())))
    assert kinds[-1] == 32 and min(kinds) < 8  # all distinct, and some alike
    assert bool(hashed) == (budget < 10_000)  # past the budget: the digests

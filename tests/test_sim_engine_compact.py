"""The engine's compact mode (``genie.sim.engine.COMPACT_NODES``: per-node state in typed arrays
instead of lists, for traces of millions of nodes) replays exactly as the list mode does:
every node's and every instance's times, bit for bit, on workloads with lanes, stream rules,
chains of compute, point-to-point and all-to-all-v; and a deadlock is named alike."""

from __future__ import annotations

import numpy as np
import pytest

from genie.errors import DeadlockError
from genie.sim import engine
from genie.sim.adapter import compile_workload
from genie.sim.engine import simulate
from genie.sim.network import AnalyticalBackend
from genie.sim.traffic import NetModel
from genie.workload.generators.llm import llm
from genie.workload.generators.moe import moe
from genie.workload.generators.pytorch_style import pytorch_style

_FIELDS = (
    "offsets",
    "ready",
    "start",
    "end",
    "inst_first_arrival",
    "inst_last_arrival",
    "inst_start",
    "inst_end",
    "inst_last_rank",
)


def _replay(cw, compact: bool, monkeypatch: pytest.MonkeyPatch, **kw):
    monkeypatch.setattr(engine, "COMPACT_NODES", 0 if compact else 1 << 62)
    return simulate(cw, AnalyticalBackend(NetModel(cw.n_ranks, 50 * 2**30, 500e-9)), **kw)


@pytest.mark.parametrize(
    "make",
    [
        lambda: pytorch_style(4, layers=4, steps=2),  # lanes, stream rules, host work
        lambda: llm(16, tp=2, pp=2, layers=4),  # send/recv, chains of compute
        lambda: moe(8, expert_skew=1.2),  # all-to-all-v
    ],
    ids=["pytorch-style", "llm", "moe"],
)
@pytest.mark.parametrize("merge", [True, False])
def test_compact_replays_as_lists_do(make, merge, monkeypatch):
    cw = compile_workload(make())
    a = _replay(cw, False, monkeypatch, merge_chains=merge)
    b = _replay(cw, True, monkeypatch, merge_chains=merge)
    assert a.events == b.events and a.makespan == b.makespan and a.makespan > 0
    for f in _FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f


def test_compact_names_a_deadlock(monkeypatch):
    wl = llm(4, tp=2, pp=2, layers=2)
    recv = next(nd for nd in wl.ranks[1].nodes if nd.type == 6)
    wl.ranks[1].nodes.remove(recv)  # its send never meets a recv
    cw = compile_workload(wl)
    msgs = []
    for compact in (False, True):
        with pytest.raises(DeadlockError) as got:
            _replay(cw, compact, monkeypatch)
        msgs.append(str(got.value))
    assert msgs[0] == msgs[1]

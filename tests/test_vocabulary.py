"""The one collective vocabulary: numbers, names, bus factors, closed forms, everywhere alike."""

from __future__ import annotations

import pytest

from genie import vocabulary as v
from genie.errors import CollectiveError
from genie.sim.network import AnalyticalBackend, Transfer
from genie.sim.traffic import NetModel


def test_chakra_numbers_and_names_round_trip():
    for t in v.CollectiveType:
        assert v.chakra_type(v.chakra_name(int(t))) == int(t)
        assert v.chakra_type(t.name) == int(t)
    assert v.chakra_name(v.P2P) == "send_recv"
    assert v.CollectiveType.ALL_REDUCE == 0  # a missing comm_type must never default to it


def test_planned_names_fold_block_reduce_scatter_and_refuse_the_unplanned():
    assert v.planned_name(v.CollectiveType.REDUCE_SCATTER_BLOCK) == "reduce_scatter"
    assert v.planned_name(v.P2P) == "send_recv"
    for t in (v.CollectiveType.GATHER, v.CollectiveType.SCATTER, v.CollectiveType.BARRIER):
        with pytest.raises(CollectiveError, match="no plan"):
            v.planned_name(t)
    assert v.canonical_collective("AllReduce") == v.canonical_collective(0) == "all_reduce"
    assert v.canonical_collective("REDUCE_SCATTER_BLOCK") == "reduce_scatter"


@pytest.mark.parametrize("n", [1, 2, 8])
def test_bus_factors_follow_nccl_tests(n):
    assert v.bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for c in ("reduce_scatter", "reduce_scatter_block", "all_gather", "all_to_all"):
        assert v.bus_factor(c, n) == pytest.approx((n - 1) / n)
    for c in ("gather", "scatter"):  # nccl-tests: (n-1)/n for both (the old sim table agreed,
        assert v.bus_factor(c, n) == pytest.approx((n - 1) / n)  # the cost model's said 1)
    for c in ("broadcast", "reduce", "send_recv"):
        assert v.bus_factor(c, n) == 1.0
    assert v.bus_factor("barrier", n) == 0.0
    assert v.bus_factor(0, n) == v.bus_factor("ALL_REDUCE", n)


@pytest.mark.parametrize("name", sorted(set(v.TRAFFIC_ALGORITHM) - {"send_recv"}))
def test_every_traffic_model_collective_alone_equals_its_closed_form(name):
    n, size, bw, lat = 6, 3 << 20, 25e9, 1e-6
    be = AnalyticalBackend(NetModel(n, bw, lat))
    t = be.alone(Transfer(0, v.chakra_type(name), size, tuple(range(n)), 0))
    assert t == pytest.approx(v.closed_form(name, None, n, size, bw, 2 * lat), rel=1e-12)
    assert v.formula(name, None)


def test_closed_form_refuses_what_has_none():
    with pytest.raises(CollectiveError):
        v.closed_form("all_reduce", "doubleBinaryTree", 8, 1 << 20, 1e9, 1e-6)
    with pytest.raises(CollectiveError):
        v.closed_form("all_reduce", "halvingDoubling", 6, 1 << 20, 1e9, 1e-6)

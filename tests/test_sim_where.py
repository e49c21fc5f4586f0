"""Where the time goes: exposed communication by dimension and collective, and busiest links."""

from __future__ import annotations

import numpy as np
import pytest

import genie
from genie.collectives import topology as T
from genie.commands.simulate import render
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.attribution import busiest_links, dimension_of, exposed_by
from genie.sim.network import AnalyticalBackend
from genie.sim.program_pricer import ProgramPricer
from genie.sim.streams import order_collectives
from genie.workload.generators import llm


def test_exposed_time_is_split_among_what_is_in_flight():
    # compute [0, 2); comm A [1, 5), comm B [3, 4): exposed = [2, 5) = 3 s; in [3, 4) both fly
    got = exposed_by(
        np.array([0.0]), np.array([2.0]), np.array([1.0, 3.0]), np.array([5.0, 4.0]), ["A", "B"]
    )
    assert got == pytest.approx({"A": 2.5, "B": 0.5})
    # several compute intervals: [0, 1) and [2, 3); comm [0.5, 4): exposed [1, 2) + [3, 4)
    got = exposed_by(
        np.array([0.0, 2.0]), np.array([1.0, 3.0]), np.array([0.5]), np.array([4.0]), ["C"]
    )
    assert got == pytest.approx({"C": 2.0})


@pytest.mark.parametrize(
    ("name", "ranks", "coll", "dim"),
    [
        ("tp_d0_p1", (2, 3), "all_reduce", "TP"),
        ("3 (dp_p0_t1)", (1, 5, 9), "all_reduce", "DP"),
        ("expert", (0, 1), "all_to_all", "EP"),
        ("pipe0", (0, 4), "send_recv", "PP"),
        ("world", tuple(range(8)), "all_to_all", "EP"),
        ("world", tuple(range(8)), "all_reduce", "DP"),
        ("7", (4, 5, 6, 7), "all_reduce", "TP"),  # consecutive ranks, no name
        ("9", (0, 4), "all_reduce", "DP"),  # a regular stride
    ],
)
def test_dimension_from_name_or_shape(name, ranks, coll, dim):
    assert dimension_of(name, ranks, coll, 8) == dim


def _llm_report(topology):
    cw = order_collectives(compile_workload(llm(16, tp=2, pp=2, layers=4, micro_batches=2)))
    placement = [r // 2 for r in range(16)]
    be = AnalyticalBackend(ProgramPricer(topology, placement, 16), track_links=True)
    rep, _ = replay(cw, be)
    return rep, be


def test_the_rollups_add_up_to_the_exposed_communication():
    rep, _ = _llm_report(T.switch(8, 12.5e9, 1e-6, intra_bandwidth=300e9))
    exposed = rep.mean("exposed_comm")
    assert exposed > 0
    assert sum(rep.exposed_by_dimension.values()) == pytest.approx(exposed, rel=1e-9)
    assert sum(rep.exposed_by_collective.values()) == pytest.approx(exposed, rel=1e-9)
    assert set(rep.exposed_by_dimension) <= {"TP", "PP", "DP", "EP", "other"}
    assert {"TP", "DP", "PP"} <= set(rep.exposed_by_dimension)


def test_an_oversubscribed_uplink_is_named_the_bottleneck():
    topo = T.leaf_spine(2, 1, 4, 12.5e9, 1e-6, 4.0, intra_bandwidth=300e9)
    rep, be = _llm_report(topo)
    links = busiest_links(be, rep.iteration_s)
    assert links and "spine" in links[0]["link"] and "leaf" in links[0]["link"]
    assert links[0]["bottleneck_share"] > 0.1
    assert all(0 <= x["utilisation"] <= 1 + 1e-9 for x in links)
    star, sbe = _llm_report(T.switch(8, 12.5e9, 1e-6, intra_bandwidth=300e9))
    assert all("spine" not in x["link"] for x in busiest_links(sbe, star.iteration_s))


def test_simulate_json_and_text_carry_where_the_time_goes(tmp_path, capsys):
    prefix = tmp_path / "llm"
    genie.save_workload(genie.generate(genie.Transformer(ranks=8)).workload, prefix)
    sim = genie.simulate(genie.SimulateSpec(workload=str(prefix)))
    rep = sim.to_dict()["reports"][0]
    assert rep["exposed_by_dimension"] and rep["exposed_by_collective"] and rep["links"]
    render(sim)  # what genie simulate prints
    out = " ".join(capsys.readouterr().out.split())
    assert "where the exposed communication goes" in out and "busiest links" in out

"""Stragglers and jitter: perturbed compute, who waited on whom, and the cost in simulate."""

from __future__ import annotations

import numpy as np
import pytest

import genie
from genie.cli import main
from genie.commands.simulate import render
from genie.errors import UsageError
from genie.live.plan import compile_oplists
from genie.sim import perturb
from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder, Kind
from genie.sim.network import ZeroNetwork
from genie.sim.waits import slowest, straggler_cost, who_waited

MS = 1e-3


def _step(n: int = 4, layers: int = 3):
    """Per layer: 1 ms compute then an all-reduce of every rank."""
    b = GraphBuilder(n)
    for r in range(n):
        last = None
        for _ in range(layers):
            c = b.compute(r, 1 * MS, [last] if last is not None else [])
            last = b.collective(r, "all_reduce", 1024, deps=[c])
    return b.build()


def test_slowdown_scales_only_the_stragglers_compute() -> None:
    cw = _step()
    p = perturb.Perturbation({2: 1.5})
    out = perturb.apply(cw, p)
    for r, (a, b) in enumerate(zip(cw.ranks, out.ranks, strict=True)):
        comp = a.kind == Kind.COMPUTE
        want = 1.5 if r == 2 else 1.0
        assert np.allclose(b.duration[comp], a.duration[comp] * want)
        assert np.array_equal(b.duration[~comp], a.duration[~comp])
    assert np.allclose(cw.ranks[2].duration[cw.ranks[2].kind == Kind.COMPUTE], 1 * MS)  # kept


def test_jitter_is_seeded_per_rank_and_has_mean_one() -> None:
    b = GraphBuilder(2)
    for r in range(2):
        for _ in range(4000):
            b.compute(r, 1 * MS)
    cw = b.build()
    for dist in perturb.DISTRIBUTIONS:
        p = perturb.Perturbation(jitter=dist, sigma=0.1, seed=4)
        one, two = perturb.apply(cw, p), perturb.apply(cw, p)
        assert np.array_equal(one.ranks[1].duration, two.ranks[1].duration)
        assert abs(one.ranks[0].duration.mean() / MS - 1) < 0.01, dist
        assert one.ranks[0].duration.std() / MS == pytest.approx(0.1, rel=0.1)
        other = perturb.apply(cw, perturb.Perturbation(jitter=dist, sigma=0.1, seed=5))
        assert not np.array_equal(one.ranks[0].duration, other.ranks[0].duration)
    # rank 1 of a job placed at global rank 1 draws what global rank 1 draws anywhere
    p = perturb.Perturbation(jitter="normal", sigma=0.1, seed=4)
    shifted = perturb.apply(cw, p, rank_base=1)
    assert np.array_equal(shifted.ranks[0].duration, perturb.apply(cw, p).ranks[1].duration)


def test_the_others_wait_on_the_straggler_by_exactly_its_extra_compute() -> None:
    cw = perturb.apply(_step(), perturb.Perturbation({2: 2.0}))
    rep, raw = replay(cw, ZeroNetwork())
    assert rep.iteration_s == pytest.approx(3 * 2 * MS)
    doc = who_waited(cw, raw)
    by = {x["rank"]: x for x in doc["by_rank"]}
    for r in (0, 1, 3):  # three layers, 1 ms each behind rank 2
        assert by[r]["wait_s"] == pytest.approx(3 * MS)
        assert by[r]["waited_most_on"] == 2
    assert by[2]["wait_s"] == 0 and by[2]["made_others_wait_s"] == pytest.approx(9 * MS)
    assert slowest(doc["by_rank"]) == 2
    assert {(p["waiter"], p["waited_on"]) for p in doc["pairs"]} == {(0, 2), (1, 2), (3, 2)}
    cost = straggler_cost(rep.iteration_s, 3 * MS)
    assert cost["cost_s"] == pytest.approx(3 * MS) and cost["cost_share"] == pytest.approx(1.0)


def test_parsing_and_the_file_form(tmp_path) -> None:
    assert perturb.parse_stragglers(["3=1.5", "8-9=1.2"]) == {3: 1.5, 8: 1.2, 9: 1.2}
    assert perturb.parse_jitter("lognormal:5%") == ("lognormal", pytest.approx(0.05))
    f = tmp_path / "p.toml"
    f.write_text('seed = 7\njitter = "normal:0.02"\n[slowdown]\n1 = 2.0\n"2-3" = 1.1\n')
    p = perturb.combine(str(f), ["1=3"], None, None)
    assert p.slowdown == {1: 3.0, 2: 1.1, 3: 1.1} and p.seed == 7
    assert (p.jitter, p.sigma) == ("normal", 0.02)
    for bad in (["3"], ["x=2"], ["3=0"], ["3=nan"], ["5-2=2"]):
        with pytest.raises(UsageError):
            perturb.parse_stragglers(bad)
    for bad in ("gauss:0.1", "normal", "normal:x", "normal:-1"):
        with pytest.raises(UsageError):
            perturb.parse_jitter(bad)
    f.write_text("speed = 3\n")
    with pytest.raises(UsageError, match="unknown keys"):
        perturb.load_file(f)
    with pytest.raises(UsageError, match="outside"):
        perturb.apply(_step(), perturb.Perturbation({9: 2.0}))


def test_emulate_op_lists_carry_the_stragglers_gaps() -> None:
    cw = perturb.apply(_step(2, 2), perturb.Perturbation({1: 3.0}))
    plan = compile_oplists(cw)
    assert [g for _, _, g in plan.rank_ops[0]] == [1_000_000, 1_000_000]
    assert [g for _, _, g in plan.rank_ops[1]] == [3_000_000, 3_000_000]


def test_simulate_reports_what_the_straggler_costs_and_who_waited(dp, capsys, tmp_path):
    spec = genie.SimulateSpec(workload=dp)
    sim = genie.simulate(spec.replace(perturb=genie.Perturb(stragglers=("2=1.5",))))
    rep = sim.reports[0]
    s = rep.stragglers
    assert s["cost_s"] > 0 and s["baseline_s"] < s["iteration_s"] == rep.iteration_s
    by = {x["rank"]: x for x in s["by_rank"]}
    assert all(by[r]["waited_most_on"] == 2 and by[r]["wait_s"] > 0 for r in (0, 1, 3))
    assert by[2]["made_others_wait_s"] > 0
    # without a perturbation nothing is said (and symmetric ranks are still replayed once)
    plain = genie.simulate(spec).reports[0]
    assert plain.stragglers == {} and plain.symmetric
    assert plain.iteration_s == pytest.approx(s["baseline_s"])
    # jitter from a file, seeded: the same twice, another seed differs
    f = tmp_path / "j.toml"
    f.write_text('seed = 1\njitter = "lognormal:0.2"\n')
    runs = []
    for seed in (None, None, 2):
        jitter = genie.Perturb(file=str(f), seed=seed)
        runs.append(genie.simulate(spec.replace(perturb=jitter)).iteration_s)
    assert runs[0] == runs[1] != runs[2]
    # the printed report has the stragglers' table
    render(sim)
    out = capsys.readouterr().out
    assert "stragglers over analytical" in out and "waited most on" in out


@pytest.mark.parametrize(
    "extra", [["--straggler", "9=2"], ["--jitter", "cauchy:1"], ["--perturb", "/nonexistent"]]
)
def test_bad_straggler_options_fail_with_one_line(dp, capsys, extra):
    assert main(["simulate", dp, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("genie: error:")


def test_a_straggler_in_one_job_of_two(dp):
    # global rank 5 is rank 1 of the second job; the first job does not wait on it
    jobs = (genie.Job(workload=dp), genie.Job(workload=dp))
    sim = genie.simulate(genie.SimulateSpec(jobs=jobs, perturb=genie.Perturb(stragglers=("5=2",))))
    by = {x["rank"]: x for x in sim.reports[0].stragglers["by_rank"]}
    assert all(by[r]["wait_s"] == 0 for r in range(4))
    assert all(by[r]["waited_most_on"] == 5 for r in (4, 6, 7))
    assert sim.jobs is not None
    first, second = sim.jobs["jobs"]
    assert second["alone_s"] > first["alone_s"]  # the straggler slows its own job alone too

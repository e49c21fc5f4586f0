"""Several jobs on one fabric: the combined workload, alone vs together, contended links."""

from __future__ import annotations

import re

import numpy as np
import pytest

import genie
from genie.cli import main
from genie.collectives import topology as T
from genie.commands.simulate import render
from genie.errors import UsageError
from genie.placement import job_blocks, parse_hosts, place_on
from genie.sim.api import replay
from genie.sim.compiled import GraphBuilder, Kind
from genie.sim.jobs import JobSpec, job_times, merge_jobs
from genie.sim.network import AnalyticalBackend
from genie.sim.program_pricer import ProgramPricer

MS = 1e-3


def _pp_job() -> object:
    """Two ranks: compute, a send 0 -> 1, an all-reduce on a group of both."""
    b = GraphBuilder(2, "pp")
    g = b.group("pair", (0, 1))
    c = b.compute(0, 1 * MS)
    s = b.send(0, 1, 4096, tag=5, deps=[c])
    b.recv(1, 0, 4096, tag=5)
    b.collective(0, "all_reduce", 1 << 20, g, deps=[s])
    b.collective(1, "all_reduce", 1 << 20, g)
    return b.build()


def test_merge_renames_groups_shifts_peers_and_delays_a_late_job() -> None:
    job = _pp_job()
    a = JobSpec("a", job, (0, 1))
    b = JobSpec("b", job, (2, 3), start_s=3 * MS)
    cw, jm = merge_jobs([a, b])
    assert cw.n_ranks == 4
    assert cw.group_names == ["a/pair", "b/pair"]
    assert cw.group_ranks == [(0, 1), (2, 3)]
    assert jm.placement == [0, 1, 2, 3]
    assert [j.ranks for j in jm.jobs] == [range(0, 2), range(2, 4)]
    # job b's send goes to its own rank 1, global rank 3; its ranks start with a delay node
    r2 = cw.ranks[2]
    assert r2.kind[0] == Kind.MEMORY and r2.duration[0] == pytest.approx(3 * MS)
    sends = np.flatnonzero(r2.kind == Kind.SEND)
    assert r2.peer[sends].tolist() == [3]
    # every instance belongs to one job: a p2p pair and an all-reduce each
    assert sorted(len(j.instances) for j in jm.jobs) == [2, 2]
    for j in jm.jobs:
        for iid in j.instances:
            assert set(cw.instance_ranks(iid)) <= set(j.ranks)
    # replayed on a switch: b runs as a does, 3 ms later
    topo = T.switch(4, 12.5e9, 1e-6)
    rep, raw = replay(cw, AnalyticalBackend(ProgramPricer(topo, jm.placement, 4)))
    ta, tb = job_times(jm, raw)
    assert tb.iteration_s == pytest.approx(ta.iteration_s, rel=1e-9)
    assert tb.end_s == pytest.approx(ta.end_s + 3 * MS, rel=1e-9)
    assert rep.iteration_s == pytest.approx(tb.end_s)


def test_placement_helpers() -> None:
    assert parse_hosts("0-3") == (0, 1, 2, 3)
    assert parse_hosts("0,2,4-5") == (0, 2, 4, 5)
    assert place_on(4, (4, 5)).hosts == (4, 4, 5, 5)
    assert job_blocks([4, 2], 2) == [(0, 1), (2,)]
    for bad in ("3-1", "a", "0,0", ""):
        with pytest.raises(UsageError):
            parse_hosts(bad)
    with pytest.raises(UsageError, match="do not fit"):
        place_on(8, (0, 1), 2)
    with pytest.raises(UsageError, match="names must differ"):
        merge_jobs([JobSpec("x", _pp_job(), (0, 1)), JobSpec("x", _pp_job(), (2, 3))])


LEAF_SPINE = genie.Fabric(topology="leaf_spine", leaves=2, oversubscription=4, bandwidth="100gbit")


def _jobs(
    dp: str, hosts: tuple[str, str], starts=(0.0, 0.0), fabric: genie.Fabric | None = None
) -> genie.Simulation:
    """Two jobs of ``dp`` on ``hosts`` (one entry per job), starting at ``starts``."""
    jobs = tuple(
        genie.Job(workload=dp, hosts=h, start=t) for h, t in zip(hosts, starts, strict=True)
    )
    return genie.simulate(genie.SimulateSpec(jobs=jobs, fabric=fabric or genie.Fabric()))


def test_rings_crossing_one_uplink_slow_each_other_and_disjoint_leaves_do_not(dp):
    # leaves hold hosts 0-3 and 4-7; a job on 0,1,4,5 and one on 2,3,6,7 both cross the uplinks
    jobs = _jobs(dp, ("0,1,4,5", "2,3,6,7"), fabric=LEAF_SPINE).jobs
    assert jobs is not None
    assert [j["name"] for j in jobs["jobs"]] == ["dp", "dp#2"]
    for j in jobs["jobs"]:
        assert j["slowdown"] > 1.5, j  # the 4:1 uplinks shared by two all-reduce rings
        assert j["together_s"] > j["alone_s"]
    names = [x["link"] for x in jobs["contended_links"]]
    assert names and all("spine" in n for n in names)
    assert all(set(x["bytes_by_job"]) == {"dp", "dp#2"} for x in jobs["contended_links"])
    assert jobs["contended_links"][0]["saturated_together_share"] > 0.5
    # the same two jobs each inside one leaf: no shared link, no slowdown
    apart = _jobs(dp, ("0-3", "4-7"), fabric=LEAF_SPINE).jobs
    assert apart is not None
    for j in apart["jobs"]:
        assert j["slowdown"] == pytest.approx(1.0, rel=1e-9)
    assert apart["contended_links"] == []
    assert apart["shared_hosts"] == []


def test_jobs_on_the_same_hosts_share_their_nics_and_a_late_start_overlaps_less(dp):
    same = _jobs(dp, ("0-3", "0-3")).jobs
    assert same is not None
    assert list(same["shared_hosts"]) == [0, 1, 2, 3]
    slow = [j["slowdown"] for j in same["jobs"]]
    assert min(slow) > 1.3
    late = _jobs(dp, ("0-3", "0-3"), starts=(0.0, "50ms"))
    assert late.jobs is not None
    # 50 ms later the first job has finished: the second runs alone
    a, b = late.jobs["jobs"]
    assert b["start_s"] == pytest.approx(0.05)
    assert a["slowdown"] == pytest.approx(1.0) and b["slowdown"] == pytest.approx(1.0)
    assert late.reports[0].iteration_s == pytest.approx(0.05 + b["alone_s"])


def test_jobs_text_output(dp, capsys):
    render(_jobs(dp, ("0,1,4,5", "2,3,6,7"), fabric=LEAF_SPINE))
    out = capsys.readouterr().out
    assert "jobs on one fabric" in out and "slowdown" in out
    assert "links the jobs contended on" in out


@pytest.mark.parametrize(
    ("extra", "msg"),
    [
        (["--job-hosts", "3-1"], "not a range"),
        (["--job-hosts", "0-1", "--job-hosts", "2-3", "--job-hosts", "4"], "for 2 workloads"),
        (["--network", "measured:x.json"], "analytical network only"),
        (["--job-name", "a", "--job-name", "a"], "names must differ"),
    ],
)
def test_bad_job_options_fail_with_one_line(dp, capsys, extra, msg):
    assert main(["simulate", dp, dp, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("genie: error:")
    assert re.search(msg, err[0]), err[0]

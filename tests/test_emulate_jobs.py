"""Several jobs on the wire, planned: one op-list plan for all jobs, a late job's offset in it,
and the command's bad input (the live run is tests/test_jobs_netns.py)."""

from __future__ import annotations

import pytest

from genie.cli import main
from genie.live.jobs import job_span
from genie.live.plan import compile_oplists
from genie.sim.adapter import compile_workload, load_workload
from genie.sim.jobs import JobSpec, merge_jobs

MS = 1e-3


def test_one_plan_runs_every_job_and_a_late_job_starts_late_on_the_wire(dp) -> None:
    cw = compile_workload(load_workload(dp))
    late = JobSpec("b", cw, (4, 5, 6, 7), 7 * MS)
    merged, jm = merge_jobs([JobSpec("a", cw, (0, 1, 2, 3)), late])
    plan = compile_oplists(merged)
    assert sorted(plan.rank_ops) == list(range(8))  # one Go starts all eight ranks
    a, b = jm.jobs
    for ra, rb in zip(a.ranks, b.ranks, strict=True):
        ops_a, ops_b = plan.rank_ops[ra], plan.rank_ops[rb]
        assert len(ops_a) == len(ops_b) > 0
        # an op timed from the common start (no collective before it) is due 7 ms later in
        # b than in a; an op timed from an earlier collective's end keeps a's gap
        assert not ops_a[0][1]
        for (_, deps, ga), (_, deps_b, gb) in zip(ops_a, ops_b, strict=True):
            assert deps == deps_b
            assert gb - ga == pytest.approx(0 if deps else 7e6, abs=1)
        # each job's ops are its own instances only
        assert set(plan.op_iid[ra]) <= set(a.instances)
        assert set(plan.op_iid[rb]) <= set(b.instances)


def test_job_span_is_from_the_jobs_start_to_its_last_op() -> None:
    rows = [
        {"iid": 0, "intervals_s": [[0.0, 0.0, 0.10], [0.0, 0.0, 0.12]]},
        {"iid": 1, "intervals_s": [[0.02, 0.02, 0.30], [0.02, 0.02, 0.34]]},
    ]
    assert job_span(rows, [0], 0.0) == pytest.approx(0.11)
    assert job_span(rows, [1], 0.02) == pytest.approx(0.30)
    assert job_span(rows, [5], 0.0) == 0.0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--job-hosts", "0,9"], "testbed netns-star has 4 hosts"),
        (["--mode", "isolated"], "overlapped only"),
        (["--job-hosts", "0-1", "--job-hosts", "2-3", "--job-hosts", "0"], "3 --job-hosts"),
    ],
)
def test_bad_jobs_are_one_line_errors(dp, capsys, extra, message) -> None:
    args = ["emulate", dp, dp, "--testbed", "testbed/netns-star.toml", *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("genie: error:") and message in err[0]

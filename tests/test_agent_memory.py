"""Agents give a job's memory back: after a job that held hundreds of MB, an agent's resident
memory is back within 50 MB of what it was before the job (``genie_agent.memory``: gc and glibc's
``malloc_trim`` once the job is dropped, which the agent logs as ``memory: ... resident A -> B``).
"""

from __future__ import annotations

import re
import time

import msgspec
import psutil
import pytest

from genie.api.benchmark import BenchSpec, bench
from genie.controller.local import LocalCluster

MIB = 1 << 20
BACK_WITHIN = 50 * MIB
TRIM = re.compile(r"memory: .* resident (\d+) -> (\d+) MiB")


@pytest.fixture
def cluster(tmp_path):
    cl = LocalCluster.start(2, tmp_path / "cl", heartbeat_s=0.5)
    try:
        yield cl
    finally:
        cl.stop()


def _trims(cluster) -> list[list[tuple[int, int]]]:
    """Per agent, its logged trims: (resident before, after) in MiB."""
    return [
        [(int(a), int(b)) for a, b in TRIM.findall(p.log.read_text(errors="replace"))]
        for p in cluster.procs
    ]


def _rss_after_trims(cluster, n: int, bound_s: float = 10.0) -> list[int]:
    """Each agent's RSS once it has logged ``n`` trims (one per job it dropped)."""
    deadline = time.monotonic() + bound_s
    while any(len(t) < n for t in _trims(cluster)):
        assert time.monotonic() < deadline, _trims(cluster)
        time.sleep(0.05)
    return [psutil.Process(p.pid).memory_info().rss for p in cluster.procs]


def test_an_agent_returns_a_jobs_memory_after_it(cluster) -> None:
    small = BenchSpec(
        testbed=str(cluster.testbed_path),
        sizes=(4096,),
        iters=3,
        warmup=1,
        store=None,
        progress=False,
    )
    assert bench(small).rows  # every code path warm: imports, threads, connections
    before = _rss_after_trims(cluster, 1)
    assert bench(msgspec.structs.replace(small, sizes=(64 * MIB,))).rows
    after = _rss_after_trims(cluster, 2)
    held = [t[1][0] * MIB for t in _trims(cluster)]  # resident as the job was dropped
    print(
        "\nagents' RSS before the 64 MiB all-reduce job / holding it / after: "
        + "; ".join(
            f"{b / MIB:.0f} / {h / MIB:.0f} / {a / MIB:.0f} MiB"
            for b, h, a in zip(before, held, after, strict=True)
        )
    )
    for b, h, a in zip(before, held, after, strict=True):
        assert h - b > 2 * BACK_WITHIN  # the job did hold its buffers (a 64 MiB all-reduce)
        assert a - b < BACK_WITHIN

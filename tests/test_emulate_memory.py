"""Real steps in the loop: memory bounded by what is in flight, any number of instances.

The issue's cases on four local agents with the default (overlapped) emulate: a 16-rank
transformer step (608 instances, 4 ranks per agent) and an 8-rank data-parallel step placed
round-robin (2 ranks per agent), each with every agent's peak RSS under 500 MB and its RSS
after the job within 50 MB of before; and one op list of 10^4 instances. Bounds on memory, not
on time.
"""

from __future__ import annotations

import threading
import time

import psutil
import pytest

import genie
from genie.controller.local import LocalCluster

MB = 10**6


class Rss:
    """Every 20 ms, the RSS of some processes; each one's peak (bytes)."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = [0] * len(pids)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def now(self) -> list[int]:
        return [p.memory_info().rss for p in self.procs]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = [max(a, b) for a, b in zip(self.peak, self.now(), strict=True)]
            self._stop.wait(0.02)

    def __enter__(self) -> Rss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _emulate(tmp_path, spec, agents: int, per_agent: int, placement: str):
    prefix = tmp_path / "wl"
    genie.save_workload(genie.generate(spec).workload, prefix)
    with (
        LocalCluster.start(agents, tmp_path / "c", ranks_per_host=per_agent) as cl,
        Rss([p.pid for p in cl.procs]) as rss,
    ):
        time.sleep(0.2)
        before = rss.now()
        o = genie.emulate(
            genie.EmulateSpec(
                workload=str(prefix),
                testbed=str(cl.testbed_path),
                placement=placement,
                iterations=1,
                warmup=0,
                calibration="none",
                store=None,
            )
        )
        time.sleep(0.5)  # the agents have released the job
        after = rss.now()
        peak = rss.peak
    return o, before, peak, after


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "agents", "per_agent", "placement", "instances"),
    [
        (genie.Transformer(ranks=16), 4, 4, "testbed", 608),
        (genie.DataParallel(ranks=8), 4, 2, "round-robin", 36),
    ],
    ids=["llm16", "dp8-round-robin"],
)
def test_a_real_step_runs_in_bounded_memory_and_gives_it_back(
    tmp_path, spec, agents, per_agent, placement, instances
) -> None:
    o, before, peak, after = _emulate(tmp_path, spec, agents, per_agent, placement)
    assert len(o.rows) == instances and all(r["measured_p50_s"] > 0 for r in o.rows)
    for b, p, a in zip(before, peak, after, strict=True):
        print(f"\nagent RSS before {b / MB:.0f} MB, peak {p / MB:.0f} MB, after {a / MB:.0f} MB")
        assert p < 500 * MB
        assert a - b < 50 * MB


@pytest.mark.slow
def test_an_op_list_of_ten_thousand_instances_runs(tmp_path) -> None:
    spec = genie.Microbench(ranks=2, sizes=(1024,), types=("all_reduce",), iterations=10_000)
    o, _before, peak, _after = _emulate(tmp_path, spec, 2, 1, "testbed")
    assert len(o.rows) == 10_000
    assert all(r["measured_p50_s"] > 0 for r in o.rows)
    assert sum(1 for r in o.runs if not r["warmup"]) == 1
    assert max(peak) < 500 * MB

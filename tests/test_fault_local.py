"""Faults with real agent processes on loopback: an agent killed mid-collective, a lost controller.

Heartbeats are short (HB seconds) so each fault is detected in well under a second; every
process is started here and ended by pid in teardown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from _agents import HOLDER

from genie.collectives import build_program
from genie.controller.local import LocalCluster, open_controller
from genie.controller.session import Timeouts
from genie.errors import RuntimeFault

HB = 0.2
MISSED = 3
BOUND_S = MISSED * HB + 0.5  # detection bound: 3 beats plus scheduling slack on a busy 2-core box


def _timeouts() -> Timeouts:
    return Timeouts(heartbeat_s=HB, missed_beats=MISSED, register_s=5.0, abort_s=1.0)


@pytest.fixture
def cluster(tmp_path):
    cl = LocalCluster.start(3, tmp_path / "cl", heartbeat_s=HB)
    try:
        yield cl
    finally:
        cl.stop()


def _long_program(n: int):
    return build_program("all_reduce", "ring", n, 8 << 20, size_convention="nccl")


def _small_program(n: int):
    return build_program("all_gather", "ring", n, 4096, size_convention="nccl")


def _kill_later(pid: int, after_s: float, when: dict, sig=signal.SIGKILL) -> threading.Thread:
    def go() -> None:
        time.sleep(after_s)
        when["t"] = time.monotonic()
        os.kill(pid, sig)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_agent_killed_mid_collective_is_named_and_others_return_to_idle(cluster, how) -> None:
    """kill -9 (dead: its peers see the links close) or SIGSTOP (frozen/cut off: silence)."""
    names = [h.name for h in cluster.testbed.hosts]
    ctl = open_controller(cluster.testbed, timeouts=_timeouts())
    victim = cluster.procs[2]
    try:
        ctl.connect()
        ctl.sync_clocks(rounds=4)
        ctl.prepare([_long_program(3)], names)
        first = ctl.run(0, iters=2)  # finishes: the results before the fault
        assert len(first.instances) == 2
        when: dict = {}
        sig = signal.SIGKILL if how == "kill" else signal.SIGSTOP
        _kill_later(victim.pid, 0.3, when, sig)
        with pytest.raises(RuntimeFault) as info:
            ctl.run(0, iters=10_000, timeout_s=60)  # would run for minutes without the fault
        detected = time.monotonic() - when["t"]
        ms = detected * 1e3
        print(f"\n{sig.name} of agent {names[2]}: detected after {ms:.0f} ms: {info.value}")
        assert names[2] in str(info.value) and "all_reduce/ring" in str(info.value)
        assert "lost" in str(info.value)
        assert detected < BOUND_S
        if how == "kill":
            assert victim.wait(timeout=2) == -signal.SIGKILL
        # the survivors dropped the job (connections, buffers): a new job on them runs at once
        ctl.prepare([_small_program(2)], names[:2])
        again = ctl.run(0, iters=2)
        assert len(again.instances) == 2 and all(x.time_s > 0 for x in again.instances)
        ctl.release()
    finally:
        ctl.close()
        ctl.t.close()
        if victim.poll() is None:
            os.kill(victim.pid, signal.SIGKILL)  # a stopped agent cannot handle SIGTERM
            victim.wait(timeout=5)


def test_bench_keeps_sizes_measured_before_a_kill_and_fails(cluster, tmp_path) -> None:
    from genie.api.benchmark import BenchSpec, bench
    from genie.store import RunStore

    store = tmp_path / "runs.sqlite"
    sizes = [4096, 8192, 64 << 20]  # the last one runs long enough to be killed in
    cfg = BenchSpec(
        testbed=str(cluster.testbed_path),
        collective="all_reduce",
        algorithm="ring",
        sizes=sizes,
        iters=200,
        warmup=0,
        store=str(store),
        progress=False,
    )
    victim = cluster.procs[1]
    killed: dict = {}

    def killer() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # kill once the two small sizes are stored
            try:
                with RunStore(store) as st:
                    runs = st.list_runs()
                    if runs and runs[0].instances >= 400:
                        time.sleep(0.3)
                        killed["t"] = time.monotonic()
                        os.kill(victim.pid, signal.SIGKILL)
                        return
            except Exception:
                pass
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    with pytest.raises(RuntimeFault, match=cluster.testbed.hosts[1].name):
        bench(cfg, timeouts=_timeouts())
    t.join(5)
    assert "t" in killed
    print(f"\nbench: agent killed, run failed {time.monotonic() - killed['t']:.2f} s later")
    with RunStore(store) as st:
        (info,) = st.list_runs()
        assert info.status == "failed" and "lost" in info.error
        times = st.size_times(info.run_id)
        assert {4096, 8192} <= times.keys() <= {4096, 8192, 64 << 20}
        assert len(times[4096]) == len(times[8192]) == 200
        # bench stores each batch of a size as it ends: batches of the killed size stay too
        assert info.instances == 400 + len(times.get(64 << 20, []))


def _agent_logs(cluster) -> dict[str, str]:
    return {
        h.name: (cluster.dir / f"agent-{h.name}.log").read_text(errors="replace")
        for h in cluster.testbed.hosts
    }


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_lost_controller_agents_go_idle_and_accept_the_next(cluster, how) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cluster.testbed_path), str(HB)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(0.3)  # mid-job: the collective is looping on the agents
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        deadline = t0 + 5
        while time.monotonic() < deadline:
            if all("idle: job" in log for log in _agent_logs(cluster).values()):
                break
            time.sleep(0.01)
        detected = time.monotonic() - t0
        logs = _agent_logs(cluster)
        assert all("idle: job" in log for log in logs.values()), logs
        # at least one agent judged the controller lost by missed beats (the others may have
        # dropped the job a moment earlier because that agent closed their data connections)
        assert any("lost: controller" in log for log in logs.values()), logs
        print(f"\ncontroller {how}: all agents idle after {detected * 1e3:.0f} ms")
        assert detected < BOUND_S
        # a new controller gets the old one's agents and runs a job: a killed controller's
        # connection closed, so its agents let it go at its first missed beat; a stopped one
        # (connection still open) is displaced by the new Hello once it has been silent long
        time.sleep(max(0.0, t0 + MISSED * HB + 0.1 - time.monotonic()))
        ctl = open_controller(cluster.testbed, timeouts=_timeouts())
        try:
            ctl.connect()
            names = [h.name for h in cluster.testbed.hosts]
            ctl.prepare([_small_program(3)], names)
            assert len(ctl.run(0, iters=2).instances) == 2
            ctl.release()
        finally:
            ctl.close()
            ctl.t.close()
        why = "disconnected" if how == "kill" else "takeover"
        assert all(why in log for log in _agent_logs(cluster).values())
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        proc.stdout.close()
        proc.stderr.close()


def test_batched_size_stores_each_go_before_a_kill(cluster, tmp_path) -> None:
    from genie.controller.sweep import run_size
    from genie.store import RunStore

    names = [h.name for h in cluster.testbed.hosts]
    prog = _long_program(3)
    ctl = open_controller(cluster.testbed, timeouts=_timeouts())
    batches: list[int] = []
    with RunStore(tmp_path / "runs.sqlite") as st:
        rid = st.start_run("batched")

        def store(batch) -> None:
            st.add_instances(rid, prog.spec, batch)
            batches.append(len(batch))
            if sum(batches) >= 12 and len(batches) >= 3:
                os.kill(cluster.procs[2].pid, signal.SIGKILL)

        try:
            ctl.connect()
            with pytest.raises(RuntimeFault, match=names[2]):
                run_size(ctl, prog, names, iters=100_000, warmup=2, on_instances=store, batch_s=0.1)
        finally:
            ctl.close()
            ctl.t.close()
        rows = st.instances(rid, include_warmup=True)
    assert batches[0] == 3 and len(batches) >= 3  # 2 warm-up + 1 measured, then growing batches
    assert len(rows) == sum(batches)  # every batch that ended is in the store
    assert [r["iteration"] for r in rows] == list(range(len(rows)))
    assert [r["warmup"] for r in rows[:3]] == [1, 1, 0]

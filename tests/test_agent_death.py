"""A dead agent is called dead: how its process ended (signal, exit status, the kernel's OOM kill),
within 2 s of its death, not "silent for N heartbeat intervals"; a local cluster says which agent
died and how to restart it, and restarts it on its ports.

The rig tests drive the controller over an in-process channel and a fake clock (a dropped
connection, a postmortem's answer); the live tests kill real agents on loopback, under their
supervisors (``genie.controller.local_agents``), and time the error from the kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from genie.collectives import build_program
from genie.collectives.program import Program, ProgramSpec
from genie.controller import Controller, InProcChannel
from genie.controller import faults as f
from genie.controller.local import LocalCluster, local_deaths, open_controller, restart_agents
from genie.controller.local_agents import alive, states
from genie.controller.postmortem import Fate
from genie.controller.session import Timeouts
from genie.errors import AgentLost, DataPlaneError, GenieError
from genie.wire import messages as p
from genie.wire.clock import FakeClock
from genie.wire.exits import ExitRecord, last_words, read_exit, write_exit
from genie_agent.programs import BUILTIN
from genie_agent.state import AgentCore, Event

HB = 0.5  # what `genie cluster local` agents and controllers beat at
DEATH_BOUND_S = 4.0  # the promise is 2 s; the slack is for a loaded 2-core machine


# ---- the exit record ---------------------------------------------------------------------------
def test_an_exit_record_says_what_the_os_said_and_claims_oom_only_on_evidence(tmp_path) -> None:
    plain = ExitRecord(pid=7, returncode=-9)
    assert plain.describe() == "killed by SIGKILL"
    oom = ExitRecord(pid=7, returncode=-9, oom="Out of memory: Killed process 7 (python)")
    assert oom.describe() == (
        "killed by SIGKILL (the kernel's OOM killer: Out of memory: Killed process 7 (python))"
    )
    died = ExitRecord(pid=7, returncode=1, last_words="MemoryError")
    assert died.describe() == "exited with status 1 (its last words: 'MemoryError')"
    assert ExitRecord(pid=7, returncode=0, last_words="stopped").describe() == (
        "exited with status 0"
    )
    assert ExitRecord(pid=7, returncode=-11).describe() == "killed by SIGSEGV"
    write_exit(tmp_path / "a.exit.json", oom)
    assert read_exit(tmp_path / "a.exit.json") == oom
    assert read_exit(tmp_path / "a.exit.json", pid=8) is None  # another process's record
    assert read_exit(tmp_path / "none.json") is None
    log = tmp_path / "a.log"
    log.write_text("old\nTraceback (most recent call last):\nMemoryError\ngenie-supervise: x\n")
    assert last_words(log) == "MemoryError"
    assert last_words(log, since=log.stat().st_size) == ""


# ---- the controller, over an in-process channel -------------------------------------------------
class _Plane:
    def __init__(self) -> None:
        self.pending: list[Event] = []

    def endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", 9000

    def prepare(self, plan, prep, post) -> None:
        done = p.Prepared(
            job=prep.job, epoch=prep.epoch, ranks=plan.ranks, connections=0, setup_s=0
        )
        self.pending.append(Event("prepared", prep.job, prep.epoch, done))

    def go(self, go, start, post) -> None:  # pragma: no cover - never started here
        raise AssertionError("no runs in these tests")

    def release(self) -> None:
        pass


class _Postmortem:
    def __init__(self, fates: dict[str, Fate]) -> None:
        self.fates = fates
        self.asked: list[str] = []

    def watch(self, hellos) -> None:
        pass

    def fate(self, agent: str) -> Fate:
        self.asked.append(agent)
        return self.fates.get(agent, Fate(None))


def _rig(names=("a0", "a1")):
    clock = FakeClock()
    planes = {n: _Plane() for n in names}
    cores = {n: AgentCore(n, planes[n], clock, planes[n].pending.append) for n in names}

    def handler(name):
        return lambda frame: [p.encode(m) for m in cores[name].handle(frame)]

    def pump():
        out = []
        for name, core in cores.items():
            while planes[name].pending:
                out += [(name, p.encode(m)) for m in core.on_event(planes[name].pending.pop(0))]
            out += [(name, p.encode(m)) for m in core.tick()]
        return out

    tr = InProcChannel({n: handler(n) for n in names}, pump, lambda s: clock.advance(int(s * 1e9)))
    ctl = Controller(tr, list(names), clock, controller_id="ctl-test", heartbeat_s=HB)
    return ctl, tr, clock


def _selftest() -> list[Program]:
    spec = ProgramSpec(collective="selftest", algorithm="ring", n_ranks=2, size=64, chunks=1)
    return [Program(spec, BUILTIN[("selftest", "ring")])]


def _die(tr: InProcChannel, agent: str, retries: int = 1) -> None:
    """``agent``'s process is gone: its frames vanish and its connection has dropped."""
    tr.drop.add(agent)
    tr.dropped[agent] = retries


def test_a_dropped_agent_whose_process_ended_is_lost_with_its_cause_before_a_beat() -> None:
    ctl, tr, clock = _rig()
    ctl.connect()
    dead = Fate(True, "its process (pid 7) was killed by SIGKILL", "genie cluster local --x")
    ctl.postmortem = _Postmortem({"a1": dead})
    _die(tr, "a1")
    t0 = clock.now()
    with pytest.raises(AgentLost) as info:
        ctl.prepare(_selftest(), ["a0", "a1"])
    assert info.value.cause == f.AGENT_DIED and info.value.agents == ("a1",)
    assert str(info.value) == (
        "agent a1 lost during prepare: its process (pid 7) was killed by SIGKILL; "
        "restart it: `genie cluster local --x`"
    )
    assert clock.now() - t0 < HB * 1e9  # at once, not after missed beats
    assert "a1" in ctl.lost


def test_a_dropped_agent_nobody_can_examine_is_lost_once_its_address_refuses_for_a_beat() -> None:
    ctl, tr, clock = _rig()
    ctl.connect()
    _die(tr, "a1")
    t0 = clock.now()
    with pytest.raises(AgentLost) as info:
        ctl.prepare(_selftest(), ["a0", "a1"])
    waited = (clock.now() - t0) / 1e9
    assert info.value.cause == f.CONNECTION_DROPPED
    assert "the agent process may have died (`genie agents status a1" in str(info.value)
    assert "silent" not in str(info.value)
    assert HB <= waited < 3 * HB  # one interval of refusals, not MISSED_BEATS_LIMIT of silence


def test_a_dropped_connection_of_a_running_process_waits_for_its_beats() -> None:
    ctl, tr, _clock = _rig()
    ctl.connect()
    ctl.postmortem = _Postmortem({"a1": Fate(False)})
    _die(tr, "a1")  # its frames vanish (a cut cable), but the process runs
    with pytest.raises(AgentLost) as info:
        ctl.prepare(_selftest(), ["a0", "a1"])
    assert info.value.cause == f.MISSED_BEATS and "silent for 3 heartbeat" in str(info.value)


def test_a_connection_that_drops_and_comes_back_is_not_a_fault() -> None:
    ctl, tr, _clock = _rig()
    ctl.connect()
    tr.dropped["a1"] = 0  # dropped, no failed reconnection yet: libzmq is reconnecting
    ctl.prepare(_selftest(), ["a0", "a1"])
    ctl.release()


# ---- real agents on loopback --------------------------------------------------------------------
@pytest.fixture
def cluster(tmp_path):
    cl = LocalCluster.start(3, tmp_path / "cl", heartbeat_s=HB)
    try:
        yield cl
    finally:
        cl.stop()


def _kill_later(pid: int, after_s: float, when: dict) -> None:
    def go() -> None:
        time.sleep(after_s)
        when["t"] = time.monotonic()
        os.kill(pid, signal.SIGKILL)

    threading.Thread(target=go, daemon=True).start()


def _long_program(n: int):
    return build_program("all_reduce", "ring", n, 8 << 20, size_convention="nccl")


@pytest.mark.parametrize("when_", ["mid-run", "between-phases"])
def test_sigkill_of_an_agent_is_named_as_sigkill_within_two_seconds(cluster, when_) -> None:
    names = [h.name for h in cluster.testbed.hosts]
    victim = cluster.procs[1]
    ctl = open_controller(cluster.testbed, timeouts=Timeouts(heartbeat_s=HB))
    try:
        ctl.connect()
        ctl.prepare([_long_program(3)], names)
        when: dict = {}
        if when_ == "mid-run":
            _kill_later(victim.pid, 0.3, when)
            with pytest.raises(AgentLost) as info:
                ctl.run(0, iters=100_000, timeout_s=600)
        else:
            when["t"] = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)
            time.sleep(0.3)  # the keepalive beats meanwhile; the next call finds it gone
            with pytest.raises(AgentLost) as info:
                ctl.run(0, iters=2)
        took = time.monotonic() - when["t"] - (0.3 if when_ == "between-phases" else 0)
        text = str(info.value)
        print(f"\n{when_}: {took:.2f} s after the kill: {text}")
        assert info.value.cause == f.AGENT_DIED and info.value.agents == (names[1],)
        assert f"agent {names[1]} lost during" in text
        assert f"its process (pid {victim.pid}) was killed by SIGKILL" in text
        assert "OOM" not in text and "silent" not in text  # no claim without evidence
        assert f"restart it: `genie cluster local --restart {names[1]} --dir " in text
        assert took < DEATH_BOUND_S
        assert victim.wait(timeout=2) == -signal.SIGKILL
    finally:
        ctl.close()
        ctl.t.close()


def test_the_next_command_says_which_agent_died_and_restart_brings_it_back(cluster) -> None:
    from genie.api.benchmark import BenchSpec, bench

    name = cluster.testbed.hosts[2].name
    os.kill(cluster.procs[2].pid, signal.SIGKILL)
    cluster.procs[2].wait(timeout=5)
    (st,) = [s for s in states(cluster.dir) if not s.running]
    assert st.name == name and st.exit is not None and st.exit.describe() == "killed by SIGKILL"
    deaths = local_deaths(cluster.testbed, cluster.testbed_path)
    assert list(deaths) == [name] and "died at" in deaths[name]
    spec = BenchSpec(
        testbed=str(cluster.testbed_path),
        sizes=(4096,),
        iters=2,
        warmup=0,
        store=None,
        progress=False,
    )
    t0 = time.monotonic()
    with pytest.raises(AgentLost, match=rf"agent {name} died at .*killed by SIGKILL"):
        bench(spec)
    assert time.monotonic() - t0 < 5  # not the hello's 10 s timeout
    (again,) = restart_agents(cluster.dir, [name])
    assert again.pid != cluster.procs[2].pid and again.poll() is None
    assert all(s.running for s in states(cluster.dir))
    res = bench(spec)
    assert res.rows
    cluster.stop()  # stops the restarted agent too (the pid file has it)
    assert again.wait(timeout=5) == 0


def test_cluster_local_status_and_restart_on_the_command_line(cluster) -> None:
    name = cluster.testbed.hosts[0].name
    os.kill(cluster.procs[0].pid, signal.SIGKILL)
    cluster.procs[0].wait(timeout=5)
    cmd = [sys.executable, "-m", "genie", "cluster", "local", "--dir", str(cluster.dir)]
    out = subprocess.run([*cmd, "--status"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith(f"{name}:"))
    assert "died at" in line and "killed by SIGKILL" in line
    assert f"restart it: genie cluster local --restart {name} --dir" in line
    out = subprocess.run([*cmd, "--restart", name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and f"{name}: restarted (pid" in out.stdout, out.stderr
    out = subprocess.run([*cmd, "--status"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count("running (pid") == 3, out.stdout
    restarted = next(s for s in states(cluster.dir) if s.name == name)
    cluster.stop()
    assert not alive(restarted.pid)


def test_an_address_space_limit_is_reported_as_the_memory_error_it_causes(tmp_path) -> None:
    """RLIMIT_AS: the allocation fails (MemoryError), the agent says so and lives on."""
    with LocalCluster.start(2, tmp_path / "cl", heartbeat_s=HB, memory_limit=700 << 20) as cl:
        names = [h.name for h in cl.testbed.hosts]
        ctl = open_controller(cl.testbed, timeouts=Timeouts(heartbeat_s=HB))
        try:
            ctl.connect()
            big = build_program("all_reduce", "ring", 2, 512 << 20, size_convention="nccl")
            with pytest.raises(GenieError) as info:
                ctl.prepare([big], names)
                ctl.run(0, iters=1)
            print(f"\n{type(info.value).__name__}: {info.value}")
            assert isinstance(info.value, DataPlaneError) and "MemoryError" in str(info.value)
            assert not isinstance(info.value, AgentLost)  # not dead, and not called so
            ctl.prepare([_long_program(2)], names)  # the same agents take the next job
            assert len(ctl.run(0, iters=1).instances) == 1
            ctl.release()
        finally:
            ctl.close()
            ctl.t.close()
        assert all(p.poll() is None for p in cl.procs)


def _memory_cgroup() -> Path | None:
    """A new memory cgroup under this process's own (None if this process may not make one)."""
    if os.geteuid() != 0:
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctl, path = line.split(":", 2)
        base = None
        if "memory" in ctl.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
        elif ctl == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
        if base is None:
            continue
        cg = base / f"genie-test-oom-{os.getpid()}"
        try:
            cg.mkdir()
        except OSError:
            continue
        limit = cg / ("memory.limit_in_bytes" if ctl else "memory.max")
        if limit.exists():
            return cg
        cg.rmdir()
    return None


def test_an_agent_the_oom_killer_takes_is_reported_with_the_kernels_words(tmp_path) -> None:
    cg = _memory_cgroup()
    if cg is None:
        pytest.skip("needs root and a memory cgroup this process may create")
    try:
        v1 = cg / "memory.limit_in_bytes"
        (v1 if v1.exists() else cg / "memory.max").write_text(str(100 << 20))
        with LocalCluster.start(2, tmp_path / "cl", heartbeat_s=HB) as cl:
            names = [h.name for h in cl.testbed.hosts]
            victim = cl.procs[1]
            (cg / "cgroup.procs").write_text(str(victim.pid))
            ctl = open_controller(cl.testbed, timeouts=Timeouts(heartbeat_s=HB))
            try:
                ctl.connect()
                big = build_program("all_reduce", "ring", 2, 256 << 20, size_convention="nccl")
                with pytest.raises(AgentLost) as info:
                    ctl.prepare([big], names)
                    ctl.run(0, iters=2)
            finally:
                ctl.close()
                ctl.t.close()
            rec = victim.exit_record()
            text = str(info.value)
            print(f"\n{text}")
            assert rec is not None and rec.returncode == -signal.SIGKILL
            assert info.value.cause == f.AGENT_DIED and info.value.agents == (names[1],)
            assert (
                f"its process (pid {victim.pid}) was killed by SIGKILL (the kernel's OOM " in text
            )
            assert f"Killed process {victim.pid}" in text or "OOM kill(s) while it ran" in text
    finally:
        time.sleep(0.2)
        cg.rmdir()

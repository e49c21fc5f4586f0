"""A cluster of agent processes on this machine's loopback, and opening a controller on a testbed.

``LocalCluster.start(n)`` launches ``python -m genie_agent`` (= ``genie agent``) n times on
127.0.0.1 (consecutive free control ports, data ports chosen by each agent), each under its
supervisor (``genie.controller.local_agents``: it records how the agent ended), waits until each
says it listens, and writes ``testbed.toml``, ``agents.pids`` (the agents' pids) and one log per
agent in its directory. ``restart_agents`` starts dead agents of a directory again on their
ports. ``stop()`` ends exactly those processes, by pid (SIGTERM, then SIGKILL after a bound).
A controller opened here reads how a local agent died (``genie.controller.postmortem``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

from genie.controller.channel import ZmqChannel
from genie.controller.local_agents import (
    AgentProcess,
    alive,
    forget,
    is_agent,
    log_path,
    restart_hint,
)
from genie.controller.local_agents import state as agent_state
from genie.controller.local_agents import states as agent_states
from genie.controller.postmortem import LocalPostmortem
from genie.controller.session import Controller, Timeouts
from genie.errors import RuntimeFault, TestbedError
from genie.wire.messages import DataOptions, RdmaOptions

PIDFILE = "agents.pids"
TESTBED_FILE = "testbed.toml"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


def _ports_free(base: int, n: int) -> bool:
    for port in range(base, base + n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_port_range(n: int, lo: int = 20000, hi: int = 60000) -> int:
    """A base port with n consecutive free loopback ports after it."""
    rnd = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        base = rnd.randrange(lo, hi - n)
        if _ports_free(base, n):
            return base
    raise TestbedError(f"no {n} consecutive free loopback ports found")


def _alive(pid: int) -> bool:
    return alive(pid)


def _is_our_agent(pid: int) -> bool:
    """True if ``pid`` is a genie agent process (guards against a recycled pid)."""
    return is_agent(pid)


def stop_pids(pids: Sequence[int], timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
    """SIGTERM the given agent pids, SIGKILL the ones still alive after ``timeout_s``."""
    mine = [p for p in pids if _alive(p) and _is_our_agent(p)]
    for p in mine:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(p) for p in mine):
        for p in mine:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(p, os.WNOHANG)
        time.sleep(0.02)
    for p in mine:
        if _alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(p, 0)
    return mine


class LocalCluster:
    """N agents on loopback, their testbed file and pid file, stoppable by pid."""

    def __init__(self, directory: Path, procs: list[AgentProcess], testbed) -> None:
        self.dir = directory
        self.procs = procs  # the agents, read like Popen objects (pid, poll, wait)
        self.testbed = testbed
        self.testbed_path = directory / TESTBED_FILE
        self.own_dir = False

    @classmethod
    def start(
        cls,
        n_agents: int,
        directory: str | Path | None = None,
        *,
        ranks_per_host: int = 1,
        base_port: int | None = None,
        heartbeat_s: float = 0.5,
        python: str | None = None,
        keys_dir: str | os.PathLike | None = None,
        memory_limit: int = 0,
    ) -> LocalCluster:
        """Start the agents, wait until all listen, write the testbed; stop all on failure.

        ``keys_dir``: agents serve CURVE with these keys; ``memory_limit``: each agent's address
        space is capped at this many bytes (RLIMIT_AS; 0: no cap).
        """
        from genie.testbed import dumps_testbed, loopback_testbed

        if not 1 <= n_agents <= 256:
            raise TestbedError(f"--agents must be 1..256, got {n_agents}")
        d = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="genie-cluster-"))
        d.mkdir(parents=True, exist_ok=True)
        old = d / PIDFILE
        if old.exists() and any(_alive(p) and _is_our_agent(p) for p in read_pids(d)):
            dead = "".join(f"; {x}" for x in dead_agents(d).values())
            raise TestbedError(f"a local cluster is already running in {d} (stop it first){dead}")
        forget(d)  # the agents of a cluster that ran here before
        base = base_port or free_port_range(n_agents)
        tb = loopback_testbed(n_agents, base_port=base, ranks_per_host=ranks_per_host)
        procs: list[AgentProcess] = []
        try:
            for h in tb.hosts:
                log_path(d, h.name).write_bytes(b"")
                cfg: dict[str, object] = {
                    "listen": h.control,
                    "data_addr": h.data_addr,
                    "heartbeat": heartbeat_s,
                    "python": python or sys.executable,
                }
                if keys_dir:
                    cfg["keys"] = str(keys_dir)
                if memory_limit:
                    cfg["memory_limit"] = int(memory_limit)
                procs.append(AgentProcess.launch(h.name, d, cfg, python))
            _wait_listening(d, procs, {p.name: 0 for p in procs})
            (d / PIDFILE).write_text(json.dumps([p.pid for p in procs]))
            (d / TESTBED_FILE).write_text(dumps_testbed(tb))
        except BaseException:
            stop_pids([p.pid for p in procs if p.pid])
            for p in procs:
                p.reap()
            raise
        cl = cls(d, procs, tb)
        cl.own_dir = directory is None  # made here: removed again by stop()
        return cl

    def stop(self) -> None:
        """Stop this cluster's agents (and any restarted since) by pid; remove the pid file."""
        pids = [p.pid for p in self.procs if p.pid]
        stop_pids(pids + [p for p in read_pids(self.dir) if p not in pids])
        for p in self.procs:
            p.reap()
        with contextlib.suppress(FileNotFoundError):
            (self.dir / PIDFILE).unlink()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _wait_listening(d: Path, procs: Sequence[AgentProcess], offsets: dict[str, int]) -> None:
    """Wait until every agent's log says it listens (after ``offsets``); say how one ended."""
    deadline = time.monotonic() + START_TIMEOUT_S
    pending = {p.name: p for p in procs}
    while pending:
        for name, p in list(pending.items()):
            with open(log_path(d, name), "rb") as f:
                f.seek(offsets.get(name, 0))
                text = f.read().decode(errors="replace")
            if "listening on" in text and p.pid:
                del pending[name]
            elif p.poll() is not None:
                rec = p.exit_record()
                mine = [x for x in text.strip().splitlines() if not x.startswith("genie-super")]
                last = mine[-1] if mine else "no output"
                how = rec.describe() if rec else f"exited with {p.poll()}"
                raise TestbedError(f"agent {name} {how}: {last}")
        if pending and time.monotonic() > deadline:
            raise TestbedError(
                f"agents {', '.join(sorted(pending))} did not start within {START_TIMEOUT_S}s"
            )
        time.sleep(0.02)


def restart_agents(directory: str | Path, names: Sequence[str]) -> list[AgentProcess]:
    """Start the named agents of a local cluster again (same ports, same options) where they
    are not running; update its pid file; return the agents started."""
    d = Path(directory)
    pids = read_pids(d)
    started: list[AgentProcess] = []
    offsets: dict[str, int] = {}
    old_pids: dict[str, int] = {}
    try:
        for name in names:
            cfg_file = d / f"agent-{name}.json"
            if not cfg_file.exists():
                raise TestbedError(f"no agent {name} in the local cluster of {d}")
            st = agent_state(d, name)
            if st.running:
                continue
            cfg = json.loads(cfg_file.read_text())
            log = log_path(d, name)
            offsets[name] = log.stat().st_size if log.exists() else 0
            started.append(AgentProcess.launch(name, d, cfg, cfg.get("python")))
            old_pids[name] = st.pid
        _wait_listening(d, started, offsets)
    except BaseException:
        stop_pids([p.pid for p in started if p.pid])
        for p in started:
            p.reap()
        raise
    for p in started:  # in place: the pid file keeps the testbed's order
        old = old_pids.get(p.name, 0)
        if old in pids:
            pids[pids.index(old)] = p.pid
        else:
            pids.append(p.pid)
    (d / PIDFILE).write_text(json.dumps(pids))
    return started


def read_pids(directory: str | Path) -> list[int]:
    """Pids recorded by a local cluster in ``directory`` (empty if none)."""
    try:
        return [int(x) for x in json.loads((Path(directory) / PIDFILE).read_text())]
    except (FileNotFoundError, ValueError, TypeError):
        return []


def stop_recorded(directory: str | Path) -> list[int]:
    """Stop the agents recorded in ``directory``'s pid file; return the pids stopped."""
    pids = read_pids(directory)
    stopped = stop_pids(pids)
    with contextlib.suppress(FileNotFoundError):
        (Path(directory) / PIDFILE).unlink()
    return stopped


def open_controller(
    testbed, timeouts: Timeouts | None = None, keys_dir: str | None = None, source: str = ""
) -> Controller:
    """A Controller connected (ZeroMQ) to every host of ``testbed``; call ``.connect()`` next.

    ``keys_dir``: CURVE key directory (default ``$GENIE_KEYS``; none: unauthenticated). A netns
    testbed must be up on this host, reached by its own links (``genie.testbed.reach``), before
    anything is sent; its connections are then bound to those links. ``source``: the testbed
    file, named in the `genie testbed up` hint. Once connected the controller beats from a
    keepalive thread between calls, so pauses of the caller never lose it its agents.
    """
    if not testbed.hosts:
        raise RuntimeFault(f"testbed {testbed.name} has no hosts")
    import uuid

    devices: dict[str, str] = {}
    if testbed.kind == "netns":
        from genie.testbed.reach import control_links

        devices = control_links(testbed, source)
        if not _can_bind_to_device(next(iter(devices.values()))):
            devices = {}  # no CAP_NET_RAW: the route check above is the only guard
    endpoints = {h.name: h.control for h in testbed.hosts}
    timeouts = timeouts or Timeouts()
    if timeouts.missed_beats is None:  # the testbed's liveness rule, unless the caller set one
        timeouts = dataclasses.replace(timeouts, missed_beats=testbed.missed_beats)
    cid = f"ctl-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    keys_dir = keys_dir or os.environ.get("GENIE_KEYS") or None
    tr = ZmqChannel(endpoints, identity=cid, keys_dir=keys_dir, devices=devices)
    ctl = Controller(
        tr,
        list(endpoints),
        timeouts=timeouts,
        controller_id=cid,
        testbed=testbed.identity,
        keepalive=True,
    )
    ctl.job_options = functools.partial(options_for_testbed, testbed)
    ctl.postmortem = LocalPostmortem()  # how an agent on this machine ended, if one does
    return ctl


def options_for_testbed(testbed, opts: DataOptions, placement: Sequence[str]) -> DataOptions:
    """``opts`` with what ``testbed`` says about a job on ``placement``: the intra-host model's
    bandwidth and latency (where ``opts`` keeps the defaults) and each rank's NIC address and
    RDMA device (where a host has several NICs and ``opts`` names none), and its ``[rdma]``
    settings (where ``opts.rdma`` keeps the defaults). ``opts`` itself when nothing changes."""
    changes: dict = {}
    intra = testbed.intra_host
    default = DataOptions()
    if (opts.intra_bandwidth, opts.intra_latency) == (
        default.intra_bandwidth,
        default.intra_latency,
    ) and (intra.bandwidth, intra.latency) != (default.intra_bandwidth, default.intra_latency):
        changes.update(intra_bandwidth=intra.bandwidth, intra_latency=intra.latency)
    if not opts.rank_addrs:
        addrs = testbed.rank_nic_addrs(placement)
        if addrs:
            changes["rank_addrs"] = addrs
    rdma = _rdma_for_testbed(testbed, opts.rdma)
    if not opts.rdma.rank_devices and any(n.rdma_device for h in testbed.hosts for n in h.nics):
        devs = [
            h.nics[k].rdma_device or "" if h.nics else "" for h, k in testbed.rank_nics(placement)
        ]
        rdma = msgspec.structs.replace(rdma, rank_devices=devs)
    if rdma is not opts.rdma:
        changes["rdma"] = rdma
    return msgspec.structs.replace(opts, **changes) if changes else opts


def _rdma_for_testbed(testbed, ro: RdmaOptions) -> RdmaOptions:
    """``ro`` with the testbed's ``[rdma]`` (queue pairs per connection, stall bound, traffic
    class) where ``ro`` keeps the defaults; ``ro`` itself when nothing changes."""
    rs = getattr(testbed, "rdma", None)
    if rs is None:
        return ro
    default = RdmaOptions()
    changes: dict = {}
    if ro.qps == default.qps and rs.qps_per_connection != default.qps:
        changes["qps"] = rs.qps_per_connection
    if ro.stall_s == default.stall_s and rs.stall_s is not None:
        changes["stall_s"] = rs.stall_s
    if ro.traffic_class == default.traffic_class and rs.traffic_class is not None:
        changes["traffic_class"] = rs.traffic_class
    return msgspec.structs.replace(ro, **changes) if changes else ro


def _can_bind_to_device(ifname: str) -> bool:
    """Whether this process may bind a socket to ``ifname`` (SO_BINDTODEVICE: CAP_NET_RAW)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        except OSError:
            return False
    return True


def start_hint(testbed, source: str = "") -> str:
    """What to run so ``testbed``'s agents answer (for errors about silent agents)."""
    import shlex

    path = shlex.quote(str(source)) if source else "FILE"
    if testbed.kind == "netns":
        return (
            f"start its agents: `sudo genie testbed down {path} && "
            f"sudo genie testbed up {path} --agents`"
        )
    made = Path(source).parent if source else None  # by `genie cluster local`?
    if made and any((made / n).exists() for n in (PIDFILE, f"agent-{testbed.hosts[0].name}.log")):
        d = shlex.quote(str(made))
        dead = dead_agents(made) if (made / PIDFILE).exists() else {}
        if dead:
            return "; ".join(dead.values())
        return f"start the agents: `genie cluster local --agents {len(testbed.hosts)} --dir {d}`"
    local = all(h.control_ip.startswith("127.") or h.control_ip == "::1" for h in testbed.hosts)
    if local:
        return "start the agents (`genie cluster local` writes a testbed file with running agents)"
    return f"start the agents: `genie agents restart all --testbed {path}` (or `genie deploy`)"


def local_deaths(testbed, source: str | Path = "") -> dict[str, str]:
    """For a testbed file that ``genie cluster local`` wrote: per agent of it whose process has
    ended, how (and how to restart it); empty for any other testbed."""
    if not source or testbed.kind == "netns":
        return {}
    made = Path(source).parent
    if not (made / PIDFILE).exists():
        return {}
    return dead_agents(made, {h.name for h in testbed.hosts})


def dead_agents(directory: str | Path, names: set[str] | None = None) -> dict[str, str]:
    """Per agent of a local cluster (of ``names``, if given) that no longer runs: one line on
    how it ended and how to restart it."""
    d = Path(directory)
    return {
        st.name: f"agent {st.name} {st.describe()}; restart it: `{restart_hint(d, st.name)}`"
        for st in agent_states(d)
        if not st.running and (names is None or st.name in names)
    }

"""A local cluster's agents, each under its supervisor: start one, find them, say how one ended.

Every agent of a cluster directory D runs under ``genie.deploy.supervise`` (started with
``genie.wire.launch.supervised_command``), which is never told to restart it: files
``D/agent-NAME.json`` (its config), ``.log`` (its output and the supervisor's lines), ``.pid``
(supervisor and agent pids while it runs) and ``.exit.json`` (how it ended: ``genie.wire.exits``).
``AgentProcess`` is one such agent, read like a ``subprocess.Popen`` of the agent itself (its
``pid``, ``poll``, ``wait``, ``returncode`` from the exit record); ``states`` says what every
agent of a directory is doing now, and ``restart_hint`` what to run for a dead one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from genie.wire.exits import EXIT_SUFFIX, ExitRecord, read_exit
from genie.wire.launch import is_agent_cmdline, supervised_command

ENDED_UNRECORDED = 255  # returncode of an agent that ended without a record (supervisor killed)


def stem(name: str) -> str:
    """The file stem of agent ``name`` in its cluster directory."""
    return f"agent-{name}"


def log_path(directory: Path, name: str) -> Path:
    """The log of agent ``name`` (its output, and its supervisor's lines)."""
    return directory / f"{stem(name)}.log"


def exit_record_path(directory: Path, name: str) -> Path:
    """Where the supervisor of agent ``name`` records how it ended."""
    return directory / f"{stem(name)}{EXIT_SUFFIX}"


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie does not: its supervisor is about to reap it)."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def is_agent(pid: int) -> bool:
    """True if ``pid`` is a genie agent process (guards against a recycled pid)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return is_agent_cmdline(cmd)


def recorded_pid(directory: Path, name: str) -> int:
    """The agent pid its supervisor recorded (0 if none is recorded now)."""
    try:
        return int(json.loads((directory / f"{stem(name)}.pid").read_text())["agent"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class AgentProcess:
    """One local agent under its supervisor, read like a ``Popen`` of the agent itself."""

    def __init__(
        self, name: str, directory: Path, supervisor: subprocess.Popen | None, pid: int = 0
    ) -> None:
        self.name = name
        self.dir = directory
        self.supervisor = supervisor  # None: found on disk, not started by this process
        self._pid = pid

    @classmethod
    def launch(
        cls, name: str, directory: Path, config: Mapping[str, object], python: str | None = None
    ) -> AgentProcess:
        """Write the agent's config and start its supervisor (which never restarts it)."""
        cfg = {**config, "id": name, "restart": False}
        (directory / f"{stem(name)}.json").write_text(json.dumps(cfg))
        with contextlib.suppress(FileNotFoundError):
            exit_record_path(directory, name).unlink()  # a record of an earlier agent
        with contextlib.suppress(FileNotFoundError):
            (directory / f"{stem(name)}.pid").unlink()
        sup = subprocess.Popen(
            supervised_command(python or sys.executable, str(directory), stem(name)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return cls(name, directory, sup)

    @property
    def log(self) -> Path:
        """The agent's log (its output, and its supervisor's lines)."""
        return log_path(self.dir, self.name)

    @property
    def pid(self) -> int:
        """The agent's pid (0 until its supervisor has started it)."""
        if not self._pid:
            self._pid = recorded_pid(self.dir, self.name)
        return self._pid

    def exit_record(self) -> ExitRecord | None:
        """How the agent ended (None while it runs, or before it started)."""
        return read_exit(exit_record_path(self.dir, self.name), self.pid) if self.pid else None

    def poll(self) -> int | None:
        """The agent's exit status as ``Popen`` has it (-N: signal N), None while it runs."""
        rec = self.exit_record()
        if rec is not None:
            return rec.returncode
        if self.pid and alive(self.pid):
            return None
        sup = self.supervisor
        if sup is not None and sup.poll() is None:
            return None  # the agent is starting, or its supervisor is writing the record
        if self.pid or sup is not None:
            return ENDED_UNRECORDED
        return None

    @property
    def returncode(self) -> int | None:
        """As ``poll()``."""
        return self.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the agent has ended; its exit status (``subprocess.TimeoutExpired``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"agent {self.name}", timeout or 0.0)
            time.sleep(0.01)

    def reap(self, timeout_s: float = 1.0) -> None:
        """Collect the supervisor (it ends with its agent); kill it if it outlives the bound."""
        sup = self.supervisor
        if sup is None:
            return
        try:
            sup.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            sup.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                sup.wait(timeout=timeout_s)


@dataclass(frozen=True)
class AgentState:
    """What one agent of a cluster directory is doing now."""

    name: str
    pid: int
    running: bool
    exit: ExitRecord | None  # how it ended, where its supervisor recorded it

    def describe(self) -> str:
        """One phrase: running (pid), or how it ended."""
        if self.running:
            return f"running (pid {self.pid})"
        if self.exit is None:
            return f"not running (pid {self.pid or '?'}; no record of how it ended)"
        when = time.strftime("%H:%M:%S", time.localtime(self.exit.ended))
        how = "stopped" if self.exit.returncode == 0 else "died"
        return f"{how} at {when} (pid {self.exit.pid}): {self.exit.describe()}"


def _natural(name: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def names(directory: Path) -> list[str]:
    """The agents configured in ``directory`` (h0, h1, ..., h10 in that order)."""
    out = []
    for f in directory.glob("agent-*.json"):
        if f.name.endswith(EXIT_SUFFIX):
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            out.append(str(json.loads(f.read_text())["id"]))
    return sorted(out, key=_natural)


def state(directory: Path, name: str) -> AgentState:
    """What agent ``name`` of ``directory`` is doing now."""
    rec = read_exit(exit_record_path(directory, name))
    pid = recorded_pid(directory, name) or (rec.pid if rec else 0)
    running = alive(pid) and is_agent(pid)
    if rec is not None and rec.pid != pid:
        rec = None
    return AgentState(name, pid, running, None if running else rec)


def states(directory: Path) -> list[AgentState]:
    """What every agent of ``directory`` is doing now."""
    return [state(directory, n) for n in names(directory)]


def forget(directory: Path) -> None:
    """Remove the configs and records of the agents a directory held (before a new cluster)."""
    for pattern in ("agent-*.json", f"agent-*{EXIT_SUFFIX}", "agent-*.pid"):
        for f in directory.glob(pattern):
            with contextlib.suppress(OSError):
                f.unlink()


def restart_hint(directory: Path, name: str) -> str:
    """What to run to start agent ``name`` of cluster ``directory`` again."""
    return f"genie cluster local --restart {name} --dir {shlex.quote(str(directory))}"

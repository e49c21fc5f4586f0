"""Why an agent the controller lost touch with is gone, as the OS tells it.

When an agent's control connection drops, the controller asks its ``Postmortem`` for the agent's
``Fate`` instead of waiting for missed heartbeats. ``LocalPostmortem`` knows the agents that run
on this machine (their hello's host id is this kernel's, their hello's pid a genie agent): once
such a process is gone, the exit record its supervisor wrote (``genie.wire.exits``; the path is
in the agent's environment) says how it ended; without a supervisor, the kernel log may still
say that the OOM killer took it. Agents on other machines have no local fate (``dead`` None): the
controller then judges by their connection.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from genie.controller.local_agents import alive, is_agent, restart_hint
from genie.wire.exits import EXIT_ENV, ExitRecord, kernel_oom_line, read_exit
from genie.wire.hostid import host_id
from genie.wire.messages import HelloReply

RECORD_WAIT_S = 1.0  # a supervisor records an ended agent within tens of ms; wait this at most
PIDFILE = "agents.pids"  # a local cluster directory holds one (genie.controller.local)


@dataclass(frozen=True)
class Fate:
    """What became of an agent's process."""

    dead: bool | None  # True: ended; False: it still runs; None: not known here
    text: str = ""  # how it ended, in one phrase ("killed by SIGKILL (...)")
    hint: str = ""  # what to run to start it again ("" if not known)


UNKNOWN = Fate(None)


class Postmortem(Protocol):
    """What the controller asks about agents whose connection dropped."""

    def watch(self, hellos: Mapping[str, HelloReply]) -> None:
        """Learn the agents just claimed (their hellos)."""
        ...

    def fate(self, agent: str) -> Fate:
        """What became of ``agent``'s process (waits a moment for an exit record)."""
        ...


@dataclass(frozen=True)
class _Local:
    pid: int
    record: Path | None  # where its supervisor records its end (None: not supervised)


class LocalPostmortem:
    """Fates of the agents on this machine, from their pids and their supervisors' records."""

    def __init__(self, record_wait_s: float = RECORD_WAIT_S) -> None:
        self.local: dict[str, _Local] = {}
        self.record_wait_s = record_wait_s
        self.me = host_id()

    def watch(self, hellos: Mapping[str, HelloReply]) -> None:
        """Remember which claimed agents run here: their pid and exit record path."""
        self.local = {}
        for name, h in hellos.items():
            if h.facts.host_id == self.me and h.pid > 0 and is_agent(h.pid):
                self.local[name] = _Local(h.pid, _record_path(h.pid))

    def fate(self, agent: str) -> Fate:
        """Dead (how, where recorded), alive, or unknown (not on this machine)."""
        known = self.local.get(agent)
        if known is None:
            return UNKNOWN
        if alive(known.pid):
            return Fate(False)
        rec = self._record(known)
        hint = _hint(known.record, agent)
        if rec is not None:
            return Fate(True, f"its process (pid {known.pid}) {_ended(rec)}", hint)
        oom = kernel_oom_line(known.pid)
        how = f"killed (the kernel's OOM killer: {oom})" if oom else "gone (no exit status known)"
        return Fate(True, f"its process (pid {known.pid}) is {how}", hint)

    def _record(self, known: _Local) -> ExitRecord | None:
        if known.record is None:
            return None
        deadline = time.monotonic() + self.record_wait_s
        while True:
            rec = read_exit(known.record, known.pid)
            if rec is not None or time.monotonic() >= deadline:
                return rec
            time.sleep(0.01)


def _ended(rec: ExitRecord) -> str:
    """How ``rec``'s process ended, after "its process (pid N)"."""
    return f"was {rec.describe()}" if rec.signum else rec.describe()


def _record_path(pid: int) -> Path | None:
    """The exit record path in the environment of process ``pid`` (None if unreadable)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    key = EXIT_ENV.encode() + b"="
    for item in env:
        if item.startswith(key):
            return Path(item[len(key) :].decode(errors="replace"))
    return None


def _hint(record: Path | None, agent: str) -> str:
    """How to restart ``agent``: a local cluster's command where its record lies in one."""
    if record is not None and (record.parent / PIDFILE).exists():
        return restart_hint(record.parent, agent)
    return ""

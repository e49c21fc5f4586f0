"""How an agent process ended, as the OS tells it: the exit record its supervisor writes.

A supervisor (``genie.deploy.supervise``) waits for its agent and, when it ends, writes an
``ExitRecord`` (JSON) beside the agent's log: the pid, the exit status or the signal, the times,
the kernel's word on an OOM kill (its log line naming the pid, or the agent's memory cgroup's
``oom_kill`` counter having grown while it ran) and the last line the agent wrote (a Python
traceback ends with the exception). It tells its agent where the record goes in the agent's
environment (``EXIT_ENV``), so whoever may read the agent's ``/proc/PID/environ`` (a controller
on the same machine) finds it. ``describe`` says it in one phrase, claiming an OOM kill only on
the kernel's evidence.

Standard library only: supervisors run on bare lab hosts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

EXIT_ENV = "GENIE_AGENT_EXIT"  # the agent's environment: the path its exit record goes to
EXIT_SUFFIX = ".exit.json"  # STEM.exit.json beside STEM.log
KMSG = "/dev/kmsg"
KMSG_RECORDS_MAX = 200_000  # records read from the kernel log at most (a bound, not a filter)
KMSG_SLACK_S = 5.0  # kernel timestamps vs CLOCK_MONOTONIC: accept lines this much earlier
LAST_WORDS_BYTES = 4096  # the tail of the agent's log read for its last words


@dataclass(frozen=True)
class ExitRecord:
    """One ended agent process: what the OS said when its supervisor reaped it."""

    pid: int
    returncode: int  # as subprocess says: -N for signal N
    agent: str = ""
    started: float = 0.0  # wall clock, seconds since the epoch
    ended: float = 0.0
    oom: str = ""  # the kernel's evidence of an OOM kill ("" if none was found)
    last_words: str = ""  # the last line the agent wrote (a traceback's exception)
    restarting: bool = False  # the supervisor starts it again

    @property
    def signum(self) -> int:
        """The signal that ended the process (0 if it exited)."""
        return -self.returncode if self.returncode < 0 else 0

    def describe(self) -> str:
        """One phrase: how the process ended, with the kernel's OOM evidence where there is any."""
        if self.signum:
            text = f"killed by {signal_name(self.signum)}"
            if self.oom:
                text += f" (the kernel's OOM killer: {self.oom})"
            return text
        text = f"exited with status {self.returncode}"
        if self.last_words and self.returncode != 0:
            text += f" (its last words: {self.last_words!r})"
        return text

    def to_json(self) -> str:
        """The record as one JSON object."""
        return json.dumps(asdict(self))


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``signal 77`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_path(log: str | os.PathLike[str]) -> Path:
    """Where the exit record of the agent logging to ``log`` goes (``STEM.exit.json``)."""
    p = Path(log)
    return p.with_name(p.stem + EXIT_SUFFIX)


def write_exit(path: str | os.PathLike[str], rec: ExitRecord) -> None:
    """Write ``rec`` to ``path`` atomically (a reader never sees half a record)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(rec.to_json())
    os.replace(tmp, p)


def read_exit(path: str | os.PathLike[str], pid: int = 0) -> ExitRecord | None:
    """The record at ``path`` (only if it is about ``pid``, when given); None if there is none."""
    try:
        raw = json.loads(Path(path).read_text())
        rec = ExitRecord(**{k: raw[k] for k in ExitRecord.__dataclass_fields__ if k in raw})
    except (OSError, ValueError, TypeError):
        return None
    if pid and rec.pid != pid:
        return None
    return rec


def kernel_oom_line(pid: int, since_monotonic: float | None = None) -> str:
    """The kernel log's line about an OOM kill of ``pid`` ("" if none, or the log is unreadable).

    Reads ``/dev/kmsg`` (root, or ``kernel.dmesg_restrict = 0``) without blocking; with
    ``since_monotonic`` (CLOCK_MONOTONIC seconds) only lines logged after it, less a slack, count
    (a pid is reused across a boot).
    """
    kill = re.compile(rf"Killed process {pid}\b")
    task = re.compile(rf"oom-kill:.*\bpid={pid}\b")
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    found = ""
    try:
        for _ in range(KMSG_RECORDS_MAX):
            try:
                raw = os.read(fd, 8192)
            except BrokenPipeError:  # records overwritten while we read: go on
                continue
            except OSError:  # EAGAIN: the end; anything else: nothing more to read
                break
            if not raw:
                break
            head, _, body = raw.decode(errors="replace").partition(";")
            text = body.split("\n", 1)[0].strip()
            if not (kill.search(text) or (not found and task.search(text))):
                continue
            if since_monotonic is not None:
                with contextlib.suppress(IndexError, ValueError):
                    if int(head.split(",")[2]) / 1e6 < since_monotonic - KMSG_SLACK_S:
                        continue
            found = text
    finally:
        os.close(fd)
    return found


def cgroup_oom_file(pid: int) -> Path | None:
    """The memory cgroup file of ``pid`` that counts OOM kills (v2 memory.events, v1
    memory.oom_control); None if there is none to read."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # v2 (unified, or hybrid's unified mount)
            for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                f = Path(base) / rel / "memory.events"
                if f.is_file():
                    return f
        elif "memory" in controllers.split(","):
            f = Path("/sys/fs/cgroup/memory") / rel / "memory.oom_control"
            if f.is_file():
                return f
    return None


def oom_kills(counter: Path | None) -> int | None:
    """The ``oom_kill`` count in a cgroup file (None if unreadable)."""
    if counter is None:
        return None
    try:
        for line in counter.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def last_words(log: str | os.PathLike[str], since: int = 0) -> str:
    """The last non-empty line the agent wrote to ``log`` after byte ``since`` ("" if none)."""
    try:
        with open(log, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(since, end - LAST_WORDS_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [x.strip() for x in tail.splitlines() if x.strip()]
    mine = [x for x in lines if not x.startswith("genie-supervise:")]
    return mine[-1][-300:] if mine else ""

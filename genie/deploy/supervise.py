"""Keeps one genie agent running and says how it ended: lab hosts without systemd, local clusters.

``python -m genie.deploy.supervise ROOT [--name STEM]`` reads ``ROOT/STEM.json`` (STEM ``agent``
by default), starts the agent with its output appended to ``ROOT/STEM.log`` and records
``{"supervisor", "agent"}`` pids in ``ROOT/STEM.pid``. Each time the agent ends, it writes what
the OS said (exit status or signal, the kernel's OOM evidence, the agent's last line) to
``ROOT/STEM.exit.json`` (``genie.wire.exits``), a path the agent finds in its environment. An
agent that exits non-zero is restarted with a growing pause, at most ``MAX_RESTARTS`` times in
``RESTART_WINDOW_S``; one that exits 0 (told to quit) is not, nor any with ``"restart": false``
in its config (a local cluster's agents: a dead one is reported, not hidden). ``"memory_limit"``
(bytes) caps the agent's address space (RLIMIT_AS). SIGTERM to the supervisor stops the agent
(SIGTERM, then SIGKILL after ``STOP_GRACE_S``) and removes the pid file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from genie.wire.exits import (
    EXIT_ENV,
    ExitRecord,
    cgroup_oom_file,
    exit_path,
    kernel_oom_line,
    last_words,
    oom_kills,
    write_exit,
)
from genie.wire.launch import launch_command

MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
STOP_GRACE_S = 5.0
STEM = "agent"
PIDFILE = f"{STEM}.pid"
CONFIG = f"{STEM}.json"
LOG = f"{STEM}.log"
POLL_S = 0.2  # how often the supervisor looks up from waiting (a death is seen at once)


def agent_command(cfg: dict, python: str | None = None) -> list[str]:
    """The command line of the agent described by an agent config (``--keys`` if it has keys)."""
    cmd = [
        *launch_command(python or sys.executable),
        "--listen",
        cfg["listen"],
        "--id",
        cfg["id"],
        "--data-addr",
        cfg["data_addr"],
        "--heartbeat",
        str(cfg.get("heartbeat", 0.5)),
    ]
    if cfg.get("keys"):
        cmd += ["--keys", cfg["keys"]]
    if cfg.get("missed_beats"):
        cmd += ["--missed-beats", str(cfg["missed_beats"])]
    return cmd


def _log(log: Path, text: str) -> None:
    with open(log, "a") as f:
        f.write(f"genie-supervise: {time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def _write_pids(pidfile: Path, agent_pid: int, restarts: int) -> None:
    rec = {
        "supervisor": os.getpid(),
        "agent": agent_pid,
        "restarts": restarts,
        "started": time.time(),
    }
    tmp = pidfile.with_name(pidfile.name + ".tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, pidfile)


def _address_space_limit(limit: int) -> Callable[[], None]:
    """A preexec function capping the child's address space at ``limit`` bytes."""

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


class _OomWatch:
    """The OOM-kill counter of the agent's memory cgroup, read at start and as it moves."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.file = cgroup_oom_file(pid)
        self.base = oom_kills(self.file)

    def refresh(self) -> None:
        """Follow the agent into another cgroup (its counter is read from there on)."""
        now = cgroup_oom_file(self.pid)
        if now is not None and now != self.file:
            self.file, self.base = now, oom_kills(now)

    def evidence(self) -> str:
        """The counter's growth since the agent started there ("" if none)."""
        after = oom_kills(self.file)
        if self.base is None or after is None or after <= self.base:
            return ""
        return (
            f"its memory cgroup counted {after - self.base} OOM kill(s) while it ran "
            f"(oom_kill {self.base} -> {after} in {self.file})"
        )


def _record(
    p: subprocess.Popen,
    name: str,
    log: Path,
    since: int,
    started: tuple[float, float],
    watch: _OomWatch,
    restarting: bool,
) -> ExitRecord:
    """What the OS said about the ended agent ``p`` (``started``: wall and monotonic time;
    ``since``: where its output began in ``log``)."""
    rc = p.returncode
    oom = ""
    if rc == -signal.SIGKILL:  # only the OOM killer's weapon: look for the kernel's word
        oom = kernel_oom_line(p.pid, started[1]) or watch.evidence()
    return ExitRecord(
        pid=p.pid,
        returncode=rc,
        agent=name,
        started=started[0],
        ended=time.time(),
        oom=oom,
        last_words=last_words(log, since),
        restarting=restarting,
    )


def supervise(root: Path, stem: str = STEM) -> int:
    """Run the agent of ``root/stem.json`` under supervision until stopped; return an exit code."""
    cfg = json.loads((root / f"{stem}.json").read_text())
    log, pidfile = root / f"{stem}.log", root / f"{stem}.pid"
    record = exit_path(log)
    restart = bool(cfg.get("restart", True))
    limit = int(cfg.get("memory_limit") or 0)
    stopping = {"flag": False}
    child: dict[str, subprocess.Popen | None] = {"p": None}

    def on_term(_sig, _frm) -> None:
        stopping["flag"] = True
        p = child["p"]
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    env = {**os.environ, EXIT_ENV: str(record.resolve())}
    restarts: list[float] = []
    rc = 0
    try:
        while not stopping["flag"]:
            with open(log, "ab") as out:
                since = out.tell()
                started = (time.time(), time.monotonic())
                p = subprocess.Popen(
                    agent_command(cfg),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=str(root),
                    env=env,
                    preexec_fn=_address_space_limit(limit) if limit else None,
                )
            child["p"] = p
            watch = _OomWatch(p.pid)
            _write_pids(pidfile, p.pid, len(restarts))
            _log(log, f"started agent pid {p.pid}")
            deadline = None
            while True:
                try:
                    rc = p.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    watch.refresh()
                    if stopping["flag"]:
                        deadline = deadline or time.monotonic() + STOP_GRACE_S
                        if time.monotonic() > deadline:
                            p.kill()
            again = restart and not stopping["flag"] and rc != 0
            rec = _record(p, cfg.get("id", ""), log, since, started, watch, again)
            with contextlib.suppress(OSError):
                write_exit(record, rec)
            _log(log, f"agent pid {p.pid} {rec.describe()}")
            if not again:
                break
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW_S] + [now]
            if len(restarts) > MAX_RESTARTS:
                _log(log, f"giving up: {MAX_RESTARTS} restarts within {RESTART_WINDOW_S:.0f} s")
                return 1
            pause = min(2.0 ** (len(restarts) - 1) * 0.5, 8.0)
            end = time.monotonic() + pause
            while time.monotonic() < end and not stopping["flag"]:
                time.sleep(0.1)
    finally:
        with contextlib.suppress(FileNotFoundError):
            pidfile.unlink()
        _log(log, "supervisor stopped")
    return 0 if stopping["flag"] else rc


def main(argv: list[str] | None = None) -> int:
    """``python -m genie.deploy.supervise ROOT [--name STEM]``."""
    ap = argparse.ArgumentParser(prog="genie.deploy.supervise")
    ap.add_argument("root")
    ap.add_argument("--name", default=STEM, help="files ROOT/NAME.json, .log, .pid, .exit.json")
    args = ap.parse_args(argv)
    return supervise(Path(args.root).expanduser().resolve(), args.name)


if __name__ == "__main__":
    sys.exit(main())

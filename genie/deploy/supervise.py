"""Runs on a lab host without systemd: keep one genie agent alive, with a pid file.

``python -m genie.deploy.supervise ROOT`` reads ``ROOT/agent.json``, starts the agent with its
output appended to ``ROOT/agent.log`` and records ``{"supervisor", "agent"}`` pids in
``ROOT/agent.pid``. An agent that exits non-zero is restarted with a growing pause, at most
``MAX_RESTARTS`` times in ``RESTART_WINDOW_S``; one that exits 0 (told to quit) is not. SIGTERM
to the supervisor stops the agent (SIGTERM, then SIGKILL after ``STOP_GRACE_S``) and removes the
pid file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from genie.wire.launch import launch_command

MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
STOP_GRACE_S = 5.0
PIDFILE = "agent.pid"
CONFIG = "agent.json"
LOG = "agent.log"


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
    return cmd


def _log(root: Path, text: str) -> None:
    with open(root / LOG, "a") as f:
        f.write(f"genie-supervise: {time.strftime('%Y-%m-%dT%H:%M:%S')} {text}\n")


def _write_pids(root: Path, agent_pid: int, restarts: int) -> None:
    rec = {
        "supervisor": os.getpid(),
        "agent": agent_pid,
        "restarts": restarts,
        "started": time.time(),
    }
    tmp = root / (PIDFILE + ".tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, root / PIDFILE)


def supervise(root: Path) -> int:
    """Run the agent of ``root`` under supervision until stopped; return an exit code."""
    cfg = json.loads((root / CONFIG).read_text())
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
    restarts: list[float] = []
    rc = 0
    try:
        while not stopping["flag"]:
            with open(root / LOG, "ab") as log:
                p = subprocess.Popen(
                    agent_command(cfg),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=str(root),
                )
            child["p"] = p
            _write_pids(root, p.pid, len(restarts))
            _log(root, f"started agent pid {p.pid}")
            deadline = None
            while True:
                try:
                    rc = p.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    if stopping["flag"]:
                        deadline = deadline or time.monotonic() + STOP_GRACE_S
                        if time.monotonic() > deadline:
                            p.kill()
            _log(root, f"agent pid {p.pid} exited with {rc}")
            if stopping["flag"] or rc == 0:
                break
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW_S] + [now]
            if len(restarts) > MAX_RESTARTS:
                _log(root, f"giving up: {MAX_RESTARTS} restarts within {RESTART_WINDOW_S:.0f} s")
                return 1
            pause = min(2.0 ** (len(restarts) - 1) * 0.5, 8.0)
            end = time.monotonic() + pause
            while time.monotonic() < end and not stopping["flag"]:
                time.sleep(0.1)
    finally:
        with contextlib.suppress(FileNotFoundError):
            (root / PIDFILE).unlink()
        _log(root, "supervisor stopped")
    return 0 if stopping["flag"] else rc


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1]).expanduser().resolve()))

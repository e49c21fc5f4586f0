"""Runs on a lab host from the deployed venv: start, stop, inspect the agent; JSON on stdout.

``python -m genie.deploy.agentctl ROOT start|stop|status|logs [LINES]``. The agent config
``ROOT/agent.json`` says which service manager holds it: ``systemd`` (a user unit
``genie-agent-ID.service``) or ``process`` (``genie.deploy.supervise`` with a pid file). Stop
acts on the recorded pids only, after checking that each still runs the expected program.
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
from typing import TypeGuard

from genie.deploy.supervise import CONFIG, LOG, PIDFILE, agent_command
from genie.wire.launch import is_agent_cmdline

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
UNIT_DIR = Path("~/.config/systemd/user").expanduser()


def unit_name(agent_id: str) -> str:
    """The systemd user unit of agent ``agent_id``."""
    return f"genie-agent-{agent_id}.service"


def unit_text(cfg: dict, python: str) -> str:
    """The systemd user unit that runs the agent of ``cfg``."""
    cmd = " ".join(agent_command(cfg, python))
    return (
        "[Unit]\n"
        f"Description=genie agent {cfg['id']}\n"
        "After=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={cmd}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        f"WorkingDirectory={cfg['root']}\n\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def _alive(pid: object) -> TypeGuard[int]:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _records(root: Path) -> dict:
    try:
        return json.loads((root / PIDFILE).read_text())
    except (OSError, ValueError):
        return {}


def _systemctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["systemctl", "--user", *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def status(root: Path, cfg: dict) -> dict:
    """What runs now: mode, pids, whether alive."""
    if cfg.get("service") == "systemd":
        out = _systemctl("show", "-p", "MainPID,ActiveState,NRestarts", unit_name(cfg["id"]))
        props = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        pid = int(props.get("MainPID", "0") or 0)
        return {
            "mode": "systemd",
            "unit": unit_name(cfg["id"]),
            "running": props.get("ActiveState") == "active" and pid > 0,
            "agent_pid": pid or None,
            "supervisor_pid": None,
            "restarts": int(props.get("NRestarts", "0") or 0),
        }
    rec = _records(root)
    sup, agent = rec.get("supervisor"), rec.get("agent")
    sup_ok = _alive(sup) and "genie.deploy.supervise" in _cmdline(sup)
    agent_ok = _alive(agent) and is_agent_cmdline(_cmdline(agent).split())
    return {
        "mode": "process",
        "running": bool(sup_ok and agent_ok),
        "agent_pid": agent,
        "supervisor_pid": sup,
        "supervisor_alive": sup_ok,
        "agent_alive": agent_ok,
        "restarts": rec.get("restarts", 0),
    }


def _wait_listening(root: Path, offset: int, pid_of) -> int | None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with open(root / LOG, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            text = ""
        pid = pid_of()
        if "listening on" in text and pid:
            return pid
        if "giving up" in text:
            return None
        time.sleep(0.05)
    return None


def start(root: Path, cfg: dict) -> dict:
    """Start the agent if it is not running; wait until it listens."""
    st = status(root, cfg)
    if st["running"]:
        return {**st, "action": "already running"}
    log = root / LOG
    offset = log.stat().st_size if log.exists() else 0
    python = str(Path(sys.executable))
    if cfg.get("service") == "systemd":
        UNIT_DIR.mkdir(parents=True, exist_ok=True)
        (UNIT_DIR / unit_name(cfg["id"])).write_text(unit_text(cfg, python))
        for args in (("daemon-reload",), ("enable", "--now", unit_name(cfg["id"]))):
            out = _systemctl(*args)
            if out.returncode:
                return {**st, "action": "failed", "error": out.stderr.strip()[-300:]}
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            st = status(root, cfg)
            if st["running"]:
                return {**st, "action": "started"}
            time.sleep(0.1)
        return {**st, "action": "failed", "error": "systemd unit did not become active"}
    with contextlib.suppress(FileNotFoundError):
        (root / PIDFILE).unlink()
    subprocess.Popen(
        [python, "-m", "genie.deploy.supervise", str(root)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=str(root),
        start_new_session=True,
        close_fds=True,
    )
    pid = _wait_listening(root, offset, lambda: _records(root).get("agent"))
    st = status(root, cfg)
    if pid is None or not st["running"]:
        error = _last_error(root, offset)
        stop(root, cfg)
        return {**status(root, cfg), "action": "failed", "error": error}
    return {**st, "action": "started"}


def _last_error(root: Path, offset: int) -> str:
    try:
        with open(root / LOG, "rb") as f:
            f.seek(offset)
            lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "no agent log"
    useful = [x for x in lines if "genie-supervise" not in x]
    return (useful or lines or ["agent did not start"])[-1][-300:]


def stop(root: Path, cfg: dict) -> dict:
    """Stop the agent: the systemd unit, or the recorded supervisor and agent pids."""
    if cfg.get("service") == "systemd":
        before = status(root, cfg)
        out = _systemctl("stop", unit_name(cfg["id"]))
        return {
            **status(root, cfg),
            "action": "stopped" if not out.returncode else "failed",
            "stopped": [before["agent_pid"]] if before["agent_pid"] else [],
        }
    st = status(root, cfg)
    targets = []
    if st["supervisor_alive"]:
        targets.append(st["supervisor_pid"])
    elif st["agent_alive"]:
        targets.append(st["agent_pid"])
    for pid in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    watch = [p for p in (st["supervisor_pid"], st["agent_pid"]) if p]
    check = {st["supervisor_pid"]: st["supervisor_alive"], st["agent_pid"]: st["agent_alive"]}
    watch = [p for p in watch if check.get(p)]
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and any(_alive(p) for p in watch):
        time.sleep(0.05)
    killed = []
    for pid in watch:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    with contextlib.suppress(FileNotFoundError):
        (root / PIDFILE).unlink()
    return {
        **status(root, cfg),
        "action": "stopped" if watch else "not running",
        "stopped": watch,
        "killed": killed,
    }


def logs(root: Path, cfg: dict, lines: int) -> str:
    """The last ``lines`` lines of the agent's log."""
    if cfg.get("service") == "systemd":
        out = subprocess.run(
            ["journalctl", "--user", "-u", unit_name(cfg["id"]), "-n", str(lines), "--no-pager"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        return out.stdout
    try:
        text = (root / LOG).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:]) + "\n"


def main(argv: list[str]) -> int:
    """Entry point on the host."""
    if len(argv) < 2 or argv[1] not in ("start", "stop", "status", "logs", "restart"):
        print(
            "usage: python -m genie.deploy.agentctl ROOT start|stop|restart|status|logs [N]",
            file=sys.stderr,
        )
        return 2
    root = Path(argv[0]).expanduser().resolve()
    try:
        cfg = json.loads((root / CONFIG).read_text())
    except (OSError, ValueError) as exc:
        print(json.dumps({"action": "failed", "error": f"no agent config in {root}: {exc}"}))
        return 1
    what = argv[1]
    if what == "logs":
        sys.stdout.write(logs(root, cfg, int(argv[2]) if len(argv) > 2 else 50))
        return 0
    if what == "restart":
        stop(root, cfg)
        what = "start"
    result = {"status": status, "start": start, "stop": stop}[what](root, cfg)
    print(json.dumps(result))
    return 1 if result.get("action") == "failed" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

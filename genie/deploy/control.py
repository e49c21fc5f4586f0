"""Drive a deployed agent over SSH: status, stop, restart, logs (via ``genie.deploy.agentctl``)."""

from __future__ import annotations

import json
from typing import Any

from genie.deploy.config import DeployConfig, HostAccess
from genie.deploy.ssh import Remote, shell_path
from genie.errors import DeployError

ACTIONS = ("status", "stop", "restart", "logs")


def agentctl_command(access: HostAccess, what: str, lines: int = 50) -> str:
    """The shell command that runs agentctl ``what`` in the host's genie venv."""
    root = shell_path(access.remote_root)
    tail = f" {int(lines)}" if what == "logs" else ""
    return f"{root}/venv/bin/python -m genie.deploy.agentctl {root} {what}{tail}"


def agent_control(cfg: DeployConfig, host: str, what: str, lines: int = 50) -> Any:
    """Run ``what`` on ``host``'s agent: a status dict, or the log text for ``logs``."""
    if what not in ACTIONS:
        raise DeployError(f"unknown agent action {what!r}; use {', '.join(ACTIONS)}")
    access = cfg.hosts[host]
    with Remote(access, cfg.connect_timeout) as remote:
        cmd = agentctl_command(access, what, lines)
        res = remote.run(cmd, f"{host}: agent {what}", check=False)
    if res.exited == 127 or "No such file" in res.stderr:
        where = access.remote_root
        raise DeployError(f"{host}: genie is not deployed under {where} (run genie deploy)")
    if what == "logs":
        if res.exited:
            raise DeployError(f"{host}: agent logs: {res.stderr.strip()[-300:]}")
        return res.stdout
    try:
        out = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise DeployError(f"{host}: agent {what}: {last[-300:]}") from None
    if out.get("action") == "failed":
        raise DeployError(f"{host}: agent {what} failed: {out.get('error', 'no reason given')}")
    return out

"""``genie agents status|stop|restart|logs HOST``: manage deployed agents over SSH."""

from __future__ import annotations

import argparse
import json
import sys

from genie.commands import _args as A
from genie.errors import DeployError


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from genie.deploy.config import load_deploy, select_hosts
    from genie.deploy.control import agent_control

    testbed, cfg = load_deploy(args.testbed)
    names = select_hosts(testbed, None if args.host == "all" else args.host)
    if args.action == "logs":
        for n in names:
            text = agent_control(cfg, n, "logs", args.lines)
            if len(names) > 1:
                print(f"==> {n} <==")
            sys.stdout.write(text)
        return 0
    rows, failed = [], []
    for n in names:
        try:
            rows.append((n, agent_control(cfg, n, args.action)))
        except DeployError as exc:
            failed.append((n, str(exc)))
    if args.json:
        data = [{"host": n, **r} for n, r in rows] + [
            {"host": n, "action": "failed", "error": e} for n, e in failed
        ]
        print(json.dumps(data, indent=2))
    else:
        t = Table(title=f"genie agents {args.action}: {testbed.name}")
        for col in ("host", "running", "mode", "agent pid", "supervisor pid", "action"):
            t.add_column(col)
        for n, r in rows:
            t.add_row(
                n,
                "[green]yes[/green]" if r.get("running") else "no",
                str(r.get("mode", "")),
                str(r.get("agent_pid") or ""),
                str(r.get("supervisor_pid") or ""),
                str(r.get("action", args.action)),
            )
        Console().print(t)
        for _n, e in failed:
            print(f"genie: error: {e}", file=sys.stderr)
    if failed:
        return 1
    if args.action == "status" and not all(r.get("running") for _, r in rows):
        return 3  # like systemctl status: not running
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``agents`` command."""
    p = sub.add_parser(
        "agents",
        help="status, stop, restart or show logs of deployed agents over SSH",
        description="Manage agents installed by `genie deploy`: status (exit 3 if one is not "
        "running), stop (by the recorded pid, or the systemd unit), restart, logs.",
    )
    p.add_argument("action", choices=("status", "stop", "restart", "logs"))
    p.add_argument("host", metavar="HOST", help="testbed host name, H0,H1, or 'all'")
    p.add_argument("--testbed", required=True, metavar="FILE", help="testbed TOML file")
    p.add_argument(
        "-n", "--lines", type=A.integer(1, 100000), default=50, help="log lines to show (logs)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run)

"""``genie hosts check``: check every testbed host over SSH; each failure with its fix."""

from __future__ import annotations

import argparse
import json

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from genie.deploy.checks import check_hosts, checks_json
    from genie.deploy.config import load_deploy, select_hosts

    testbed, cfg = load_deploy(args.testbed)
    names = select_hosts(testbed, args.hosts)
    err = Console(stderr=True)
    with err.status(f"checking {len(names)} host(s) over SSH"):
        results = check_hosts(testbed, cfg, names)
    if args.json:
        print(json.dumps(checks_json(results), indent=2))
    else:
        t = Table(title=f"genie hosts check: {testbed.name}")
        for col in ("host", "check", "status", "value", "fix"):
            t.add_column(col)
        for name, checks in results.items():
            for i, c in enumerate(checks):
                s = _STYLE[c.status]
                t.add_row(name if i == 0 else "", c.name, f"[{s}]{c.status}[/{s}]", c.value, c.fix)
        Console().print(t)
    failed = [n for n, cs in results.items() if any(c.status == "fail" for c in cs)]
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``hosts`` command."""
    p = sub.add_parser("hosts", help="check the testbed's hosts over SSH")
    hs = p.add_subparsers(dest="hosts_command", metavar="SUBCOMMAND", required=True)
    c = hs.add_parser(
        "check",
        help="reachability, Python, genie, NICs, MTU, TCP stack, RDMA, clock, CPU governor, keys, "
        "agent",
        description="Check each host over SSH: reachable, Python >= 3.11 with venv, genie "
        "version, data NIC (state, link speed, MTU against the testbed), the TCP stack against "
        "the testbed's [tcp] (may the agent's user set its congestion control; ECN, slow start "
        "after idle, buffer limits), RDMA devices and GIDs "
        "(/sys/class/infiniband), clock offset, CPU governor, the agent's key directory against "
        "[deploy] keys (modes, public keys, no controller secret), and a hello to the agent "
        "(over CURVE with the controller's keys when set). Every failure names its fix; "
        "exit 1 if any check failed.",
    )
    c.add_argument("--testbed", required=True, metavar="FILE", help="testbed TOML file")
    c.add_argument("--hosts", metavar="H0,H1", help="check only these hosts")
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(func=_run)

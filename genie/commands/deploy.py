"""``genie deploy``: install genie on every testbed host over SSH and start its agent."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from genie.errors import DeployError


def _table(outcomes, title: str):
    from rich.table import Table

    t = Table(title=title)
    for col in ("host", "result", "action", "agent pid", "mode", "time", "detail"):
        t.add_column(col, justify="right" if col in ("agent pid", "time") else "left")
    for o in outcomes:
        t.add_row(
            o.name,
            "[green]ok[/green]" if o.ok else "[red]failed[/red]",
            o.action,
            str(o.agent_pid or ""),
            o.mode,
            f"{o.seconds:.1f} s",
            o.detail,
        )
    return t


def outcome_json(o) -> dict:
    """One host outcome as plain JSON data."""
    return {
        "host": o.name,
        "ok": o.ok,
        "action": o.action,
        "detail": o.detail,
        "version": o.version,
        "agent_pid": o.agent_pid,
        "mode": o.mode,
        "extras": o.extras,
        "seconds": round(o.seconds, 3),
        "timings_s": {k: round(v, 3) for k, v in o.timings.items()},
        **({} if o.preflight is None else {"preflight": [vars(c) for c in o.preflight]}),
    }


def preflight_lines(outcomes) -> list[str]:
    """One line per failed or warned RDMA preflight row of every host, with its fix."""
    return [
        f"rdma preflight {o.name}: {c.status} {c.name}: {c.value}"
        + (f" -> {c.fix}" if c.fix else "")
        for o in outcomes
        for c in o.preflight or []
        if c.status in ("fail", "warn")
    ]


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from genie.deploy.config import load_deploy, select_hosts
    from genie.deploy.deployer import Artifacts, deploy
    from genie.deploy.inventory import write_inventory
    from genie.deploy.wheel import build_wheel

    testbed, cfg = load_deploy(args.testbed)
    names = select_hosts(testbed, args.hosts)
    if args.ansible_inventory:
        p = write_inventory(testbed, cfg, args.ansible_inventory, str(args.testbed))
        print(f"wrote Ansible inventory for {len(testbed.hosts)} hosts to {p}")
        print(f"  next: ansible-playbook -i {p} ansible/site.yml -e genie_wheel=WHEEL")
        return 0
    if cfg.keys:
        from genie.deploy.keyfiles import plan_keys

        for n in names:
            plan_keys(cfg.keys, n)  # a missing or bad key directory: one line, before any work
    err = Console(stderr=True)
    if args.wheel:
        wheel = Path(args.wheel)
        if not wheel.is_file():
            raise DeployError(f"--wheel {wheel}: no such file")
    else:
        with err.status("building the genie wheel"):
            wheel = build_wheel()
    art = Artifacts.of(wheel, cfg.wheelhouse)
    lock = threading.Lock()
    quiet = args.json or not err.is_terminal
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.fields[host]:<12}"),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=False,
    ) as progress:
        tasks = {n: progress.add_task("waiting", host=n, total=None) for n in names}

        def report(host: str, stage: str) -> None:
            with lock:
                progress.update(tasks[host], description=stage)
            if quiet and not args.json:
                print(f"{host}: {stage}", file=sys.stderr, flush=True)

        outcomes = deploy(testbed, cfg, names, art, report)
    if args.json:
        print(json.dumps([outcome_json(o) for o in outcomes], indent=2))
    else:
        Console().print(_table(outcomes, f"genie deploy: {testbed.name} ({wheel.name})"))
        lines = preflight_lines(outcomes)
        for line in lines:
            print(line)
        if lines:
            print(f"  (every row: genie hosts check --testbed {args.testbed})")
    return 0 if all(o.ok for o in outcomes) else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``deploy`` command."""
    p = sub.add_parser(
        "deploy",
        help="install genie on the testbed hosts over SSH and start their agents",
        description="Build the genie wheel, copy it to every host of the testbed over SSH, "
        "install it into ROOT/venv (ROOT: [deploy] remote_root, default ~/.genie; the rdma "
        "extra where /sys/class/infiniband has devices), write the agent config, start the "
        "agent (systemd user unit, else a supervised process with a pid file) and wait for "
        "its hello. SSH access comes from the file's [deploy] and [deploy.hosts.NAME] tables "
        "(user, port, key path, ssh_host) or ~/.ssh/config; passwords are refused. With "
        '[deploy] keys = "DIR" (a `genie keys init` directory) each host gets ROOT/keys (0700): '
        "its agent's key pair and the controller's public keys, never the controller's "
        "secret; the agent then admits only those controllers (CURVE). A second deploy with "
        "nothing changed reinstalls nothing and leaves a healthy agent alone; changed keys are "
        "rewritten and the agent restarted, without a reinstall. Hosts that run RDMA jobs get "
        "the RDMA preflight of `genie hosts check` after the probe: its failed and warned rows "
        "are printed under the table (JSON: preflight) and do not stop the deploy.",
    )
    p.add_argument("--testbed", required=True, metavar="FILE", help="testbed TOML file")
    p.add_argument("--hosts", metavar="H0,H1", help="deploy only these hosts (default: all)")
    p.add_argument(
        "--ansible-inventory",
        metavar="OUT",
        help="write an Ansible inventory of the testbed to OUT and stop (no deploy)",
    )
    p.add_argument("--wheel", metavar="FILE", help="deploy this wheel instead of building one")
    p.add_argument("--json", action="store_true", help="print the per-host outcomes as JSON")
    p.set_defaults(func=_run)

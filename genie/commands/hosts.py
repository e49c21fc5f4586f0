"""``genie hosts check``: check every testbed host over SSH; each failure with its fix."""

from __future__ import annotations

import argparse
import json

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def _tree(args: argparse.Namespace) -> tuple[str, dict]:
    """``--sysfs-root DIR``: the RDMA preflight against a recorded tree, no SSH."""
    from genie.deploy.config import load_deploy, select_hosts
    from genie.deploy.rdma_preflight import preflight_tree
    from genie.errors import UsageError

    if not args.testbed:
        if args.hosts:
            raise UsageError("--hosts needs --testbed (the host's NICs come from the testbed)")
        return f"rdma preflight of {args.sysfs_root}", {
            "(tree)": preflight_tree(args.sysfs_root, priority=args.priority)
        }
    testbed, _ = load_deploy(args.testbed)
    names = select_hosts(testbed, args.hosts)
    if len(names) != 1:
        raise UsageError(
            f"--sysfs-root is one host's tree: name that host with --hosts H "
            f"({testbed.name} has {len(names)})"
        )
    host = testbed.host(names[0])
    checks = preflight_tree(args.sysfs_root, testbed, host, args.priority)
    return f"rdma preflight of {args.sysfs_root} as {host.name} of {testbed.name}", {
        host.name: checks
    }


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from genie.deploy.checks import check_hosts, checks_json
    from genie.deploy.config import load_deploy, select_hosts
    from genie.errors import UsageError

    if args.priority is not None and not 0 <= args.priority <= 7:
        raise UsageError(f"--priority {args.priority}: a priority is 0..7")
    if args.sysfs_root:
        title, results = _tree(args)
    elif not args.testbed:
        raise UsageError("hosts check needs --testbed FILE (or --sysfs-root DIR)")
    else:
        testbed, cfg = load_deploy(args.testbed)
        names = select_hosts(testbed, args.hosts)
        err = Console(stderr=True)
        with err.status(f"checking {len(names)} host(s) over SSH"):
            results = check_hosts(testbed, cfg, names, args.priority)
        title = testbed.name
    if args.json:
        print(json.dumps(checks_json(results), indent=2))
    else:
        t = Table(title=f"genie hosts check: {title}")
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
        "(over CURVE with the controller's keys when set). Hosts of an rdma testbed (or with "
        "an rdma_device) also get the RDMA preflight: per NIC the RDMA device <-> netdev <-> "
        "IP mapping, port state and link layer, the GID index carrying the host's IP as RoCE "
        "v2 (what NCCL_IB_GID_INDEX must be; RoCE v1 only fails), active MTU against the "
        "netdev MTU (ibv_devinfo -v), PFC (mlnx_qos or dcb) and ECN (roce_np/roce_rp in "
        "/sys/class/net/IF/ecn) on the traffic priority (--priority, else that of the "
        "testbed's [rdma] traffic_class, else NCCL_IB_TC's, else 3), firmware and rate, and the "
        "locked-memory limit. --sysfs-root DIR runs the preflight alone, here, without SSH, "
        "on a recorded tree (DIR/sys/class/infiniband, DIR/sys/class/net, DIR/proc/self/"
        "limits, DIR/etc/nccl.conf, tool outputs in DIR/genie-tools/: ibv_devinfo.txt, "
        "mlnx_qos-IF.txt or dcb-pfc-IF.txt; python -m genie.deploy.rdma_probe / --record DIR "
        "records one on a host); with --testbed F --hosts H it checks host H's NICs, else every "
        "device in the tree. Every failure names its fix; exit 1 if any check failed.",
    )
    c.add_argument(
        "--testbed", metavar="FILE", help="testbed TOML file (required without --sysfs-root)"
    )
    c.add_argument("--hosts", metavar="H0,H1", help="check only these hosts")
    c.add_argument(
        "--sysfs-root",
        metavar="DIR",
        help="run the RDMA preflight on this recorded tree of one host, here (no SSH)",
    )
    c.add_argument(
        "--priority",
        type=int,
        metavar="P",
        help="the traffic priority PFC and ECN must cover (default: the one genie's queue pairs "
        "use where the testbed's [rdma] sets traffic_class, else from NCCL_IB_TC in the host's "
        "nccl.conf or environment, else 3, RoCE's usual lossless priority; a traffic class TC "
        "maps under the common DSCP trust mapping: DSCP = TC >> 2, priority = DSCP >> 3, so "
        "106 -> DSCP 26 -> priority 3)",
    )
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(func=_run)

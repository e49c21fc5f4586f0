"""The agent's command line: its options and how they start the daemon.

Shared by ``python -m agents`` (how lab hosts and local clusters start agents) and by
``genie agent``; it imports only ``agents`` and the wire-level genie modules.
"""

from __future__ import annotations

import argparse

from genie.errors import UsageError


def _split_addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen wants IP:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the agent the parsed options describe."""
    from agents.daemon import run_agent

    host, port = _split_addr(args.listen)
    data_addr = args.data_addr or host
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return run_agent(
        listen,
        args.id,
        data_addr,
        args.data_port,
        heartbeat_s=args.heartbeat,
        keys_dir=args.keys,
    )


def add_agent_arguments(p: argparse.ArgumentParser) -> None:
    """The agent's options (shared by ``genie agent`` and ``python -m agents``)."""
    p.add_argument("--listen", required=True, metavar="IP:PORT", help="control address to bind")
    p.add_argument("--id", required=True, metavar="NAME", help="agent id (the testbed host name)")
    p.add_argument(
        "--data-addr", metavar="IP", help="address for data listeners (default: --listen IP)"
    )
    p.add_argument("--data-port", type=int, default=0, help="data listener port (default: any)")
    p.add_argument("--heartbeat", type=float, default=0.5, metavar="S", help="heartbeat interval")
    p.add_argument(
        "--keys",
        metavar="DIR",
        default=None,
        help="CURVE keys from `genie keys init` (default: $GENIE_KEYS; none: unauthenticated)",
    )

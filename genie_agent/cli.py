"""The agent's command line: its options and how they start the daemon.

Shared by ``python -m genie_agent`` (how lab hosts and local clusters start agents) and by
``genie agent``; it imports only ``agents`` and the wire-level genie modules.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re

from genie.errors import UsageError
from genie.wire.liveness import MISSED_BEATS_LIMIT, MISSED_BEATS_MAX, MISSED_BEATS_MIN

HEARTBEAT_MIN_S = 0.01
HEARTBEAT_MAX_S = 60.0
MAX_DATA_ADDRS = 64  # NICs of one host
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _split_addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen wants IP:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def check_args(args: argparse.Namespace) -> tuple[str, list[str]]:
    """Validate the agent's options; return (listen, data addresses). UsageError if bad."""
    host, port = _split_addr(args.listen)
    data_addrs = [a.strip() for a in (args.data_addr or host).split(",")]
    if len(data_addrs) != len(set(data_addrs)) or len(data_addrs) > MAX_DATA_ADDRS:
        raise UsageError(
            f"--data-addr wants 1..{MAX_DATA_ADDRS} distinct addresses, got {args.data_addr!r}"
        )
    for flag, ip in (("--listen", host), *(("--data-addr", a) for a in data_addrs)):
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise UsageError(f"{flag} wants an IP address, got {ip!r}") from None
    if not _NAME.match(args.id):
        raise UsageError(f"--id must be 1-64 of A-Z a-z 0-9 _ . -; got {args.id!r}")
    if args.testbed and not _NAME.match(args.testbed):
        raise UsageError(f"--testbed must be 1-64 of A-Z a-z 0-9 _ . -; got {args.testbed!r}")
    if not 0 <= args.data_port <= 65535:
        raise UsageError(f"--data-port must be 0..65535 (0: any), got {args.data_port}")
    hb = args.heartbeat
    if not (math.isfinite(hb) and HEARTBEAT_MIN_S <= hb <= HEARTBEAT_MAX_S):
        raise UsageError(
            f"--heartbeat must be {HEARTBEAT_MIN_S:g}..{HEARTBEAT_MAX_S:g} seconds, got {hb}"
        )
    mb = args.missed_beats
    if not MISSED_BEATS_MIN <= mb <= MISSED_BEATS_MAX:
        raise UsageError(
            f"--missed-beats must be {MISSED_BEATS_MIN}..{MISSED_BEATS_MAX} heartbeats, got {mb}"
        )
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return listen, data_addrs


def run_from_args(args: argparse.Namespace) -> int:
    """Run the agent the parsed options describe."""
    from genie_agent.daemon import run_agent

    listen, data_addr = check_args(args)
    return run_agent(
        listen,
        args.id,
        data_addr,
        args.data_port,
        heartbeat_s=args.heartbeat,
        missed_beats=args.missed_beats,
        keys_dir=args.keys,
        testbed=args.testbed or "",
        counters_sysfs=args.counters_sysfs,
    )


def add_agent_arguments(p: argparse.ArgumentParser) -> None:
    """The agent's options (shared by ``genie agent`` and ``python -m genie_agent``)."""
    p.add_argument("--listen", required=True, metavar="IP:PORT", help="control address to bind")
    p.add_argument("--id", required=True, metavar="NAME", help="agent id (the testbed host name)")
    p.add_argument(
        "--data-addr",
        metavar="IP[,IP...]",
        help="address(es) for data listeners, one per NIC, the first the agent's own (default: "
        "--listen IP); each rank's connections leave from its NIC's address",
    )
    p.add_argument("--data-port", type=int, default=0, help="data listener port (default: any)")
    p.add_argument("--heartbeat", type=float, default=0.5, metavar="S", help="heartbeat interval")
    p.add_argument(
        "--missed-beats",
        type=int,
        default=MISSED_BEATS_LIMIT,
        metavar="N",
        help="heartbeats a controller may miss before the agent drops its job (default "
        f"{MISSED_BEATS_LIMIT}; more on hosts that stall for seconds, with the testbed's "
        "missed_beats alike)",
    )
    p.add_argument(
        "--keys",
        metavar="DIR",
        default=None,
        help="CURVE keys from `genie keys init` (default: $GENIE_KEYS; none: unauthenticated)",
    )
    p.add_argument(
        "--testbed",
        metavar="NAME",
        default=None,
        help="serve only controllers of this testbed (genie sets it for netns agents)",
    )
    p.add_argument(
        "--counters-sysfs",
        metavar="DIR",
        default=None,
        help="sysfs root the NIC counters reported with each run are read from (default: "
        "$GENIE_COUNTERS_SYSFS, else /sys)",
    )

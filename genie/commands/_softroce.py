"""``genie testbed softroce up|down|status``: soft-RoCE links for hosts without RDMA NICs.

``add_commands(subparsers)`` adds the three commands to any subparser set, so ``genie testbed``
can offer them as ``genie testbed softroce ...`` too.
"""

from __future__ import annotations

import argparse
import os

from genie.errors import TestbedError
from genie.testbed import softroce as sr
from genie_agent.dataplane.rdma_conn import find_devices


def _support_or_fail() -> sr.KernelSupport:
    ks = sr.kernel_support()
    problem = ks.problem()
    if problem:
        raise TestbedError(problem)
    return ks


def _print_cmds(cmds: list[list[str]]) -> None:
    for c in cmds:
        print(" ".join(c))


def _up(args: argparse.Namespace) -> int:
    ks = _support_or_fail()
    if not sr.netdev_exists(args.netdev):
        raise TestbedError(f"no network device {args.netdev!r} on this host")
    cmds = sr.up_commands(args.netdev, sr.list_links(), not ks.needs_modprobe)
    if args.dry_run:
        _print_cmds(cmds)
        return 0
    if cmds and os.geteuid() != 0:
        raise TestbedError("softroce up needs root (modprobe, rdma link add)")
    sr.apply(cmds)
    if not cmds:
        print(f"an rxe link on {args.netdev} exists already")
    return _status(args)


def _down(args: argparse.Namespace) -> int:
    cmds = sr.down_commands(sr.list_links())
    if args.dry_run:
        _print_cmds(cmds)
        return 0
    if cmds and os.geteuid() != 0:
        raise TestbedError("softroce down needs root (rdma link delete)")
    sr.apply(cmds)
    print(f"removed {len(cmds)} {sr.PREFIX}* link(s)")
    return 0


def _status(_args: argparse.Namespace) -> int:
    ks = sr.kernel_support()
    problem = ks.problem()
    print(f"kernel {ks.release}: " + (problem or "soft-RoCE available"))
    devs = find_devices()
    if not devs:
        print("RDMA devices: none")
    for d in devs:
        for p in d.ports:
            gids = ", ".join(f"{g.index}={g.ip() or g.gid} ({g.kind or '?'})" for g in p.gids)
            print(f"{d.name} port {p.num}: {p.state} {p.link_layer}; GIDs {gids or 'none'}")
    for link in sr.list_links():
        mark = " (genie)" if link["name"].startswith(sr.PREFIX) else ""
        print(f"link {link['name']}/{link['port']} {link['state']} netdev {link['netdev']}{mark}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``softroce up|down|status`` to ``sub``."""
    p = sub.add_parser(
        "softroce",
        help="soft-RoCE (rdma_rxe) links for RDMA jobs without an RDMA NIC",
        description="Load rdma_rxe and add an rxe link on a network device (genie-rxe0, or "
        "the next free genie-rxe<N>), remove genie's rxe links, or show the kernel's support "
        "and the RDMA devices.",
    )
    s = p.add_subparsers(dest="softroce_command", metavar="SUBCOMMAND", required=True)
    u = s.add_parser("up", help="load rdma_rxe and add genie-rxe<N> on --netdev (root)")
    u.add_argument("--netdev", required=True, metavar="IF", help="network device, e.g. eth0")
    u.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    u.set_defaults(func=_up)
    d = s.add_parser("down", help="remove every genie-rxe* link (root)")
    d.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    d.set_defaults(func=_down)
    st = s.add_parser("status", help="kernel support, RDMA devices, ports, GIDs and links")
    st.set_defaults(func=_status)

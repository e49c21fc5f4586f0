"""``genie testbed``: show testbed files, and build/remove emulated (netns) testbeds."""

from __future__ import annotations

import argparse
import os
import shlex

from genie.commands import _args as A
from genie.commands import _softroce as softroce
from genie.errors import TestbedError
from genie.testbed.model import Testbed
from genie.units import format_bytes, format_seconds


def wire_note(tb: Testbed) -> str:
    """What the links add besides their rate: netem's delay, jitter and loss, or nothing."""
    lks = [lk for lk in tb.links if lk.impaired]
    if not lks:
        return "note: links are rate-limited with tc tbf; no delay or loss is emulated (none set)"
    lk = max(lks, key=lambda x: (x.latency, x.jitter, x.loss))
    return (
        f"note: links are rate-limited with tc tbf under netem: {len(lks)} of {len(tb.links)} "
        f"links add delay, jitter or loss at each end (most: {format_seconds(lk.latency)} "
        f"+- {format_seconds(lk.jitter)}, {lk.loss:.3%} loss)"
    )


def _rich_console():
    from rich.console import Console

    return Console(highlight=False)


def _gbit(rate: float) -> str:
    return f"{rate * 8 / 1e9:g} Gbit/s"


def _show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from genie.testbed import dumps_testbed, load_testbed

    tb = load_testbed(args.file)
    if args.toml:
        print(dumps_testbed(tb), end="")
        return 0
    con = _rich_console()
    con.print(
        f"testbed [bold]{tb.name}[/bold]: kind {tb.kind}, transport {tb.transport}, "
        f"{len(tb.hosts)} hosts, {tb.n_ranks} ranks, {len(tb.switches)} switches, "
        f"{len(tb.links)} links"
    )
    hosts = Table("host", "control", "data_addr", "ranks", "nic", "rdma", "netns")
    for h in tb.hosts:
        hosts.add_row(
            h.name, h.control, h.data_addr, str(h.ranks), h.nic or "-", h.rdma_device or "-",
            h.netns or "-",
        )  # fmt: skip
    con.print(hosts)
    links = Table("a", "b", "rate (10^9 bit/s)", "mtu", "queue", "latency", "jitter", "loss")
    for lk in tb.links:
        q = format_bytes(lk.queue_limit) if lk.queue_limit else "auto"
        links.add_row(
            lk.a, lk.b, _gbit(lk.rate), str(lk.mtu), q, format_seconds(lk.latency),
            format_seconds(lk.jitter), f"{lk.loss:.3%}",
        )  # fmt: skip
    con.print(links)
    ih = tb.intra_host
    con.print(f"intra-host: {ih.bandwidth / 1e9:g} GB/s (10^9 B/s), {ih.latency * 1e6:g} us")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from genie.testbed import load_testbed
    from genie.testbed.netns_plan import plan_up

    plan = plan_up(load_testbed(args.file))
    for cmd in plan.commands:
        print(shlex.join(cmd.argv))
    return 0


def _need_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError("netns testbeds need root (CAP_NET_ADMIN): run with sudo")


def _up(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, TextColumn

    from genie.testbed import load_testbed, netns

    tb = load_testbed(args.file)
    if tb.kind != "netns":
        raise TestbedError(f"{args.file}: kind is {tb.kind!r}; only netns testbeds are built")
    _need_root()
    with Progress(TextColumn("{task.description}"), BarColumn(), transient=True) as prog:
        task = prog.add_task("building", total=None)

        def step(i: int, total: int, what: str) -> None:
            prog.update(task, completed=i, total=total, description=what[:40])

        plan = netns.up(tb, source=str(args.file), progress=step)
    con = _rich_console()
    con.print(
        f"testbed {tb.name} is up: {len(tb.hosts)} host and {len(tb.switches)} switch "
        f"namespaces, {len(tb.links)} shaped links ({len(plan.commands)} commands)"
    )
    con.print(wire_note(tb))
    if args.agents:
        try:
            started = netns.start_agents(tb, timeout=args.agent_timeout)
        except TestbedError:
            netns.down(tb)
            raise
        for line in started:
            con.print(f"agent {line}")
    for h in tb.hosts:
        con.print(f"  {h.name}: netns {h.netns}, control {h.control}, data {h.data_addr}")
    return 0


def _down(args: argparse.Namespace) -> int:
    from genie.testbed import load_testbed, netns

    tb = load_testbed(args.file)
    if tb.kind != "netns":
        raise TestbedError(f"{args.file}: kind is {tb.kind!r}; nothing was built for it")
    _need_root()
    removed = netns.down(tb)
    print(f"testbed {tb.name} is down" + (f": removed {', '.join(removed)}" if removed else ""))
    return 0


def _status(args: argparse.Namespace) -> int:
    from genie.testbed import netns, state

    namespaces = netns.list_namespaces()
    links = netns.list_root_links()
    records = state.load_all()
    if not (namespaces or links or records):
        print("no genie testbed is up")
        return 0
    for path, st in records:
        if st is None:
            print(f"unreadable record {path}")
            continue
        up = [n for n in st.namespaces if n in namespaces]
        alive = [a for a in st.agents if netns.agent_alive(a)]
        print(
            f"testbed {st.name} ({st.source or 'no file'}): {len(up)}/{len(st.namespaces)} "
            f"namespaces, {len(alive)}/{len(st.agents)} agents alive"
        )
        for a in st.agents:
            mark = "alive" if a in alive else "gone"
            print(f"  agent {a.host} pid {a.pid} {a.listen} {mark} (log {a.log})")
    known = {n for _, st in records if st for n in st.namespaces}
    stray = [n for n in namespaces if n not in known]
    if stray:
        print(
            f"namespaces without a record: {', '.join(stray)} "
            "(`genie testbed clean --prefix P` removes those of netns prefix P)"
        )
    if links:
        print(f"root links: {', '.join(links)}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from rich.table import Table

    from genie.testbed import load_testbed, netns
    from genie.testbed.measure import measure_flows
    from genie.testbed.netns_plan import plan_up

    tb = load_testbed(args.file)
    if tb.kind != "netns":
        raise TestbedError(f"{args.file}: kind is {tb.kind!r}; check measures netns testbeds")
    _need_root()
    wanted = set(plan_up(tb).namespaces)
    missing = wanted - set(netns.list_namespaces(prefix=tb.netns_prefix))
    if missing:
        raise TestbedError(f"testbed {tb.name} is not up (no {sorted(missing)[0]}): run `up`")
    if len(tb.hosts) < 2:
        raise TestbedError("check needs at least 2 hosts")
    topo = tb.to_topology("line")  # "set" is the line rate; the TCP ceiling is beside it
    table = Table(
        "flow", "set (Mbit/s)", "measured (Mbit/s)", "measured/set", "TCP ceiling/set",
        title="one TCP flow at a time (Mbit = 10^6 bit)",
    )  # fmt: skip
    worst = 1.0
    mtu = min(lk.mtu for lk in tb.links)
    n = len(tb.hosts)
    for i in range(n if n > 2 else 1):
        src, dst = tb.hosts[i].name, tb.hosts[(i + 1) % n].name
        route = topo.route(src, dst)
        rate = topo.route_bandwidth(route)
        nbytes = int(min(args.seconds * rate, 256 * 2**20))
        (flow,) = measure_flows(tb, [(src, dst)], nbytes)
        ratio = flow.rate / rate
        worst = min(worst, ratio)
        table.add_row(
            f"{src} -> {dst}", f"{rate * 8 / 1e6:.1f}", f"{flow.rate * 8 / 1e6:.1f}",
            f"{ratio:.3f}", f"{(mtu - 52) / (mtu + 14):.3f}",
        )  # fmt: skip
    con = _rich_console()
    con.print(table)
    con.print(wire_note(tb))
    return 0 if worst >= 0.8 else 1


def _clean(args: argparse.Namespace) -> int:
    from genie.testbed import load_testbed, netns

    _need_root()
    left: list[str] = []
    if args.all_genie:
        removed, left = netns.clean_all()
    elif args.prefix is not None:
        removed = netns.clean(prefix=args.prefix)
    else:
        tb = load_testbed(args.file)
        if tb.kind != "netns":
            raise TestbedError(f"{args.file}: kind is {tb.kind!r}; clean removes netns testbeds")
        removed = netns.clean_testbed(tb)
    print(f"removed {', '.join(removed)}" if removed else "nothing to clean")
    if left:
        print(
            f"left {', '.join(left)}: no genie record claims them "
            "(`genie testbed clean --prefix genie-TAG-` removes a testbed whose record was lost)"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``testbed`` command and its subcommands."""
    p = sub.add_parser(
        "testbed",
        help="show testbed files; build and remove emulated (netns) testbeds",
        description="Testbeds are TOML files (see testbed/*.toml). netns testbeds are built "
        "on this machine from network namespaces, veth pairs, bridges and tc tbf shaping; a "
        "link's latency, jitter and loss need netem (refused in one line where the kernel "
        "lacks it).",
    )
    tsub = p.add_subparsers(dest="testbed_command", metavar="SUBCOMMAND", required=True)
    softroce.add_commands(tsub)  # `genie testbed softroce up|down|status`

    s = tsub.add_parser("show", help="validate a testbed file and print what it describes")
    s.add_argument("file")
    s.add_argument("--toml", action="store_true", help="print the expanded file as TOML")
    s.set_defaults(func=_show)

    s = tsub.add_parser("plan", help="print the ip/tc commands `up` would run (no root needed)")
    s.add_argument("file")
    s.set_defaults(func=_plan)

    s = tsub.add_parser("up", help="build a netns testbed (root)")
    s.add_argument("file")
    s.add_argument("--agents", action="store_true", help="start a genie agent in each host")
    s.add_argument(
        "--agent-timeout",
        type=A.real(0, 3600),
        default=15.0,
        metavar="S",
        help="wait for agents (s)",
    )
    s.set_defaults(func=_up)

    s = tsub.add_parser("down", help="remove a netns testbed and its agents (root)")
    s.add_argument("file")
    s.set_defaults(func=_down)

    s = tsub.add_parser("check", help="measure TCP rates between hosts of an up netns testbed")
    s.add_argument("file")
    s.add_argument(
        "--seconds",
        type=A.real(0, 3600),
        default=1.0,
        metavar="S",
        help="about how long each flow runs",
    )
    s.set_defaults(func=_check)

    s = tsub.add_parser("status", help="list genie namespaces, links and agents on this machine")
    s.set_defaults(func=_status)

    s = tsub.add_parser(
        "clean",
        help="remove one testbed's namespaces, root links and agents, even half-built (root)",
        description="Removes only what genie made: the testbed FILE's namespaces, root links "
        "and recorded agents; with --prefix, a testbed of that netns_prefix whose record was "
        "lost; with --all-genie, every testbed genie's records name (each is listed). A "
        "namespace no record claims is never removed by --all-genie.",
    )
    which = s.add_mutually_exclusive_group(required=True)
    which.add_argument("file", nargs="?", help="the testbed file")
    which.add_argument(
        "--prefix", metavar="P", help="the netns_prefix (genie-TAG-) of a testbed to remove"
    )
    which.add_argument(
        "--all-genie", action="store_true", help="remove every testbed genie has a record of"
    )
    s.set_defaults(func=_clean)

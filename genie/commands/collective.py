"""``genie collective``: show what a collective does per rank and what it costs on a topology."""

from __future__ import annotations

import argparse

from genie.api.specs import Fabric
from genie.commands import _args as A
from genie.errors import UsageError
from genie.units import format_bytes, format_seconds, parse_size

_SHOW_RANKS = 9  # ranks summarised in full before the listing is cut


def _console():
    from rich.console import Console

    return Console(highlight=False)


# One default link for every command that prices links without a testbed: the API's Fabric's
DEFAULT_LINK = (str(Fabric().bandwidth), str(Fabric().latency))


def _link(args: argparse.Namespace) -> str:
    """Fill in the default link where ``--bandwidth``/``--latency`` were not given; what is used."""
    given = args.bandwidth is not None and args.latency is not None
    if args.bandwidth is None:
        args.bandwidth = A.bandwidth(DEFAULT_LINK[0])
    if args.latency is None:
        args.latency = A.duration(DEFAULT_LINK[1])
    return "" if given else " (genie's default link, as genie simulate's; --bandwidth, --latency)"


def _topology(args: argparse.Namespace, n_hosts: int):
    from genie.collectives import topology as T

    bw, lat = args.bandwidth, args.latency
    intra = args.intra_bandwidth
    intra_lat = args.intra_latency
    kw = {"intra_bandwidth": intra, "intra_latency": intra_lat}
    if args.topology == "leaf_spine":
        hpl = args.hosts_per_leaf
        leaves = -(-n_hosts // hpl)
        return T.leaf_spine(leaves, args.spines, hpl, bw, lat, args.oversubscription, **kw)
    n = max(n_hosts, 2) if args.topology == "ring" else n_hosts
    if args.topology == "ring":
        return T.ring(n, bw, lat, **kw)
    if args.topology == "fully_connected":
        return T.fully_connected(n, bw, lat, **kw)
    return T.switch(n, bw, lat, **kw)


def _summary_row(rank: int, steps) -> list[str]:
    from genie.collectives.program import Op

    counts = [0, 0, 0, 0]
    sent = recv = 0
    for st in steps:
        counts[st.op] += 1
        if st.op == Op.SEND:
            sent += st.nbytes
        elif st.op == Op.RECV:
            recv += st.nbytes
    return [str(rank), str(len(steps)), *map(str, counts), str(sent), str(recv)]


def _step_line(i: int, st) -> str:
    from genie.collectives.program import Op

    deps = ",".join(map(str, st.deps)) or "-"
    if st.op == Op.SEND:
        what = f"SEND   to {st.peer:<4} [{st.offset}:{st.offset + st.nbytes}] {st.nbytes} B"
    elif st.op == Op.RECV:
        what = f"RECV from {st.peer:<4} {st.nbytes} B"
    else:
        what = f"{st.op.name:<6} step {st.src} -> [{st.offset}:{st.offset + st.nbytes}]"
    return f"  {i:>5}  c{st.chunk} t{st.tag}  {what}  deps {deps}"


def _show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from genie.collectives import build_program
    from genie.collectives.cost import estimate, nccl_size
    from genie.vocabulary import algbw, busbw

    if args.ranks < 1:
        raise UsageError(f"--ranks must be positive: {args.ranks}")
    size = parse_size(args.size)
    program = build_program(
        args.type,
        args.algo,
        args.ranks,
        size,
        chunks=args.chunks,
        root=args.root,
        ranks_per_host=args.ranks_per_host,
        size_convention=args.size_convention,
        window=args.window,
    )
    spec = program.spec
    n = spec.n_ranks
    n_hosts = -(-n // spec.ranks_per_host)
    default = _link(args)
    topo = _topology(args, n_hosts)
    con = _console()
    buf = program.buffer_bytes()
    conv = (
        "nccl-tests: size is the whole buffer"
        if args.size_convention == "nccl"
        else (
            "ASTRA-sim: size is the per-rank shard"
            if spec.collective == "all_gather"
            else "ASTRA-sim: size is the whole buffer"
        )
    )
    con.print(
        f"[bold]{spec.collective}[/bold] / [bold]{spec.algorithm}[/bold] on {n} ranks "
        f"({spec.ranks_per_host} per host), size {size} B ({format_bytes(size)}; {conv}), "
        f"buffer {buf} B per rank, {spec.chunks} chunk(s)"
    )
    con.print(
        f"{topo.describe()}; link {args.bandwidth / 1e9:g} GB/s (10^9 B/s), "
        f"latency {format_seconds(args.latency)}{default}"
    )
    shown = list(range(n)) if n <= _SHOW_RANKS else [*range(_SHOW_RANKS - 1), n - 1]
    if args.rank is not None:
        if not 0 <= args.rank < n:
            raise UsageError(f"--rank {args.rank} outside 0..{n - 1}")
        shown = [args.rank]
    table = Table(
        "rank", "steps", "SEND", "RECV", "REDUCE", "COPY", "bytes sent", "bytes received",
        title="steps per rank",
    )  # fmt: skip
    for r in shown:
        table.add_row(*_summary_row(r, program.steps(r)))
    con.print(table)
    if len(shown) < n and args.rank is None:
        con.print(f"({n - len(shown)} more ranks not listed; --rank R shows one)")
    if args.steps:
        for r in shown:
            con.print(f"rank {r}: (index, chunk, tag, step, deps)")
            for i, st in enumerate(program.steps(r)):
                con.print(_step_line(i, st), markup=False)
    cost = estimate(program, topo)
    links = Table("link", "bytes", "busy at full rate", title="bytes per link (busiest first)")
    ranked = sorted(cost.link_bytes.items(), key=lambda kv: (-kv[1], kv[0]))
    for lid, b in ranked[: args.links]:
        links.add_row(topo.link_name(lid), str(b), format_seconds(b / topo.links[lid].bandwidth))
    con.print(links)
    rest = len(ranked) - min(len(ranked), args.links)
    con.print(
        f"{len(ranked)} links carry traffic{f' ({rest} not listed)' if rest else ''}; "
        f"intra-host {cost.intra_bytes} B; {cost.messages} messages, {cost.bytes_sent} B sent"
    )
    s = nccl_size(program)
    t = cost.time_s
    con.print(
        f"modeled time [bold]{format_seconds(t)}[/bold] ({cost.method} simulation, "
        f"{cost.steps} steps simulated; bandwidth bound {format_seconds(cost.bottleneck_s)})"
    )
    con.print(
        f"algbw {algbw(s, t) / 1e9:.3f} GB/s, busbw {busbw(spec.collective, n, s, t) / 1e9:.3f} "
        f"GB/s (GB = 10^9 bytes; S = {s} B, the whole buffer, as nccl-tests)"
    )
    return 0


def _list(_args: argparse.Namespace) -> int:
    from genie.collectives import ALGORITHMS, DEFAULT_ALGORITHM

    for coll, algos in ALGORITHMS.items():
        marked = [f"{a}*" if a == DEFAULT_ALGORITHM[coll] else a for a in algos]
        print(f"{coll:<15} {' '.join(marked)}")
    print("(* default)")
    return 0


def register(subparsers) -> None:
    """Add ``genie collective show`` and ``genie collective list``."""
    p = subparsers.add_parser("collective", help="plan collectives as per-rank step programs")
    sub = p.add_subparsers(dest="collective_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda _a: (p.print_help(), 2)[1])
    show = sub.add_parser("show", help="steps per rank, bytes per link, modeled time, algbw/busbw")
    show.add_argument("--type", required=True, help="all_reduce, reduce_scatter, all_gather, ...")
    show.add_argument("--algo", default=None, help="ring, direct, halvingDoubling, ...")
    show.add_argument("--ranks", type=A.integer(1, 8192), required=True, help="group size")
    show.add_argument("--size", required=True, help="bytes, e.g. 64MiB (see --size-convention)")
    show.add_argument(
        "--chunks", type=A.integer(1, 1024), default=1, help="pipelined chunks (default 1)"
    )
    show.add_argument(
        "--root", type=A.integer(0, 65535), default=0, help="root of broadcast/reduce"
    )
    show.add_argument(
        "--window", type=A.integer(1, 65536), default=None, help="direct: sends in flight"
    )
    show.add_argument(
        "--ranks-per-host", type=A.integer(1, 4096), default=1, help="for hierarchical"
    )
    show.add_argument(
        "--size-convention", choices=("astra-sim", "nccl"), default="astra-sim",
        help="astra-sim: all-gather size is the per-rank shard; nccl: always the whole buffer",
    )  # fmt: skip
    show.add_argument("--steps", action="store_true", help="list every step of the shown ranks")
    show.add_argument("--rank", type=A.integer(0, 131072), default=None, help="show only this rank")
    show.add_argument(
        "--bandwidth", type=A.bandwidth, default=None,
        help=f"per link (default {DEFAULT_LINK[0]}: genie's default link, as genie simulate's)",
    )  # fmt: skip
    show.add_argument(
        "--latency", type=A.duration, default=None,
        help=f"per link (default {DEFAULT_LINK[1]}, as genie simulate's)",
    )  # fmt: skip
    show.add_argument(
        "--topology", choices=("switch", "ring", "fully_connected", "leaf_spine"),
        default="switch",
    )  # fmt: skip
    show.add_argument(
        "--intra-bandwidth", type=A.bandwidth, default=None, help="same-host rate (default: link)"
    )
    show.add_argument(
        "--intra-latency", type=A.duration, default="0", help="same-host latency (default 0)"
    )
    show.add_argument(
        "--spines", type=A.integer(1, 1024), default=2, help="leaf_spine: spine switches"
    )
    show.add_argument(
        "--hosts-per-leaf", type=A.integer(1, 4096), default=4, help="leaf_spine: hosts per leaf"
    )
    show.add_argument("--oversubscription", type=A.ratio, default=1.0, help="leaf_spine uplinks")
    show.add_argument(
        "--links", type=A.integer(0, 100000), default=12, help="busiest links to list (default 12)"
    )
    show.set_defaults(func=_show)
    lst = sub.add_parser("list", help="collectives and their algorithms")
    lst.set_defaults(func=_list)

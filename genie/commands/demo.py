"""``genie demo``: a 4-agent cluster on loopback, a short collective sweep, the table; cleaned up.

The agents are always stopped (by pid), also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from genie.commands import _args as A
from genie.store import DEFAULT_STORE


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from genie.commands.bench import BenchConfig, print_table, run_bench
    from genie.controller.local import LocalCluster

    con = Console(stderr=True, highlight=False)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="genie-demo-") as d:
        con.print(f"genie demo: starting {args.agents} agents on 127.0.0.1 ...")
        cluster = LocalCluster.start(args.agents, d)
        try:
            hosts = ", ".join(f"{h.name}@{h.control}" for h in cluster.testbed.hosts)
            con.print(f"agents up in {time.monotonic() - t0:.1f} s: {hosts}")
            cfg = BenchConfig(
                testbed_path=str(cluster.testbed_path),
                collective=args.collective,
                algorithm=args.algo,
                sizes=args.sizes,
                iters=args.iters,
                warmup=args.warmup,
                store=None if args.no_store else args.store,
                command="genie " + " ".join(sys.argv[1:]),
                progress=True,  # genie.progress draws it only on a terminal, never with -q
            )
            run_id, rows, offsets = run_bench(cfg)
        finally:
            cluster.stop()
    worst = max((e.uncertainty_ns for e in offsets.values()), default=0)
    title = (
        f"genie demo: {args.collective}/{args.algo} on {args.agents} local agents "
        "(TCP over loopback)"
    )
    print_table(rows, title, args.iters, args.warmup)
    print(
        f"clock sync: {len(offsets)} agents, offsets within +-{worst / 1e3:.0f} us; "
        f"agents stopped; total {time.monotonic() - t0:.1f} s"
    )
    if run_id:
        print(f"stored as run {run_id} in {args.store}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    p = sub.add_parser(
        "demo",
        help="run a short live benchmark on a local 4-agent cluster and print the table",
        description="Start agents on loopback, sweep a collective over a few sizes, print "
        "nccl-tests columns beside the cost model, stop the agents.",
    )
    p.add_argument("--agents", type=A.integer(1, 256), default=4, help="local agents (default 4)")
    p.add_argument("--collective", default="all_reduce")
    p.add_argument("--algo", default="ring")
    p.add_argument("--sizes", type=A.sweep, default="1KiB:16MiB:x4")
    p.add_argument("--iters", type=A.integer(1, 1000000), default=10)
    p.add_argument("--warmup", type=A.integer(0, 100000), default=3)
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help="run store (SQLite)")
    p.add_argument("--no-store", action="store_true", help="do not record the run")
    p.set_defaults(func=_run)

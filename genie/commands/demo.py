"""``genie demo``: genie's job in one command, on this machine.

A small data-parallel training step (generated) runs its communication on four local agents
over loopback TCP, with the compute gaps between collectives honoured; the step is then replayed
with the times measured on the wire and with the analytical model of the same fabric (probed
first, so the model prices this machine and not a nominal link). It prints the iteration time
measured vs modelled, where the time goes, the nccl-tests table of the step's collectives, and
what to try next. The agents are always stopped (by pid), also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from genie.commands import _args as A
from genie.store import DEFAULT_STORE

LAYERS, HIDDEN, SEQ, BATCH = 4, 1024, 1024, 16


def _iteration_table(o, model_note: str):
    """Measured vs modelled iteration time and where it goes, one row per backend."""
    from rich.table import Table

    from genie.commands._sim_output import BLOCKED, BLOCKED_CAPTION
    from genie.units import format_seconds

    t = Table(
        title="the training step: iteration time and where it goes (per-rank means)",
        title_justify="left",
        caption=f"measured = its communication on the agents; model = {model_note}; "
        + BLOCKED_CAPTION,
    )
    for c in ("replayed with", "iteration", "compute", "exposed comm", BLOCKED, "idle"):
        t.add_column(c, justify="left" if c == "replayed with" else "right")
    labels = ("times measured on the wire", "analytical model, probed fabric")
    for label, r in zip(labels, o.reports, strict=True):
        t.add_row(
            label,
            format_seconds(r.iteration_s),
            format_seconds(r.mean("compute")),
            format_seconds(r.mean("exposed_comm")),
            format_seconds(r.mean("wait")),
            format_seconds(r.mean("idle")),
        )
    return t


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from genie import progress
    from genie.api.benchmark import BenchSpec, bench
    from genie.api.emulation import emulate
    from genie.api.specs import EmulateSpec
    from genie.commands._bench_output import print_table
    from genie.controller.local import LocalCluster
    from genie.controller.probe import probe_cluster
    from genie.live.overlapped import Overlapped
    from genie.workload import save_workload
    from genie.workload.generators import data_parallel

    err = Console(stderr=True, highlight=False)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    store = None if args.no_store else args.store
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="genie-demo-") as d:
        with progress.stage(f"starting {args.agents} agents on 127.0.0.1"):
            cluster = LocalCluster.start(args.agents, Path(d) / "cluster")
        try:
            with progress.stage("probing the loopback fabric (ring all-reduce, 3 sizes)"):
                probe = probe_cluster(cluster)
            err.print(f"fabric: {probe.describe()}")
            wl = data_parallel(args.agents, layers=LAYERS, hidden=HIDDEN, seq=SEQ, batch=BATCH)
            prefix = Path(d) / "dp"
            save_workload(wl, prefix)
            o = emulate(
                EmulateSpec(
                    workload=str(prefix),
                    testbed=str(cluster.testbed_path),
                    iterations=args.iterations,
                    warmup=1,
                    calibration="none",
                    store=store,
                    command="genie demo",
                )
            )
            assert isinstance(o, Overlapped) and o.compiled is not None
            sizes = sorted({int(s) for s in o.compiled.instances.size})
            swept = bench(
                BenchSpec(
                    testbed=str(cluster.testbed_path),
                    collective="all_reduce",
                    algorithm="ring",
                    sizes=tuple(sizes),
                    iters=args.iterations,
                    warmup=1,
                    store=store,
                    command="genie demo",
                )
            )
            bench_id, rows = swept.run_id, swept.rows
        finally:
            cluster.stop()
    measured, model = o.reports[0].iteration_s, o.reports[1].iteration_s
    out.print(
        f"[bold]genie demo[/]: one data-parallel training step ({LAYERS} transformer layers, "
        f"hidden {HIDDEN}, {len(sizes)} gradient all-reduce sizes) on {args.agents} agents, "
        "this machine's loopback TCP standing in for the network"
    )
    out.print(_iteration_table(o, probe.describe()))
    out.print(
        f"iteration: {measured * 1e3:.1f} ms measured, {model * 1e3:.1f} ms modelled "
        f"(measured/model {measured / model:.2f}); exposed communication is "
        f"{o.reports[0].mean('exposed_comm') / measured:.0%} of the measured step"
    )
    print_table(
        rows,
        "the step's collectives alone, nccl-tests style (genie bench)",
        args.iterations,
        1,
        model=probe.describe(),
    )
    if store:
        out.print(f"stored as runs {o.run_id} (the step) and {bench_id} (the sweep) in {store}")
    out.print(f"done in {time.monotonic() - t0:.0f} s; agents stopped. Try next:")
    for line in (
        "genie simulate on a 400G fabric:  genie workload generate dp --ranks 64 --out /tmp/dp "
        "&& genie simulate /tmp/dp --topology switch --bandwidth 400gbit --latency 1us",
        "your own network: genie testbed up testbed/netns-star.toml --agents (root), then "
        "genie emulate /tmp/dp --testbed testbed/netns-star.toml",
        "look at it:       genie report RUN_ID --out /tmp/report (pip install '.[report]')",
    ):
        out.print(f"  {line}", markup=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    p = sub.add_parser(
        "demo",
        help="genie's job on this machine: a training step on local agents, measured vs modelled",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--agents", type=A.integer(2, 16), default=4, help="local agents (ranks)")
    p.add_argument(
        "--iterations", type=A.integer(1, 100), default=3, help="measured runs of the step"
    )
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help="run store (SQLite)")
    p.add_argument("--no-store", action="store_true", help="do not record the runs")
    p.set_defaults(func=_run)

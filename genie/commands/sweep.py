"""``genie sweep``: ``genie simulate`` over a grid of options, one table and one figure.

Every point of the grid is one simulation of the same workload (``genie.api.run_sweep``); the
points run on every core (a process pool) or, with ``--dask ADDRESS``, on an existing Dask
distributed cluster (``genie.sweep.pool``). The keys of ``--grid KEY=V1,V2`` and ``--set
KEY=VALUE`` (``genie.sweep.grid``) are simulate's options; here each becomes the spec field it
sets (``FIELDS``) and each value goes through simulate's own parser first, so a bad value stops
the sweep before anything runs. Written to ``--out``: ``sweep.json`` (every point: its options
and the replay's numbers), ``sweep.csv`` and the figure ``sweep.{png,svg,pdf}`` (grouped bars
side by side for two or three points, small multiples for more).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console
from rich.table import Table

from genie.commands import _args as A
from genie.commands._sim_output import BLOCKED
from genie.errors import UsageError
from genie.sweep.grid import KEYS, label, parse_grid
from genie.sweep.pool import default_workers
from genie.units import format_seconds

if TYPE_CHECKING:
    from genie.api.sweep import SweepResult, SweepSpec, Value

#: sweep key (a simulate option) -> the ``SimulateSpec`` field it sets
FIELDS = {
    "topology": "fabric.topology",
    "bandwidth": "fabric.bandwidth",
    "latency": "fabric.latency",
    "oversubscription": "fabric.oversubscription",
    "spines": "fabric.spines",
    "leaves": "fabric.leaves",
    "routing": "fabric.routing",
    "algorithm": "model.algorithm",
    "chunks": "model.chunks",
    "placement": "fabric.placement",
    "ranks-per-host": "fabric.ranks_per_host",
    "intra-bandwidth": "fabric.intra_bandwidth",
    "calibration": "fabric.calibration",
    "comm-concurrency": "model.comm_concurrency",
    "pricer": "model.pricer",
    "testbed": "fabric.testbed",
    "straggler": "perturb.stragglers",
    "jitter": "perturb.jitter",
    "seed": "perturb.seed",
}


class _Parser(argparse.ArgumentParser):
    """simulate's parser, whose errors are a UsageError (not an exit): the sweep names the point."""

    def error(self, message: str) -> NoReturn:
        """Raise the message as a UsageError."""
        raise UsageError(message)


def _simulate_parser() -> argparse.ArgumentParser:
    from genie.commands import simulate

    p = _Parser(prog="genie")
    sub = p.add_subparsers(dest="command")
    simulate.register(sub)
    return p


def parse_point(argv: list[str]) -> argparse.Namespace:
    """The simulate arguments of one point (UsageError when simulate would refuse them)."""
    return _simulate_parser().parse_args(["simulate", *argv])


def _value(parser: argparse.ArgumentParser, prefix: str, key: str, text: str) -> Value:
    """The spec value of ``--KEY TEXT`` as simulate reads it (its own parser and checks)."""
    from genie.commands.simulate import spec_from_args

    args = parser.parse_args(["simulate", prefix, KEYS[key], text])
    value: object = spec_from_args(args)
    for part in FIELDS[key].split("."):
        value = getattr(value, part)
    assert value is None or isinstance(value, str | int | float | tuple)
    return value


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    """The ``SweepSpec`` of ``genie sweep``'s command line: its keys (simulate's options) as
    spec fields, each value read by simulate's own parser, so checked as simulate checks it."""
    from genie.api.sweep import Axis, SweepSpec
    from genie.commands.simulate import spec_from_args as simulate_spec

    grid = parse_grid(args.grid or [], args.set)
    parser = _simulate_parser()

    def axis(key: str, texts: tuple[str, ...]) -> Axis:
        values = tuple(_value(parser, args.workload, key, v) for v in texts)
        return Axis(field=FIELDS[key], values=values, name=key, labels=texts)

    try:
        fixed = tuple(axis(k, (v,)) for k, v in grid.fixed)
        axes = tuple(axis(k, vals) for k, vals in grid.axes)
    except UsageError as exc:  # say so of the first point simulate would refuse
        for pt in grid.points():
            try:
                parse_point(grid.argv(args.workload, pt))
            except UsageError as bad:
                raise UsageError(f"point {label(pt)}: {bad}") from None
        raise exc
    return SweepSpec(
        base=simulate_spec(parser.parse_args(["simulate", args.workload])),
        axes=axes,
        fixed=fixed,
        workers=args.workers,
        dask=args.dask,
        out=args.out,
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``genie sweep``."""
    p = sub.add_parser(
        "sweep",
        help="genie simulate over a grid of options: one table and one figure",
        description=__doc__,
    )
    p.add_argument("workload", help="workload prefix (files PREFIX.<rank>.et) or its directory")
    p.add_argument(
        "--grid",
        action="append",
        metavar="KEY=V1,V2",
        help=f"swept option and its values (repeatable); keys: {', '.join(KEYS)}",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option fixed for every point (same keys), e.g. topology=leaf_spine",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="where the table and figure go")
    p.add_argument(
        "--workers",
        type=A.integer(1, 4096),
        help=f"local worker processes (default: every core, here {default_workers()})",
    )
    p.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="run the points on the Dask distributed scheduler at ADDRESS (tcp://host:8786; "
        "the 'sweep' extra)",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run)


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_seconds(value)


def _print(con: Console, res: SweepResult) -> None:
    """The sweep's table: one row per point."""
    t = Table(title=f"{res.title} ({res.model}; {res.where})", title_justify="left")
    for k in res.keys:
        t.add_column(k)
    for c in ("iteration", "exposed comm", "compute", BLOCKED, "vs best", "busiest link"):
        t.add_column(c, justify="left" if c == "busiest link" else "right")
    for r in res.rows:
        cells = [r.point[k] for k in res.keys]
        if r.error is not None:
            t.add_row(*cells, "error", r.error[:60], "", "", "", "")
            continue
        link = r.busiest_link or "-"
        if r.busiest_link_bottleneck_share:
            link += f" ({r.busiest_link_bottleneck_share:.0%} saturated)"
        t.add_row(
            *cells,
            *(_seconds(x) for x in (r.iteration_s, r.exposed_comm_s, r.compute_s, r.wait_s)),
            "-" if r.vs_best is None else f"{r.vs_best:.2f}x",
            link,
        )
    con.print(t)


def run(args: argparse.Namespace) -> int:
    """Handle ``genie sweep``: parse -> spec -> ``genie.api.run_sweep`` -> render."""
    from genie.api.sweep import run_sweep

    res = run_sweep(spec_from_args(args))
    for note in res.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        json.dump(res.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print(Console(width=None if sys.stdout.isatty() else 140), res)
        print(f"wrote {', '.join(str(f) for f in res.files)}")
    if res.failed:
        n, total = len(res.failed), len(res.rows)
        print(f"genie: {n} of {total} points failed (see the table)", file=sys.stderr)
        return 1
    return 0

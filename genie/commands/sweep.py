"""``genie sweep``: ``genie simulate`` over a grid of options, one table and one figure.

Every point of the grid (``genie.sweep.grid``) is one simulate run of the same workload; the
points run on every core (a process pool) or, with ``--dask ADDRESS``, on an existing Dask
distributed cluster (``genie.sweep.pool``). Each point's command line goes through simulate's
own parser first, so a bad value stops the sweep before anything runs. Written to ``--out``:
``sweep.json`` (every point: its options and the replay's numbers), ``sweep.csv`` and the figure
``sweep.{png,svg,pdf}`` (grouped bars side by side for two or three points, small multiples for
more).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from genie import progress
from genie.commands import _args as A
from genie.errors import GenieError, MissingDependency, UsageError
from genie.sweep.grid import KEYS, Grid, label, parse_grid
from genie.sweep.pool import default_workers, run_all
from genie.units import format_seconds

MODEL = "genie simulate, analytical model"


class _Parser(argparse.ArgumentParser):
    """simulate's parser, whose errors are a UsageError (not an exit) in a worker."""

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


def run_point(argv: list[str]) -> dict[str, Any]:
    """Simulate one point (in a worker); its numbers, or the one-line error it hit."""
    from genie.api.simulation import simulate
    from genie.commands.simulate import spec_from_args

    progress.set_quiet(True)
    try:
        sim = simulate(spec_from_args(parse_point(argv)))
    except GenieError as exc:
        return {"error": str(exc)}
    rep = sim.reports[0]
    link = rep.links[0] if rep.links else None
    return {
        "workload": sim.workload.name,
        "network": sim.network,
        "backend": rep.backend,
        "iteration_s": rep.iteration_s,
        "compute_s": rep.mean("compute"),
        "exposed_comm_s": rep.mean("exposed_comm"),
        "wait_s": rep.mean("wait"),
        "idle_s": rep.mean("idle"),
        "busiest_link": link["link"] if link else None,
        "busiest_link_bottleneck_share": link["bottleneck_share"] if link else None,
    }


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


def _rows(grid: Grid, points: list[dict], results: list[dict]) -> list[dict]:
    best = min((r["iteration_s"] for r in results if "iteration_s" in r), default=None)
    out = []
    for pt, res in zip(points, results, strict=True):
        row = {"point": pt, "label": label(pt, grid.keys), **res}
        if best and "iteration_s" in res:
            row["vs_best"] = res["iteration_s"] / best
        out.append(row)
    return out


def _title(prefix: str, grid: Grid, rows: list[dict]) -> str:
    name = next((r["workload"] for r in rows if "workload" in r), Path(prefix).name)
    fixed = ", ".join(f"{k} {v}" for k, v in grid.fixed)
    return f"{name}" + (f" ({fixed})" if fixed else "") + f": sweep of {', '.join(grid.keys)}"


def _write(out: Path, grid: Grid, rows: list[dict], title: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "title": title,
        "model": MODEL,
        "keys": grid.keys,
        "fixed": dict(grid.fixed),
        "units": {"time": "s"},
        "rows": rows,
    }
    files = [out / "sweep.json", out / "sweep.csv"]
    files[0].write_text(json.dumps(doc, indent=1))
    cols = ["iteration_s", "exposed_comm_s", "compute_s", "wait_s", "idle_s", "vs_best"]
    cols += ["busiest_link", "error"]
    with files[1].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*grid.keys, *cols])
        for r in rows:
            w.writerow([*(r["point"][k] for k in grid.keys), *(r.get(c, "") for c in cols)])
    try:
        from genie.report.data import sweep_figure
        from genie.report.plots import draw

        fig = sweep_figure(rows, grid.keys, title, MODEL)
        files += draw(fig, out / "sweep.png", all_formats=True)
    except MissingDependency as exc:
        print(f"note: no figure: {exc}", file=sys.stderr)
    return files


def _print(con: Console, grid: Grid, rows: list[dict], title: str, where: str) -> None:
    t = Table(title=f"{title} ({MODEL}; {where})", title_justify="left")
    for k in grid.keys:
        t.add_column(k)
    for c in ("iteration", "exposed comm", "compute", "wait", "vs best", "busiest link"):
        t.add_column(c, justify="left" if c == "busiest link" else "right")
    for r in rows:
        cells = [r["point"][k] for k in grid.keys]
        if "error" in r:
            t.add_row(*cells, "error", r["error"][:60], "", "", "", "")
            continue
        link = r["busiest_link"] or "-"
        if r["busiest_link_bottleneck_share"]:
            link += f" ({r['busiest_link_bottleneck_share']:.0%} saturated)"
        t.add_row(
            *cells,
            format_seconds(r["iteration_s"]),
            format_seconds(r["exposed_comm_s"]),
            format_seconds(r["compute_s"]),
            format_seconds(r["wait_s"]),
            f"{r['vs_best']:.2f}x",
            link,
        )
    con.print(t)


def run(args: argparse.Namespace) -> int:
    """Handle ``genie sweep``."""
    grid = parse_grid(args.grid or [], args.set)
    points = grid.points()
    argvs = [grid.argv(args.workload, pt) for pt in points]
    for pt, argv in zip(points, argvs, strict=True):  # every point as simulate would read it
        try:
            parse_point(argv)
        except UsageError as exc:
            raise UsageError(f"point {label(pt)}: {exc}") from None
    workers = args.workers or default_workers()
    where = f"Dask at {args.dask}" if args.dask else f"{min(workers, len(points))} processes"
    with progress.bar(f"sweep on {where}", len(points), "points") as bar:

        def done(i: int, res: dict) -> None:
            bar.advance()
            bar.describe(f"{label(points[i])} done")

        results = run_all(run_point, argvs, workers=workers, dask=args.dask, on_result=done)
    rows = _rows(grid, points, results)
    title = _title(args.workload, grid, rows)
    files = _write(Path(args.out), grid, rows, title)
    failed = [r for r in rows if "error" in r]
    if args.json:
        json.dump({"title": title, "model": MODEL, "rows": rows}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print(Console(width=None if sys.stdout.isatty() else 140), grid, rows, title, where)
        print(f"wrote {', '.join(str(f) for f in files)}")
    if failed:
        print(f"genie: {len(failed)} of {len(rows)} points failed (see the table)", file=sys.stderr)
        return 1
    return 0

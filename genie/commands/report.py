"""``genie report``: PNG plots and one self-contained report.html for runs, plus figure JSON.

Simulated iterations are not in the run store (``genie simulate`` prints them), so they come in
as files: ``--sim`` takes the output of ``genie simulate --json`` or ``genie emulate --json``,
``--trace`` a Chrome trace from ``--trace``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from genie.store import DEFAULT_STORE

if TYPE_CHECKING:
    from genie.api.report import ReportSpec

DESCRIPTION = """\
Write PNG plots, one self-contained report.html (images inlined, no server or network needed)
and figures.json (the plotted numbers) into --out: busbw and time vs message size per collective,
measured beside genie's cost model on the run's own testbed, with --compare runs overlaid; the
run's testbed and host facts.

Simulated iterations are not kept in the run store, so they come as files: --sim takes the output
of `genie simulate --json` or `genie emulate --json` (iteration time per backend, per-rank
breakdown, a timeline of collectives), --trace a Chrome trace from `genie simulate --trace`
(a per-rank timeline of one iteration).

Units: bytes (KiB = 2^10 B), seconds, GB/s = 10^9 bytes/s.
Needs matplotlib (the 'report' extra: from a clone, pip install '.[report]'; into an installed
genie, pip install matplotlib)."""


def spec_from_args(args: argparse.Namespace) -> ReportSpec:
    """The ``ReportSpec`` of ``genie report``'s command line."""
    from genie.api.report import ReportSpec

    return ReportSpec(
        out=args.out,
        runs=tuple(([args.run_id] if args.run_id else []) + list(args.compare or [])),
        sims=tuple(args.sim or ()),
        traces=tuple(args.trace or ()),
        store=args.store,
    )


def _run(args: argparse.Namespace) -> int:
    """Handle ``genie report``: parse -> spec -> ``genie.api.write_report`` -> render."""
    from genie.api.report import write_report

    rep = write_report(spec_from_args(args))
    if args.json:
        json.dump(rep.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"wrote {len(rep.files)} plots and {rep.html} (figure data: {rep.json_path})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` command."""
    p = sub.add_parser(
        "report",
        help="plots and a self-contained HTML report of runs (needs matplotlib)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_id", nargs="?", metavar="RUN_ID", help="run to report (a unique prefix)")
    p.add_argument(
        "--compare", action="append", metavar="RUN_ID", help="overlay another run (repeatable)"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory for PNGs and HTML")
    p.add_argument(
        "--sim", action="append", metavar="FILE", help="`genie simulate/emulate --json` output"
    )
    p.add_argument(
        "--trace", action="append", metavar="FILE", help="Chrome trace from `genie simulate`"
    )
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help="run store (SQLite)")
    p.add_argument("--json", action="store_true", help="print the figure data as JSON")
    p.set_defaults(func=_run)

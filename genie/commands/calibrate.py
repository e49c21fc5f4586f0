"""``genie calibrate RUN [RUN ...]``: fit the cost model to bench sweeps; print MAPE before/after.

The fit (``genie.calibration.fit``) uses part of the runs' points and holds back the rest
(``--holdout``); the model's error on the held-back points, nominal and calibrated, is the
figure to trust. Parameters are fitted per link class (host NIC: a link with a host at one end;
uplink: switch to switch; intra-host), each class the runs do not exercise or cannot tell apart
kept nominal, as the notes say. Parameters stay physical (bandwidth at most the payload rate,
times >= 0); a fit that hits a bound says so. The calibration is stored with the testbed in the
run store, for ``genie simulate|emulate|bench --calibration ID``, and offered for
``--calibration latest`` only when no bound binds and its held-back error beats nominal by a
clear margin (the output says which). ``--validate RUN``: the fitted model's error on another
run (another topology or size range) beside nominal.

``genie calibrate compute PREFIX --out NEW``: rewrite a workload's compute durations from its
shapes (timed with PyTorch on a local accelerator when there is one, else the roofline; the
report says which); new files, never in place.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from genie.commands import _args as A
from genie.errors import UsageError
from genie.store import DEFAULT_STORE
from genie.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from rich.console import Console

    from genie.api.calibration import CalibrateSpec
    from genie.calibration.model import Calibration


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} %"


def _err(model: float | None, measured: float) -> str:
    if model is None:
        return "-"
    return f"{(model - measured) / measured * 100:+.1f} %"


def spec_from_args(args: argparse.Namespace) -> CalibrateSpec:
    """The ``CalibrateSpec`` of ``genie calibrate RUN...``'s command line."""
    from genie.api.calibration import CalibrateSpec

    return CalibrateSpec(
        runs=tuple(args.items),
        store=args.store,
        holdout=args.holdout,
        save=not args.no_save,
        mix_conditions=args.mix_conditions,
        validate=tuple(args.validate or ()),
    )


def _fit_runs(args: argparse.Namespace) -> int:
    """Handle ``genie calibrate RUN...``: parse -> spec -> ``genie.api.calibrate`` -> render."""
    from genie.api.calibration import calibrate

    spec = spec_from_args(args)
    cal = calibrate(spec)
    if args.json:
        json.dump(cal.to_dict(), sys.stdout, indent=1)
        print()
        return 0
    print_calibration(cal, nominal=cal.testbed_name, store=Path(spec.store) if spec.save else None)
    return 0


def print_calibration(
    cal: Calibration, nominal: str, store: Path | None, file: TextIO | None = None
) -> None:
    """The calibration's parameters, MAPE before and after, and its per-point table."""
    from rich.console import Console
    from rich.table import Table

    out = file or sys.stdout
    con = Console(file=out, highlight=False, width=None if out.isatty() else 120)
    con.print(
        f"[bold]calibration {cal.cal_id or '(not stored)'}[/] of testbed {cal.testbed_name}, "
        f"fit on runs {', '.join(cal.runs)}"
    )
    con.print(
        f"points: {cal.points_fit} fit, {cal.points_held} held back ({cal.holdout})", markup=False
    )
    con.print(
        "parameters (± one standard error); host NIC = a link with a host at one end, uplink = "
        "switch to switch:",
        markup=False,
    )
    con.print(f"  {cal.describe().replace('; ', chr(10) + '  ')}", markup=False)
    for note in cal.notes:
        con.print(f"  note: {note}", markup=False)
    for bound in cal.bounds:
        con.print(f"  bound: {bound}", markup=False)
    m = cal.mape
    con.print("model error, MAPE = mean |model - measured| / measured:", markup=False)
    w = cal.weighted
    t = Table()
    cols = ("points", "n", "nominal model", "calibrated model", "nominal, time-weighted")
    for c in (*cols, "calibrated, time-weighted"):
        t.add_column(c, justify="left" if c == "points" else "right")
    for name, part, n in (("held back", "held", cal.points_held), ("fit", "fit", cal.points_fit)):
        t.add_row(
            name,
            str(n),
            _pct(m.get(f"{part}_nominal")),
            _pct(m.get(f"{part}_calibrated")),
            _pct(w.get(f"{part}_nominal")),
            _pct(w.get(f"{part}_calibrated")),
        )
    con.print(t)
    con.print(
        "time-weighted = sum |model - measured| / sum measured: each point weighted by its "
        "share of the measured time",
        markup=False,
    )
    a = cal.apart
    if a.get("points_below"):
        con.print(
            f"{a['points_below']} point(s) below {a['share']:.0%} of the measured time, reported "
            f"apart: MAPE nominal {_pct(a['below']['nominal'])}, calibrated "
            f"{_pct(a['below']['calibrated'])}; the rest: nominal {_pct(a['rest']['nominal'])}, "
            f"calibrated {_pct(a['rest']['calibrated'])}",
            markup=False,
        )
    con.print(
        f"nominal = the cost model of testbed {nominal} as its file declares it; "
        f"calibrated = {cal.label}",
        markup=False,
    )
    con.print("per point (measured = median of the measured iterations):", markup=False)
    rows = Table()
    for c in ("collective", "size", "part", "measured", "nominal", "error", "calibrated", "error"):
        rows.add_column(c, justify="left" if c in ("collective", "part") else "right")
    for r in cal.rows:
        rows.add_row(
            r["label"].rsplit(" ", 2)[0],
            format_bytes(r["size"]),
            "held" if r["held"] else "fit",
            format_seconds(r["measured_s"]),
            format_seconds(r["nominal_s"]),
            _err(r["nominal_s"], r["measured_s"]),
            format_seconds(r["calibrated_s"]),
            _err(r["calibrated_s"], r["measured_s"]),
        )
    con.print(rows)
    if cal.validation:
        print_validation(con, cal)
    con.print(cal.verdict, markup=False)
    if store is not None and cal.offered:
        con.print(
            f"stored as calibration {cal.cal_id} in {store}; price with it: genie "
            f"simulate|emulate|bench ... --calibration {cal.cal_id} (or latest)",
            markup=False,
        )
    elif store is not None:
        con.print(
            f"stored as calibration {cal.cal_id} in {store}, not offered: --calibration latest "
            "does not pick it and --calibration ID refuses it",
            markup=False,
        )


def print_validation(con: Console, cal: Calibration) -> None:
    """The fitted model on the --validate runs: MAPE and per point, beside nominal."""
    from rich.table import Table

    v = cal.validation
    con.print(
        f"validation on run(s) {', '.join(v['runs'])} (testbed {', '.join(v['testbeds'])}; "
        f"nothing fitted on them): MAPE over {v['points']} points: nominal "
        f"{_pct(v['nominal_mape'])}, calibrated {_pct(v['calibrated_mape'])}",
        markup=False,
    )
    for note in v.get("notes", []):
        con.print(f"  note: {note}", markup=False)
    rows = Table()
    for c in ("run", "collective", "size", "measured", "nominal", "error", "calibrated", "error"):
        rows.add_column(c, justify="left" if c in ("run", "collective") else "right")
    for r in v["rows"]:
        rows.add_row(
            r["run"],
            r["label"].rsplit(" ", 2)[0],
            format_bytes(r["size"]),
            format_seconds(r["measured_s"]),
            format_seconds(r["nominal_s"]),
            _err(r["nominal_s"], r["measured_s"]),
            format_seconds(r["calibrated_s"]),
            _err(r["calibrated_s"], r["measured_s"]),
        )
    con.print(rows)


def _compute(args: argparse.Namespace) -> int:
    from genie.commands._calibrate_compute import run_compute

    if len(args.items) != 2:
        raise UsageError("usage: genie calibrate compute PREFIX --out NEW_PREFIX")
    return run_compute(args, args.items[1])


def _run(args: argparse.Namespace) -> int:
    if args.items[0] == "compute":
        if args.validate:
            raise UsageError("--validate: only for genie calibrate RUN...")
        return _compute(args)
    compute_only = ("out", "peak_flops", "memory_bandwidth", "efficiency", "device")
    given = [f"--{k.replace('_', '-')}" for k in compute_only if getattr(args, k) is not None]
    if given:
        raise UsageError(f"{', '.join(given)}: only for genie calibrate compute PREFIX")
    return _fit_runs(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``calibrate`` command."""
    p = sub.add_parser(
        "calibrate",
        help="fit the cost model to bench runs (MAPE before/after); or compute durations",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "items",
        nargs="+",
        metavar="RUN",
        help="bench run ids (a unique prefix works), or: compute PREFIX",
    )
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH", help="run store (SQLite)")
    p.add_argument(
        "--holdout",
        choices=("alternate", "largest", "none"),
        default="alternate",
        help="points not fitted, to measure the error on: every other size of each series "
        "(alternate), the largest quarter (largest), or none (default alternate)",
    )
    p.add_argument("--no-save", action="store_true", help="do not store the calibration")
    p.add_argument(
        "--mix-conditions",
        action="store_true",
        help="pool runs whose recorded conditions (congestion control, buffers, MTU, qdisc, "
        "kernel) differ (refused by default, naming what differs)",
    )
    p.add_argument(
        "--validate",
        nargs="+",
        metavar="RUN",
        default=None,
        help="bench run(s) to judge the fitted model on, beside nominal (another topology or "
        "size range; nothing fitted on them)",
    )
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    c = p.add_argument_group("compute (genie calibrate compute PREFIX --out NEW)")
    c.add_argument("--out", default=None, metavar="PREFIX", help="where the new files go")
    c.add_argument(
        "--device",
        default=None,
        help="roofline preset for the device to model (h100, h200, a100); default: the local "
        "accelerator if PyTorch sees one, else h100",
    )
    c.add_argument("--peak-flops", type=A.real(0, 1e20), default=None, help="roofline FLOP/s")
    c.add_argument(
        "--memory-bandwidth", type=A.bandwidth, default=None, help="roofline memory bandwidth"
    )
    c.add_argument(
        "--efficiency", type=A.real(0, 1), default=None, help="roofline fraction of peak"
    )
    p.set_defaults(func=_run)

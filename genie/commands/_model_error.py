"""The model-error table every bench and emulate report prints (see ``genie.calibration.accuracy``).

Per row: measured, the nominal model and its error, the calibrated model and its error, and a
text strip of both errors on -100 % .. +100 %; then the MAPE of each model, beside it the
time-weighted error (each row weighted by its share of the measured time) and, apart, the rows
below 1 % of that time (``genie.calibration.accuracy``), and which fabric each model priced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from genie.calibration.accuracy import (
    MINOR_SHARE,
    ErrorRow,
    error_strip,
    split_by_share,
    summary,
    weighted_error,
)
from genie.units import format_bytes, format_seconds


def _err(e: float | None) -> str:
    return "-" if e is None else f"{e:+.1f} %"


def print_error_table(
    con: Console,
    title: str,
    rows: Sequence[ErrorRow],
    nominal: str,
    calibration: Any = None,
    missing_hint: str = "",
) -> None:
    """The table, the MAPE line and what each model is (``calibration``: a Calibration)."""
    con.print(
        f"[bold]{title}[/] (error = (model - measured) / measured; strip: n = nominal, "
        "c = calibrated, * = both)",
        highlight=False,
    )
    t = Table()
    for c in ("what", "size", "measured", "nominal", "error", "calibrated", "error"):
        t.add_column(c, justify="left" if c == "what" else "right")
    t.add_column("-100% ... 0 ... +100%", justify="left", no_wrap=True)
    for r in rows:
        t.add_row(
            r.label,
            "-" if r.size is None else format_bytes(r.size),
            format_seconds(r.measured_s),
            "-" if r.nominal_s is None else format_seconds(r.nominal_s),
            _err(r.nominal_err),
            "-" if r.calibrated_s is None else format_seconds(r.calibrated_s),
            _err(r.calibrated_err),
            error_strip(r.nominal_err, r.calibrated_err),
        )
    con.print(t)
    s = summary(rows)
    nom, cal = s["nominal_mape_pct"], s["calibrated_mape_pct"]
    line = f"MAPE over {len(rows)} rows: nominal {'-' if nom is None else f'{nom:.1f} %'}"
    if calibration is not None:
        line += f", calibrated {'-' if cal is None else f'{cal:.1f} %'}"
    con.print(line, highlight=False)
    if len(rows) > 1:
        print_weighted(con, rows, calibration is not None)
    con.print(f"  nominal = genie's cost model of {nominal}", highlight=False, markup=False)
    if calibration is not None:
        con.print(
            f"  calibrated = the same model with {calibration.label} ({calibration.describe()})",
            highlight=False,
            markup=False,
        )
    elif missing_hint:
        con.print(f"  calibrated: {missing_hint}", highlight=False, markup=False)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} %"


def print_weighted(con: Console, rows: Sequence[ErrorRow], calibrated: bool) -> None:
    """The time-weighted error of each model, and the MAPE of rows below the share apart."""
    nom = weighted_error((r.nominal_s, r.measured_s) for r in rows)
    line = f"time-weighted error (each row by its share of the measured time): nominal {_pct(nom)}"
    if calibrated:
        line += f", calibrated {_pct(weighted_error((r.calibrated_s, r.measured_s) for r in rows))}"
    con.print(line, highlight=False, markup=False)
    major, minor = split_by_share([r.measured_s for r in rows])
    if not minor:
        return

    def part(idx: list[int]) -> str:
        s = summary(rows[i] for i in idx)
        text = f"MAPE nominal {_pct(s['nominal_mape_pct'])}"
        return text + (f", calibrated {_pct(s['calibrated_mape_pct'])}" if calibrated else "")

    con.print(
        f"  {len(minor)} row(s) below {MINOR_SHARE:.0%} of the measured time, apart: "
        f"{part(minor)}; the other {len(major)}: {part(major)}",
        highlight=False,
        markup=False,
    )

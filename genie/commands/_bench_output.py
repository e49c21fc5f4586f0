"""What ``genie bench`` prints: the nccl-tests-like table, the model's error per size, how far
repeats lie apart, and the link faults' effect."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TextIO

from rich.console import Console
from rich.table import Table

from genie.api.benchmark import FAULT_ORIGIN, BenchResult
from genie.calibration.model import nominal_reason
from genie.commands._faults import print_applied
from genie.commands._model_error import print_error_table
from genie.commands._steady import unsteady
from genie.controller.sweep import SizeRow
from genie.units import format_bytes, format_seconds


def print_repeats(rows: Sequence[SizeRow], file: TextIO | None = None) -> None:
    """How far each size's repeats lie apart, and a warning when the wire was not steady."""
    spreads = [(r.size, r.spread) for r in rows if r.spread is not None]
    if not spreads:
        return
    out = file or sys.stdout
    n = len(rows[0].repeat_p50_s)
    worst_size, worst = max(spreads, key=lambda x: x[1] or 0.0)
    text = (
        f"{n} repeats per size (each its own prepare, warm-up and iterations): their p50s lie "
        f"at most {worst:.1%} apart ({format_bytes(worst_size)})"
    )
    print(text + unsteady(worst), file=out)


def print_fault_effect(doc: dict, file: TextIO | None = None) -> None:
    """The faults as applied, then per size the p50 with and without a fault overlapping."""

    def p50(t: float | None) -> str:
        return "-" if t is None else format_seconds(t)

    out = file or sys.stdout
    con = Console(file=out, highlight=False, width=None if out.isatty() else 160)
    print_applied(con, doc, FAULT_ORIGIN)
    con.print("fault effect per size (p50 of the measured iterations, measured on the wire):")
    for s in doc["by_size"]:
        ratio = s["fault_vs_clean"]
        con.print(
            f"  {format_bytes(s['size'])}: {s['clean_runs']} iterations overlapping no fault, "
            f"p50 {p50(s['clean_median_s'])}; {s['fault_runs']} overlapping a fault, p50 "
            f"{p50(s['fault_median_s'])}" + (f" ({ratio:.2f}x)" if ratio is not None else ""),
            markup=False,
        )
        for e in s["events"]:
            if e["runs"]:
                con.print(
                    f"    '{e['label']}' ({format_seconds(e['from_s'])} to "
                    f"{format_seconds(e['to_s'])}): {e['runs']} iteration(s), p50 "
                    f"{p50(e['median_s'])}",
                    markup=False,
                )


def _us(t: float | None) -> str:
    return "-" if t is None or not math.isfinite(t) else f"{t * 1e6:.1f}"


def print_table(
    rows: Sequence[SizeRow],
    title: str,
    iters: int,
    warmup: int,
    file: TextIO | None = None,
    model: str = "its testbed's rates",
) -> None:
    """The nccl-tests-like table (rich); ``model`` says which fabric the model column priced."""
    t = Table(
        title=title,
        caption=f"time = p50 of {iters} iterations after {warmup} warm-up; "
        f"times in us; GB/s = 10^9 bytes/s;\nmodel = genie cost model (ring/direct step programs, "
        f"fair link sharing) of {model}",
        header_style="bold",
    )
    for col in (  # every column with a number says its unit (nccl-tests' own names)
        "size (B)",
        "count (elements)",
        "type",
        "time p50 (us)",
        "algbw GB/s",
        "busbw GB/s",
        "p99 (us)",
        "min (us)",
        "max (us)",
        "model (us)",
        "meas/model",
    ):
        t.add_column(col, justify="right")
    for r in rows:
        ratio = r.ratio
        t.add_row(
            str(r.size),
            str(r.count),
            r.dtype,
            _us(r.stats.p50),
            f"{r.algbw / 1e9:.3f}",
            f"{r.busbw / 1e9:.3f}",
            _us(r.stats.p99),
            _us(r.stats.min),
            _us(r.stats.max),
            _us(r.modeled_s),
            "-" if ratio is None else f"{ratio:.2f}",
        )
    out = file or sys.stdout
    width = None if out.isatty() else 160  # never truncate columns when piped
    Console(file=out, highlight=False, width=width).print(t)


def print_model_error(res: BenchResult, asked: str | None, file: TextIO | None = None) -> None:
    """The model-error table of a sweep and the run's notes (dilation)."""
    out = file or sys.stdout
    con = Console(file=out, highlight=False, width=None if out.isatty() else 160)
    print_error_table(
        con,
        "model error per size",
        res.error_rows(),
        res.model,
        res.calibration,
        nominal_reason(asked),
    )
    for note in res.notes:
        con.print(note, markup=False)

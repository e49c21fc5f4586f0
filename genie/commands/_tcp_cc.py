"""``--tcp-cc A,B,...`` for ``genie bench`` and ``genie emulate``: congestion control as an
experiment. The same sweep or step runs once under each algorithm (every data socket set to it
and read back), and one table puts them side by side with the retransmissions and the model,
which knows rates and sharing but nothing of congestion control: a gap that differs between
algorithms is theirs, not the model's."""

from __future__ import annotations

import argparse
import re
import sys

from rich.console import Console
from rich.table import Table

from genie.api.benchmark import BenchResult
from genie.errors import UsageError
from genie.live.overlapped import Overlapped
from genie.units import format_bytes, format_seconds

MODEL_NOTE = (
    "model: genie's fluid model of the links' payload rates and fair sharing; it knows nothing "
    "of congestion control (queues, losses, flow unfairness), so the differences between the "
    "columns are the algorithms'"
)


def add_argument(p: argparse.ArgumentParser) -> None:
    """Add ``--tcp-cc A[,B...]``."""
    p.add_argument(
        "--tcp-cc",
        metavar="ALGO[,ALGO...]",
        help="TCP congestion control of every data socket (default: the testbed's [tcp], cubic "
        "where the host allows it, else reno); several: run once under each and compare them "
        "side by side, e.g. reno,bbr",
    )


def algorithms(value: str | None) -> list[str]:
    """The algorithms ``--tcp-cc`` names ([] without it)."""
    if not value:
        return []
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if not re.fullmatch(r"[a-z0-9_]{1,15}", n)]
    if bad or not names or len(set(names)) != len(names):
        raise UsageError(f"--tcp-cc {value!r}: distinct algorithm names, e.g. reno,bbr")
    return names


def in_force(conditions: dict) -> str:
    """The congestion control(s) the agents read back ("?" when none said)."""
    seen = sorted({c for cond in conditions.values() for c in cond.congestion})
    return ",".join(seen) or "?"


def print_bench(results: dict[str, BenchResult]) -> None:
    """Per size, each algorithm's p50 side by side, its slowdown vs the best, the model."""
    first = next(iter(results.values()))
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    t = Table(
        title=f"{first.collective}/{first.algorithm}: p50 per TCP congestion control (measured "
        f"on the wire) beside the model of {first.model}",
        title_justify="left",
    )
    t.add_column("size", justify="right")
    for cc in results:
        t.add_column(cc, justify="right")
    t.add_column("model", justify="right")
    for k, row in enumerate(first.rows):
        times = {cc: r.rows[k].stats.p50 for cc, r in results.items()}
        best = min(times.values())
        cells = [
            f"{format_seconds(v)} ({v / best:.2f}x)" if v != best else format_seconds(v)
            for v in times.values()
        ]
        model = row.modeled_s
        t.add_row(format_bytes(row.size), *cells, format_seconds(model) if model else "-")
    t.add_row(
        "retransmits",
        *[str(r.retransmits) if r.retransmits >= 0 else "?" for r in results.values()],
        "-",
    )
    t.add_row("in force", *[in_force(r.conditions) for r in results.values()], "-")
    con.print(t)
    con.print(MODEL_NOTE, markup=False)


def print_emulate(results: dict[str, Overlapped]) -> None:
    """Per algorithm: the step on the wire and replayed, slowdown vs the best, the model."""
    import statistics

    con = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    first = next(iter(results.values()))
    t = Table(
        title=f"{first.workload} on {first.testbed} per TCP congestion control",
        title_justify="left",
    )
    for c in ("congestion control", "wire p50", "iteration (measured, replayed)", "vs best"):
        t.add_column(c, justify="left" if c == "congestion control" else "right")
    t.add_column("retransmits", justify="right")
    t.add_column("model iteration", justify="right")
    its = {cc: o.reports[0].iteration_s for cc, o in results.items()}
    best = min(its.values())
    for cc, o in results.items():
        spans = [r["makespan_s"] for r in o.runs if not r["warmup"]]
        t.add_row(
            f"{cc} (in force: {in_force(o.conditions)})",
            format_seconds(statistics.median(spans)) if spans else "-",
            format_seconds(its[cc]),
            f"{its[cc] / best:.2f}x",
            str(o.retransmits) if o.retransmits >= 0 else "?",
            format_seconds(o.reports[1].iteration_s) if len(o.reports) > 1 else "-",
        )
    con.print(t)
    con.print(MODEL_NOTE, markup=False)

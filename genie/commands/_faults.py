"""``--faults`` for the commands that run on the wire (``genie emulate``, ``genie bench``): the
option and the table of the faults as applied (``genie.faults`` plans, applies and times them)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from genie.faults.run import plan, scheduler, widen_timeouts
from genie.units import format_seconds

__all__ = ["add_argument", "plan", "print_applied", "scheduler", "widen_timeouts"]

EXAMPLE = "'at 200ms: h1 link rate 100mbit; at 600ms: sw0-p0 down for 50ms'"


def add_argument(p: argparse.ArgumentParser, origin: str) -> None:
    """Add ``--faults SCHEDULE``; ``origin``: what the times count from."""
    p.add_argument(
        "--faults",
        metavar="SCHEDULE",
        help=f"link faults during the run, timed from {origin}, e.g. {EXAMPLE} (or a file of "
        "such lines); netns testbeds, or lab hosts with faults = true on interfaces the "
        "testbed file names; links are restored to the testbed file's state afterwards "
        "(genie.faults.schedule)",
    )


def print_applied(con: Console, f: dict, origin: str) -> None:
    """The faults as applied (times from ``origin``) and whether the links were restored."""
    t = Table(title=f"link faults applied on the wire (times from {origin})", title_justify="left")
    for c in ("fault", "planned", "applied", "result"):
        t.add_column(c, justify="left" if c in ("fault", "result") else "right")
    for a in f["applied"]:
        applied = a["applied_s"]
        t.add_row(
            a["label"],
            format_seconds(a["planned_s"]),
            "unconfirmed" if applied is None else format_seconds(applied),
            "ok" if a["ok"] else a["error"],
        )
    for a in f["not_applied"]:
        t.add_row(a["label"], format_seconds(a["planned_s"]), "-", "not applied: run ended")
    con.print(t)
    r = f["restored"]
    con.print(
        "links restored to the testbed file's state after the run"
        if r.get("ok")
        else f"restoring the links FAILED: {'; '.join(r.get('errors', []))}"
    )

"""``--faults`` for the commands that run on the wire (``genie emulate``, ``genie bench``): the
option, the schedule resolved on a testbed, the timeouts it needs, and the table of the faults
as applied (``genie.testbed.faults`` plans them, ``genie.testbed.fault_run`` applies them)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rich.console import Console
from rich.table import Table

from genie.errors import UsageError
from genie.units import format_seconds

EXAMPLE = "'at 200ms: h1 link rate 100mbit; at 600ms: sw0-p0 down for 50ms'"


def add_argument(p: argparse.ArgumentParser, origin: str) -> None:
    """Add ``--faults SCHEDULE``; ``origin``: what the times count from."""
    p.add_argument(
        "--faults",
        metavar="SCHEDULE",
        help=f"link faults during the run, timed from {origin}, e.g. {EXAMPLE} (or a file of "
        "such lines); netns testbeds, or lab hosts with faults = true on interfaces the "
        "testbed file names; links are restored to the testbed file's state afterwards "
        "(genie.testbed.faults)",
    )


def plan(value: str | None, tb: Any, dilation: float = 1.0) -> Any:
    """The schedule ``value`` resolved on ``tb`` (None without one); refused with a dilation."""
    if not value:
        return None
    from genie.testbed import faults

    if dilation != 1:
        raise UsageError("--faults is timed on the wire: give no --dilation with it")
    return faults.plan_faults(tb, faults.parse_schedule(faults.read_schedule(value)))


def scheduler(fault_plan: Any, now: Any, testbed_path: str) -> Any:
    """The scheduler that applies ``fault_plan``: tc/ip in namespaces (netns testbeds), or
    detached commands over the testbed's SSH access (lab hosts; ``[deploy]`` in its file)."""
    from genie.testbed.lab_faults import LabPlan

    if isinstance(fault_plan, LabPlan):
        from genie.deploy.config import load_deploy
        from genie.deploy.faults import LabFaultScheduler

        return LabFaultScheduler(fault_plan, now, load_deploy(testbed_path)[1].hosts)
    from genie.testbed.fault_run import FaultScheduler

    return FaultScheduler(fault_plan, now)


# after a link comes back, TCP resends only when its backed-off retransmit timer fires: a 50 ms
# outage was seen to stall a run about 2 s on this machine; allow this much per down event
TCP_RECOVERY_S = 8.0


def widen_timeouts(timeouts: Any, fault_plan: Any) -> Any:
    """``timeouts`` (a ``Timeouts``) that let a run live through ``fault_plan``: the slow rate
    no faster than the slowest rate it sets, the outage to live through as long as its links
    are down plus TCP's recovery after each down window (once per iteration of a Go, once per
    op-list run: not once per program of the run)."""
    from genie.controller.session import Timeouts

    t = timeouts or Timeouts()
    if fault_plan is None:
        return t
    rates = [e.rate for e in fault_plan.events if e.action == "rate" and e.rate]
    slow = min([t.slow_rate, *rates])
    downs = sum(1 for e in fault_plan.events if e.action == "down")
    extra = fault_plan.down_s() + TCP_RECOVERY_S * downs
    return dataclasses.replace(t, slow_rate=slow, outage_s=t.outage_s + extra)


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

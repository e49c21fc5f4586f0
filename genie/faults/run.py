"""Link faults around a run on the wire: a schedule resolved on a testbed, the scheduler that
applies it (netns or lab hosts), and the controller timeouts a run needs to live through it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from genie.controller.session import Timeouts
from genie.errors import UsageError
from genie.faults.lab import LabFaultScheduler
from genie.faults.lab_plan import LabPlan
from genie.faults.netns import FaultScheduler
from genie.faults.schedule import FaultPlan
from genie.testbed.model import Testbed


def plan(value: str | None, tb: Testbed, dilation: float = 1.0) -> FaultPlan | LabPlan | None:
    """The schedule ``value`` resolved on ``tb`` (None without one); refused with a dilation."""
    if not value:
        return None
    from genie.faults import schedule as faults

    if dilation != 1:
        raise UsageError("--faults is timed on the wire: give no --dilation with it")
    events = faults.parse_schedule(faults.read_schedule(value))
    netem = [e for e in events if e.action in faults.NETEM]
    if netem and tb.kind == "netns":
        from genie.testbed.netns import netem_available

        if not netem_available():
            raise faults.FaultError(
                f"fault {netem[0].text!r}: {netem[0].action} needs netem (sch_netem), which "
                "this kernel lacks; genie does not fake it (rate, down and up run here)"
            )
    return faults.plan_faults(tb, events)


def scheduler(
    fault_plan: FaultPlan | LabPlan, now: Callable[[], int], testbed_path: str
) -> FaultScheduler | LabFaultScheduler:
    """The scheduler that applies ``fault_plan``: tc/ip in namespaces (netns testbeds), or
    detached commands over the testbed's SSH access (lab hosts; ``[deploy]`` in its file)."""
    if isinstance(fault_plan, LabPlan):
        from genie.deploy.config import load_deploy

        return LabFaultScheduler(fault_plan, now, load_deploy(testbed_path)[1].hosts)
    return FaultScheduler(fault_plan, now)


# after a link comes back, TCP resends only when its backed-off retransmit timer fires: a 50 ms
# outage was seen to stall a run about 2 s on this machine; allow this much per down event
TCP_RECOVERY_S = 8.0


def widen_timeouts(timeouts: Timeouts | None, fault_plan: FaultPlan | LabPlan | None) -> Timeouts:
    """``timeouts`` (a ``Timeouts``) that let a run live through ``fault_plan``: the slow rate
    no faster than the slowest rate it sets, the outage to live through as long as its links
    are down plus TCP's recovery after each down window (once per iteration of a Go, once per
    op-list run: not once per program of the run)."""
    t = timeouts or Timeouts()
    if fault_plan is None:
        return t
    rates = [e.rate for e in fault_plan.events if e.action == "rate" and e.rate]
    slow = min([t.slow_rate, *rates])
    # a down, a delay or a loss each may cost TCP a backed-off retransmit timer; a delay its length
    hits = sum(1 for e in fault_plan.events if e.action in ("down", "delay", "loss"))
    delays = sum(
        (e.delay or 0.0) + (e.jitter or 0.0) for e in fault_plan.events if e.action == "delay"
    )
    extra = fault_plan.down_s() + TCP_RECOVERY_S * hits + delays
    return dataclasses.replace(t, slow_rate=slow, outage_s=t.outage_s + extra)

"""Running plans on the live testbed through the controller's public API.

* ``measure_all`` (isolated mode): every distinct transfer prepared, run and released in turn
  (``genie.controller.sweep.run_size``);
* ``emulate_overlapped``: every instance's program prepared once, then the op lists run
  warm-up + iterations times with ``Controller.run_oplists``; each run is a ``Pass`` of
  per-instance and per-rank times on the controller clock; ``instance_medians`` reduces them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from genie.collectives.program import Program
from genie.collectives.topology import Topology
from genie.controller.results import Instance
from genie.controller.session import Controller
from genie.live.backends import Measured
from genie.live.plan import Key, OpListPlan, plan_key
from genie.wire.messages import DataOptions


def measure_all(
    ctl: Controller,
    keys: dict[Key, int],
    rank_agents: Sequence[str],
    *,
    iters: int,
    warmup: int,
    algorithms: dict[str, str] | None = None,
    chunks: int = 1,
    options: DataOptions | None = None,
    topology: Topology | None = None,
    on_done: Callable[[Measured, Program, list[Instance]], None] | None = None,
    model_placement: Sequence[str] | None = None,
) -> dict[Key, Measured]:
    """Run every distinct transfer on the agents in turn; ``on_done`` sees each as measured.

    ``model_placement``: each global rank's topology host (its NIC's endpoint) for the model
    (default: its agent, right where every host has one NIC)."""
    from genie.collectives.cost import estimate
    from genie.controller.results import measured
    from genie.controller.sweep import run_size
    from genie.errors import GenieError

    out: dict[Key, Measured] = {}
    for key, count in keys.items():
        prog = plan_key(key, algorithms, chunks)
        placement = [rank_agents[r] for r in key[2]]
        instances = run_size(ctl, prog, placement, iters=iters, warmup=warmup, options=options)
        m = Measured(
            key=key,
            collective=prog.spec.collective,
            algorithm=prog.spec.algorithm,
            count=count,
            times=[float(t) for t in measured(instances)],
        )
        if topology is not None:
            try:
                where = model_placement or rank_agents
                m.modeled_s = float(estimate(prog, topology, [where[r] for r in key[2]]).time_s)
            except GenieError:
                m.modeled_s = None
        out[key] = m
        if on_done:
            on_done(m, prog, instances)
    return out


def measured_time_ns(arrival_ns: int, end_ns: int) -> int:
    """The one definition of an emulated instance's measured time: from its last member's
    arrival (the latest rank start: from then on every member is in the collective, as the
    simulator starts it) to its last rank's end. The wait of early members for the late ones is
    not the collective's time: the replay adds it back from the compute before each arrival.
    ``genie emulate`` prints it, the run store keeps it (``time_s``), and ``genie report``,
    ``runs show``/``compare`` and ``simulate --network measured:RUN`` read it from there."""
    return max(0, end_ns - arrival_ns)


@dataclass
class Pass:
    """One run of the whole op list on the agents, controller clock ns.

    ``inst``: per instance (earliest rank start, latest rank start, last rank end); the latest
    start is when the last member arrived, from which the simulator's instance runs.
    """

    start_at_ns: int
    inst: dict[int, tuple[int, int, int]]
    rank_times: dict[int, list[tuple[int, int]]]  # rank -> per op (start, end)
    bytes_sent: int
    bytes_received: int
    verified: int
    cpu_s: dict[int, float] = field(default_factory=dict)  # rank -> CPU its thread used, s
    rank_sent: dict[int, int] = field(default_factory=dict)  # rank -> bytes it sent

    def sent_rates(self, rank_agents: Sequence[str]) -> dict[str, float]:
        """Each agent's bytes sent over the run's makespan (bytes/s, on average)."""
        wall = self.makespan_s
        out: dict[str, float] = {}
        for r, b in self.rank_sent.items():
            out[rank_agents[r]] = out.get(rank_agents[r], 0.0) + (b / wall if wall > 0 else 0.0)
        return out

    def measured_s(self, iid: int) -> float:
        """Instance ``iid``'s measured time (s, as the wire ran it, not divided by a dilation):
        from its last member's arrival to its last rank's end (``measured_time_ns``)."""
        _first, arrival, end = self.inst[iid]
        return measured_time_ns(arrival, end) / 1e9

    @property
    def makespan_s(self) -> float:
        """From the common start to the last op's end."""
        return max((e for _, _, e in self.inst.values()), default=self.start_at_ns) / 1e9 - (
            self.start_at_ns / 1e9
        )


def run_pass(
    ctl: Controller,
    plan: OpListPlan,
    rank_agents: Sequence[str],
    *,
    lead_s: float | None = None,
    on_start: Callable[[int], None] | None = None,
) -> Pass:
    """Send each agent its ranks' op lists in one Go, all starting together; gather the times.

    ``Controller.run_oplists`` bounds the wait (heartbeats, lost agents, error naming) and
    aborts the job on failure; the times come back on the controller clock; ``on_start`` is
    told the common start (controller clock ns) before the Go goes out.
    """
    from genie.errors import RuntimeFault

    out = ctl.run_oplists(
        plan.rank_ops,
        rank_agents,
        lead_s=lead_s,
        after=plan.rank_after,
        on_start=on_start,
        instance_program=plan.instance_program,
    )
    start_at = out.start_at_ns
    inst: dict[int, tuple[int, int, int]] = {}
    rank_times: dict[int, list[tuple[int, int]]] = {}
    sent = received = verified = 0
    cpu: dict[int, float] = {}
    rank_sent: dict[int, int] = {}
    for a, res in out.results.items():
        off = out.offsets_ns.get(a, 0)
        for rr in res.ranks:
            if rr.cpu_ns >= 0:
                cpu[rr.rank] = rr.cpu_ns / 1e9
            sent += rr.bytes_sent
            rank_sent[rr.rank] = rr.bytes_sent
            received += rr.bytes_received
            verified += rr.messages_verified
            times = [(s - off, e - off) for s, e in zip(rr.start, rr.end, strict=True)]
            rank_times[rr.rank] = times
            for iid, (s, e) in zip(plan.op_iid[rr.rank], times, strict=True):
                lo, late, hi = inst.get(iid, (s, s, e))
                inst[iid] = (min(lo, s), max(late, s), max(hi, e))
    want = plan.sent_bytes()
    if sent != want or received != want:
        raise RuntimeFault(
            f"op-list run moved {sent} bytes sent / {received} received; the plan has {want}"
        )
    return Pass(start_at, inst, rank_times, sent, received, verified, cpu, rank_sent)


def emulate_overlapped(
    ctl: Controller,
    plan: OpListPlan,
    rank_agents: Sequence[str],
    *,
    iters: int,
    warmup: int,
    options: DataOptions | None = None,
    on_pass: Callable[[int, Pass], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> list[Pass]:
    """Prepare every instance's program once, run the op lists warmup+iters times, release;
    ``on_start`` is told the first measured run's common start (controller clock ns, after
    the warm-up runs) before its Go."""
    ctl.prepare(plan.programs, list(rank_agents), options)
    passes = []
    try:
        for k in range(warmup + iters):
            p = run_pass(ctl, plan, rank_agents, on_start=on_start if k == warmup else None)
            passes.append(p)
            if on_pass:
                on_pass(k, p)
    except BaseException:
        ctl.abort("interrupted")
        raise
    ctl.release()
    return passes


def instance_medians(passes: Sequence[Pass], warmup: int) -> dict[int, float]:
    """Per instance, the median measured time (s, ``measured_time_ns``) over the non-warm-up
    passes (the simulator starts an instance when all members arrived)."""
    keep = list(passes[warmup:]) or list(passes)
    out: dict[int, float] = {}
    for iid in keep[0].inst if keep else ():
        out[iid] = float(np.median([p.measured_s(iid) for p in keep]))
    return out

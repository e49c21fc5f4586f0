"""Overlapped emulation: the whole trace's communication on the agents, compute gaps honoured.

``run_overlapped`` compiles every rank's op list (``genie.live.plan``), runs it warm-up +
iterations times with one Go each (``genie.live.run``), stores every instance's times, then
replays the workload with the measured times beside the nominal (and calibrated) model; an
``Overlapped`` holds it all and ``doc()`` is the ``genie emulate --json`` document. Link faults
(``genie.faults``) are applied during the runs, timed from the first measured run's Go.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from genie import progress
from genie.controller.admission import check_memory
from genie.controller.results import Instance, spread
from genie.faults.run import scheduler, widen_timeouts
from genie.live.paths import learn_paths, with_paths
from genie.live.plan import OpListPlan, describe_payload
from genie.live.run import Pass
from genie.live.stored import live_run, replay_all, wire_notes
from genie.sim.closed import with_closed
from genie.sim.compiled import CompiledWorkload
from genie.sim.streams import order_collectives
from genie.wire.messages import HostFacts, RdmaOptions, WireConditions

JsonDoc = dict[str, Any]  # a JSON document (seconds, bytes)


def _instances_of(
    plan: OpListPlan,
    where: dict[tuple[int, int], int],
    passes: Sequence[Pass],
    warmup: int,
    iid: int,
) -> list[Instance]:
    """The store's Instance rows of one communication instance, one per pass (``where``:
    ``plan.op_index()``): ``time_s`` is the measured time ``genie emulate`` prints
    (``genie.live.run.measured_time_ns``, not divided by a dilation: the store keeps the wire's
    times), ``start_ns`` the earliest member's start."""
    out = []
    ranks = list(plan.program_of(iid).spec.ranks)
    for k, p in enumerate(passes):
        first, _arrival, end = p.inst[iid]
        starts, ends = [], []
        for r in ranks:
            j = where[(r, iid)]
            s, e = p.rank_times[r][j]
            starts.append(s)
            ends.append(e)
        out.append(
            Instance(
                iteration=k,
                warmup=k < warmup,
                start_ns=first,
                end_ns=end,
                time_s=p.measured_s(iid),
                rank_start_ns=starts,
                rank_end_ns=ends,
                ranks=ranks,
            )
        )
    return out


@dataclass
class Overlapped:
    """What ``run_overlapped`` measured and replayed (``doc()`` is the ``--json`` document)."""

    run_id: str | None
    workload: str
    testbed: str
    network: str  # what the analytical backend priced
    wire: list[str]  # how the wire ran it: issue order, intra-host steps, flows
    rows: list[dict]  # per communication instance: measured and modelled
    runs: list[dict]  # per run of the trace (warm-up flagged)
    reports: list  # SimReport per backend: measured, analytical nominal, [calibrated]
    models: Any = None  # genie.live.compare.Models the run was compared with
    notes: list[str] = field(default_factory=list)
    raws: list = field(default_factory=list)  # the replays' raw results, one per report
    backends: list = field(default_factory=list)  # the replays' backends, one per report
    faults: dict | None = None  # link faults: schedule, applied, restored, effect
    # the replay with measured times: when its last communication ended (the wire's makespan
    # stops there; the iteration also counts the compute after it)
    replay_comm_end_s: float | None = None
    compiled: CompiledWorkload | None = None  # the workload replayed (issue order applied)
    # per agent, what its data connections ran under (read back); TCP segments retransmitted
    conditions: dict[str, WireConditions] = field(default_factory=dict)
    retransmits: int = -1

    def errors(self) -> list:
        """Per instance: measured vs nominal vs calibrated (``ErrorRow``)."""
        from genie.calibration.accuracy import ErrorRow

        return [
            ErrorRow(
                f"{r['iid']}: {r['collective']} n={len(r['ranks'])}",
                r["size"],
                r["measured_p50_s"],
                r["modeled_s"],
                r.get("calibrated_s"),
            )
            for r in self.rows
        ]

    def iteration(self) -> Any:
        """The iteration replayed with measured times vs with each model (``ErrorRow``)."""
        from genie.live.compare import iteration_row

        return iteration_row(self.reports, "iteration (replayed)")

    def spans(self) -> list[float]:
        """The measured runs' makespans (seconds, from the common start to the last op's end)."""
        return [r["makespan_s"] for r in self.runs if not r["warmup"]]

    def spread(self) -> float | None:
        """How far the measured runs' makespans lie apart: max / min - 1."""
        return spread(self.spans())

    def to_dict(self) -> JsonDoc:
        """The JSON document (as ``doc()``), named as every genie result names it."""
        return self.doc()

    def doc(self) -> dict:
        """The JSON document of ``genie emulate --json``."""
        cal = self.models.calibration if self.models else None
        return {
            "run_id": self.run_id,
            "mode": "overlapped",
            "workload": self.workload,
            "testbed": self.testbed,
            "network": self.network,
            "wire": self.wire,
            "calibration": cal.cal_id if cal else None,
            "dilation": self.models.k if self.models else 1.0,
            "instances": self.rows,
            "runs": self.runs,
            "runs_spread": self.spread(),
            "replay_comm_end_s": self.replay_comm_end_s,
            "model_error": [e.to_dict() for e in [*self.errors(), self.iteration()]],
            "notes": self.notes,
            "reports": [with_closed(r.to_dict(), None) for r in self.reports],
            "conditions": {a: msgspec.to_builtins(c) for a, c in self.conditions.items()},
            "retransmits": self.retransmits,
            **({"faults": self.faults} if self.faults is not None else {}),
        }


def run_overlapped(
    cw: CompiledWorkload,
    tb,
    testbed_path,
    agents: list[str],
    *,
    store: str | None,
    iterations: int,
    warmup: int,
    algorithms: dict[str, str] | None = None,
    chunks: int = 1,
    max_instances: int = 0,
    payload: str = "lean",
    symmetry: bool = True,
    trace: str | None = None,
    command: str = "genie emulate",
    calibration: Any = None,
    dilation: float = 1.0,
    asked: str = "none",
    unperturbed: CompiledWorkload | None = None,
    perturbation: Any = None,
    comm_concurrency: int = 1,
    meta: dict | None = None,
    faults: Any = None,
) -> Overlapped:
    """The whole trace's communication on the agents, then replayed measured and modelled.

    ``cw`` (and ``unperturbed``) are compiled workloads without the issue order: the op lists
    and the replays each apply ``comm_concurrency`` their own way.

    With ``dilation`` K the compute gaps run K times longer on the wire and every time is read
    divided by K (``genie.calibration.dilation``); ``calibration`` adds the calibrated model;
    ``meta`` is stored with the run beside what the run says of itself; ``faults`` (a
    ``genie.faults.schedule.FaultPlan``) is applied during the runs, timed from the first
    measured run's Go,
    recorded with the run and undone afterwards (``genie.faults.netns``).
    """
    from genie.calibration.dilation import check_dilation
    from genie.calibration.model import conditions_refusal
    from genie.live.backends import InstanceBackend
    from genie.live.compare import last_comm_end_s
    from genie.live.compare import models as compare_models
    from genie.live.plan import compile_oplists, dilate_plan
    from genie.live.run import emulate_overlapped, instance_medians

    k = check_dilation(dilation)
    models = compare_models(tb.to_topology(), calibration, k, tb.model_note(), asked)
    ends = tb.rank_endpoints(agents)  # each rank's NIC: where the model places it
    algos = algorithms or {}
    with progress.stage("compiling op lists"):
        # the op lists carry the issue order themselves, as waits with no compute gap; planned
        # on an ordered workload, a collective would wait its compute gap again after the one
        # before it ended, though that compute ran while the one before was on the wire
        plan = compile_oplists(
            cw, algos, chunks, max_instances=max_instances, comm_concurrency=comm_concurrency
        )
        cw = order_collectives(cw, comm_concurrency)  # what the replays and the store see
        if unperturbed is not None:
            unperturbed = order_collectives(unperturbed, comm_concurrency)
        if k != 1:
            plan = dilate_plan(plan, k)
    meta = {
        "iterations": iterations,
        "mode": "overlapped",
        "calibration": calibration.cal_id if calibration else None,
        "dilation": k,
        "comm_concurrency": comm_concurrency,
        "streams": tb.routing.flows,
        **(meta or {}),
    }
    with live_run(
        cw,
        tb,
        testbed_path,
        agents,
        store=store,
        meta=meta,
        command=command,
        unit="runs of the trace",
        total=iterations + warmup,
        timeouts=widen_timeouts(None, faults) if faults is not None else None,
    ) as (run, bar):
        # the agents sharing a machine must fit in its memory together: refused here, in one
        # line, before any Prepare makes an agent allocate
        check_memory(plan.peak_bytes(agents, payload), {a: h.facts for a, h in run.hellos.items()})

        options = plan.data_options(tb.routing.flows, payload, tb.tcp.congestion_control)
        if tb.transport == "rdma":  # the testbed's data plane, as genie bench takes it
            devices = {h.name: h.rdma_device for h in tb.hosts if h.rdma_device}
            options = msgspec.structs.replace(
                options, transport="rdma", rdma=RdmaOptions(devices=devices)
            )
        learned: list = []  # the paths the fabric gives the job's connections, once they are up

        def on_pass(j, p) -> None:
            bar.advance()
            bar.describe(f"run {j + 1}: {p.makespan_s / k:.4g} s")
            if j == 0:
                learned.append(learn_paths(tb, models.nominal, ends, plan, options))

        assert run.ctl is not None  # StoredRun connected it on entering
        with contextlib.ExitStack() as undo:
            sched = None
            if faults is not None:
                sched = scheduler(faults, run.ctl.clock.now, testbed_path)
                undo.enter_context(sched)
            passes = emulate_overlapped(
                run.ctl,
                plan,
                agents,
                iters=iterations,
                warmup=warmup,
                on_pass=on_pass,
                options=options,
                on_start=sched.start if sched else None,
            )
        fault_doc = None
        if sched is not None:
            fault_doc = _fault_doc(sched.records(), passes, warmup)
            run.update_meta(faults=fault_doc)
        conditions = dict(run.ctl.conditions)
        retransmits = sum(run.ctl.retransmits.values()) if run.ctl.retransmits else -1
        refused = conditions_refusal(calibration, conditions)
        if refused:  # fitted under other wire conditions: the nominal model only, and why
            models = compare_models(tb.to_topology(), None, k, tb.model_note(), asked)
            models.missing = refused
            run.update_meta(calibration=None, calibration_refused=refused)
        where = plan.op_index()
        for iid in plan.iids:
            spec = plan.program_of(iid).spec
            run.add_instances(spec, _instances_of(plan, where, passes, warmup, iid))
    run_id = run.run_id
    paths, paths_note = learned[0] if learned else (None, None)
    models = with_paths(models, paths)
    medians = {iid: t / k for iid, t in instance_medians(passes, warmup).items()}
    model_backends = models.backends(ends, cw.n_ranks, algos, chunks, cw.instances.splits)

    def measured_backend():
        return InstanceBackend(medians, name=f"testbed:{run_id}")

    backends = [measured_backend(), *model_backends]
    strag = (unperturbed, perturbation, measured_backend) if unperturbed is not None else None
    reports, raws = replay_all(cw, backends, symmetry, trace, strag)
    measured = passes[warmup:]
    rows = []
    priced: dict[int, tuple[float | None, float | None]] = {}  # per program: nominal, calibrated
    for iid in plan.iids:
        program = plan.program_of(iid)
        spec = program.spec
        k_prog = plan.instance_program[iid]
        if k_prog not in priced:
            priced[k_prog] = models.price(program, [ends[r] for r in spec.ranks])
        nominal, calibrated = priced[k_prog]
        rows.append(
            {
                "iid": iid,
                "collective": spec.collective,
                "algorithm": spec.algorithm,
                "ranks": list(spec.ranks),
                "size": int(cw.instances.size[iid]),
                "measured_p50_s": medians[iid],
                # per measured run: seconds from the run's start, first rank start / last
                # member's arrival / last rank end (divided by the dilation)
                "intervals_s": [
                    [(t - p.start_at_ns) / 1e9 / k for t in p.inst[iid]] for p in measured
                ],
                # per measured run: [rank, start, end] of each member, seconds from the start
                "rank_intervals_s": [
                    [
                        [r, *((t - p.start_at_ns) / 1e9 / k for t in p.rank_times[r][j])]
                        for r, j in ((r, where[(r, iid)]) for r in spec.ranks)
                    ]
                    for p in measured
                ],
                "modeled_s": nominal,
                "calibrated_s": calibrated,
            }
        )
    runs = [
        {
            "makespan_s": p.makespan_s / k,
            # from the first measured run's Go (warm-up runs: before it)
            "start_s": (p.start_at_ns - passes[min(warmup, len(passes) - 1)].start_at_ns) / 1e9 / k,
            "bytes_sent": p.bytes_sent,
            "messages_verified": p.verified,
            "cpu_s": {str(r): c for r, c in sorted(p.cpu_s.items())},  # per rank thread
            # per agent: bytes it sent over the run's makespan as the wire ran it (not divided
            # by a dilation), bytes/s on average
            "sent_Bps": dict(sorted(p.sent_rates(agents).items())),
            "warmup": j < warmup,
        }
        for j, p in enumerate(passes)
    ]
    network = f"{model_backends[0].pricer.describe()}; model of {models.nominal_label}"
    notes = [n for n in [models.dilation_note(cw, ends, algos, chunks, symmetry), paths_note] if n]
    wire = [plan.describe_order(), *wire_notes(tb, agents, plan.n_channels)]
    wire.append(describe_payload(payload))
    facts = {a: h.facts for a, h in run.hellos.items()}
    cpu_note = cpu_load(measured, agents, facts)
    if cpu_note:
        wire.append(cpu_note)
    if fault_doc is not None and trace:
        _trace_faults(trace, fault_doc, runs, cw.n_ranks)
    return Overlapped(
        run_id,
        cw.name,
        tb.name,
        network,
        wire,
        rows,
        runs,
        reports,
        models,
        notes,
        raws,
        backends,
        fault_doc,
        last_comm_end_s(raws[0]) if raws else None,
        cw,
        conditions,
        retransmits,
    )


def cpu_load(passes: Sequence[Pass], agents: Sequence[str], facts: dict[str, HostFacts]) -> str:
    """What the rank threads cost the agents' CPUs over the measured runs (each rank's CPU time
    over the run's wall time), and a warning when a host's agents came near its cores: then the
    agents, not the network, may have set the pace."""
    rank_share: list[float] = []
    host_cores: dict[str, float] = {}
    for p in passes:
        wall = p.makespan_s
        if wall <= 0 or not p.cpu_s:
            continue
        per_host: dict[str, float] = {}
        for r, c in p.cpu_s.items():
            rank_share.append(c / wall)
            f = facts.get(agents[r])
            host = (f.host_id or f.hostname) if f is not None else agents[r]
            per_host[host] = per_host.get(host, 0.0) + c / wall
        for h, c in per_host.items():
            host_cores[h] = max(host_cores.get(h, 0.0), c)
    if not rank_share:
        return ""
    cores = {(f.host_id or f.hostname): f.cpus_logical for f in facts.values()}
    busiest = max(host_cores, key=lambda h: host_cores[h])
    used, have = host_cores[busiest], cores.get(busiest, 0)
    text = (
        f"agent CPU (measured): a rank thread used at most {max(rank_share):.0%} of a core; the "
        f"busiest host's agents {used:.2f} cores" + (f" of its {have}" if have else "")
    )
    rates = [v for p in passes for v in p.sent_rates(agents).values()]
    if rates:
        text += (
            f"; an agent sent at most {max(rates) / 1e9:.3f} GB/s (10^9 B/s, bytes sent over "
            "a run's makespan)"
        )
    if have and used >= 0.9 * have:
        text += (
            ": near all of them, so the agents, not the network, may have set the pace "
            "(--dilation stretches compute and gives them time)"
        )
    return text


def _fault_doc(records: dict, passes: list, warmup: int) -> dict:
    """The run's fault records with each run's overlap and the effect on iteration time."""
    from genie.faults.effect import fault_effect, fault_windows

    t0 = passes[min(warmup, len(passes) - 1)].start_at_ns if passes else 0
    runs = [
        {"start_s": (p.start_at_ns - t0) / 1e9, "makespan_s": p.makespan_s, "warmup": j < warmup}
        for j, p in enumerate(passes)
    ]
    end = max((r["start_s"] + r["makespan_s"] for r in runs), default=0.0)
    windows = fault_windows(records, end)
    effect = fault_effect([r for r in runs if not r["warmup"]], windows)
    return {**records, "run_end_s": end, "effect": effect}


def _trace_faults(path: str, fault_doc: dict, runs: list[dict], n_ranks: int) -> None:
    """Add the wire's runs and the applied faults to the Chrome trace at ``path``."""
    import json
    from pathlib import Path

    from genie.faults.effect import trace_events

    p = Path(path)
    doc = json.loads(p.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    events.extend(trace_events(fault_doc, runs, n_ranks + 1))
    p.write_text(json.dumps(doc))

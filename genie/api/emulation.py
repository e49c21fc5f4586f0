"""``emulate``: a workload's communication on a testbed's live agents, as ``genie emulate``.

``overlapped`` (the default) runs the whole trace's communication with the compute gaps
honoured, so collectives that overlap in the trace overlap on the wire (``genie.live
.overlapped``); ``isolated`` measures each distinct collective alone (``genie.live
.isolated``); several jobs run together with one Go, then each alone (``genie.live.jobs``).
Every run is a stored run (host facts, clock offsets, every instance), finished with its reason
on any error. The result's ``doc()`` is the JSON document ``genie emulate --json`` prints; every
time in it says whether it was measured on the wire or priced by which model.
"""

from __future__ import annotations

import msgspec
import numpy as np

from genie import progress
from genie.api.experiments import job_layout, job_names, perturbation
from genie.api.specs import EmulateSpec
from genie.calibration.model import Calibration
from genie.calibration.stored import resolve
from genie.collectives.registry import parse_algorithms
from genie.errors import UsageError
from genie.faults.lab_plan import LabPlan
from genie.faults.run import plan as plan_faults
from genie.faults.schedule import FaultPlan
from genie.live.isolated import Isolated, run_isolated
from genie.live.jobs import JobsOnWire, wire_doc
from genie.live.overlapped import Overlapped, run_overlapped
from genie.live.plan import distinct_transfers
from genie.sim import perturb
from genie.sim.adapter import compile_workload, load_workload
from genie.sim.compiled import CompiledWorkload
from genie.sim.job_report import hosts_text
from genie.sim.jobs import JobSpec, merge_jobs
from genie.sim.perturb import Perturbation
from genie.testbed import load_testbed
from genie.testbed.model import Testbed

Emulation = Overlapped | Isolated | JobsOnWire


def _with_congestion(tb: Testbed, congestion: str | None) -> Testbed:
    """``tb`` with its data connections on ``congestion`` (None: as its ``[tcp]`` says)."""
    if not congestion:
        return tb
    return msgspec.structs.replace(
        tb, tcp=msgspec.structs.replace(tb.tcp, congestion_control=congestion)
    )


def _check(spec: EmulateSpec) -> None:
    """One-line refusals of what no mode can run."""
    if spec.iterations < 1 or spec.warmup < 0:
        raise UsageError("--iterations must be >= 1 and --warmup >= 0")
    if spec.faults and spec.mode != "overlapped":
        raise UsageError("--faults runs in --mode overlapped (one timeline from the first Go)")


def emulate(spec: EmulateSpec) -> Emulation:
    """Run what ``spec`` describes on the testbed's agents and replay it (see the module)."""
    _check(spec)
    if spec.jobs:
        if spec.faults:
            raise UsageError("--faults runs with one workload (not with several jobs) so far")
        return _emulate_jobs(spec)
    with progress.stage("loading workload"):
        wl = load_workload(spec.workloads()[0])
        base = compile_workload(wl)
        pert = perturbation(spec.perturb)
        cw = perturb.apply(base, pert)  # the compute gaps on the wire are the perturbed ones
    tb = _with_congestion(load_testbed(spec.testbed), spec.congestion)
    faults = plan_faults(spec.faults, tb, spec.dilation)
    placed = tb.place(cw.n_ranks, spec.placement, spec.ranks_per_host)
    agents = tb.rank_host_names(placed)
    keys = distinct_transfers(cw)
    if spec.mode == "isolated" and cw.instances.splits:
        raise UsageError(
            f"the workload has {len(cw.instances.splits)} uneven all-to-alls (all-to-all-v), "
            "which isolated mode does not measure: use --mode overlapped (the default)"
        )
    if spec.mode == "isolated" and len(keys) > spec.max_collectives:
        raise UsageError(
            f"the workload has {len(keys)} distinct collectives (more than --max-collectives "
            f"{spec.max_collectives})"
        )
    algos = parse_algorithms(spec.algorithm)
    tb = tb.with_flows(spec.streams or tb.routing.flows)  # the model prices the wire's flows
    store = spec.store
    cal = resolve(spec.calibration, store, tb.name, tb.to_topology())
    if spec.mode == "overlapped":
        o = _overlapped(
            spec,
            cw,
            tb,
            agents,
            algos,
            cal,
            trace=spec.trace,
            unperturbed=base,
            pert=pert,
            faults=faults,
        )
        if placed.note:
            o.notes.append(placed.note)
        return o
    iso = run_isolated(
        cw,
        tb,
        spec.testbed,
        agents,
        store=store,
        iterations=spec.iterations,
        warmup=spec.warmup,
        algorithms=algos,
        chunks=spec.chunks,
        calibration=cal,
        asked=spec.calibration,
        dilation=spec.dilation,
        comm_concurrency=spec.comm_concurrency,
        command=spec.command,
        symmetry=spec.symmetry,
        trace=spec.trace,
        unperturbed=base,
        perturbation=pert,
    )
    if placed.note:
        iso.notes.append(placed.note)
    return iso


def _overlapped(
    spec: EmulateSpec,
    cw: CompiledWorkload,
    tb: Testbed,
    agents: list[str],
    algos: dict[str, str],
    cal: Calibration | None,
    *,
    trace: str | None,
    unperturbed: CompiledWorkload | None = None,
    pert: Perturbation | None = None,
    faults: FaultPlan | LabPlan | None = None,
    meta: dict[str, object] | None = None,
) -> Overlapped:
    """``run_overlapped`` with the settings ``spec`` gives every overlapped run."""
    return run_overlapped(
        cw,
        tb,
        spec.testbed,
        agents,
        store=spec.store,
        iterations=spec.iterations,
        warmup=spec.warmup,
        algorithms=algos,
        chunks=spec.chunks,
        max_instances=spec.max_instances,
        payload=spec.payload,
        symmetry=spec.symmetry,
        trace=trace,
        command=spec.command,
        calibration=cal,
        dilation=spec.dilation,
        asked=spec.calibration,
        unperturbed=unperturbed,
        perturbation=pert,
        comm_concurrency=spec.comm_concurrency,
        meta=meta,
        faults=faults,
    )


def _emulate_jobs(spec: EmulateSpec) -> JobsOnWire:
    """Several jobs together with one Go, then each alone (``genie.live.jobs``)."""
    if spec.mode != "overlapped":
        raise UsageError("several jobs run in --mode overlapped only (one Go for every job)")
    names = job_names(spec.jobs)
    pert = perturbation(spec.perturb)
    cws: list[CompiledWorkload] = []
    with progress.stage("loading workloads") as st:
        for pre in spec.workloads():
            st.describe(f"loading {pre}")
            cws.append(compile_workload(load_workload(pre)))  # run_overlapped orders them
    layout, starts = job_layout(spec.jobs, [cw.n_ranks for cw in cws], spec.ranks_per_host)
    tb = _with_congestion(load_testbed(spec.testbed), spec.congestion)
    top = max((max(h) for h in layout), default=0)
    if top >= len(tb.hosts):
        raise UsageError(
            f"host {top} named, but testbed {tb.name} has {len(tb.hosts)} hosts "
            f"(0..{len(tb.hosts) - 1})"
        )
    bases = np.cumsum([0, *[cw.n_ranks for cw in cws]]).tolist()
    perturb.check_ranks(pert, bases[-1])
    pcws = [perturb.apply(cw, pert, bases[k]) for k, cw in enumerate(cws)]
    specs = [JobSpec(names[k], pcws[k], layout[k], starts[k]) for k in range(len(cws))]
    merged, jm = merge_jobs(specs)
    tb = tb.with_flows(spec.streams or tb.routing.flows)
    agents = [tb.hosts[h].name for h in jm.placement]
    store = spec.store
    prefixes = spec.workloads()
    jobs_meta = [
        {"name": j.name, "workload": prefixes[k], "hosts": hosts_text(j.hosts),
         "start_s": j.start_s, "ranks": [j.ranks.start, j.ranks.stop - 1]}
        for k, j in enumerate(jm.jobs)
    ]  # fmt: skip
    cal = resolve(spec.calibration, store, tb.name, tb.to_topology())
    algos = parse_algorithms(spec.algorithm)

    def run(cw: CompiledWorkload, where: list[str], phase: str, trace: str | None) -> Overlapped:
        meta: dict[str, object] = {"jobs": jobs_meta, "jobs_phase": phase}
        return _overlapped(spec, cw, tb, where, algos, cal, trace=trace, meta=meta)

    together = run(merged, agents, "together", spec.trace)
    alone = [
        run(pcws[k], agents[job.ranks.start : job.ranks.stop], f"alone: {job.name}", None)
        for k, job in enumerate(jm.jobs)
    ]
    return JobsOnWire(together, alone, wire_doc(jm, together, alone, prefixes))

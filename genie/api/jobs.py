"""Several jobs on one fabric, simulated alone and together (``genie simulate A B ...``).

Each job is replayed alone on the fabric (its own hosts, the others idle), then all jobs
together as one combined workload (``genie.sim.jobs.merge_jobs``) over one analytical backend,
so their transfers share links as the fluid model shares any transfers in flight together. The
document says per job its iteration alone and together and the slowdown, and which fabric links
carried more than one job's bytes: how long each was saturated together and alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from genie import progress
from genie.api import fabric
from genie.api.experiments import job_layout, job_names
from genie.api.specs import SimulateSpec
from genie.errors import UsageError
from genie.sim import perturb
from genie.sim.adapter import ComputeModel, compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.compiled import CompiledWorkload
from genie.sim.job_report import Alone, jobs_doc
from genie.sim.jobs import JobSpec, merge_jobs
from genie.sim.network import AnalyticalBackend
from genie.sim.stragglers import replay_perturbed
from genie.sim.streams import order_collectives

if TYPE_CHECKING:
    from genie.api.simulation import Simulation

JsonDoc = dict[str, object]


def simulate_jobs(
    spec: SimulateSpec, compute: ComputeModel, pert: perturb.Perturbation
) -> Simulation:
    """Replay each job alone and all together (see the module docstring)."""
    from genie.api.simulation import Simulation, backend_names, describe, trace_facts

    if backend_names(spec) != ["analytical"]:
        raise UsageError("several jobs run on the analytical network only (--network analytical)")
    names = job_names(spec.jobs)
    cws: list[CompiledWorkload] = []
    facts: JsonDoc = {}
    with progress.stage("loading workloads") as st:
        for pre in spec.workloads():
            st.describe(f"loading {pre}")
            wl = load_workload(pre)
            cw = compile_workload(wl, compute, spec.model.trace_edges)
            cw = order_collectives(cw, spec.model.comm_concurrency)
            cws.append(cw)
            facts = facts or trace_facts(wl, cw)
    layout, starts = job_layout(spec.jobs, [cw.n_ranks for cw in cws], spec.fabric.ranks_per_host)
    bases = np.cumsum([0, *[cw.n_ranks for cw in cws]]).tolist()
    perturb.check_ranks(pert, bases[-1])
    pcws = [perturb.apply(cw, pert, bases[k]) for k, cw in enumerate(cws)]
    specs = [JobSpec(names[k], pcws[k], layout[k], starts[k]) for k in range(len(cws))]
    merged, jm = merge_jobs(specs)
    base = merged
    if pert:
        plain = [JobSpec(names[k], cws[k], layout[k], starts[k]) for k in range(len(cws))]
        base, _ = merge_jobs(plain)
    built = fabric.build(spec.fabric, merged.n_ranks, jm.placement, store=spec.store)
    pricer = fabric.pricer(spec.model, built, merged.n_ranks)
    pricer.use_splits(merged.instances.splits)
    symmetry = spec.symmetry
    with progress.stage(f"replaying {len(cws)} jobs together") as st:
        be = AnalyticalBackend(pricer, track_links=True)
        rep, raw = replay_perturbed(
            merged, base, be, lambda: AnalyticalBackend(pricer, track_links=True), pert, symmetry
        )
        alone: list[Alone] = []
        for k, job in enumerate(jm.jobs):
            st.describe(f"replaying job {job.name} alone")
            p = fabric.pricer(spec.model, built, pcws[k].n_ranks, job.hosts)
            p.use_splits(pcws[k].instances.splits)
            be_k = AnalyticalBackend(p, track_links=True)
            rep_k, _ = replay(pcws[k], be_k, symmetry=symmetry)
            alone.append((job.name, be_k, rep_k))
    rep.notes.append(f"{len(jm.jobs)} jobs on one fabric; groups are named JOB/GROUP")
    if pert:
        rep.notes.append(f"stragglers/jitter (global ranks): {pert.describe()}")
    doc = jobs_doc(jm, raw, rep, be, pricer, alone, spec.workloads(), merged)
    return Simulation(merged, describe(pricer), [rep], None, facts, [raw], doc)

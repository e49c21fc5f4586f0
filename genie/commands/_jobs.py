"""``genie simulate A B ...``: several jobs on one fabric, alone and together.

Each job is replayed alone on the fabric (its own hosts, the others idle), then all jobs
together as one combined workload (``genie.sim.jobs.merge_jobs``) over one analytical backend,
so their transfers share links as the fluid model shares any transfers in flight together. The
document says per job its iteration alone and together and the slowdown, and which fabric links
carried more than one job's bytes: how long each was saturated together and alone.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from genie import progress
from genie.commands import _experiments as X
from genie.errors import UsageError
from genie.sim import perturb
from genie.sim.adapter import ComputeModel, compile_workload, load_workload
from genie.sim.api import replay
from genie.sim.jobs import JobMap, JobSpec, job_times, merge_jobs
from genie.sim.network import AnalyticalBackend
from genie.sim.streams import order_collectives
from genie.units import format_bytes, format_seconds

MODEL = "analytical model: fluid max-min sharing of every link among the transfers in flight"


def _hosts_text(hosts: tuple[int, ...]) -> str:
    """``0-3`` / ``0,2,4`` for a job's distinct hosts in order."""
    uniq = sorted(set(hosts))
    runs: list[list[int]] = []
    for h in uniq:
        if runs and h == runs[-1][1] + 1:
            runs[-1][1] = h
        else:
            runs.append([h, h])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def contended_links(
    names: list[str],
    n_topo: int,
    together: AnalyticalBackend,
    together_s: float,
    alone: list[tuple[str, AnalyticalBackend, float]],
    top: int = 8,
) -> list[dict]:
    """Fabric links that carried bytes of two or more jobs, most saturated together first."""
    rows = []
    for lid in range(n_topo):
        per = {name: float(be.link_bytes[lid]) for name, be, _ in alone if be.link_bytes[lid] > 0}
        if len(per) < 2:
            continue
        sat_alone = max(
            (float(be.link_saturated_s[lid]) / t for _, be, t in alone if t > 0), default=0.0
        )
        rows.append(
            {
                "link": names[lid],
                "bytes_by_job": per,
                "capacity_Bps": float(together.cap[lid]),
                "saturated_together_share": float(together.link_saturated_s[lid]) / together_s
                if together_s > 0
                else 0.0,
                "saturated_alone_share": sat_alone,
            }
        )
    rows.sort(key=lambda x: (-x["saturated_together_share"], -sum(x["bytes_by_job"].values())))
    return rows[:top]


def _exposed(rep: Any, ranks: range) -> float:
    vals = [b.exposed_comm for b in rep.ranks if b.rank in ranks]
    return float(np.mean(vals)) if vals else 0.0


def run_jobs(args: argparse.Namespace, compute: ComputeModel, pert: perturb.Perturbation) -> Any:
    """Replay each job alone and all together (see the module docstring); a ``Simulated``."""
    from genie.commands._sim_output import describe, trace_facts
    from genie.commands.simulate import Simulated, _backend_specs, fabric, make_pricer

    if _backend_specs(args) != ["analytical"]:
        raise UsageError("several jobs run on the analytical network only (--network analytical)")
    names = X.job_names(args.workload, args.job_name)
    cws, facts = [], {}
    with progress.stage("loading workloads") as st:
        for pre in args.workload:
            st.describe(f"loading {pre}")
            wl = load_workload(pre)
            cw = order_collectives(compile_workload(wl, compute), args.comm_concurrency)
            cws.append(cw)
            facts = facts or trace_facts(wl, cw)
    layout, starts = X.job_layout(args, [cw.n_ranks for cw in cws])
    bases = np.cumsum([0, *[cw.n_ranks for cw in cws]]).tolist()
    perturb.check_ranks(pert, bases[-1])
    pcws = [perturb.apply(cw, pert, bases[k]) for k, cw in enumerate(cws)]
    specs = [JobSpec(names[k], pcws[k], layout[k], starts[k]) for k in range(len(cws))]
    merged, jm = merge_jobs(specs)
    base = merged
    if pert:
        plain = [JobSpec(names[k], cws[k], layout[k], starts[k]) for k in range(len(cws))]
        base, _ = merge_jobs(plain)
    topo, placement = fabric(args, merged.n_ranks, jm.placement)
    pricer = make_pricer(args, topo, placement, merged.n_ranks).use_splits(merged.instances.splits)
    symmetry = not args.no_symmetry
    with progress.stage(f"replaying {len(cws)} jobs together") as st:
        be = AnalyticalBackend(pricer, track_links=True)
        rep, raw = X.replay_perturbed(
            merged, base, be, lambda: AnalyticalBackend(pricer, track_links=True), pert, symmetry
        )
        alone = []
        for k, job in enumerate(jm.jobs):
            st.describe(f"replaying job {job.name} alone")
            p = make_pricer(args, topo, list(job.hosts), pcws[k].n_ranks)
            p.use_splits(pcws[k].instances.splits)
            be_k = AnalyticalBackend(p, track_links=True)
            rep_k, _ = replay(pcws[k], be_k, symmetry=symmetry)
            alone.append((job.name, be_k, rep_k))
    rep.notes.append(f"{len(jm.jobs)} jobs on one fabric; groups are named JOB/GROUP")
    if pert:
        rep.notes.append(f"stragglers/jitter (global ranks): {pert.describe()}")
    doc = jobs_doc(jm, raw, rep, be, pricer, alone, args.workload)
    return Simulated(merged, describe(pricer), [rep], {}, facts, [raw], doc)


def jobs_doc(jm: JobMap, raw, rep, be, pricer, alone, prefixes) -> dict:
    """The jobs part of the ``--json`` document (seconds, bytes, bytes/s)."""
    times = job_times(jm, raw)
    rows = []
    for k, (job, t) in enumerate(zip(jm.jobs, times, strict=True)):
        rep_k = alone[k][2]
        a = rep_k.iteration_s
        rows.append(
            {
                "name": job.name,
                "workload": prefixes[k],
                "ranks": [job.ranks.start, job.ranks.stop - 1],
                "hosts": _hosts_text(job.hosts),
                "start_s": job.start_s,
                "alone_s": a,
                "together_s": t.iteration_s,
                "slowdown": t.iteration_s / a if a > 0 else float("nan"),
                "exposed_comm_alone_s": rep_k.mean("exposed_comm"),
                "exposed_comm_together_s": _exposed(rep, job.ranks),
            }
        )
    n_topo = pricer.fallback.n_links if hasattr(pricer, "fallback") else pricer.n_links
    links = contended_links(
        pricer.link_names(),
        n_topo,
        be,
        rep.iteration_s,
        [(name, be_k, rep_k.iteration_s) for name, be_k, rep_k in alone],
    )
    return {
        "model": MODEL,
        "jobs": rows,
        "shared_hosts": sorted(jm.shared_hosts()),
        "contended_links": links,
        "makespan_s": rep.iteration_s,
    }


def print_jobs(con: Console, doc: dict) -> None:
    """The per-job table (alone, together, slowdown) and the links the jobs contended on."""
    t = Table(title=f"jobs on one fabric ({doc['model']})", title_justify="left")
    for c in ("job", "ranks", "hosts", "start", "alone", "together", "slowdown"):
        t.add_column(c, justify="left" if c in ("job", "hosts") else "right")
    t.add_column("exposed comm alone / together", justify="right")
    for j in doc["jobs"]:
        t.add_row(
            *job_cells(j),
            *slowdown_cells(j),
            seconds_pair(j["exposed_comm_alone_s"], j["exposed_comm_together_s"]),
        )
    con.print(t)
    print_contended(con, doc)


def job_cells(j: dict) -> list[str]:
    """A job row's first cells: name, ranks, hosts, start."""
    return [j["name"], f"{j['ranks'][0]}-{j['ranks'][1]}", j["hosts"], format_seconds(j["start_s"])]


def slowdown_cells(j: dict, prefix: str = "") -> list[str]:
    """A job row's ``PREFIXalone_s``, ``PREFIXtogether_s`` and ``PREFIXslowdown`` cells."""
    return [
        format_seconds(j[f"{prefix}alone_s"]),
        format_seconds(j[f"{prefix}together_s"]),
        f"{j[f'{prefix}slowdown']:.2f}x",
    ]


def seconds_pair(a: float, b: float) -> str:
    """``a / b`` in seconds' units."""
    return f"{format_seconds(a)} / {format_seconds(b)}"


def print_contended(con: Console, doc: dict) -> None:
    """The hosts several jobs share and the links they contended on (``jobs_doc``)."""
    if doc["shared_hosts"]:
        con.print(f"hosts shared by several jobs: {doc['shared_hosts']}")
    if not doc["contended_links"]:
        con.print("no fabric link carried more than one job's bytes")
        return
    lt = Table(
        title="links the jobs contended on (carrying bytes of several jobs; saturated = at "
        "capacity, setting the pace)",
        title_justify="left",
    )
    for c in ("link", "bytes by job", "capacity", "saturated together", "alone (max)"):
        lt.add_column(c, justify="left" if c in ("link", "bytes by job") else "right")
    for x in doc["contended_links"]:
        lt.add_row(
            x["link"],
            ", ".join(f"{k} {format_bytes(v)}" for k, v in x["bytes_by_job"].items()),
            f"{x['capacity_Bps'] / 1e9:.2f} GB/s",
            f"{x['saturated_together_share']:.0%} of the makespan",
            f"{x['saturated_alone_share']:.0%}",
        )
    con.print(lt)

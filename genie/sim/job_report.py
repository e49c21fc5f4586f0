"""What several jobs on one fabric did to each other, from the replays: per job its iteration
alone and together and the slowdown, and which links carried more than one job's bytes (how long
each was saturated together and alone). Pure: the replays come from the caller (``genie.api``
simulates them; ``genie.live`` measures them on the wire).

Which job's bytes a link carried is read from the run together when the caller gives the
combined workload (``merged``): each job's transfers priced on the together run's routes, which
on a fabric that hashes flows need not be the routes the job takes alone (its ranks, hence its
flows, are numbered differently there); else from the replays alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from genie.sim.compiled import CompiledWorkload
from genie.sim.engine import RawResult
from genie.sim.jobs import JobMap, job_times
from genie.sim.network import AnalyticalBackend, Transfer
from genie.sim.program_pricer import ProgramPricer
from genie.sim.report import SimReport
from genie.sim.traffic import TopologyPricer

JsonDoc = dict[str, Any]  # a JSON document (seconds, bytes, bytes/s)
Alone = tuple[str, AnalyticalBackend, SimReport]

MODEL = "analytical model: fluid max-min sharing of every link among the transfers in flight"


def hosts_text(hosts: tuple[int, ...]) -> str:
    """``0-3`` / ``0,2,4`` for a job's distinct hosts in order."""
    uniq = sorted(set(hosts))
    runs: list[list[int]] = []
    for h in uniq:
        if runs and h == runs[-1][1] + 1:
            runs[-1][1] = h
        else:
            runs.append([h, h])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def job_link_bytes(
    jm: JobMap, merged: CompiledWorkload, pricer: TopologyPricer | ProgramPricer
) -> list[np.ndarray]:
    """Per job, the bytes its transfers put on each link of ``pricer`` (priced as the run
    together prices them: its routes)."""
    ins = merged.instances
    out = []
    for job in jm.jobs:
        nbytes = np.zeros(len(pricer.capacity()))
        for iid in job.instances:
            grp = int(ins.group[iid])
            ranks = merged.group_ranks[grp] if grp >= 0 else (int(ins.src[iid]), int(ins.dst[iid]))
            t = Transfer(iid, int(ins.comm_type[iid]), int(ins.size[iid]), tuple(ranks), grp)
            dem = pricer.price(t)
            np.add.at(nbytes, dem.links, dem.nbytes)
        out.append(nbytes)
    return out


def contended_links(
    names: list[str],
    n_topo: int,
    together: AnalyticalBackend,
    together_s: float,
    alone: Sequence[tuple[str, AnalyticalBackend, float]],
    top: int = 8,
    together_bytes: Sequence[np.ndarray] | None = None,
) -> list[JsonDoc]:
    """Fabric links that carried bytes of two or more jobs, most saturated together first;
    ``together_bytes``: per job (as ``alone``), its bytes per link in the run together (else
    its replay alone says)."""
    sat_together = together.link_saturated_s
    assert sat_together is not None, "the backends must track links"
    ranked: list[tuple[float, float, JsonDoc]] = []
    for lid in range(n_topo):
        per: dict[str, float] = {}
        sat_alone = 0.0
        for k, (name, be, t) in enumerate(alone):
            assert be.link_bytes is not None and be.link_saturated_s is not None
            carried = be.link_bytes if together_bytes is None else together_bytes[k]
            if carried[lid] > 0:
                per[name] = float(carried[lid])
            if t > 0:
                sat_alone = max(sat_alone, float(be.link_saturated_s[lid]) / t)
        if len(per) < 2:
            continue
        share = float(sat_together[lid]) / together_s if together_s > 0 else 0.0
        row: JsonDoc = {
            "link": names[lid],
            "bytes_by_job": per,
            "capacity_Bps": float(together.cap[lid]),
            "saturated_together_share": share,
            "saturated_alone_share": sat_alone,
        }
        ranked.append((-share, -sum(per.values()), row))
    ranked.sort(key=lambda x: (x[0], x[1]))
    return [row for _, _, row in ranked[:top]]


def _exposed(rep: SimReport, ranks: range) -> float:
    vals = [b.exposed_comm for b in rep.ranks if b.rank in ranks]
    return float(np.mean(vals)) if vals else 0.0


def jobs_doc(
    jm: JobMap,
    raw: RawResult,
    rep: SimReport,
    be: AnalyticalBackend,
    pricer: TopologyPricer | ProgramPricer,
    alone: Sequence[Alone],
    prefixes: Sequence[str],
    merged: CompiledWorkload | None = None,
) -> JsonDoc:
    """The jobs part of the ``--json`` document (seconds, bytes, bytes/s); ``merged``: the
    combined workload the run together replayed (then the links' bytes per job are the run
    together's)."""
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
                "hosts": hosts_text(job.hosts),
                "start_s": job.start_s,
                "alone_s": a,
                "together_s": t.iteration_s,
                "slowdown": t.iteration_s / a if a > 0 else float("nan"),
                "exposed_comm_alone_s": rep_k.mean("exposed_comm"),
                "exposed_comm_together_s": _exposed(rep, job.ranks),
            }
        )
    n_topo = pricer.fallback.n_links if isinstance(pricer, ProgramPricer) else pricer.n_links
    links = contended_links(
        pricer.link_names(),
        n_topo,
        be,
        rep.iteration_s,
        [(name, be_k, rep_k.iteration_s) for name, be_k, rep_k in alone],
        together_bytes=None if merged is None else job_link_bytes(jm, merged, pricer),
    )
    return {
        "model": MODEL,
        "jobs": rows,
        "shared_hosts": sorted(jm.shared_hosts()),
        "contended_links": links,
        "makespan_s": rep.iteration_s,
    }

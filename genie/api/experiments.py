"""What simulate and emulate share for experiments: stragglers and jitter, and several jobs.

* ``perturbation``: a ``Perturb`` spec as the simulator's ``Perturbation`` (``genie.sim.perturb``);
* ``job_names`` / ``job_layout``: several workloads on one fabric, each with its hosts and start
  (``genie.placement``, ``genie.sim.jobs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from genie.api.specs import Job, Perturb, seconds
from genie.errors import UsageError
from genie.placement import job_blocks, parse_hosts, place_on
from genie.sim import perturb


def perturbation(spec: Perturb) -> perturb.Perturbation:
    """The perturbation ``spec`` asks for (empty when none)."""
    return perturb.combine(spec.file, list(spec.stragglers) or None, spec.jitter, spec.seed)


def job_names(jobs: Sequence[Job]) -> list[str]:
    """One name per job: the given one, else the workload's file name (made unique)."""
    given = [j.name for j in jobs if j.name]
    if len(set(given)) != len(given):
        raise UsageError(f"job names must differ: {given}")
    out: list[str] = []
    for i, job in enumerate(jobs):
        name = job.name or Path(job.workload.rstrip("/")).name or f"job{i}"
        if "/" in name or not name:
            raise UsageError(f"job name {name!r}: no '/' and not empty")
        base, k = name, 2
        while name in out:
            name, k = f"{base}#{k}", k + 1
        out.append(name)
    return out


def job_layout(
    jobs: Sequence[Job], sizes: Sequence[int], ranks_per_host: int
) -> tuple[list[tuple[int, ...]], list[float]]:
    """Per job, the host of each rank and its start offset in seconds.

    A job without hosts takes the next free block of hosts, ``ranks_per_host`` to a host.
    """
    default = job_blocks(sizes, ranks_per_host)
    named = [parse_hosts(j.hosts) if j.hosts else None for j in jobs]
    taken = {h for hosts in named if hosts for h in hosts}
    nxt = max(taken, default=-1) + 1
    layout = []
    for i, size in enumerate(sizes):
        hosts = named[i]
        if hosts is not None:
            layout.append(place_on(size, hosts).hosts)
            continue
        block = tuple(range(nxt, nxt + len(default[i])))
        nxt += len(default[i])
        layout.append(place_on(size, block, ranks_per_host).hosts)
    return layout, [seconds(j.start) for j in jobs]

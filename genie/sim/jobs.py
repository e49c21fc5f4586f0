"""Several jobs on one fabric, planned purely: one combined workload and who owns what in it.

``merge_jobs`` gives job k's rank r the global rank ``base_k + r`` (jobs in order), renames its
process groups ``JOB/GROUP`` (so two jobs' "world" groups stay two groups), shifts its
send/recv peers by ``base_k``, and, when the job starts ``start_s`` late, puts one MEMORY node of
that duration (it holds no lane) at the head of each of its ranks, which every node without
dependencies waits for. The result is an ordinary ``CompiledWorkload``: the engine replays it
like any other, and the jobs' transfers share the links the pricer gives them as any transfers
in flight together do. The ``JobMap`` beside it says which global ranks, groups, communication
instances and hosts belong to which job; ``job_times`` reads each job's iteration out of a
replay of the combined workload (from its own start to its last rank's end).

Placement: each job lists the fabric hosts its ranks go to; ranks fill them in order, ``k`` to a
host (``genie.placement.place_on``). Jobs may share hosts (then they share the hosts' NIC links
and intra-host ports) or use disjoint sets. Nothing here knows about a network: the live path
can compile the same combined workload into op lists and start every job's ranks with one Go.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from genie.errors import UsageError
from genie.sim.compiled import CompiledRank, CompiledWorkload, Kind, finish
from genie.sim.engine import RawResult

START_NODE = "job start offset"


@dataclass(frozen=True)
class JobSpec:
    """One job to place: its compiled workload, the hosts it runs on, when it starts."""

    name: str
    workload: CompiledWorkload
    hosts: tuple[int, ...]  # host index of each of its ranks (``genie.placement``)
    start_s: float = 0.0


@dataclass
class Job:
    """Where one job sits in the combined workload."""

    name: str
    ranks: range  # its global ranks
    hosts: tuple[int, ...]  # host index of each of its ranks
    start_s: float
    groups: list[int] = field(default_factory=list)  # its group ids in the combined workload
    instances: list[int] = field(default_factory=list)  # its communication instance ids

    def host_set(self) -> set[int]:
        """The hosts the job uses."""
        return set(self.hosts)


@dataclass
class JobMap:
    """Who owns what in a combined workload (see the module docstring)."""

    jobs: list[Job]
    placement: list[int]  # host index of every global rank

    def job_of_rank(self, rank: int) -> Job:
        """The job that global rank ``rank`` belongs to."""
        for j in self.jobs:
            if rank in j.ranks:
                return j
        raise IndexError(f"rank {rank} belongs to no job")

    def shared_hosts(self) -> set[int]:
        """Hosts used by more than one job."""
        seen: dict[int, int] = {}
        for j in self.jobs:
            for h in j.host_set():
                seen[h] = seen.get(h, 0) + 1
        return {h for h, c in seen.items() if c > 1}


def _offset_rank(cr: CompiledRank, base: int, gbase: int, start_s: float) -> CompiledRank:
    """A copy of ``cr`` with groups and peers shifted and, if late, a head delay node."""
    group = np.where(cr.group >= 0, cr.group + gbase, -1).astype(np.int32)
    peer = np.where(cr.peer >= 0, cr.peer + base, -1).astype(np.int32)
    if start_s <= 0:
        return dataclasses.replace(cr, group=group, peer=peer, splits=dict(cr.splits))
    n = cr.n_nodes
    counts = np.diff(cr.dep_ptr)
    roots = counts == 0
    new_counts = np.concatenate([[0], counts + roots])
    ptr = np.zeros(n + 2, np.int64)
    np.cumsum(new_counts, out=ptr[1:])
    # each old node v is node v + 1; its deps move by one, roots get the head node (0)
    idx = np.zeros(int(ptr[-1]), np.int64)
    owner = np.repeat(np.arange(n), counts)
    at = ptr[owner + 1] + (np.arange(len(cr.dep_idx)) - cr.dep_ptr[owner])
    idx[at] = cr.dep_idx + 1
    names = None if cr.names is None else [START_NODE, *cr.names]

    def head(arr: np.ndarray, value) -> np.ndarray:
        return np.concatenate([np.asarray([value], arr.dtype), arr])

    return CompiledRank(
        kind=head(cr.kind, Kind.MEMORY),
        duration=head(cr.duration, float(start_s)),
        dep_ptr=ptr,
        dep_idx=idx,
        comm_type=head(cr.comm_type, -2),
        comm_size=head(cr.comm_size, 0),
        group=head(group, -1),
        peer=head(peer, -1),
        tag=head(cr.tag, 0),
        node_ids=head(cr.node_ids, -1),
        names=names,
        lane=head(cr.lane, -1),
        lane_names=list(cr.lane_names),
        splits={i + 1: s for i, s in cr.splits.items()},
    )


def merge_jobs(jobs: Sequence[JobSpec], name: str | None = None) -> tuple[CompiledWorkload, JobMap]:
    """One combined workload of ``jobs`` and the map of who owns what (see the docstring)."""
    if not jobs:
        raise UsageError("no job to run")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise UsageError(f"job names must differ: {names}")
    ranks: list[CompiledRank] = []
    group_names: list[str] = []
    group_ranks: list[tuple[int, ...]] = []
    out_jobs: list[Job] = []
    placement: list[int] = []
    for spec in jobs:
        cw = spec.workload
        if len(spec.hosts) != cw.n_ranks:
            raise UsageError(
                f"job {spec.name}: {len(spec.hosts)} host slots for {cw.n_ranks} ranks"
            )
        if not (math.isfinite(spec.start_s) and spec.start_s >= 0):
            raise UsageError(f"job {spec.name}: start {spec.start_s} s must be >= 0")
        base, gbase = len(ranks), len(group_names)
        for cr in cw.ranks:
            ranks.append(_offset_rank(cr, base, gbase, spec.start_s))
        group_names.extend(f"{spec.name}/{g}" for g in cw.group_names)
        group_ranks.extend(tuple(r + base for r in g) for g in cw.group_ranks)
        placement.extend(int(h) for h in spec.hosts)
        out_jobs.append(
            Job(
                spec.name,
                range(base, base + cw.n_ranks),
                tuple(spec.hosts),
                float(spec.start_s),
                list(range(gbase, gbase + len(cw.group_names))),
            )
        )
    merged = finish(ranks, group_names, group_ranks, name or " + ".join(names))
    owner = np.empty(len(ranks), np.int64)
    for k, j in enumerate(out_jobs):
        owner[j.ranks.start : j.ranks.stop] = k
    for iid, mem in enumerate(merged.instances.members):
        if mem:
            out_jobs[int(owner[mem[0][0]])].instances.append(iid)
    return merged, JobMap(out_jobs, placement)


@dataclass
class JobTime:
    """One job's iteration in a replay of the combined workload (seconds)."""

    name: str
    iteration_s: float  # from the job's start to its last rank's end
    end_s: float  # its last rank's end, from the common start


def job_times(jm: JobMap, raw: RawResult) -> list[JobTime]:
    """Each job's iteration out of a replay of the combined workload (a rank not replayed has
    its orbit representative's times: ``genie.sim.orbits``)."""
    pos = {r: k for k, r in enumerate(raw.sim_ranks)}
    if raw.rank_rep is not None:
        pos = {r: int(k) for r, k in enumerate(raw.rank_rep.tolist())}
    out = []
    for j in jm.jobs:
        ends = [
            float(raw.end[raw.rank_slice(pos[r])].max())
            for r in j.ranks
            if r in pos and raw.rank_slice(pos[r]).stop > raw.rank_slice(pos[r]).start
        ]
        end = max(ends, default=j.start_s)
        out.append(JobTime(j.name, end - j.start_s, end))
    return out

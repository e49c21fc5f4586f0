"""PyTorch execution traces to a genie workload in one step (``genie workload import pytorch``).

What Chakra's ``chakra_trace_link`` and ``chakra_converter`` do in two tools, read straight from
PyTorch's files (``genie.workload.pytorch_trace``), per rank:

* every recorded operator (not the thread/process labels) is a CPU node (``is_cpu_op``) of its
  thread: it depends on the operator its thread called before it (the host runs one operator at
  a time per thread) and takes its own time (Kineto's duration less its callees'; backend
  markers ``nccl:*``, ``gloo:*`` take none). PyTorch's ``## process_group:init ##`` record is the
  METADATA node that names the process groups;
* with a Kineto trace, every GPU event is a GPU node that depends on the operator that launched
  it (the Kineto ``External id``, else the operator enclosing its CUDA runtime call), on its
  ``stream``, with its measured duration. An NCCL kernel is the collective (COMM_COLL, or
  COMM_SEND / COMM_RECV for ``SendRecv`` kernels of ``send``/``recv``) with ``comm_type``,
  ``comm_size`` and ``pg_name``;
* without GPU events (no Kineto trace, or a run without a GPU), each collective operator gets a
  GPU collective node, and each leaf ``aten::`` operator that runs a kernel a GPU compute node
  with its shapes (``gemm_m/n/k`` for matrix products, ``num_ops``/``tensor_size`` otherwise),
  priced by the roofline of ``device`` (what ``genie calibrate compute`` reprices). Their
  streams are left to genie's inference (``genie.workload.stream_rules``).

Collectives: the type from ``record_param_comms``'s collective name, the kernel's ``Collective
name`` or the ``c10d::`` / ``_c10d_functional::`` operator; ``comm_size`` is the bytes of the
collective's input as ASTRA-sim reads it (the whole buffer for all-reduce, reduce-scatter and
all-to-all, the rank's shard for all-gather); the group from ``record_param_comms``'s process
group, the kernel's ``Process Group Name`` or the functional operator's group name; else the
group whose size matches an all-gather's output list (when exactly one does), else the default
group, counted in a note.

This module imports the whole job: trace files matched to ranks, one rank replicated or
all of them checked against each other. One rank's graph is built in
``genie.workload.pytorch_nodes``, its collectives and process groups decoded in
``genie.workload.pytorch_collectives``, its call tree and CPU times read in
``genie.workload.pytorch_calls``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from genie.errors import WorkloadError
from genie.workload.process_groups import WORLD_PG_NAME
from genie.workload.pytorch_collectives import world_of
from genie.workload.pytorch_nodes import build_rank
from genie.workload.pytorch_trace import HostTrace, KinetoTrace


def check_ranks(found: dict[int, Any], what: str) -> int:
    """The number of ranks of a set of per-rank inputs, or an error naming the gaps."""
    n = max(found) + 1
    missing = [r for r in range(n) if r not in found]
    if missing:
        raise WorkloadError(f"{what}: no trace for rank(s) {missing[:16]} (found {sorted(found)})")
    return n


_RANK_IN_NAME = re.compile(r"(?:^|[._-])(?:rank)?[_-]?(\d{1,6})\.json(?:\.gz)?$", re.IGNORECASE)


@dataclass
class Imported:
    """A whole imported job: the workload, the rank it was replicated from, and notes."""

    workload: Any  # genie.workload.model.Workload
    notes: list[str]
    replicated_from: int | None = None
    shape_priced: bool = False  # GPU nodes known only by their shapes: they need a roofline


def rank_of(path: str, kineto: KinetoTrace | None = None) -> int | None:
    """The rank a trace file is of: Kineto's distributedInfo, else a number in its name."""
    if kineto is not None and kineto.rank is not None:
        return kineto.rank
    m = _RANK_IN_NAME.search(path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def import_pytorch(
    hosts: list[str],
    kinetos: list[str] | None = None,
    ranks: int | None = None,
    name: str = "pytorch",
) -> Imported:
    """Read host traces (one per rank) and Kineto traces (matched by rank) into a workload.

    One host trace of a job of N ranks (its process groups say N) is replicated to N ranks, or
    to ``ranks``; several must be ranks 0..N-1. GPU nodes known only by their shapes keep no
    duration here (``shape_priced``): ``genie.api.workload.import_pytorch`` prices them by a
    roofline (the workload layer does not depend on calibration).
    """
    from genie.workload.model import Workload
    from genie.workload.pytorch_trace import read_host_et, read_kineto
    from genie.workload.transform import replicate

    kin = [read_kineto(k) for k in kinetos or []]
    host_traces = [read_host_et(h) for h in hosts]
    notes: list[str] = []
    for h in host_traces:
        notes += h.problems
    for k in kin:
        notes += k.problems
    by_rank: dict[int, HostTrace] = {}
    for i, h in enumerate(host_traces):
        r = rank_of(h.path)
        if r is None:
            r = i if len(host_traces) > 1 else 0
        if r in by_rank:
            raise WorkloadError(f"{h.path}: rank {r} given twice (also {by_rank[r].path})")
        by_rank[r] = h
    kin_by_rank: dict[int, KinetoTrace] = {}
    if len(host_traces) == 1 and len(kin) == 1:  # one rank's pair: Kineto knows its rank
        r = rank_of(kin[0].path, kin[0])
        by_rank = {r if r is not None else next(iter(by_rank)): host_traces[0]}
    for i, kt in enumerate(kin):
        if len(kin) == 1 and len(by_rank) == 1:
            kin_by_rank[next(iter(by_rank))] = kt
            continue
        r = rank_of(kt.path, kt)
        if r is None:
            r = sorted(by_rank)[i] if i < len(by_rank) else i
        kin_by_rank[r] = kt
    if len(by_rank) == 1:
        ((r, h),) = by_rank.items()
        world = world_of(h)
        if world is not None and r >= world:
            notes.append(f"{h.path}: the number in its name ({r}) is no rank of a job of {world}")
            by_rank = {0: h}
            kin_by_rank = {0: kin_by_rank[r]} if r in kin_by_rank else {}
    extra = sorted(set(kin_by_rank) - set(by_rank))
    if extra:
        raise WorkloadError(f"Kineto trace(s) for rank(s) {extra} have no host trace")
    ids = [max((op.id for h in host_traces for op in h.ops), default=0)]
    built = [build_rank(by_rank[r], kin_by_rank.get(r), r, ids) for r in sorted(by_rank)]
    for b in built:
        notes += [f"rank {b.graph.rank}: {n}" for n in b.notes]
    groups: dict[str, tuple[int, ...]] = {}
    desc: dict[str, str] = {}
    for b in built:
        for g, v in b.groups.items():
            if g in groups and groups[g] != v:
                raise WorkloadError(
                    f"process group {g!r} is {list(v)} in rank {b.graph.rank}'s trace but "
                    f"{list(groups[g])} in another's"
                )
            groups[g] = v
        desc.update(b.desc)
    world = max((b.world_size or 0 for b in built), default=0)
    replicated_from = None
    if len(built) == 1 and (ranks or world) and (ranks or world) != 1:
        n = ranks or world
        src = built[0]
        wl = replicate(src.graph, src.graph.rank, groups, n, name)
        replicated_from = src.graph.rank
        for rg in wl.ranks:
            rg.source = src.graph.source
    else:
        n = check_ranks({b.graph.rank: b for b in built}, "host traces")
        if world and n != world:
            raise WorkloadError(
                f"host traces of ranks 0..{n - 1} of a job of {world} ranks (its process "
                f"groups say): give all {world}, or one to replicate"
            )
        if ranks is not None and ranks != n:
            raise WorkloadError(f"--ranks {ranks} given with host traces of {n} ranks")
        full = {k: (v if v else tuple(range(n))) for k, v in groups.items()}
        wl = Workload(ranks=[b.graph for b in built], groups=full, name=name)
        wl.groups.setdefault(WORLD_PG_NAME, tuple(range(n)))
    wl.group_desc = {k: v for k, v in desc.items() if k in wl.groups}
    shapes = any(b.gpu_source == "shapes" for b in built)
    if shapes:
        without = "no Kineto trace" if not kin else "no GPU events in the Kineto trace"
        notes.append(f"GPU kernels known by their shapes only ({without})")
    else:
        notes.append("GPU kernel durations and streams from the Kineto trace")
    return Imported(wl, notes, replicated_from, shapes)

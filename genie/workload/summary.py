"""What ``genie workload inspect`` reports, as plain data (rendering lives in the CLI)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from genie.workload.astra import astra_problems
from genie.workload.graph import check_collective_sequences, compute_time, critical_path
from genie.workload.model import CollectiveType, NodeKind, NodeType, Workload
from genie.workload.stream_rules import summarize_edges

MIB = 2**20


def _coll_name(t: int | None) -> str:
    try:
        if t is not None:
            return CollectiveType(t).name
    except (ValueError, TypeError):
        pass
    return f"comm_type {t}"


def reading_notes(dropped: dict[str, int], host_nodes: int) -> list[str]:
    """Lines saying how a trace was read: dependencies dropped, host work (empty when neither)."""
    from genie.workload.validate import DROP_REASONS

    out = []
    parts = [f"{v} {k.split('_deps')[0]}_deps {DROP_REASONS[k]}" for k, v in dropped.items() if v]
    if parts:
        out.append("dependencies dropped, not scheduled on: " + ", ".join(parts))
    if host_nodes:
        out.append(
            f"host work: {host_nodes} host-side communication launchers (is_cpu_op, no "
            "comm_type/peer) count as CPU time, not as network operations"
        )
    return out


def summarize(wl: Workload) -> dict[str, Any]:
    """Counts, collectives by type and size, compute and critical-path times, problems."""
    kinds: Counter[str] = Counter()
    colls: Counter[tuple[str, int, str]] = Counter()
    p2p_bytes = 0
    per_rank = []
    for rg in wl.ranks:
        rk = Counter(n.kind.value for n in rg.nodes)
        kinds.update(rk)
        for n in rg.nodes:
            if n.type == NodeType.COMM_COLL_NODE and n.kind is NodeKind.COLLECTIVE:
                colls[(_coll_name(n.comm_type), int(n.comm_size or 0), n.pg_name)] += 1
            elif n.kind is NodeKind.SEND:
                p2p_bytes += int(n.comm_size or 0)
        cp, _chain = critical_path(rg)
        per_rank.append(
            {
                "rank": rg.rank,
                "nodes": len(rg.nodes),
                "compute_s": compute_time(rg),
                "critical_path_s": cp,
            }
        )
    problems = list(wl.problems)
    for p in check_collective_sequences(wl):
        if p not in problems:
            problems.append(p)
    collectives = [
        {
            "type": t,
            "comm_size_bytes": size,
            "comm_size_MiB": size / MIB,
            "pg_name": pg,
            "nodes": count,
        }
        for (t, size, pg), count in sorted(colls.items(), key=lambda kv: (kv[0][0], kv[0][1]))
    ]
    return {
        "name": wl.name,
        "ranks": wl.n_ranks,
        "nodes": sum(r["nodes"] for r in per_rank),
        "nodes_by_kind": {k.value: kinds.get(k.value, 0) for k in NodeKind},
        "collectives": collectives,
        "collective_bytes": sum(size * count for (_t, size, _pg), count in colls.items()),
        "send_bytes": p2p_bytes,
        "compute_s_total": sum(r["compute_s"] for r in per_rank),
        "compute_s_max_rank": max((r["compute_s"] for r in per_rank), default=0.0),
        "critical_path_s": max((r["critical_path_s"] for r in per_rank), default=0.0),
        "critical_path_note": "longest data_deps chain of node durations; communication "
        "nodes count as 0 s (no network model)",
        "groups": {(k or "<default>"): list(v) for k, v in wl.groups.items()},
        "group_desc": dict(wl.group_desc),
        "astra_sim": astra_problems(wl),
        "dropped": dict(wl.dropped),
        "stream_rules": summarize_edges(wl.ranks),
        "per_rank": per_rank,
        "problems": problems,
    }

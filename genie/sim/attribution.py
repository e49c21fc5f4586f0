"""Where the time goes: exposed communication by parallelism dimension and collective, and links.

A rank's *exposed* communication is the time a transfer of its is in flight while its compute
is idle (``genie.sim.report``). ``exposed_by`` splits that time among the communication nodes in
flight: each stretch not covered by compute is shared equally by the nodes in flight during it,
so the parts add up to the exposed communication exactly. Each node then counts towards its
collective type and its group's parallelism dimension (``dimension_of``): TP, PP, DP, EP or
other, from the group's name (``tp``/``tensor``, ``pp``/``pipe``/``stage``, ``dp``/``data``/
``fsdp``/``zero``, ``ep``/``expert``/``moe``; a readable name kept beside an integer pg_name
counts), else from what it does (point-to-point sends are pipeline traffic, all-to-all is expert
traffic) and its shape (the whole job: DP; consecutive ranks: TP; a regular stride: DP).

``busiest_links`` reads what a backend that tracks links recorded (its ``link_usage()``: an
``AnalyticalBackend`` with ``track_links``): each link's bytes and utilisation over the
iteration, and the share of the iteration it was saturated (its load at its capacity: the link
that set the pace of what crossed it).
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict

import numpy as np

from genie.sim.compiled import COMM_KINDS, CompiledWorkload
from genie.sim.engine import RawResult
from genie.sim.network import NetworkBackend
from genie.vocabulary import P2P, chakra_name

DIMENSIONS = ("TP", "PP", "DP", "EP", "other")
_TOKENS = {
    "TP": ("tp", "tensor", "tensorparallel"),
    "PP": ("pp", "pipe", "pipeline", "stage"),
    "DP": ("dp", "data", "ddp", "fsdp", "zero", "dataparallel"),
    "EP": ("ep", "expert", "experts", "moe"),
}


def dimension_of(group: str, ranks: tuple[int, ...], collective: str, n_ranks: int) -> str:
    """The parallelism dimension a group's traffic serves (see the module docstring)."""
    words = [w for w in re.split(r"[^a-z]+", group.lower()) if w]
    for dim, tokens in _TOKENS.items():
        if any(w in tokens for w in words):
            return dim
    if collective == "send_recv":
        return "PP"
    if collective == "all_to_all":
        return "EP"
    if len(ranks) == n_ranks and n_ranks > 1:
        return "DP"
    if len(ranks) > 1:
        steps = set(np.diff(sorted(ranks)).tolist())
        if steps == {1}:
            return "TP"
        if len(steps) == 1:
            return "DP"
    return "other"


def _covered(merged_s: list[float], merged_e: list[float], cum: list[float], t: float) -> float:
    """Length of the compute union before ``t``."""
    i = bisect.bisect_right(merged_s, t)
    if i == 0:
        return 0.0
    before = cum[i - 2] if i >= 2 else 0.0  # whole intervals before the one t falls in or after
    return before + min(t, merged_e[i - 1]) - merged_s[i - 1]


def exposed_by(
    comp_s: np.ndarray, comp_e: np.ndarray, comm_s: np.ndarray, comm_e: np.ndarray, keys: list
) -> dict:
    """Seconds of exposed communication per key (one key per comm node; see the docstring)."""
    merged_s: list[float] = []
    merged_e: list[float] = []
    for s, e in sorted(zip(comp_s.tolist(), comp_e.tolist(), strict=True)):
        if e <= s:
            continue
        if merged_s and s <= merged_e[-1]:
            merged_e[-1] = max(merged_e[-1], e)
        else:
            merged_s.append(s)
            merged_e.append(e)
    cum = list(np.cumsum(np.subtract(merged_e, merged_s))) if merged_s else []
    events = []
    for j, (s, e) in enumerate(zip(comm_s.tolist(), comm_e.tolist(), strict=True)):
        if e > s:
            events.append((s, 1, j))
            events.append((e, -1, j))
    events.sort()
    out: dict = defaultdict(float)
    active: set[int] = set()
    prev = None
    for t, what, j in events:
        if prev is not None and active and t > prev:
            free = (t - prev) - (
                _covered(merged_s, merged_e, cum, t) - _covered(merged_s, merged_e, cum, prev)
            )
            if free > 0:
                share = free / len(active)
                for a in active:
                    out[keys[a]] += share
        if what > 0:
            active.add(j)
        else:
            active.discard(j)
        prev = t
    return dict(out)


def rank_exposure(cw: CompiledWorkload, raw: RawResult, k: int, dims: dict) -> dict:
    """Exposed seconds of simulated rank ``k`` per (dimension, collective)."""
    r = raw.sim_ranks[k]
    cr = cw.ranks[r]
    sl = raw.rank_slice(k)
    st, en = raw.start[sl], raw.end[sl]
    comp = cr.kind == 0  # Kind.COMPUTE
    comm = np.flatnonzero(np.isin(cr.kind, COMM_KINDS) & (cr.instance >= 0))
    keys = []
    for i in comm.tolist():
        iid = int(cr.instance[i])
        keys.append(dims[iid])
    return exposed_by(st[comp], en[comp], st[comm], en[comm], keys)


def instance_keys(cw: CompiledWorkload) -> dict[int, tuple[str, str]]:
    """(dimension, collective name) of every communication instance."""
    ins = cw.instances
    out = {}
    seen: dict[tuple[int, int], tuple[str, str]] = {}  # (type, group) -> key: groups repeat
    for iid, (ctype, g) in enumerate(zip(ins.comm_type.tolist(), ins.group.tolist(), strict=True)):
        key = seen.get((ctype, g))
        if key is None:
            if g < 0 or ctype == P2P:
                key = ("PP", "send_recv")
            else:
                name = chakra_name(ctype)
                key = (dimension_of(cw.group_names[g], cw.group_ranks[g], name, cw.n_ranks), name)
            seen[(ctype, g)] = key
        out[iid] = key
    return out


def busiest_links(backend: NetworkBackend, makespan: float, top: int = 8) -> list[dict]:
    """The links that were saturated longest (then most used), from a tracking backend."""
    if makespan <= 0:
        return []
    usage = backend.link_usage()
    if usage is None:
        return []
    cap = usage.capacity
    names = usage.names
    util = usage.nbytes / (cap * makespan)
    sat = usage.saturated_s / makespan
    order = np.lexsort((-util, -sat))
    out = []
    for lid in order[:top].tolist():
        if usage.nbytes[lid] <= 0:
            break
        out.append(
            {
                "link": names[lid] if names else f"link {lid}",
                "bytes": float(usage.nbytes[lid]),
                "capacity_Bps": float(cap[lid]),
                "utilisation": float(util[lid]),
                "bottleneck_share": float(sat[lid]),
            }
        )
    return out

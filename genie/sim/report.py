"""Reports of a replay: iteration time, per-rank breakdown, per-collective table, trace, JSON.

Per rank the iteration splits into four parts that add up to the iteration time:
``compute`` (a compute lane busy: CPU, GPU compute or a stream, ``genie.sim.lanes``),
``exposed_comm`` (a transfer of this rank in flight while no compute runs), ``wait`` (a
communication node ready but not started: its peers had not arrived, or it was queued for its
lane, with nothing else running) and ``idle`` (the rest, including the tail after the rank
finished).
Bandwidths follow nccl-tests and are in GB/s = 10^9 B/s: algbw = S / t, busbw = algbw x factor,
with S the whole buffer (n x comm_size for all-gather, whose comm_size is the per-rank shard).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields
from operator import attrgetter
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import msgspec
import numpy as np

from genie.sim.compiled import COMM_KINDS, CompiledWorkload, Kind
from genie.sim.engine import RawResult
from genie.sim.lanes import GPU as GPU_LANE
from genie.sim.uneven import skew
from genie.vocabulary import P2P, bus_factor, chakra_name


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by the union of intervals [starts, ends)."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    prev = np.concatenate([[-np.inf], reach[:-1]])
    return float(np.sum(np.maximum(0.0, e - np.maximum(s, prev))))


@dataclass
class RankBreakdown:
    """Where one rank's iteration time went (seconds)."""

    rank: int
    compute: float
    exposed_comm: float
    wait: float
    idle: float
    comm_total: float
    finish: float


@dataclass
class CollectiveRow:
    """One communication instance: when it ran and at what bandwidth."""

    collective: str
    group: str
    seq: int
    ranks: int
    size: int  # comm_size as in the trace, bytes
    first_arrival: float
    start: float  # when the last member arrived
    end: float
    time: float
    algbw_gbps: float  # GB/s = 1e9 B/s
    busbw_gbps: float
    standalone: float | None = None  # time alone on the network, when the backend knows it
    last_rank: int = -1  # the rank that arrived last (whose arrival started the instance)
    uneven: float | None = None  # all-to-all-v: largest per-peer block / mean (genie.sim.uneven)


@dataclass
class SimReport:
    """Everything one replay found, ready for text, JSON or trace output."""

    workload: str
    backend: str
    n_ranks: int
    iteration_s: float
    ranks: list[RankBreakdown]
    collectives: list[CollectiveRow]
    nodes: int
    nodes_replayed: int
    events: int
    wall_s: float
    symmetric: bool
    notes: list[str] = field(default_factory=list)
    # where the exposed communication went (per-rank mean seconds, adding up to exposed_comm)
    exposed_by_dimension: dict[str, float] = field(default_factory=dict)
    exposed_by_collective: dict[str, float] = field(default_factory=dict)
    links: list[dict] = field(default_factory=list)  # busiest links (attribution.busiest_links)
    # with stragglers or jitter: the cost against the unperturbed workload, who waited on whom
    stragglers: dict = field(default_factory=dict)

    def to_dict(self, row_extra: tuple[str, list] | None = None) -> dict:
        """Plain dict for ``--json`` (units: seconds, bytes, GB/s = 1e9 B/s).

        ``row_extra``: a key and one value per collective row, set on each row's dict (as
        ``genie.sim.closed.with_closed`` sets the closed forms), in the same pass.
        """
        # what dataclasses.asdict gives, without its deep copy of every row's scalars (a third
        # of a 4,096-rank simulate's report time went there)
        d: dict = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "ranks":
                d[f.name] = _row_dicts(RankBreakdown, value)
            elif f.name == "collectives":
                d[f.name] = _row_dicts(CollectiveRow, value, row_extra)
            else:
                d[f.name] = copy.deepcopy(value)
        d["units"] = {"time": "s", "size": "bytes", "bandwidth": "GB/s = 1e9 bytes/s"}
        return d

    def mean(self, attr: str) -> float:
        """Mean of one breakdown field over ranks."""
        return float(np.mean([getattr(r, attr) for r in self.ranks])) if self.ranks else 0.0


_GETTERS: dict[type, tuple[tuple[str, ...], attrgetter]] = {}


def _getter(cls: type) -> tuple[tuple[str, ...], attrgetter]:
    """``cls``'s field names in order and a getter of their values."""
    got = _GETTERS.get(cls)
    if got is None:
        names = tuple(f.name for f in fields(cls))
        got = _GETTERS[cls] = (names, attrgetter(*names))
    return got


def _row_dict(cls: type, row: object) -> dict:
    """A row dataclass of scalars as a dict, fields in order (``asdict`` for flat rows)."""
    names, get = _getter(cls)
    return dict(zip(names, get(row), strict=True))


def _row_dicts(cls: type, rows: list, extra: tuple[str, list] | None = None) -> list[dict]:
    """``_row_dict`` of every row: a copy of the row's ``__dict__`` where that holds exactly
    the fields in order (as ``__init__`` leaves it), else field by field; with ``extra``
    (a key and one value per row) set on each."""
    names = list(_getter(cls)[0])  # [*d] == names: the cheapest check of the keys' order
    out: list[dict] = []
    append = out.append
    if extra is None:
        for row in rows:
            d = getattr(row, "__dict__", None)
            append(d.copy() if d is not None and [*d] == names else _row_dict(cls, row))
        return out
    key, values = extra
    for row, value in zip(rows, values, strict=True):
        d = getattr(row, "__dict__", None)
        d = d.copy() if d is not None and [*d] == names else _row_dict(cls, row)
        d[key] = value
        append(d)
    return out


def _breakdown(cw: CompiledWorkload, raw: RawResult, k: int, makespan: float) -> RankBreakdown:
    r = raw.sim_ranks[k]
    sl = raw.rank_slice(k)
    kind = cw.ranks[r].kind
    st, en, rd = raw.start[sl], raw.end[sl], raw.ready[sl]
    comp = kind == Kind.COMPUTE
    comm = np.isin(kind, COMM_KINDS)
    p_s, p_e = st[comp], en[comp]
    c_s, c_e = st[comm], en[comm]
    w_s, w_e = rd[comm], st[comm]
    compute = union_length(p_s, p_e)
    pc = union_length(np.concatenate([p_s, c_s]), np.concatenate([p_e, c_e]))
    pcw = union_length(np.concatenate([p_s, c_s, w_s]), np.concatenate([p_e, c_e, w_e]))
    finish = float(en.max()) if len(en) else 0.0
    return RankBreakdown(
        rank=r,
        compute=compute,
        exposed_comm=max(0.0, pc - compute),  # unions of supersets: never below, but for
        wait=max(0.0, pcw - pc),  # rounding, which would print as a negative zero
        idle=max(0.0, makespan - pcw),
        comm_total=union_length(c_s, c_e),
        finish=finish,
    )


def build_report(
    cw: CompiledWorkload, raw: RawResult, standalone: dict[int, float] | None = None
) -> SimReport:
    """Turn a RawResult into a SimReport; ranks not replayed copy their representative."""
    makespan = raw.makespan
    simulated = {r: _breakdown(cw, raw, k, makespan) for k, r in enumerate(raw.sim_ranks)}
    symmetric = len(raw.sim_ranks) < cw.n_ranks
    rep = simulated[raw.sim_ranks[0]] if raw.sim_ranks else None
    ranks = []
    get = attrgetter(*(f.name for f in fields(RankBreakdown)[1:]))
    for r in range(cw.n_ranks):
        b = simulated.get(r)
        if b is None and raw.rank_rep is not None:  # an orbit replay: its orbit's representative
            b = RankBreakdown(r, *get(simulated[raw.sim_ranks[int(raw.rank_rep[r])]]))
        elif b is None and rep is not None:
            b = RankBreakdown(r, *get(rep))
        if b is not None:
            ranks.append(b)
    rows = collective_rows(cw, raw, standalone, symmetric)
    by_dim, by_coll = _exposure(cw, raw)
    notes = list(raw.notes)
    if symmetric:
        notes.append(
            f"symmetric ranks: replayed {len(raw.sim_ranks)} representative rank(s) for "
            f"{cw.n_ranks}; the others are proven identical (genie.sim.symmetry)"
        )
    return SimReport(
        workload=cw.name,
        backend=raw.backend,
        n_ranks=cw.n_ranks,
        iteration_s=makespan,
        ranks=ranks,
        collectives=rows,
        nodes=cw.n_nodes,
        nodes_replayed=len(raw.start),
        events=raw.events,
        wall_s=raw.wall_s,
        symmetric=symmetric,
        notes=notes,
        exposed_by_dimension=by_dim,
        exposed_by_collective=by_coll,
    )


def _unique_small(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of integers in a narrow range, by counting
    (no sort): the distinct values in order and each value's index among them."""
    if not len(values):
        found, inverse = np.unique(values, return_inverse=True)
        return found, inverse.reshape(-1)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 4 * len(values) + 1024:  # a wide range: counting would cost more
        found, inverse = np.unique(values, return_inverse=True)
        return found, inverse.reshape(-1)
    present = np.bincount(values - lo) > 0
    rank = np.cumsum(present) - 1
    return (np.flatnonzero(present) + lo).astype(values.dtype), rank[values - lo]


def collective_rows(
    cw: CompiledWorkload, raw: RawResult, standalone: dict[int, float] | None, symmetric: bool
) -> list[CollectiveRow]:
    """One row per instance that ran, in instance order: columns computed as arrays, then
    the rows made from them (``collective_rows_reference`` makes them one by one, alike)."""
    ins = cw.instances
    iids = np.flatnonzero(~np.isnan(raw.inst_start))
    if not len(iids):
        return []
    ctype = ins.comm_type[iids].astype(np.int64)
    g = ins.group[iids].astype(np.int64)
    sizes = np.array([len(x) for x in cw.group_ranks] + [2], np.int64)  # group -1: two ends
    n = sizes[np.where(g >= 0, g, len(cw.group_ranks))]
    size = ins.size[iids].astype(np.int64)
    kinds, kind_of = _unique_small(ctype)
    kind_names = [chakra_name(int(c)) for c in kinds.tolist()]
    gather = np.isin(kind_of, [k for k, nm in enumerate(kind_names) if nm == "all_gather"])
    total = np.where(gather, size * n, size)
    start = raw.inst_start[iids]
    t = raw.inst_end[iids] - start
    algbw = np.zeros(len(iids))
    pos = t > 0
    algbw[pos] = total[pos].astype(np.float64) / t[pos] / 1e9
    span = int(n.max()) + 1
    pairs, pair_of = _unique_small(kind_of * span + n)  # (kind, n) pairs
    bf = np.array(
        [
            bus_factor(kind_names[k], m) if int(kinds[k]) != P2P else 1.0
            for k, m in (divmod(p, span) for p in pairs.tolist())
        ],
        np.float64,
    )
    busbw = algbw * bf[pair_of.reshape(-1)]
    iid_l = iids.tolist()
    names = np.array(kind_names, dtype=object)[kind_of].tolist()
    gnames = np.array([*cw.group_names, ""], dtype=object)
    group = gnames[np.where(g >= 0, g, len(cw.group_names))].tolist()
    p2p = np.flatnonzero(g < 0)
    ends: dict[tuple[int, int], str] = {}  # a pair's name made once: pairs repeat
    for k, s, d in zip(
        p2p.tolist(), ins.src[iids[p2p]].tolist(), ins.dst[iids[p2p]].tolist(), strict=True
    ):
        name = ends.get((s, d))
        group[k] = name if name is not None else ends.setdefault((s, d), f"p2p {s}->{d}")
    none = [None] * len(iid_l)
    alone = none if standalone is None else list(map(standalone.get, iid_l))
    last = [-1] * len(iid_l) if symmetric else raw.inst_last_rank[iids].astype(np.int64).tolist()
    splits = ins.splits
    uneven = [skew(splits[i]) if i in splits else None for i in iid_l] if splits else none
    return list(
        map(
            CollectiveRow,
            names,
            group,
            ins.seq[iids].astype(np.int64).tolist(),
            n.tolist(),
            size.tolist(),
            raw.inst_first_arrival[iids].astype(np.float64).tolist(),
            start.astype(np.float64).tolist(),
            raw.inst_end[iids].astype(np.float64).tolist(),
            t.astype(np.float64).tolist(),
            algbw.tolist(),
            busbw.tolist(),
            alone,
            last,
            uneven,
        )
    )


def collective_rows_reference(
    cw: CompiledWorkload, raw: RawResult, standalone: dict[int, float] | None, symmetric: bool
) -> list[CollectiveRow]:
    """``collective_rows`` one instance at a time: the reference it is tested against."""
    ins = cw.instances
    rows = []
    names: dict[int, str] = {}
    factors: dict[tuple[str, int], float] = {}
    for iid in range(len(ins)):
        start, end = float(raw.inst_start[iid]), float(raw.inst_end[iid])
        if math.isnan(start):
            continue
        ctype = int(ins.comm_type[iid])
        name = names.get(ctype) or names.setdefault(ctype, chakra_name(ctype))
        g = int(ins.group[iid])
        n = len(cw.group_ranks[g]) if g >= 0 else 2
        bf = factors.get((name, n))
        if bf is None:
            bf = factors[(name, n)] = bus_factor(name, n) if ctype != P2P else 1.0
        size = int(ins.size[iid])
        total = size * n if name == "all_gather" else size
        t = end - start
        algbw = total / t / 1e9 if t > 0 else 0.0
        rows.append(
            CollectiveRow(
                collective=name,
                group=cw.group_names[g] if g >= 0 else f"p2p {ins.src[iid]}->{ins.dst[iid]}",
                seq=int(ins.seq[iid]),
                ranks=n,
                size=size,
                first_arrival=float(raw.inst_first_arrival[iid]),
                start=start,
                end=end,
                time=t,
                algbw_gbps=algbw,
                busbw_gbps=algbw * bf,
                standalone=None if standalone is None else standalone.get(iid),
                last_rank=int(raw.inst_last_rank[iid]) if not symmetric else -1,
                uneven=skew(ins.splits[iid]) if iid in ins.splits else None,
            )
        )
    return rows


def _replayed_instance_keys(cw: CompiledWorkload, raw: RawResult) -> dict[int, tuple[str, str]]:
    """``genie.sim.attribution.instance_keys(cw)`` for the instances the replayed ranks take
    part in (all that ``rank_exposure`` reads): a symmetric replay of thousands of ranks has a
    few, of the hundreds of thousands ``instance_keys`` would name. It is asked of the same
    instance table cut to those instances (its comm types and groups, what it reads)."""
    from genie.sim.attribution import instance_keys

    iids = [cw.ranks[r].instance for r in raw.sim_ranks]
    # sorted distinct ids (not np.unique, which imports numpy.ma: ~9 ms of a small run)
    need = np.array(sorted(set(np.concatenate(iids).tolist())) if iids else [], np.int64)
    need = need[need >= 0]
    ins = cw.instances
    if len(need) == len(ins):
        return instance_keys(cw)
    cut = SimpleNamespace(
        instances=SimpleNamespace(comm_type=ins.comm_type[need], group=ins.group[need]),
        group_names=cw.group_names,
        group_ranks=cw.group_ranks,
        n_ranks=cw.n_ranks,
    )
    keys = instance_keys(cast(CompiledWorkload, cut))
    return dict(zip(need.tolist(), keys.values(), strict=True))


def _exposure(cw: CompiledWorkload, raw: RawResult) -> tuple[dict, dict]:
    """Exposed communication per dimension and per collective, as per-rank means (s)."""
    from genie.sim.attribution import rank_exposure

    if not raw.sim_ranks:
        return {}, {}
    keys = _replayed_instance_keys(cw, raw)
    dim: dict[str, float] = {}
    coll: dict[str, float] = {}
    # replayed ranks stand for the identical others (an orbit replay: each for its orbit)
    weights = (
        np.bincount(raw.rank_rep, minlength=len(raw.sim_ranks)).tolist()
        if raw.rank_rep is not None
        else [cw.n_ranks / len(raw.sim_ranks)] * len(raw.sim_ranks)
    )
    for k in range(len(raw.sim_ranks)):
        weight = weights[k]
        for (d, c), secs in rank_exposure(cw, raw, k, keys).items():
            dim[d] = dim.get(d, 0.0) + secs * weight / cw.n_ranks
            coll[c] = coll.get(c, 0.0) + secs * weight / cw.n_ranks
    order = sorted(dim, key=lambda x: -dim[x])
    return {d: dim[d] for d in order}, dict(sorted(coll.items(), key=lambda kv: -kv[1]))


_TID = {
    int(Kind.COMPUTE): 0,
    int(Kind.COLLECTIVE): 1,
    int(Kind.SEND): 1,
    int(Kind.RECV): 1,
    int(Kind.MEMORY): 3,
    int(Kind.OTHER): 3,
}
_TRACK_NAMES = {0: "compute", 1: "comm", 2: "wait", 3: "memory/other"}
_LANE_TID = 10  # tid of lane 0 when a rank has lanes besides the one compute lane


def chrome_trace(
    cw: CompiledWorkload, raw: RawResult, path: str | Path, max_ranks: int | None = None
) -> int:
    """Write a Chrome-trace / Perfetto JSON timeline (one process per rank); return event count.

    ``max_ranks`` keeps only the first ranks (the file says how many were left out).
    """
    events: list[dict] = []
    by_rank = {r: k for k, r in enumerate(raw.sim_ranks)}
    shown = cw.n_ranks if max_ranks is None else min(cw.n_ranks, max_ranks)
    for r in range(shown):
        k = by_rank.get(r, 0 if raw.rank_rep is None else int(raw.rank_rep[r]))
        if not raw.sim_ranks:
            break
        src = raw.sim_ranks[k]
        cr = cw.ranks[src]
        sl = raw.rank_slice(k)
        st, en, rd = raw.start[sl].tolist(), raw.end[sl].tolist(), raw.ready[sl].tolist()
        events.append({"ph": "M", "pid": r, "name": "process_name", "args": {"name": f"rank {r}"}})
        for tid, tname in _TRACK_NAMES.items():
            events.append(
                {"ph": "M", "pid": r, "tid": tid, "name": "thread_name", "args": {"name": tname}}
            )
        kinds = cr.kind.tolist()
        lanes = cr.lane.tolist()
        by_lane = cr.lane_names not in ([], [GPU_LANE])  # one track per lane (genie.sim.lanes)
        if by_lane:
            for ln, lname in enumerate(cr.lane_names):
                events.append(
                    {
                        "ph": "M",
                        "pid": r,
                        "tid": _LANE_TID + ln,
                        "name": "thread_name",
                        "args": {"name": f"lane {lname}"},
                    }
                )
        for i in range(cr.n_nodes):
            k_i = kinds[i]
            dur_us = (en[i] - st[i]) * 1e6
            name = cr.name(i)
            args: dict = {}
            if k_i in (Kind.COLLECTIVE, Kind.SEND, Kind.RECV):
                iid = int(cr.instance[i])
                args = {"bytes": int(cw.instances.size[iid]), "instance": iid}
                name = name if cr.names else chakra_name(int(cw.instances.comm_type[iid]))
                if st[i] > rd[i]:
                    events.append(
                        {
                            "ph": "X",
                            "pid": r,
                            "tid": 2,
                            "name": f"wait {name}",
                            "ts": rd[i] * 1e6,
                            "dur": (st[i] - rd[i]) * 1e6,
                        }
                    )
            if dur_us <= 0 and k_i == Kind.OTHER:
                continue
            events.append(
                {
                    "ph": "X",
                    "pid": r,
                    "tid": _LANE_TID + lanes[i] if by_lane and lanes[i] >= 0 else _TID[k_i],
                    "name": name,
                    "ts": st[i] * 1e6,
                    "dur": dur_us,
                    "args": args,
                }
            )
    other = {"backend": raw.backend, "ranks_shown": shown, "ranks_left_out": cw.n_ranks - shown}
    doc = {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}
    Path(path).write_bytes(msgspec.json.encode(doc))
    return len(events)

"""``compile_workload`` for all ranks at once: one probe per distinct node, columns for the rest.

What a node compiles to (kind, lane, duration, collective type and size, group, peer, tag)
depends only on its type, derived attrs and duration (``genie.sim.adapter._fields``). This path
works each distinct such *probe* out once for the workload, gives every node the index of its
probe (a handful of passes over each rank's node list: keys, ids, names, deps; a node is found
by the identity of its derived tuple, which readers share between equal nodes, before it is
hashed by value), and makes every per-node column with one numpy gather over all ranks.
Dependencies become one CSR over the workload (bad and self deps dropped in one vector pass;
the ranks whose deps equal the previous rank's of their node count share its arrays), lanes are
numbered per rank in order of first appearance in one sort, and each rank's arrays are slices of
the workload's.

It gives exactly what ``genie.sim.adapter.compile_reference`` gives (tests compare the arrays);
it answers None where it cannot (nodes without derived fields, unhashable attr values, a
problem to name), and the adapter then runs the reference, which raises the error it always
raised.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_, is_not
from typing import Any

import numpy as np

from genie.errors import ValidationError
from genie.sim.compiled import CompiledRank, CompiledWorkload, Kind, positional_deps
from genie.sim.uneven import SPLIT_ATTR
from genie.workload.model import NodeType, RankGraph, is_host_work
from genie.workload.stream_rules import stream_edges

log = logging.getLogger(__name__)

#: distinct deps lists (with their arrays) kept per node count
_DEPS_KEPT = 4


#: what ``_ranks`` sets on each CompiledRank it makes without __init__ (a test holds it to
#: the dataclass's fields)
_RANK_FIELDS = (
    *("kind", "duration", "dep_ptr", "dep_idx", "comm_type", "comm_size", "group", "peer"),
    *("tag", "node_ids", "names", "instance", "lane", "lane_names", "splits"),
)


_COLLECTIVE, _SEND, _RECV = int(Kind.COLLECTIVE), int(Kind.SEND), int(Kind.RECV)
_SEND_NODE, _RECV_NODE = int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)


class Declined(Exception):
    """A fast compile path cannot compile this workload; the reference will (or names the
    error). Raised by this module and ``genie.sim.columns_compile`` alike."""


#: what a fast compile path declines on (the reference compiles, or names the error)
_DECLINES = (Declined, ValidationError, TypeError, AttributeError, OverflowError)


def attempt(path: str, compile_fn: Callable[..., CompiledWorkload], *args: Any) -> Any:
    """``compile_fn(*args)``, or None where it declines (logged with ``path``'s name)."""
    try:
        return compile_fn(*args)
    except _DECLINES as exc:
        log.debug("%s declined (%s): a slower path compiles", path, exc)
        return None


def compile_batch(
    wl: Any, edges: str, fields_of: Callable[[Any, int, tuple], tuple], a2a: int
) -> CompiledWorkload | None:
    """The workload compiled (``fields_of(node, rank, groups_of)`` works out one probe), or None
    where the reference must run (see the module docstring)."""
    return attempt("batch compile", _compile, wl, edges, fields_of, a2a)


class Probes:
    """The distinct nodes of a workload and what each compiles to, in order of first
    appearance (rank after rank, node after node), with the process groups they name."""

    def __init__(self, wl: Any, fields_of: Callable[[Any, int, tuple], tuple], a2a: int) -> None:
        groups: dict[str, tuple[int, ...]] = dict(getattr(wl, "groups", {}) or {})
        self.group_names = list(groups)
        self.group_ranks = [tuple(int(x) for x in groups[g]) for g in self.group_names]
        self.gid = {g: i for i, g in enumerate(self.group_names)}
        self.groups_of = (self.gid, self.group_names, self.group_ranks, tuple(range(wl.n_ranks)))
        self.fields_of = fields_of
        self.a2a = a2a
        self.memo: dict[tuple, int] = {}  # (type, derived, duration) -> probe
        self.fields: list[tuple] = []
        self.split: set[int] = set()  # all-to-all collectives: per-peer sizes are per node
        self.cpu: set[int] = set()  # nodes marked is_cpu_op (stream rules may apply)
        self.host: list[int] = []  # host work (``NodeKind.HOST``: a kind of type and derived)
        self._shapes: dict[tuple, tuple] = {}

    def add(self, nd: Any, key: tuple, r: int) -> int:
        """The probe of ``key`` (``nd`` a node of rank ``r`` with that key), made if new."""
        p = self.memo.get(key)
        return self.new(nd, key, r) if p is None else p

    def new(self, nd: Any, key: tuple, r: int) -> int:
        """``add`` for a ``key`` known to have no probe yet."""
        f = self._work_out(nd, key, r)
        p = self.memo[key] = len(self.fields)
        self.fields.append(f)
        if f[0] == _COLLECTIVE and f[3] == self.a2a:
            self.split.add(p)
        if key[1][8]:
            self.cpu.add(p)
            if is_host_work(key[0], key[1]):
                self.host.append(p)
        return p

    def _work_out(self, nd: Any, key: tuple, r: int) -> tuple:
        """A new probe's fields: worked out by ``fields_of`` once per shape (the key less the
        group name and the peer), the group or peer of each further one filled in here."""
        t, d, dur = key
        shape = (t, d[0], d[1], d[3], d[4], d[5], d[6] is None, d[7] is None, d[8], d[9], dur)
        base = self._shapes.get(shape)
        if base is None:
            base = self._shapes[shape] = self.fields_of(nd, r, self.groups_of)
            return base
        kind = base[0]
        if kind == _COLLECTIVE:
            pg = d[2] or ""
            g = self.gid.get(pg)
            if g is None:
                if pg:
                    raise Declined(f"process group {pg!r} has no known members")
                g = self.gid[pg] = len(self.group_names)
                self.group_names.append(pg)
                self.group_ranks.append(self.groups_of[3])
            return (*base[:5], g, *base[6:])
        if kind in (_SEND, _RECV):
            peer = d[7] if t == _SEND_NODE else d[6] if t == _RECV_NODE else None  # Node.peer
            if peer is None:
                raise Declined("a send/recv without a peer")
            return (*base[:6], int(peer), *base[7:])
        return base

    def finish(
        self, wl: Any, made: tuple[list[CompiledRank], dict[str, np.ndarray]]
    ) -> CompiledWorkload:
        """The compiled workload of ``made`` (``make_ranks``'s ranks and the arrays they are
        slices of), instances matched, groups labelled."""
        from genie.sim.compiled import finish

        name = getattr(wl, "name", "") or "workload"
        desc = getattr(wl, "group_desc", None) or {}
        labels = [f"{g} ({desc[g]})" if g in desc else g or "world" for g in self.group_names]
        return finish(made[0], labels, self.group_ranks, name, made[1])

    def host_work(self, pid: np.ndarray) -> int:
        """How many of the nodes whose probes are ``pid`` are host work."""
        if not self.host:
            return 0
        is_host = np.zeros(len(self.fields), bool)  # by probe (np.isin may load numpy.ma)
        is_host[self.host] = True
        return int(is_host[pid].sum())


@dataclass
class Gathered:
    """Every node of a workload, rank after rank: its probe, id, deps (positions in its rank,
    as lengths and one flat array; bad ones still in), and per rank the names and splits."""

    pid: np.ndarray
    node_ids: np.ndarray
    dep_len: np.ndarray
    dep_flat: np.ndarray
    counts: list[int]
    names: list[list[str]]
    splits: list[dict[int, list[int]]]


def _compile(wl: Any, edges: str, fields_of: Any, a2a: int) -> CompiledWorkload:
    probes = Probes(wl, fields_of, a2a)
    pids: list[int] = []  # every node's probe, rank after rank
    dep_lens: list[np.ndarray] = []  # per rank: each node's count of deps (positions)
    dep_flats: list[np.ndarray] = []  # per rank: the deps, flat
    node_ids: list[np.ndarray] = []
    # node count -> the deps (and their arrays) of the last ranks of that count, latest first
    by_shape: dict[int, list[tuple[list, np.ndarray, np.ndarray]]] = {}
    aranges: dict[int, np.ndarray] = {}
    counts: list[int] = []
    ranks_names: list[list[str]] = []
    ranks_splits: list[dict[int, list[int]]] = []
    ranges: dict[int, list[int]] = {}
    infer = edges == "inferred"
    memo = probes.memo
    #: (type, id of the derived tuple, duration) -> probe: the tuples live as long as the nodes
    #: and readers share them between equal nodes, so most nodes are found without hashing one
    by_id: dict[tuple[Any, int, Any], int] = {}
    like = _LikeRanks()
    for r, rg in enumerate(wl.ranks):
        nodes = rg.nodes
        n = len(nodes)
        found = like.find(nodes)
        if found is not None:  # as an earlier rank of these types and durations: its probes
            got, redo = found  # but where the tuple differs, found by identity or worked out
            for i in redo:
                nd = nodes[i]
                ikey = (nd.type, id(nd._d), nd.duration_micros)
                p = by_id.get(ikey)
                if p is None:
                    key = (nd.type, nd._d, nd.duration_micros)
                    p = memo.get(key)
                    if p is None:
                        p = probes.new(nd, key, r)
                    by_id[ikey] = p
                got[i] = p
        else:  # each node's key, then its probe by identity (None: not met so)
            ikeys = [(x.type, id(x._d), x.duration_micros) for x in nodes]
            got = list(map(by_id.get, ikeys))
            if None in got:
                for i in list(compress(range(n), map(is_, got, repeat(None)))):
                    nd = nodes[i]
                    key = (nd.type, nd._d, nd.duration_micros)
                    p = memo.get(key)
                    if p is None:
                        p = probes.new(nd, key, r)
                    got[i] = by_id[ikeys[i]] = p
        like.add(got)
        pids.extend(got)
        splits: dict[int, list[int]] = {}
        if probes.split and not probes.split.isdisjoint(got):
            for i, p in enumerate(got):
                if p in probes.split:
                    row = nodes[i].attr(SPLIT_ATTR)
                    if row is not None:
                        splits[i] = split_row(row)
        ranks_splits.append(splits)
        ids = [x.id for x in nodes]  # (a slot read in a list display beats attrgetter)
        rng = ranges.get(n)
        if rng is None:
            rng = ranges[n] = list(range(n))
        # out-of-range and self deps of a rank whose ids are its positions are dropped below
        deps: list[Any] = (
            [x.data_deps for x in nodes] if ids == rng else positional_deps(nodes, ids)
        )
        if infer and isinstance(rg, RankGraph):
            has_cpu = bool(probes.cpu) and not probes.cpu.isdisjoint(got)
            extra = stream_edges(rg, has_cpu_ops=has_cpu).edges
            if extra:
                deps = [d or [] for d in deps]
                for i, before in extra.items():
                    deps[i] = [*deps[i], *before]
        # ranks of one shape: their deps as arrays once (a few shapes of each node count, as
        # pipeline stages alternate)
        known = by_shape.get(n)
        if known is None:
            known = by_shape[n] = []
        for seen in known:
            if seen[0] == deps:
                break
        else:
            seen = (deps, *_dep_arrays(deps))
            known.insert(0, seen)
            if len(known) > _DEPS_KEPT:
                known.pop()
        dep_lens.append(seen[1])
        dep_flats.append(seen[2])
        if ids == rng:
            at = aranges.get(n)
            if at is None:
                at = aranges[n] = np.arange(n, dtype=np.int64)
            node_ids.append(at)
        else:
            node_ids.append(np.fromiter(ids, np.int64, n))
        names = [x.name for x in nodes]
        if not all(names):
            names = [x or "" for x in names]
        ranks_names.append(names)
        counts.append(n)
    n_all = len(pids)
    got_all = Gathered(
        pid=np.fromiter(pids, np.int64, n_all),
        node_ids=_joined(node_ids),
        dep_len=_joined(dep_lens),
        dep_flat=_joined(dep_flats),
        counts=counts,
        names=ranks_names,
        splits=ranks_splits,
    )
    out = probes.finish(wl, make_ranks(probes.fields, got_all))
    out.host_work_nodes = probes.host_work(got_all.pid)  # read by the trace facts
    return out


class _LikeRanks:
    """The node types, durations, derived tuples and probes of the last few ranks of each node
    count: a rank with an earlier one's types and durations (pipeline stages alternate) takes
    that rank's probe wherever its node holds the very same derived tuple (readers share them
    between equal nodes), and works out only the others (none is taken where over 3 in 4
    differ: one lookup of them all costs less then). Stops looking while none was found once
    ``GIVE_UP`` ranks found none (ranks whose durations all differ, as traced ones do) or
    ``GIVE_UP_UNSHARED`` found one with mostly other tuples (a reader that shares none). Keeps
    ``_DEPS_KEPT`` ranks' lists for each of ``MAX_COUNTS`` node counts at most."""

    GIVE_UP = 64
    GIVE_UP_UNSHARED = 4
    MAX_COUNTS = 64

    def __init__(self) -> None:
        self.by_count: dict[int, list[tuple[list, list, list, list]]] = {}
        self.hits = 0
        self.misses = 0
        self.unshared = 0  # ranks like an earlier one but for most of their tuples
        self._last: tuple = ()  # what ``find`` learnt of the rank ``add`` then records

    def find(self, nodes: list) -> tuple[list, list[int]] | None:
        """(probes as an earlier rank's, positions to work out again), or None."""
        self._last = ()
        if not self.hits and (
            self.misses >= self.GIVE_UP or self.unshared >= self.GIVE_UP_UNSHARED
        ):
            return None
        known = self.by_count.get(len(nodes))
        if known is None:
            if len(self.by_count) >= self.MAX_COUNTS:
                return None  # (bounded: the lists of ranks of this many node counts at most)
            known = self.by_count[len(nodes)] = []
        types = [x.type for x in nodes]
        durations = [x.duration_micros for x in nodes]
        ds = [x._d for x in nodes]
        for e in known:
            if e[0] == types and e[1] == durations:
                redo = list(compress(range(len(nodes)), map(is_not, ds, e[2])))
                if len(redo) > len(nodes) * 3 // 4:
                    self.unshared += 1
                    break  # mostly other tuples (not shared by a reader): all looked up at once
                self.hits += 1
                self._last = (known, e, ds)
                return list(e[3]), redo
        self.misses += 1
        self._last = (known, None, ds, types, durations)
        return None

    def add(self, got: list) -> None:
        """Remember the probes of the rank ``find`` was last asked about (the latest first;
        ``_DEPS_KEPT`` ranks per node count)."""
        if not self._last:
            return
        known, e, ds = self._last[:3]
        if e is not None:
            known.remove(e)
            known.insert(0, (e[0], e[1], ds, got))
        else:
            known.insert(0, (self._last[3], self._last[4], ds, got))
            if len(known) > _DEPS_KEPT:
                known.pop()
        self._last = ()


def _dep_arrays(deps: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each node's count of deps and the deps in one flat array (None deps: none)."""
    try:
        lens = np.fromiter(map(len, deps), np.int64, len(deps))
    except TypeError:  # a node whose data_deps is None
        deps = [d or [] for d in deps]
        lens = np.fromiter(map(len, deps), np.int64, len(deps))
    flat = np.fromiter(itertools.chain.from_iterable(deps), np.int64, int(lens.sum()))
    return lens, flat


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def split_row(row: Any) -> list[int]:
    """An all-to-all-v node's per-peer sizes as the reference reads them."""
    if not isinstance(row, list | tuple):
        raise Declined("per-peer sizes that are not a list")
    return [int(x) for x in row]


def make_ranks(
    probes: list[tuple], g: Gathered
) -> tuple[list[CompiledRank], dict[str, np.ndarray]]:
    """Every rank's CompiledRank, its columns gathered from the probes over the workload; and
    the workload's columns, of which each rank's are slices (by CompiledRank field)."""
    pid, counts = g.pid, g.counts
    n_all = len(pid)
    cols = list(zip(*probes, strict=True)) if probes else [()] * 8
    kind = np.asarray(cols[0], np.int8)[pid]
    duration = np.asarray(cols[2], np.float64)[pid]
    ctype = np.asarray(cols[3], np.int16)[pid]
    csize = np.asarray(cols[4], np.int64)[pid]
    group = np.asarray(cols[5], np.int32)[pid]
    peer = np.asarray(cols[6], np.int32)[pid]
    tag = np.asarray(cols[7], np.int64)[pid]
    node_ids = g.node_ids
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    rank_of = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    local = np.arange(n_all, dtype=np.int64) - offsets[rank_of]
    lane, lane_names = _lanes(cols[1], pid, rank_of, offsets)
    ptr, idx = _deps_csr(g.dep_len, g.dep_flat, counts, rank_of, local)
    ranks_names, ranks_splits = g.names, g.splits
    out = []
    no_instance = np.zeros(0, np.int64)  # finish gives each rank its own
    bounds = offsets.tolist()
    pbounds = ptr[offsets].tolist()
    for r in range(len(counts)):
        a, b, pa, pb = bounds[r], bounds[r + 1], pbounds[r], pbounds[r + 1]
        cr = object.__new__(CompiledRank)  # the fields as __init__ sets them; lanes are valid
        cr.__dict__.update(
            kind=kind[a:b],
            duration=duration[a:b],
            dep_ptr=ptr[a : b + 1] - pa,
            dep_idx=idx[pa:pb],
            comm_type=ctype[a:b],
            comm_size=csize[a:b],
            group=group[a:b],
            peer=peer[a:b],
            tag=tag[a:b],
            node_ids=node_ids[a:b],
            names=ranks_names[r],
            instance=no_instance,
            lane=lane[a:b],
            lane_names=lane_names[r],
            splits={i: np.asarray(v, np.int64) for i, v in ranks_splits[r].items()},
        )
        out.append(cr)
    whole = {"kind": kind, "group": group, "comm_type": ctype, "comm_size": csize}
    whole.update(peer=peer, tag=tag)
    return out, whole


def _lanes(
    keys: tuple, pid: np.ndarray, rank_of: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, list[list[str]]]:
    """Each node's lane index within its rank and each rank's lane names, numbered in order of
    first appearance in the rank (as the reference numbers them). Lane keys are few: each
    key's first node per rank is found in one pass over that key's nodes."""
    n_ranks = len(offsets) - 1
    key_ids: dict[str, int] = {}
    per_probe = np.asarray(
        [-1 if k is None else key_ids.setdefault(k, len(key_ids)) for k in keys], np.int64
    )
    lane = np.full(len(pid), -1, np.int16)
    names: list[list[str]] = [[] for _ in range(n_ranks)]
    if not key_ids:
        return lane, names
    n_keys = len(key_ids)
    glob = per_probe[pid]
    absent = int(offsets[-1])  # past every node: the key is not in the rank
    first = np.full((n_ranks, n_keys), absent, np.int64)
    for k in range(n_keys):
        at = np.flatnonzero(glob == k)
        if len(at):
            ranks = rank_of[at]
            lead = np.r_[True, ranks[1:] != ranks[:-1]]
            first[ranks[lead], k] = at[lead]
    order = np.argsort(first, axis=1, kind="stable")  # each rank's keys by first appearance
    local = np.empty((n_ranks, n_keys), np.int64)
    np.put_along_axis(local, order, np.arange(n_keys)[None, :], axis=1)
    has = glob >= 0
    lane[has] = local[rank_of[has], glob[has]]
    key_names = list(key_ids)
    present = (first < absent).sum(axis=1).tolist()
    rows = order.tolist()
    cache: dict[tuple, list[str]] = {}
    for r in range(n_ranks):
        ks = tuple(rows[r][: present[r]])
        got = cache.get(ks)
        if got is None:
            got = cache[ks] = [key_names[k] for k in ks]
        names[r] = list(got)  # each rank its own list, as the reference gives
    return lane, names


def _deps_csr(
    lens: np.ndarray,
    idx: np.ndarray,
    counts: list[int],
    rank_of: np.ndarray,
    local: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Workload-wide CSR of the deps (positions within each rank), with deps outside the rank
    and on the node itself dropped; ptr[offsets[r]] starts rank r."""
    n_all = len(lens)
    ptr = np.zeros(n_all + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    if len(idx):
        owner = np.repeat(np.arange(n_all, dtype=np.int64), lens)
        size = np.asarray(counts, np.int64)[rank_of[owner]]
        bad = (idx < 0) | (idx >= size) | (idx == local[owner])
        if bad.any():
            idx = idx[~bad]
            np.cumsum(np.bincount(owner[~bad], minlength=n_all), out=ptr[1:])
    return ptr, idx

"""Rank-orbit replay: one representative rank per orbit of a rank rotation, checked at run time.

``genie.sim.symmetry`` replays one rank when every rank is alike. Most workloads are alike only
up to a relabelling: in a tensor x pipeline x data-parallel job, the ranks at one (tensor,
pipeline) position differ only by their data-parallel index, and rotating that index maps the
job onto itself. This module finds such a rotation and proves, for the workload at hand and the
network it is priced on, that the full replay is invariant under it; the engine then replays one
rank per orbit, each collective standing for its whole orbit of copies on the network.

The rotation. ``sigma`` rotates the ranks inside blocks of ``B`` consecutive ranks by ``s``:
``sigma(r) = (r // B) * B + (r % B + s) % B`` (``s`` divides ``B``; a block is the whole job on a
switch, one leaf's ranks on a leaf-spine). Each rank's orbit is ``{r, sigma(r), ...}`` (``B / s``
ranks); its smallest rank is its representative.

Proof obligations (each checked; any failure falls back to the full replay):

(W1) node by node, rank ``sigma(r)`` has the same graph as rank ``r``: node kinds, durations,
     deps, lanes, collective types, sizes and tags (``_shapes``);
(W2) the nodes of rank ``r`` and of ``sigma(r)`` at the same index belong to instances related by
     one bijection ``sigma_I`` of the instances, which keeps type, size and sequence number, maps
     a collective's group onto the group of the image ranks (as a set), a send/recv's ends onto
     the image ranks, and keeps tags; no instance is an uneven all-to-all (``_instance_map``);
(W3) closure: every member ``(m, node)`` of an instance that has a representative member has
     ``(rep(m), node)`` as a member too (so the representatives' arrivals decide its start, and
     each instance orbit holds exactly one instance with a representative member);
(N1) ``pi``, the link permutation induced by ``sigma`` (hosts by the placement, each host's
     switch by its host link, other switches fixed, intra-host ports by rank) is a bijection of
     the links that keeps every link's bandwidth and latency (``link_permutation``);
(N2) for every instance ``i`` the pricer's demand of ``sigma_I(i)`` is the demand of ``i`` with
     its links moved by ``pi``: the same latency and the same bytes, bit for bit
     (``check_pricing``); routing that tells hosts apart (ECMP hashes) fails here;
(N3) the backend's rates are weighted max-min fair per set of transfers in flight
     (``AnalyticalBackend``): the fair allocation is unique, so it is invariant under any
     capacity-preserving link permutation that maps the set of demands onto itself.

Then the full replay is invariant under ``sigma``: by induction over events in time order, if
node ``j`` of every rank ``r`` and of ``sigma(r)`` have had the same times so far, and instance
``sigma_I(i)`` the same as ``i``, the next local event is the same on both (W1); the members of
``sigma_I(i)`` arrive when those of ``i`` do (W2), so both start together; the demands in flight
are a ``pi``-invariant set (N2), so each instance and its image get the same rate (N3) and end
together. So every rank copies its representative, and every instance the instance of its orbit
that has a representative member (W3) (its last rank moved by ``sigma``).

The quotient. Only the representatives' instances are replayed, each standing for its orbit of
``K`` instances (``K`` = orbit length under ``sigma_I``). Under an invariant allocation every
link of a link orbit carries the same load; the load on the orbit's representative link
``lam`` of the ``K`` copies of instance ``i`` at rate ``x`` is ``x / W_i * sum_{j<K} d_i(pi^-j
lam)``, ``W_i`` the standalone bytes-time of one copy. So the backend runs max-min fairness on
representative links with these summed demands (``Quotient.demand``, keeping ``W_i``): the same
constraints as the full system restricted to invariant allocations, hence the same rates
(progressive filling freezes an orbit exactly when the full system freezes its copies, since
links of one orbit saturate together). Floating point sums in another order, so times agree to
rounding (tests hold them to 1 ns), not bit for bit. A link's bytes and saturated seconds are
its representative link's.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

try:  # as in genie.sim.compiled: the builtin blake2b, without OpenSSL
    from _blake2 import blake2b
except ImportError:  # pragma: no cover
    from hashlib import blake2b

from genie.sim.compiled import CompiledWorkload, MemberLists
from genie.sim.network import Demand, Transfer

if TYPE_CHECKING:
    from genie.sim.network import Pricer

log = logging.getLogger(__name__)

#: candidate rotations tried on the workload (each one a pass over the instances)
MAX_CANDIDATES = 8
#: rotations whose rank graphs agree (W1) checked further (W2, W3) at most
MAX_TRIES = 16


@dataclass
class RankOrbits:
    """A rank rotation ``perm`` that passed W1-W3, with its orbits and instance orbits."""

    block: int  # B: ranks rotate inside blocks of this many consecutive ranks
    shift: int  # s
    perm: np.ndarray  # rank -> sigma(rank)
    reps: list[int]  # representative ranks (each orbit's smallest), ascending
    rank_rep: np.ndarray  # rank -> index into reps of its orbit's representative
    inst_perm: np.ndarray  # sigma_I
    inst_rep: np.ndarray  # instance -> the instance of its orbit that has a representative member
    inst_power: np.ndarray  # instance = sigma_I ** inst_power (inst_rep)
    inst_orbit: np.ndarray  # instance -> its orbit's length K under sigma_I
    # the workload side of N2, made on first use and shared by every pricer (``check_pricing``)
    pricing_plan: _PricingPlan | None = field(default=None, repr=False, compare=False)
    # N1's answer and its cycles per network, shared by pricers of one network (``_link_side``)
    link_memo: dict[tuple, tuple] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_orbits(self) -> int:
        """How many ranks are replayed."""
        return len(self.reps)

    def rank_power(self, ranks: np.ndarray, power: np.ndarray) -> np.ndarray:
        """``sigma ** power`` applied to ``ranks`` (elementwise)."""
        b, s = self.block, self.shift
        return (ranks // b) * b + (ranks % b + power * s) % b


class Orbits(list[int]):
    """The representative ranks of the first candidate rotation, carrying the others lazily.

    A ``list[int]`` so that ``representatives`` keeps its type; the engine walks the candidates
    (``each``) and takes the first whose network obligations hold on its backend
    (``genie.sim.engine``), else replays every rank. Later candidates are checked only when an
    earlier one is refused.
    """

    def __init__(self, first: RankOrbits, more: Iterator[RankOrbits]) -> None:
        super().__init__(first.reps)
        self._found = [first]
        self._more: Iterator[RankOrbits] | None = more

    def each(self) -> Iterator[RankOrbits]:
        """Every candidate, best first (at most ``MAX_CANDIDATES``), checked as reached."""
        k = 0
        while True:
            if k < len(self._found):
                yield self._found[k]
                k += 1
                continue
            nxt = None if self._more is None else next(self._more, None)
            if nxt is None or len(self._found) >= MAX_CANDIDATES:
                self._more = None
                return
            self._found.append(nxt)

    @property
    def candidates(self) -> list[RankOrbits]:
        """All candidates (checks them all)."""
        return list(self.each())


#: ``_shapes`` keeps one copy of the bytes of each distinct rank; past this many it hashes
_W1_BYTES = 64 << 20


def _shapes(cw: CompiledWorkload) -> np.ndarray:
    """An id per rank of what W1 compares (not groups, peers or instances), numbered in order
    of first appearance: ranks have one id exactly when those arrays are byte for byte equal
    and their lane names too (a dict of the bytes themselves: it compares them where their
    hashes meet). Where the distinct ranks' bytes pass ``_W1_BYTES``, ``_shapes_reference``."""
    ids: dict[tuple, int] = {}
    out = [0] * cw.n_ranks
    held = 0
    for r, cr in enumerate(cw.ranks):
        key = (
            cr.kind.tobytes(),
            cr.duration.tobytes(),
            cr.dep_ptr.tobytes(),
            cr.dep_idx.tobytes(),
            cr.comm_type.tobytes(),
            cr.comm_size.tobytes(),
            cr.tag.tobytes(),
            cr.lane.tobytes(),
            tuple(cr.lane_names),
        )
        k = ids.get(key)
        if k is None:
            held += sum(map(len, key[:8]))
            if held > _W1_BYTES:
                return _shapes_reference(cw)
            k = ids[key] = len(ids)
        out[r] = k
    return np.asarray(out, np.int64)


def _shapes_reference(cw: CompiledWorkload) -> np.ndarray:
    """A digest per rank of what W1 compares (not groups, peers or instances): int row ids."""
    ids: dict[bytes, int] = {}
    out = np.empty(cw.n_ranks, np.int64)
    for r, cr in enumerate(cw.ranks):
        h = blake2b(digest_size=16)
        for arr in (
            cr.kind,
            cr.duration,
            cr.dep_ptr,
            cr.dep_idx,
            cr.comm_type,
            cr.comm_size,
            cr.tag,
            cr.lane,
        ):
            h.update(np.ascontiguousarray(arr).tobytes())
            h.update(b"|")
        h.update("|".join(cr.lane_names).encode())
        out[r] = ids.setdefault(h.digest(), len(ids))
    return out


def rotation(n: int, block: int, shift: int) -> np.ndarray:
    """``sigma(r)`` for every rank: rotate by ``shift`` inside blocks of ``block`` ranks."""
    r = np.arange(n, dtype=np.int64)
    return (r // block) * block + (r % block + shift) % block


def _candidates(n: int) -> list[tuple[int, int]]:
    """(block, shift) pairs, fewest orbits first (n * shift / block), excluding the identity."""
    divs = [d for d in range(1, n + 1) if n % d == 0]
    out = [(b, s) for b in divs if b > 1 for s in divs if s < b and b % s == 0]
    return sorted(out, key=lambda bs: (n * bs[1] // bs[0], -bs[0]))


_MEMO: dict[int, tuple[weakref.ref, Orbits | None]] = {}


def find_orbits(cw: CompiledWorkload) -> Orbits | None:
    """Rank rotations under which the workload is invariant (W1-W3), best first; None if none.

    Memoised per workload object (a replay and the line-rate replay beside it ask alike).
    """
    hit = _MEMO.get(id(cw))
    if hit is not None and hit[0]() is cw:
        return hit[1]
    n = cw.n_ranks
    out: Orbits | None = None
    if n >= 2 and not cw.instances.splits and not any(cr.splits for cr in cw.ranks):
        found = _search(cw)
        first = next(found, None)
        out = None if first is None else Orbits(first, found)
    for key in [k for k, (ref, _) in _MEMO.items() if ref() is None]:
        del _MEMO[key]
    _MEMO[id(cw)] = (weakref.ref(cw), out)
    return out


def _search(cw: CompiledWorkload) -> Iterator[RankOrbits]:
    """Rotations passing W1-W3, fewest orbits first."""
    n = cw.n_ranks
    shapes = _shapes(cw)
    flat = _flat_instances(cw)
    tries = 0
    for block, shift in _candidates(n):
        perm = rotation(n, block, shift)
        if not np.array_equal(shapes[perm], shapes):
            continue
        tries += 1
        if tries > MAX_TRIES:  # each a pass over the instances: bounded
            return
        orb = _check(cw, block, shift, perm, flat)
        if orb is not None:
            yield orb


@dataclass
class _Flat:
    """Every rank's instance column side by side (rank-major) and where each rank starts."""

    inst: np.ndarray
    offsets: np.ndarray
    comm: np.ndarray  # flat positions of communication nodes
    comm_rank: np.ndarray  # their rank
    comm_local: np.ndarray  # their index on that rank
    members: list[list[tuple[int, int]]] = field(default_factory=list)


def _flat_instances(cw: CompiledWorkload) -> _Flat:
    inst = np.concatenate([cr.instance for cr in cw.ranks]).astype(np.int64)
    sizes = np.array([cr.n_nodes for cr in cw.ranks], np.int64)
    offsets = np.zeros(cw.n_ranks + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    comm = np.flatnonzero(inst >= 0)
    rank = np.searchsorted(offsets, comm, side="right") - 1
    return _Flat(inst, offsets, comm, rank, comm - offsets[rank])


def _check(
    cw: CompiledWorkload, block: int, shift: int, perm: np.ndarray, flat: _Flat
) -> RankOrbits | None:
    """W2 and W3 for ``perm`` (W1 already holds); the orbits, or None with the reason logged."""
    ins = cw.instances
    n_inst = len(ins)
    src = flat.inst[flat.comm]
    dst = flat.inst[flat.offsets[perm[flat.comm_rank]] + flat.comm_local]
    sig = np.full(n_inst, -1, np.int64)
    sig[src] = dst
    if not np.array_equal(sig[src], dst) or np.any(sig < 0):
        return _no(block, shift, "nodes of one instance map to different instances")
    if np.any(np.bincount(sig, minlength=n_inst) != 1):
        return _no(block, shift, "the instance map is not a bijection")
    for col in (ins.comm_type, ins.size, ins.seq, ins.tag):
        if not np.array_equal(col[sig], col):
            return _no(block, shift, "an instance and its image differ in type, size, seq or tag")
    p2p = ins.group < 0
    if np.any(p2p):
        for col in (ins.src, ins.dst):
            c = col.astype(np.int64)
            ok = c[p2p] >= 0
            if not np.array_equal(c[sig][p2p][ok], perm[c[p2p][ok]]):
                return _no(block, shift, "a send/recv's image has other ends")
    g = ins.group.astype(np.int64)
    span = max(len(cw.group_ranks), 1)
    pairs = _distinct(g[~p2p] * span + g[sig][~p2p], span * span)  # (group, image group)
    bad = _unmapped_group(cw.group_ranks, perm, [divmod(x, span) for x in pairs.tolist()])
    if bad is not None:
        return _no(block, shift, f"group {bad[0]}'s image is not group {bad[1]}")
    # orbits of ranks: each orbit's smallest rank represents it
    n = cw.n_ranks
    r = np.arange(n, dtype=np.int64)
    rep_rank = (r // block) * block + (r % block) % shift
    reps = _distinct(rep_rank, n)
    rank_rep = np.searchsorted(reps, rep_rank)
    # W3: closure of the instances that have a representative member
    is_rep = rep_rank == r
    rep_inst = _distinct(flat.inst[flat.comm[is_rep[flat.comm_rank]]], n_inst)
    open_iid = _not_closed(ins.members, rep_inst.tolist(), rep_rank.tolist())
    if open_iid is not None:
        return _no(block, shift, f"instance {open_iid} is not closed under its orbits")
    walked = instance_orbits(sig, rep_inst, n_inst, block // shift)
    if isinstance(walked, str):
        return _no(block, shift, walked)
    inst_rep, inst_power = walked
    inst_orbit = np.bincount(inst_rep, minlength=n_inst)[inst_rep]
    return RankOrbits(
        block,
        shift,
        perm,
        reps.tolist(),
        rank_rep,
        sig,
        inst_rep,
        inst_power,
        inst_orbit,
    )


def instance_orbits(
    sig: np.ndarray, rep_inst: np.ndarray, n_inst: int, steps: int
) -> tuple[np.ndarray, np.ndarray] | str:
    """Each instance's representative instance and the power of sigma_I that maps it there,
    walking sigma_I at most ``steps`` times from every representative instance; or why not:
    an instance no walk reaches, or a walk that reaches another representative's instance (two
    representatives would stand for one orbit: W3 excludes it, and this checks it)."""
    inst_rep = np.full(n_inst, -1, np.int64)
    inst_power = np.zeros(n_inst, np.int64)
    cur = rep_inst.copy()
    for j in range(steps):
        fresh = inst_rep[cur] < 0
        if j and np.any(inst_rep[cur[~fresh]] != rep_inst[~fresh]):
            return "an instance orbit holds two representatives' instances"
        if j and not fresh.any():
            break
        inst_rep[cur[fresh]] = rep_inst[fresh]
        inst_power[cur[fresh]] = j
        cur = sig[cur]
    if np.any(inst_rep < 0):
        return "an instance orbit holds no representative's instance"
    return inst_rep, inst_power


def _unmapped_group(
    group_ranks: list[tuple[int, ...]], perm: np.ndarray, pairs: list[tuple[int, int]]
) -> tuple[int, int] | None:
    """The first (group, image group) of ``pairs`` whose ranks moved by ``perm`` are not the
    image's (as sets, of one size), or None (W2)."""
    image = perm.tolist().__getitem__
    for a, b in pairs:
        ra, rb = group_ranks[a], group_ranks[b]
        if len(ra) != len(rb) or set(map(image, map(int, ra))) != set(rb):
            return a, b
    return None


def _unmapped_group_reference(
    group_ranks: list[tuple[int, ...]], perm: np.ndarray, pairs: list[tuple[int, int]]
) -> tuple[int, int] | None:
    """``_unmapped_group`` through numpy per group: the reference it is tested against."""
    for a, b in pairs:
        ra, rb = group_ranks[a], group_ranks[b]
        if len(ra) != len(rb) or set(perm[np.asarray(ra, np.int64)].tolist()) != set(rb):
            return a, b
    return None


def _not_closed(
    members: Sequence[list[tuple[int, int]]], iids: list[int], rep_of: list[int]
) -> int | None:
    """The first of ``iids`` with a member ``(m, node)`` whose ``(rep_of[m], node)`` is not a
    member too, or None (W3); each instance's check one pass at C speed (members held as
    columns: every instance's at once, ``_not_closed_columns``)."""
    if isinstance(members, MemberLists):
        axes = _code_axes(members, len(iids), rep_of)
        if axes is not None:
            return _not_closed_columns(members, iids, rep_of, axes)
    rep = rep_of.__getitem__
    for iid in iids:
        mem = members[iid]
        if not mem:
            continue
        ms, nds = zip(*mem, strict=True)
        if not set(mem).issuperset(zip(map(rep, ms), nds, strict=True)):
            return iid
    return None


def _code_axes(members: MemberLists, n_iids: int, rep_of: list[int]) -> tuple[int, int] | None:
    """The (rank, node) axes of ``_not_closed_columns``'s codes (instance, rank, node), or None
    where they do not fit an int64 or a rank, node or image is negative (such a member is the
    loop's to name, as the reference does). The rank axis makes room for the images too: an
    image past every member's rank must not alias the next instance's member."""
    if int(members.rank.min(initial=0)) < 0 or int(members.node.min(initial=0)) < 0:
        return None
    if rep_of and min(rep_of) < 0:
        return None
    n_r = max(len(rep_of), int(members.rank.max(initial=0)) + 1, max(rep_of, default=0) + 1)
    n_n = int(members.node.max(initial=0)) + 1
    return (n_r, n_n) if n_iids * n_r * n_n < 1 << 62 else None


def _not_closed_columns(
    members: MemberLists, iids: list[int], rep_of: list[int], axes: tuple[int, int]
) -> int | None:
    """``_not_closed`` on members held as columns: each pair ``(m, node)`` of the instances
    and its ``(rep_of[m], node)`` coded as (instance, rank, node), the images looked up among
    the pairs at once; the first instance of ``iids`` with an image missing, or None."""
    ids = np.asarray(iids, np.int64)
    if not len(ids):
        return None
    starts = members.bounds[ids]
    lens = members.bounds[ids + 1] - starts
    total = int(lens.sum())
    if not total:
        return None
    owner = np.repeat(np.arange(len(ids), dtype=np.int64), lens)  # position in ``iids``
    rows = np.arange(total, dtype=np.int64) + np.repeat(starts - (np.cumsum(lens) - lens), lens)
    rank, node = members.rank[rows], members.node[rows]
    n_r, n_n = axes
    rep = np.asarray(rep_of, np.int64)[rank]
    have = np.sort((owner * n_r + rank) * n_n + node)  # (not np.isin: it imports numpy.ma)
    want = (owner * n_r + rep) * n_n + node
    ok = have[np.minimum(np.searchsorted(have, want), total - 1)] == want
    if ok.all():
        return None
    return iids[int(owner[~ok].min())]


def _not_closed_reference(
    members: Sequence[list[tuple[int, int]]], iids: list[int], rep_of: list[int]
) -> int | None:
    """``_not_closed`` member by member: the reference it is tested against."""
    for iid in iids:
        mem = members[iid]
        have = set(mem)
        for m, nd in mem:
            if (rep_of[m], nd) not in have:
                return iid
    return None


def _distinct(values: np.ndarray, bound: int) -> np.ndarray:
    """``np.unique(values)`` of non-negative ints below ``bound``: marked in a table where it
    is small (no sort), else ``np.unique``."""
    if bound > (1 << 24) or (len(values) and int(values.min()) < 0):
        return np.unique(values)
    seen = np.zeros(bound, bool)
    seen[values] = True
    return np.flatnonzero(seen)


def _no(block: int, shift: int, why: str) -> RankOrbits | None:
    """Log why rotation (block, shift) is refused; None."""
    log.debug("rank rotation by %d in blocks of %d refused: %s", shift, block, why)
    return None


# --- the network side: N1 and N2, and the quotient the backend prices ------------------------


def link_permutation(pricer: Pricer, perm: np.ndarray) -> np.ndarray | str:
    """``pi``: the links' permutation induced by ``perm`` (N1), or why there is none."""
    base = getattr(pricer, "fallback", pricer)
    topo = getattr(base, "topology", None)
    host_of = getattr(base, "host_of", None)
    n_links = getattr(base, "n_links", None)
    if topo is None or host_of is None or n_links is None:
        return f"{type(pricer).__name__} names no topology and placement"
    n = len(perm)
    cap = np.asarray(pricer.capacity(), np.float64)
    if len(cap) != n_links + n or len(host_of) != n:
        return "the pricer's links are not topology links and one intra-host port per rank"
    if getattr(topo, "multi_nic", False):
        return "hosts with several NICs"
    host_of = np.asarray(host_of, np.int64)
    n_hosts = len(topo.hosts)
    hmap = np.arange(n_hosts, dtype=np.int64)
    hmap[host_of] = host_of[perm]
    if not np.array_equal(hmap[host_of], host_of[perm]):
        return "ranks of one host move to different hosts"
    if len(set(hmap.tolist())) != n_hosts:  # (np.unique imports numpy.ma: start-up)
        return "two hosts move onto one"
    names = {h: i for i, h in enumerate(topo.hosts)}
    node_map: dict[str, str] = {topo.hosts[h]: topo.hosts[int(hmap[h])] for h in range(n_hosts)}
    uplink: dict[str, str] = {}  # host -> its one switch
    for lk in topo.links:
        for a, b in ((lk.src, lk.dst), (lk.dst, lk.src)):
            if a in names and b not in names and uplink.setdefault(a, b) != b:
                return f"host {a} has several switches"
    for h, sw in uplink.items():
        img = uplink.get(node_map[h])
        if img is None or node_map.setdefault(sw, img) != img:
            return f"switch {sw} has no consistent image"
    if len(set(node_map.values())) != len(node_map):
        return "two switches move onto one"
    lid = {(lk.src, lk.dst): i for i, lk in enumerate(topo.links)}
    pi = np.empty(n_links + n, np.int64)
    for i, lk in enumerate(topo.links):
        j = lid.get((node_map.get(lk.src, lk.src), node_map.get(lk.dst, lk.dst)))
        if j is None:
            return f"link {lk.src}->{lk.dst} has no image"
        other = topo.links[j]
        if (other.bandwidth, other.latency) != (lk.bandwidth, lk.latency):
            return f"link {lk.src}->{lk.dst} and its image differ"
        pi[i] = j
    pi[n_links:] = n_links + perm
    if len(set(pi.tolist())) != len(pi) or not np.array_equal(cap[pi], cap):
        return "the link map is not a capacity-preserving bijection"
    return pi


def _transfer(cw: CompiledWorkload, iid: int) -> Transfer:
    ins = cw.instances
    g = int(ins.group[iid])
    ranks = cw.group_ranks[g] if g >= 0 else (int(ins.src[iid]), int(ins.dst[iid]))
    return Transfer(iid, int(ins.comm_type[iid]), int(ins.size[iid]), ranks, g)


def _transfers(cw: CompiledWorkload, iids: np.ndarray) -> list[Transfer]:
    """``[_transfer(cw, i) for i in iids]``, the columns read once."""
    ins = cw.instances
    group = ins.group[iids].tolist()
    src, dst = ins.src[iids].tolist(), ins.dst[iids].tolist()
    granks = cw.group_ranks
    return [
        Transfer(i, c, z, granks[g] if g >= 0 else (a, b), g)
        for i, c, z, g, a, b in zip(
            iids.tolist(),
            ins.comm_type[iids].tolist(),
            ins.size[iids].tolist(),
            group,
            src,
            dst,
            strict=True,
        )
    ]


@dataclass
class _PricingPlan:
    """The workload side of N2 for one rotation, the same for every pricer (memoised on it).

    An instance's demand is decided by its key (type, size, group; a send/recv's ends too);
    ``keys`` holds one instance per distinct key, in the keys' sorted order, and ``pairs`` the
    distinct (key of ``i``, key of ``sigma_I(i)``) as indices into ``keys``, sorted, with an
    instance ``first`` that has each pair (for messages).
    """

    keys: np.ndarray  # int64 iids, one per distinct key
    pair_a: np.ndarray  # int64 index into keys: key of i
    pair_b: np.ndarray  # int64 index into keys: key of sigma_I(i)
    first: np.ndarray  # int64: the smallest iid with each pair
    # the keys in the order the check prices them, and their transfers (``_priced_order``)
    order: list[int] | None = None
    transfers: tuple[Transfer, ...] | None = None


def _row_ids(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the columns, the index of its distinct row in sorted (lexicographic) order,
    and the smallest row holding each distinct row."""
    n = len(cols[0])
    order = np.lexsort(cols[::-1])  # stable: equal rows stay in ascending row order
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for c in cols:
            s = c[order]
            new[1:] |= s[1:] != s[:-1]
    ids = np.empty(n, np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids, order[new]


def _pricing_plan(cw: CompiledWorkload, orb: RankOrbits) -> _PricingPlan:
    """``_PricingPlan`` of ``orb`` on ``cw``, made once per rotation (a pass over instances)."""
    plan = orb.pricing_plan
    if plan is not None:
        return plan
    ins = cw.instances
    sig = orb.inst_perm
    g = ins.group.astype(np.int64)
    p2p = g < 0
    cols = [
        ins.comm_type.astype(np.int64),
        ins.size.astype(np.int64),
        g,
        np.where(p2p, ins.src, -1).astype(np.int64),
        np.where(p2p, ins.dst, -1).astype(np.int64),
    ]
    kid, keys = _row_ids(cols)
    _, first = _row_ids([kid, kid[sig]])
    plan = _PricingPlan(keys, kid[first], kid[sig[first]], first)
    orb.pricing_plan = plan
    return plan


def _priced_order(
    cw: CompiledWorkload, plan: _PricingPlan
) -> tuple[list[int], tuple[Transfer, ...]]:
    """The keys in the order the check prices them and their transfers, made once per plan
    (the line-rate twin's check reads the same): the order the reference prices in (a pair's
    instance, then its image), each key once, as a pricer may remember what it priced first
    (NcclPricer.choices)."""
    if plan.order is None or plan.transfers is None:
        seq = list(dict.fromkeys(np.stack([plan.pair_a, plan.pair_b], axis=1).ravel().tolist()))
        plan.transfers = tuple(_transfers(cw, plan.keys[seq] if seq else plan.keys[:0]))
        plan.order = seq
    return plan.order, plan.transfers


def check_pricing(
    pricer: Pricer, cw: CompiledWorkload, orb: RankOrbits, pi: np.ndarray
) -> str | None:
    """N2 over every instance; None when it holds.

    Each distinct key is priced once, each distinct demand sorted once, and every distinct pair
    of demands compared at once as arrays: the same comparisons as ``check_pricing_reference``
    (equal latency, and the stable-sorted moved links and their bytes equal to the image's
    stable-sorted links and bytes), so the same verdict. The workload side (which instances
    have which keys and pairs) is made once per rotation and shared by every pricer the
    rotation is checked on (the NCCL-like replay and the line-rate one beside it).
    """
    plan = _pricing_plan(cw, orb)
    # (``price_many``, where the pricer has it, prices them as ``price`` one by one would)
    dems: list[Demand | None] = [None] * len(plan.keys)
    seq, transfers = _priced_order(cw, plan)
    many = getattr(pricer, "price_many", None)
    got = many(transfers) if many is not None else [pricer.price(t) for t in transfers]
    for k, d in zip(seq, got, strict=True):
        dems[k] = d
    slot: dict[int, int] = {}  # id(demand) -> index among the distinct demands
    uniq: list[Demand] = []
    did = np.empty(len(dems), np.int64)
    for k, d in enumerate(dems):
        assert d is not None
        j = slot.get(id(d))
        if j is None:
            j = slot[id(d)] = len(uniq)
            uniq.append(d)
        did[k] = j
    da, db = did[plan.pair_a], did[plan.pair_b]
    bad = _compare_moved(uniq, pi, da, db)
    if bad is None:
        return None
    iid = int(plan.first[bad])
    a, b = uniq[int(da[bad])], uniq[int(db[bad])]
    if a.latency != b.latency or len(a.links) != len(b.links):
        return f"instance {iid} and its image are priced differently"
    return f"instance {iid}'s demand moved by the link map is not its image's"


def _compare_moved(
    dems: list[Demand], pi: np.ndarray, da: np.ndarray, db: np.ndarray
) -> int | None:
    """The first pair ``k`` whose demand ``dems[da[k]]`` moved by ``pi`` differs from
    ``dems[db[k]]`` (latency, links, bytes per link), or None: every pair's, as arrays."""
    lat = np.array([d.latency for d in dems], np.float64)
    lens = np.array([len(d.links) for d in dems], np.int64)
    ok = (lat[da] == lat[db]) & (lens[da] == lens[db])
    if len(dems) and lens.sum():
        links = np.concatenate([np.asarray(d.links, np.int64) for d in dems])
        nbytes = np.concatenate([np.asarray(d.nbytes, np.float64) for d in dems])
        seg = np.repeat(np.arange(len(dems), dtype=np.int64), lens)
        start = np.zeros(len(dems) + 1, np.int64)
        np.cumsum(lens, out=start[1:])
        span = int(max(len(pi), int(links.max()) + 1 if len(links) else 0))
        moved = pi[links]
        # per demand, stable sorts by link (as the reference's argsort(kind="stable")): one
        # sort of (segment, link) keys keeps each segment's equal links in their order
        oa = np.argsort(seg * span + moved, kind="stable")
        ob = np.argsort(seg * span + links, kind="stable")
        a_l, a_b = moved[oa], nbytes[oa]
        b_l, b_b = links[ob], nbytes[ob]
        live = np.flatnonzero(ok & (lens[da] > 0))
        if len(live):
            n = lens[da[live]]
            pos = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
            ia = np.repeat(start[da[live]], n) + pos
            ib = np.repeat(start[db[live]], n) + pos
            same = (a_l[ia] == b_l[ib]) & (a_b[ia] == b_b[ib])
            if not same.all():
                owner = np.repeat(live, n)
                ok[owner[~same]] = False
    wrong = np.flatnonzero(~ok)
    return int(wrong[0]) if len(wrong) else None


def check_pricing_reference(
    pricer: Pricer, cw: CompiledWorkload, orb: RankOrbits, pi: np.ndarray
) -> str | None:
    """N2 as first written (a pair of instances at a time): the reference ``check_pricing`` is
    tested against; None when it holds."""
    ins = cw.instances
    sig = orb.inst_perm
    g = ins.group.astype(np.int64)
    p2p = g < 0
    # an instance's demand is decided by (type, size, group) and, for send/recv, its ends
    key = np.stack(
        [
            ins.comm_type.astype(np.int64),
            ins.size.astype(np.int64),
            g,
            np.where(p2p, ins.src, -1).astype(np.int64),
            np.where(p2p, ins.dst, -1).astype(np.int64),
        ],
        axis=1,
    )
    both = np.concatenate([key, key[sig]], axis=1)
    _, first = np.unique(both, axis=0, return_index=True)
    seen: set[tuple[int, int]] = set()
    for iid in first.tolist():
        a = pricer.price(_transfer(cw, iid))
        b = pricer.price(_transfer(cw, int(sig[iid])))
        if (id(a), id(b)) in seen:
            continue
        seen.add((id(a), id(b)))
        if a.latency != b.latency or len(a.links) != len(b.links):
            return f"instance {iid} and its image are priced differently"
        moved = pi[a.links]
        order = np.argsort(moved, kind="stable")
        bo = np.argsort(b.links, kind="stable")
        if not (
            np.array_equal(moved[order], b.links[bo])
            and np.array_equal(a.nbytes[order], b.nbytes[bo])
        ):
            return f"instance {iid}'s demand moved by the link map is not its image's"
    return None


class Quotient:
    """What the backend prices in an orbit replay: representatives' instances on link orbits."""

    def __init__(
        self,
        orb: RankOrbits,
        pi: np.ndarray,
        cap: np.ndarray,
        cycles: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.orb = orb
        self.pi = pi
        # link orbits: representative (smallest) link and the power e with l = pi^e(rep)
        self.link_rep, self.link_pos, self.link_len = _cycles(pi) if cycles is None else cycles
        self.cap = cap
        self._cache: dict[tuple[int, int], Demand] = {}
        self._keep: list[Demand] = []

    def demand(self, iid: int, dem: Demand) -> Demand:
        """The summed demand of instance ``iid``'s orbit on representative links (see above)."""
        k = int(self.orb.inst_orbit[iid])
        key = (id(dem), k)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        links = dem.links
        if len(links) == 0:
            out = dem
        else:
            w = float(np.max(dem.nbytes / self.cap[links]))
            c = self.link_len[links]
            j0 = (c - self.link_pos[links]) % c
            count = np.where(j0 < k, (k - j0 + c - 1) // c, 0)
            lam = self.link_rep[links]
            uniq, inv = np.unique(lam, return_inverse=True)
            nb = np.bincount(inv, weights=dem.nbytes * count, minlength=len(uniq))
            keep = nb > 0
            out = Demand(dem.latency, uniq[keep], nb[keep], alone_w=w)
        self._keep.append(dem)  # id(dem) stays unique while cached
        self._cache[key] = out
        return out

    def expand_links(self, per_link: np.ndarray) -> np.ndarray:
        """A per-link figure of representative links, copied to every link of their orbit."""
        return per_link[self.link_rep]


def _cycles(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per element ``l`` of permutation ``p``: its cycle's smallest element ``rep``, the power
    ``e`` with ``l = p^e(rep)``, and its cycle's length (one walk, each element once)."""
    n = len(p)
    nxt = p.tolist()
    rep = [-1] * n
    pos = [0] * n
    length = [0] * n
    for start in range(n):  # ascending: a cycle is first met at its smallest element
        if rep[start] >= 0:
            continue
        cyc = [start]
        x = nxt[start]
        while x != start:
            cyc.append(x)
            x = nxt[x]
        k = len(cyc)
        for e, y in enumerate(cyc):
            rep[y], pos[y], length[y] = start, e, k
    return np.asarray(rep, np.int64), np.asarray(pos, np.int64), np.asarray(length, np.int64)


def quotient_for(
    orbits: Orbits, pricer: Pricer, cw: CompiledWorkload
) -> tuple[Quotient | None, str]:
    """The first candidate whose network obligations (N1, N2) hold, or None and why not."""
    why = "no candidate"
    for orb in orbits.each():
        pi, cycles = _link_side(pricer, orb)
        if isinstance(pi, str):
            why = pi
            log.debug("orbit replay (shift %d, block %d): %s", orb.shift, orb.block, pi)
            continue
        bad = check_pricing(pricer, cw, orb, pi)
        if bad is not None:
            why = bad
            log.debug("orbit replay (shift %d, block %d): %s", orb.shift, orb.block, bad)
            continue
        return Quotient(orb, pi, np.asarray(pricer.capacity(), np.float64), cycles), ""
    return None, why


def _link_side(pricer: Pricer, orb: RankOrbits) -> tuple[np.ndarray | str, tuple | None]:
    """``link_permutation(pricer, orb.perm)`` (N1) and the cycles of ``pi``, remembered on
    ``orb`` per network: pricers on one topology object with the same placement and link
    capacities (the NCCL-like pricer and its line-rate twin) get the same answer, so it is
    worked out once. What N1 reads is all in the key (the topology held, so its id stays)."""
    base = getattr(pricer, "fallback", pricer)
    topo = getattr(base, "topology", None)
    host_of = getattr(base, "host_of", None)
    if topo is None or host_of is None:
        return link_permutation(pricer, orb.perm), None
    cap = np.asarray(pricer.capacity(), np.float64)
    key = (
        id(topo),
        getattr(base, "n_links", None),
        np.asarray(host_of).tobytes(),
        str(np.asarray(host_of).dtype),
        cap.tobytes(),
    )
    hit = orb.link_memo.get(key)
    if hit is None:
        pi = link_permutation(pricer, orb.perm)
        hit = orb.link_memo[key] = (topo, pi, None if isinstance(pi, str) else _cycles(pi))
    return hit[1], hit[2]

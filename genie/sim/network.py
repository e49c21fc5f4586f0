"""Network backends: the one small interface the engine drives, and the fluid analytical one.

The engine hands a backend a ``Transfer`` when every participant of a collective (or both ends
of a send/recv) has arrived, with ``start(transfer, now)``; it asks ``next_time()`` for the
earliest completion and collects the finished instance ids with ``pop(now)``. Times are seconds.
A backend whose ``per_member`` attribute is true is driven per member instead
(``PerMemberBackend``): ``arrive(transfer, rank, now)`` as each member arrives, and
``pop_members(now)`` returns ``(iid, rank)`` as each member ends (the engine then replays every
rank; ``genie.sim.astra_model`` is one). What else the engine and the reports read of a backend
is declared on ``NetworkBackend`` too: its ``notes``, the ``standalone`` time of each instance,
an optional ``lazy_next``, and ``link_usage()`` (what a backend that tracks links recorded).

``AnalyticalBackend`` prices each transfer with a *pricer* (``price(transfer) -> Demand``): the
bytes it puts on each link of a topology and its latency term. Alone, a transfer moves its bytes
in ``W = max(bytes_l / capacity_l)`` and then finishes ``latency`` later (bytes first, then the
latency tail, which does not hold links). Transfers in flight at the same time share links with
weighted max-min fairness (progressive filling): each transfer runs at a fraction ``r <= 1`` of
its standalone speed, its demand on link ``l`` being ``r * bytes_l / W``, and rates are
recomputed whenever a transfer starts or its bytes finish. Two equal transfers on one link thus
take twice as long as one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeGuard

import numpy as np

if TYPE_CHECKING:
    from genie.sim.orbits import Quotient


@dataclass(slots=True)
class Transfer:
    """One communication instance handed to a backend."""

    iid: int
    comm_type: int  # Chakra number, or compiled.P2P for send/recv
    size: int  # bytes
    ranks: tuple[int, ...]  # the group's global ranks, or (src, dst)
    group: int  # group id, -1 for send/recv


@dataclass(slots=True)
class Demand:
    """What a transfer asks of the network: bytes per link and a latency term."""

    latency: float
    links: np.ndarray  # int64 link ids
    nbytes: np.ndarray  # float64 bytes per link
    # the bytes-time W alone, when it is not max(nbytes / capacity): an orbit's summed demand
    # (``genie.sim.orbits``) moves at the pace of one of its copies
    alone_w: float | None = None


class Pricer(Protocol):
    """Turns a transfer into link loads on a fixed set of links."""

    def capacity(self) -> np.ndarray:
        """Bandwidth of every link, bytes/s."""
        ...

    def price(self, transfer: Transfer) -> Demand:
        """Bytes per link and latency of one transfer."""
        ...

    def link_names(self) -> list[str]:
        """A name for every link, in the order of ``capacity()``."""
        ...

    def describe(self) -> str:
        """The network it prices, in one line (reports say it beside every number)."""
        ...


def generic_link_names(n_links: int) -> list[str]:
    """``link 0``, ``link 1``...: the names of links a pricer does not name."""
    return [f"link {i}" for i in range(n_links)]


class CachedPricer:
    """Base of the analytical pricers: each demand is built once per (type, size, group).

    A collective's demand depends on its type, size and group only (its ranks are the group's);
    a send/recv's (group -1) on its two ranks too. Subclasses define ``capacity()`` and
    ``_price(transfer)``; ``price`` serves repeats from the cache.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[object, ...], Demand] = {}

    def capacity(self) -> np.ndarray:
        """Bandwidth of every link, bytes/s."""
        raise NotImplementedError

    def describe(self) -> str:
        """The network it prices, in one line (subclasses say more)."""
        return f"{type(self).__name__}: {len(self.capacity())} links"

    def _price(self, transfer: Transfer) -> Demand:
        raise NotImplementedError

    def link_names(self) -> list[str]:
        """Generic names (``link 0``...); pricers that know their links name them."""
        return generic_link_names(len(self.capacity()))

    def price(self, transfer: Transfer) -> Demand:
        """Bytes per link and latency of one transfer (cached)."""
        key: tuple[object, ...] = (transfer.comm_type, transfer.size, transfer.group)
        if transfer.group < 0:
            key = (*key, transfer.ranks)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._price(transfer)
        return hit


@dataclass(frozen=True, slots=True)
class LinkUsage:
    """What a backend that tracks links recorded over a replay, per link (pricer's order)."""

    names: list[str]
    capacity: np.ndarray  # bytes/s
    nbytes: np.ndarray  # bytes carried
    saturated_s: np.ndarray  # seconds at capacity (the link set the pace of what crossed it)


class NetworkBackend(Protocol):
    """The interface the engine drives (see the module docstring)."""

    name: str
    notes: list[str]  # said on the report (how the backend models the network)

    @property
    def per_member(self) -> bool:
        """True: driven per member, as a ``PerMemberBackend`` (``arrive``, ``pop_members``)."""
        ...

    @property
    def lazy_next(self) -> Callable[[], tuple[float, bool]] | None:
        """None, or what the engine asks after a start instead of ``next_time()``.

        It returns ``(t, True)`` with the next completion, or ``(t, False)``: the next
        completion is strictly after ``t`` (not resolved yet, so starts at one time resolve
        once).
        """
        ...

    @property
    def standalone(self) -> dict[int, float] | None:
        """Instance id -> seconds it would take alone on the network (None: not known)."""
        ...

    def start(self, transfer: Transfer, now: float) -> None:
        """Begin ``transfer`` at time ``now``."""
        ...

    def next_time(self) -> float:
        """Earliest completion time of a transfer in flight (``inf`` when none)."""
        ...

    def pop(self, now: float) -> list[int]:
        """Instance ids that complete at ``now`` (which must be ``next_time()``)."""
        ...

    def link_usage(self) -> LinkUsage | None:
        """What each link carried, when the backend tracks links (else None)."""
        ...


class PerMemberBackend(NetworkBackend, Protocol):
    """A backend driven per member (``per_member`` true): ranks issue and finish on their own."""

    def arrive(self, transfer: Transfer, rank: int, now: float) -> None:
        """Member ``rank`` of ``transfer`` arrived at ``now``."""
        ...

    def pop_members(self, now: float) -> list[tuple[int, int]]:
        """``(iid, rank)`` of each member whose share ends at ``now`` (``next_time()``)."""
        ...


def is_per_member(backend: NetworkBackend) -> TypeGuard[PerMemberBackend]:
    """Whether the engine drives ``backend`` per member."""
    return backend.per_member


_REL = 1e-12
_ULPS = 8 * 2.0**-52  # a few units in the last place of a time, relative


def fill(cap: np.ndarray, links: list[np.ndarray], demand: list[np.ndarray]) -> list[float] | None:
    """Weighted max-min fair rates (fractions of full speed) of transfers by progressive filling.

    Transfer k puts ``demand[k] * rate`` bytes/s on its ``links[k]``; links have ``cap``. None
    when every transfer fits at full speed (no link over its capacity).
    """
    all_links = np.concatenate(links)
    dem = np.concatenate(demand)
    owner = np.repeat(np.arange(len(links)), [len(x) for x in links])
    uniq, inv = np.unique(all_links, return_inverse=True)
    c = cap[uniq]
    load = np.bincount(inv, weights=dem, minlength=len(uniq))
    if np.all(load <= c * (1 + _REL)):
        return None
    k = len(links)
    rate = np.zeros(k)
    frozen = np.zeros(k, bool)
    rem = c.copy()
    level = 0.0
    n_links = len(uniq)
    while not frozen.all():
        live = ~frozen[owner]
        load = np.bincount(inv[live], weights=dem[live], minlength=n_links)
        used = load > 0
        theta_l = np.full(n_links, np.inf)
        np.divide(rem, load, out=theta_l, where=used)
        tmin = float(theta_l.min())
        if level + tmin >= 1.0 - _REL:  # nothing left saturates before full speed
            rate[~frozen] = 1.0
            break
        level += tmin
        rem -= tmin * load
        # every link that saturates now (within rounding) freezes the transfers on it
        sat = used & (theta_l <= tmin * (1 + 1e-9) + 1e-300)
        newly = np.zeros(k, bool)
        newly[owner[live & sat[inv]]] = True
        newly &= ~frozen
        rate[newly] = level
        frozen |= newly
    return rate.tolist()


class _Fluid:
    """What the fluid backends share: standalone time, and cached max-min rates of a set."""

    cap: np.ndarray
    pricer: Pricer
    shared_count: int
    _rate_cache: dict[tuple[int, ...], list[float]]
    _keep: dict[int, tuple]  # id(demand) -> (demand, W, demand bytes/s per link array, ...)
    _tails: list[tuple[float, int]]  # (time the latency tail is over, iid)
    # one transfer alone runs at full speed; not so an orbit's summed demand (``use_orbits``)
    _single_fits = True

    def alone(self, transfer: Transfer) -> float:
        """Time ``transfer`` would take with the network to itself (no state change)."""
        dem = self.pricer.price(transfer)
        w = float(np.max(dem.nbytes / self.cap[dem.links])) if len(dem.links) else 0.0
        return w + dem.latency

    def _tails_done(self, now: float) -> list[int]:
        """Instances whose latency tail is over at ``now``."""
        done: list[int] = []
        tails = self._tails
        while tails and tails[0][0] <= now + 1e-18 + abs(now) * _REL:
            done.append(heapq.heappop(tails)[1])
        return done

    def _cached_rates(self, states: list[list]) -> tuple[list[list], list[float]]:
        """``states`` ordered by demand, and their max-min rates (cached by the demands)."""
        states = sorted(states, key=lambda st: st[6])
        key = tuple(st[6] for st in states)
        rates = self._rate_cache.get(key)
        if rates is None:
            rates = self._fill(states)
            if len(self._rate_cache) < 100_000:
                self._rate_cache[key] = rates
        return states, rates

    def _fill(self, states: list[list]) -> list[float]:
        """Weighted max-min fair rates of ``states`` by progressive filling."""
        if len(states) == 1 and self._single_fits:
            return [1.0]
        rates = fill(self.cap, [st[3] for st in states], [self._keep[st[6]][2] for st in states])
        if rates is None:
            return [1.0] * len(states)
        self.shared_count += 1
        return rates


class AnalyticalBackend(_Fluid):
    """Fluid link-sharing model over a pricer (see the module docstring).

    Rates are max-min fair within each *connected set* of transfers in flight (transfers linked
    by sharing links, transitively): a start or an end re-fills only the set it touches, and not
    even that when nothing there is slowed (a transfer that fits beside transfers all at full
    speed changes no rate; one whose links carry no slowed transfer leaves none changed when it
    ends). Each transfer's progress is brought up to date only when its rate changes, and
    completions come from a heap. ``ReferenceAnalyticalBackend`` re-fills everything on every
    event; the rates agree (the tests hold them to the same times).
    """

    per_member = False

    def __init__(self, pricer: Pricer, name: str = "analytical", track_links: bool = False) -> None:
        self.name = name
        self.pricer = pricer
        self.cap = np.asarray(pricer.capacity(), np.float64)
        self._cap_l = self.cap.tolist()
        self.notes: list[str] = []
        self.track_links = track_links
        self._sat_s = np.zeros(len(self.cap))  # saturated seconds up to the last change
        self._sat_since: dict[int, float] = {}  # saturated link -> since when
        self._starts: dict[int, int] = {}  # id(demand) -> transfers started with it
        # iid -> [remaining standalone s at t_last, rate, W, links, demand per link (dict),
        #         latency, id(demand), t_last, version, iid]
        self._active: dict[int, list] = {}
        self._on: dict[int, dict[int, list]] = {}  # link -> {iid: state} of transfers on it
        self._heap: list[tuple[float, int, int]] = []  # (bytes-done time, version, iid)
        self._tails: list[tuple[float, int]] = []
        self._last = 0.0
        self._next = math.inf
        self.standalone: dict[int, float] = {}  # iid -> time it would take alone
        self.shared_count = 0  # rate computations where links were contended
        self._rate_cache: dict[tuple[int, ...], list[float]] = {}
        self._pending: set[int] = set()  # links of starts whose re-fill is not done yet
        self._pending_at = 0.0
        # id(demand) -> (demand, W, demand bytes/s per link: array, and as a dict)
        self._keep: dict[int, tuple] = {}
        self._quotient: Quotient | None = None  # an orbit replay's (``use_orbits``)

    def use_orbits(self, quotient: Quotient) -> None:
        """Price each transfer as its whole orbit on representative links (``genie.sim.orbits``)."""
        self._quotient = quotient
        self._single_fits = False

    @property
    def link_bytes(self) -> np.ndarray | None:
        """Bytes each link carried (with ``track_links``)."""
        if not self.track_links:
            return None
        out = np.zeros(len(self.cap))
        for did, count in self._starts.items():
            dem = self._keep[did][0]
            if len(dem.links):
                np.add.at(out, dem.links, dem.nbytes * count)
        return out if self._quotient is None else self._quotient.expand_links(out)

    @property
    def link_saturated_s(self) -> np.ndarray | None:
        """Seconds each link was saturated: its load at its capacity (with ``track_links``)."""
        if not self.track_links:
            return None
        out = self._sat_s.copy()
        for lid, since in self._sat_since.items():
            out[lid] += self._last - since
        return out if self._quotient is None else self._quotient.expand_links(out)

    def link_usage(self) -> LinkUsage | None:
        """What each link carried and how long it was saturated (with ``track_links``)."""
        nbytes, sat = self.link_bytes, self.link_saturated_s
        if nbytes is None or sat is None:
            return None
        return LinkUsage(self.pricer.link_names(), self.cap, nbytes, sat)

    def _known(self, dem: Demand) -> tuple:
        did = id(dem)
        known = self._keep.get(did)
        if known is None or known[0] is not dem:
            w = float(np.max(dem.nbytes / self.cap[dem.links])) if len(dem.links) else 0.0
            if dem.alone_w is not None:
                w = dem.alone_w
            per = dem.nbytes / w if w > 0 else dem.nbytes
            # keeping dem alive keeps id(dem) unique while the caches hold it
            known = (dem, w, per, dict(zip(dem.links.tolist(), per.tolist(), strict=True)))
            self._keep[did] = known
        return known

    def start(self, transfer: Transfer, now: float) -> None:
        """Begin a transfer: price it, then share links with those in flight."""
        dem = self.pricer.price(transfer)
        if self._quotient is not None:
            dem = self._quotient.demand(transfer.iid, dem)
        known = self._known(dem)
        did = id(dem)
        w = known[1]
        self.standalone[transfer.iid] = w + dem.latency
        self._last = now
        if self.track_links:
            self._starts[did] = self._starts.get(did, 0) + 1
        if w <= 0.0:
            heapq.heappush(self._tails, (now + dem.latency, transfer.iid))
            if not self._pending:
                self._next = self._compute_next()
            return
        per = known[3]
        iid = transfer.iid
        st = [w, 1.0, w, dem.links, per, dem.latency, did, now, 0, iid]
        self._active[iid] = st
        on = self._on
        cap = self._cap_l
        fits = not self._pending  # rates in flight are stale until the pending re-fill
        for lid, d in per.items():
            others = on.get(lid)
            if others is None:
                on[lid] = {iid: st}
                # alone a transfer fits, but an orbit's summed demand may not (``use_orbits``)
                if fits and d > cap[lid] * (1 + _REL):
                    fits = False
                continue
            if fits:
                load = d
                for o in others.values():
                    load += o[4][lid] * o[1]
                if load > cap[lid] * (1 + _REL):
                    fits = False
            others[iid] = st
        if fits:  # full speed beside the others, whose rates stay as they were
            heapq.heappush(self._heap, (now + w, 0, iid))
            if self.track_links:
                self._check_saturation(per, now)
            if not self._pending:
                self._next = self._compute_next()
        else:
            st[8] = -1  # not on the heap yet: the refill puts it there
            self._pending.update(per)
            self._pending_at = now

    def _resolve(self) -> None:
        """Re-fill what the starts since the last resolve connected to (at one time)."""
        pending = self._pending
        if pending:
            self._pending = set()
            self._refill(pending, self._pending_at)
            self._next = self._compute_next()

    def lazy_next(self) -> tuple[float, bool]:
        """(t, True) with the next completion, or (t, False): it is strictly after ``t``.

        Rates are left to re-fill until asked, so starts at one time re-fill once.
        """
        if self._pending and not (self._tails and self._tails[0][0] <= self._pending_at):
            return self._pending_at, False
        self._resolve()
        return self._next, True

    def _refill(self, links, now: float) -> None:
        """Recompute the rates of every transfer connected to ``links``, set by set."""
        on = self._on
        seen: set[int] = set()
        changed = set(links) if self.track_links else None  # links whose load changed
        for root in links:
            if root in seen or root not in on:
                continue
            group: dict[int, list] = {}
            stack = [root]
            seen.add(root)
            while stack:
                for iid, st in on[stack.pop()].items():
                    if iid not in group:
                        group[iid] = st
                        for x in st[4]:
                            if x not in seen:
                                seen.add(x)
                                stack.append(x)
            self._set_rates(group, now, changed)
        if changed:
            self._check_saturation(changed, now)

    def _set_rates(self, group: dict[int, list], now: float, changed: set | None) -> None:
        """Give one connected set of transfers its max-min rates from ``now`` on."""
        states, rates = self._cached_rates(list(group.values()))
        heap = self._heap
        for st, r in zip(states, rates, strict=True):
            if r != st[1] or st[8] < 0:
                st[0] -= st[1] * (now - st[7])
                st[7] = now
                st[1] = r
                st[8] = abs(st[8]) + 1
                heapq.heappush(heap, (now + st[0] / r, st[8], st[9]))
                if changed is not None:
                    changed.update(st[4])

    def _check_saturation(self, links, now: float) -> None:
        """Note which of ``links`` are saturated now (load at capacity) and since when."""
        since = self._sat_since
        cap = self._cap_l
        for lid in links:
            others = self._on.get(lid)
            load = 0.0
            if others:
                for o in others.values():
                    load += o[4][lid] * o[1]
            sat = load >= cap[lid] * (1 - 1e-9)
            was = since.get(lid)
            if sat and was is None:
                since[lid] = now
            elif not sat and was is not None:
                self._sat_s[lid] += now - was
                del since[lid]

    def _head(self) -> tuple[float, list] | None:
        """The earliest bytes-done time on the heap and its transfer (stale entries dropped)."""
        heap = self._heap
        active = self._active
        while heap:
            when, version, iid = heap[0]
            st = active.get(iid)
            if st is not None and st[8] == version:
                return when, st
            heapq.heappop(heap)
        return None

    def _compute_next(self) -> float:
        t = self._tails[0][0] if self._tails else math.inf
        head = self._head()
        return t if head is None else min(t, head[0])

    def next_time(self) -> float:
        """Earliest completion (bytes done or latency tail over)."""
        self._resolve()
        return self._next

    def pop(self, now: float) -> list[int]:
        """Finish what ends at ``now``: bytes-done transfers enter their latency tail."""
        self._resolve()
        self._last = now
        finished = []
        active = self._active
        while (head := self._head()) is not None:
            st = head[1]
            # done within the bytes' own tolerance, or within what the clock can tell apart
            # at ``now`` (a fast link moves more than the bytes' tolerance in one ulp of a
            # time near a second: without it the event never pops and the replay spins)
            slack = _REL * st[2] * 16 + st[1] * abs(now) * _ULPS + 1e-18
            if st[0] - st[1] * (now - st[7]) > slack:
                break
            heapq.heappop(self._heap)
            finished.append(st)
        if finished:
            touched: set[int] = set()
            slowed = False
            on = self._on
            for st in finished:
                iid = st[9]
                del active[iid]
                heapq.heappush(self._tails, (now + st[5], iid))
                slowed = slowed or st[1] != 1.0
                for lid in st[4]:
                    others = on[lid]
                    del others[iid]
                    if others:
                        touched.add(lid)
                        if not slowed:
                            slowed = any(o[1] != 1.0 for o in others.values())
                    else:
                        del on[lid]
                        if self.track_links and lid in self._sat_since:
                            self._check_saturation((lid,), now)
            if slowed:
                self._refill(touched, now)
            elif self.track_links:
                self._check_saturation(touched, now)
        done = self._tails_done(now)
        self._next = self._compute_next()
        return done


class ReferenceAnalyticalBackend(_Fluid):
    """The fluid model computed the plain way: every event re-fills every transfer in flight.

    ``AnalyticalBackend`` gives the same rates per connected set of transfers and is what
    ``genie simulate`` runs; this one is the reference its tests compare against.
    """

    per_member = False
    lazy_next = None

    def __init__(self, pricer: Pricer, name: str = "analytical", track_links: bool = False) -> None:
        self.name = name
        self.pricer = pricer
        self.cap = np.asarray(pricer.capacity(), np.float64)
        self.notes: list[str] = []
        # with track_links: bytes each link carried, and how long each was saturated (a
        # bottleneck: its load at its capacity, so it set the rate of what crossed it)
        self.track_links = track_links
        self._link_bytes = np.zeros(len(self.cap))
        self._link_saturated_s = np.zeros(len(self.cap))
        self._sat: np.ndarray = np.zeros(0, np.int64)
        self._sat_cache: dict[tuple[int, ...], np.ndarray] = {}
        # iid -> [remaining standalone seconds, rate, W, links, demand bytes/s, latency]
        self._active: dict[int, list] = {}
        self._tails: list[tuple[float, int]] = []
        self._last = 0.0
        self._next = math.inf
        self.standalone: dict[int, float] = {}  # iid -> time it would take alone
        self.shared_count = 0  # rate recomputations where links were contended
        # rates depend only on the multiset of demands in flight: cache them by demand ids
        self._rate_cache: dict[tuple[int, ...], list[float]] = {}
        self._keep: dict[int, tuple[Demand, float, np.ndarray]] = {}

    @property
    def link_bytes(self) -> np.ndarray | None:
        """Bytes each link carried (with ``track_links``)."""
        return self._link_bytes if self.track_links else None

    @property
    def link_saturated_s(self) -> np.ndarray | None:
        """Seconds each link was saturated: its load at its capacity (with ``track_links``)."""
        return self._link_saturated_s if self.track_links else None

    def link_usage(self) -> LinkUsage | None:
        """What each link carried and how long it was saturated (with ``track_links``)."""
        if not self.track_links:
            return None
        names = self.pricer.link_names()
        return LinkUsage(names, self.cap, self._link_bytes, self._link_saturated_s)

    def _advance(self, now: float) -> None:
        dt = now - self._last
        if dt > 0:
            for st in self._active.values():
                st[0] -= st[1] * dt
            if self.track_links and len(self._sat):
                self._link_saturated_s[self._sat] += dt
        self._last = now

    def start(self, transfer: Transfer, now: float) -> None:
        """Begin a transfer: price it, then share links with those in flight."""
        dem = self.pricer.price(transfer)
        did = id(dem)
        known = self._keep.get(did)
        if known is None or known[0] is not dem:
            w = float(np.max(dem.nbytes / self.cap[dem.links])) if len(dem.links) else 0.0
            if dem.alone_w is not None:
                w = dem.alone_w
            # keeping dem alive keeps id(dem) unique while the rate cache holds it
            known = (dem, w, dem.nbytes / w if w > 0 else dem.nbytes)
            self._keep[did] = known
        w = known[1]
        self.standalone[transfer.iid] = w + dem.latency
        self._advance(now)
        if self.track_links and len(dem.links):
            np.add.at(self._link_bytes, dem.links, dem.nbytes)
        if w <= 0.0:
            heapq.heappush(self._tails, (now + dem.latency, transfer.iid))
        else:
            st = [w, 1.0, w, dem.links, known[2], dem.latency, did]
            self._active[transfer.iid] = st
            self._rates()
        self._next = self._compute_next()

    def _rates(self) -> None:
        act = self._active
        if len(act) <= 1:
            for st in act.values():
                st[1] = 1.0
            if self.track_links:
                self._saturated(list(act.values()))
            return
        states, hit = self._cached_rates(list(act.values()))
        for st, r in zip(states, hit, strict=True):
            st[1] = r
        if self.track_links:
            self._saturated(states)

    def _saturated(self, states: list[list]) -> None:
        """The links whose load is at their capacity at the current rates (bottlenecks)."""
        if not states:
            self._sat = np.zeros(0, np.int64)
            return
        key = tuple(st[6] for st in states)
        hit = self._sat_cache.get(key)
        if hit is None:
            links = np.concatenate([st[3] for st in states])
            load = np.concatenate([st[4] * st[1] for st in states])
            uniq, inv = np.unique(links, return_inverse=True)
            total = np.bincount(inv, weights=load, minlength=len(uniq))
            hit = uniq[total >= self.cap[uniq] * (1 - 1e-9)]
            if len(self._sat_cache) < 100_000:
                self._sat_cache[key] = hit
        self._sat = hit

    def _compute_next(self) -> float:
        t = self._tails[0][0] if self._tails else math.inf
        last = self._last
        for st in self._active.values():
            x = last + st[0] / st[1]
            if x < t:
                t = x
        return t

    def next_time(self) -> float:
        """Earliest completion (bytes done or latency tail over)."""
        return self._next

    def pop(self, now: float) -> list[int]:
        """Finish what ends at ``now``: bytes-done transfers enter their latency tail."""
        self._advance(now)
        finished = [iid for iid, st in self._active.items() if st[0] <= _REL * st[2] * 16 + 1e-18]
        for iid in finished:
            st = self._active.pop(iid)
            heapq.heappush(self._tails, (now + st[5], iid))
        if finished:
            self._rates()
        done = self._tails_done(now)
        self._next = self._compute_next()
        return done


class CalibratedPricer(CachedPricer):
    """A pricer whose transfers alone take a given (e.g. measured) time, with the base's links.

    ``alone(transfer)`` gives the time the transfer takes with the network to itself (or None to
    keep the base pricer's). The base demand's bytes and latency are scaled by one factor so the
    standalone time matches; transfers in flight together then share links as the base says.
    """

    def __init__(self, base: Pricer, alone) -> None:
        super().__init__()
        self.base = base
        self.alone = alone
        self._cap = np.asarray(base.capacity(), np.float64)

    def capacity(self) -> np.ndarray:
        """The base pricer's links."""
        return self._cap

    def link_names(self) -> list[str]:
        """The base pricer's link names."""
        return self.base.link_names()

    def _price(self, transfer: Transfer) -> Demand:
        """The base demand scaled to the calibrated standalone time."""
        dem = self.base.price(transfer)
        t = self.alone(transfer)
        if t is not None:
            w = float(np.max(dem.nbytes / self._cap[dem.links])) if len(dem.links) else 0.0
            a = w + dem.latency
            if a > 0:
                f = t / a
                dem = Demand(latency=dem.latency * f, links=dem.links, nbytes=dem.nbytes * f)
            else:
                dem = Demand(latency=t, links=dem.links[:0], nbytes=dem.nbytes[:0])
        return dem


class FixedTimeBackend:
    """A backend whose instances each take a duration known up front (measured or tabled).

    Subclasses define ``duration(transfer)``. With a ``pricer`` the instances in flight together
    share links as the analytical backend shares them, each scaled to its own duration
    (``CalibratedPricer``); without one, each completes ``duration`` after it starts.
    """

    per_member = False
    lazy_next = None

    def __init__(self, name: str, pricer: Pricer | None = None) -> None:
        self.name = name
        self.notes: list[str] = []  # subclasses say how they model the network
        self._heap: list[tuple[float, int]] = []
        self.standalone: dict[int, float] = {}
        self._inner: AnalyticalBackend | None = None
        if pricer is not None:
            self._inner = AnalyticalBackend(CalibratedPricer(pricer, self.duration), name)
            self.standalone = self._inner.standalone

    def duration(self, transfer: Transfer) -> float:
        """The instance's time when alone on the network (s)."""
        raise NotImplementedError

    def start(self, transfer: Transfer, now: float) -> None:
        """Begin the instance."""
        if self._inner is not None:
            self._inner.start(transfer, now)
            return
        t = self.duration(transfer)
        self.standalone[transfer.iid] = t
        heapq.heappush(self._heap, (now + t, transfer.iid))

    def next_time(self) -> float:
        """Earliest completion."""
        if self._inner is not None:
            return self._inner.next_time()
        return self._heap[0][0] if self._heap else math.inf

    def pop(self, now: float) -> list[int]:
        """Instances completing at ``now``."""
        if self._inner is not None:
            return self._inner.pop(now)
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[1])
        return out

    def link_usage(self) -> LinkUsage | None:
        """None: the instances' times are given, no link is tracked."""
        return None


class ZeroNetwork(FixedTimeBackend):
    """A network on which every transfer completes the instant it starts (compute-only replay)."""

    def __init__(self) -> None:
        super().__init__("zero")

    def duration(self, transfer: Transfer) -> float:
        """Zero: no network."""
        return 0.0

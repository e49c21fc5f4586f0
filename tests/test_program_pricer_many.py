"""``ProgramPricer.price_many`` (what ``orbits.check_pricing`` prices thousands of transfers
with) against pricing them one by one with ``price``: the same latency, links and bytes bit for
bit, one demand object per cache key, the same cost-model calls in the same order (so the NCCL-
like model's first choice per shape is the same), the same ``priced`` and ``fallbacks``; and the
loop itself where the array renaming does not apply (no canonical shapes, a subclass's own
``price``)."""

from __future__ import annotations

import numpy as np
import pytest

from genie.collectives import nccl_model
from genie.collectives.topology import leaf_spine, switch
from genie.sim.nccl_pricer import NcclPricer
from genie.sim.network import Demand, Transfer
from genie.sim.program_pricer import ProgramPricer

P2P, ALL_REDUCE, ALL_GATHER, GATHER, ALL_TO_ALL, REDUCE_SCATTER = -1, 0, 2, 3, 6, 7
# 24 ranks; groups inside a host, a leaf, across leaves, reversed, repeated (one cache key
# twice), an all-to-all-v, and a gather (the cost model declines it: the traffic model prices)
GROUPS = [
    (0, 1),
    (5, 6),
    (9, 11),
    (0, 4),
    (2, 7),
    (11, 3),
    (0, 4, 8),
    (1, 5, 9),
    (3, 10, 6),
    (0, 1, 4, 5),
    (2, 3, 10, 11),
    (8, 9, 10, 11),
    tuple(range(12)),
    tuple(range(12, 24)),
    (7, 0, 11, 2, 5, 9),
    (13, 22),
]
SPLIT = 15  # the group priced as an all-to-all-v


def _transfers() -> list[Transfer]:
    out = []
    for g, ranks in enumerate(GROUPS):
        for ctype in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, GATHER):
            out.append(Transfer(len(out), ctype, 3 << 20, ranks, g))
        out.append(Transfer(len(out), ALL_REDUCE, 0, ranks, g))  # empty: the traffic model
        if len(ranks) == 2:  # a send/recv each way
            out.append(Transfer(len(out), P2P, 1 << 20, ranks, -1))
            out.append(Transfer(len(out), P2P, 1 << 20, ranks[::-1], -1))
    # the same keys again (other instances), an all-to-all-v
    out += [
        Transfer(len(out) + k, t.comm_type, t.size, t.ranks, t.group) for k, t in enumerate(out[:9])
    ]
    out.append(Transfer(len(out), ALL_TO_ALL, 3 << 20, GROUPS[SPLIT], SPLIT))
    return out


def _topology(kind: str):
    if kind == "switch":
        return switch(12, 50e9, 500e-9, intra_bandwidth=200e9)
    spines = 2 if kind == "two_spines" else 1
    return leaf_spine(3, spines, 4, 50e9, 500e-9, oversubscription=2.0, intra_bandwidth=200e9)


def _pricer(kind: str, nccl: bool, cls: type = ProgramPricer) -> ProgramPricer:
    topo = _topology(kind)
    hosts = [r // 2 for r in range(24)]  # two ranks a host: intra-host bytes too
    if nccl:
        sys = nccl_model.System(nodes=1, gpus_per_node=1, intra_bw=1.0, net_bw=1.0)
        p: ProgramPricer = NcclPricer(topo, hosts, 24, sys)
    else:
        p = cls(topo, hosts, 24)
    last = len(_transfers()) - 1
    return p.use_splits({last: np.arange(4, dtype=np.int64).reshape(2, 2) * 1000 + 7})


def _same(a: Demand, b: Demand) -> None:
    assert type(a.latency) is type(b.latency) and a.latency == b.latency
    assert a.links.dtype == b.links.dtype and a.links.tolist() == b.links.tolist()
    assert a.nbytes.dtype == b.nbytes.dtype and a.nbytes.tolist() == b.nbytes.tolist()
    assert a.alone_w == b.alone_w


@pytest.mark.parametrize("kind", ["switch", "leaf_spine", "two_spines"])
@pytest.mark.parametrize("nccl", [False, True])
def test_price_many_prices_as_price_one_by_one(kind: str, nccl: bool, monkeypatch) -> None:
    ts = _transfers()
    many, one = _pricer(kind, nccl), _pricer(kind, nccl)
    assert (many.canonical or many._leaf_hosts is not None) == (kind != "two_spines")
    shapes_renamed: list[int] = []
    rename = ProgramPricer._rename_rows

    def spy(self, key, shape, group):
        shapes_renamed.append(len(group))
        return rename(self, key, shape, group)

    monkeypatch.setattr(ProgramPricer, "_rename_rows", spy)
    got = many.price_many(ts)
    # canonical shapes renamed as arrays, several groups at a time; else the loop
    assert (sum(shapes_renamed) > len(shapes_renamed) > 0) == (kind != "two_spines")
    ref = [one.price(t) for t in ts]
    for a, b in zip(got, ref, strict=True):
        _same(a, b)
    # one object per cache key, as the cache gives (the backends tell demands apart by id)
    ids_many = [id(d) for d in got]
    ids_one = [id(d) for d in ref]
    assert [ids_many.index(x) for x in ids_many] == [ids_one.index(x) for x in ids_one]
    assert [many.price(t) is d for t, d in zip(ts, got, strict=True)] == [True] * len(ts)
    # the same cost-model calls in the same order, the same records
    assert list(many._shapes) == list(one._shapes)
    assert list(many._programs) == list(one._programs)
    assert list(many.priced.items()) == list(one.priced.items())
    assert many.fallbacks == one.fallbacks and many.fallbacks.get("gather")
    if nccl:
        assert list(many.choices.items()) == list(one.choices.items())
    # a second batch is served from the cache
    again = many.price_many(ts[::-1])
    assert [id(d) for d in again] == ids_many[::-1]


def test_price_many_keeps_a_subclass_own_price() -> None:
    """A subclass that prices otherwise (here: every latency a nanosecond up) is asked one
    transfer at a time, never bypassed by the arrays."""

    class Slower(ProgramPricer):
        def price(self, transfer: Transfer) -> Demand:
            dem = super().price(transfer)
            return Demand(dem.latency + 1e-9, dem.links, dem.nbytes)

    ts = _transfers()
    slow = _pricer("leaf_spine", False, Slower)
    plain = _pricer("leaf_spine", False)
    for a, b in zip(slow.price_many(ts), plain.price_many(ts), strict=True):
        assert a.latency == b.latency + 1e-9
        assert a.links.tolist() == b.links.tolist()


def test_price_many_leaves_a_renaming_it_cannot_look_up_to_price() -> None:
    """Where a renamed link is not among the links the arrays look up (here: every other one
    hidden from them), that shape's groups are priced by ``_price`` one by one: the same."""
    ts = _transfers()
    many, one = _pricer("leaf_spine", False), _pricer("leaf_spine", False)
    nodes, codes, lids = many._link_codes()
    many._codes = (nodes, codes[::2], lids[::2])
    for a, b in zip(many.price_many(ts), [one.price(t) for t in ts], strict=True):
        _same(a, b)
    assert list(many.priced.items()) == list(one.priced.items())


def _first_by_loop(leaf_hosts, hosts):
    """The k-th distinct host on a leaf -> that leaf's k-th host, host by host."""
    first, used = {}, {}
    for h in hosts:
        if h not in first:
            leaf, row = leaf_hosts[h]
            first[h] = row[used.get(leaf, 0)]
            used[leaf] = used.get(leaf, 0) + 1
    return first


def test_pairs_on_a_leaf_spine_are_numbered_as_groups_are() -> None:
    """A pair's hosts numbered directly (same host, same leaf, two leaves) as the loop numbers
    any group's, and priced as the pair itself is (``canonical=False``)."""
    fast = _pricer("leaf_spine", False)
    ref = ProgramPricer(fast.topology, fast.host_of.tolist(), 24, canonical=False)
    assert fast._leaf_hosts is not None
    for a in range(12):
        for b in range(12):
            got = fast._first([a, b])
            assert list(got.items()) == list(_first_by_loop(fast._leaf_hosts, [a, b]).items())
    for k, (a, b) in enumerate([(0, 1), (0, 2), (1, 7), (0, 9), (23, 22), (17, 4)]):
        t = Transfer(k, P2P, 1 << 20, (a, b), -1)
        x, y = fast.price(t), ref.price(t)
        assert x.latency == pytest.approx(y.latency, rel=1e-12, abs=1e-18)
        assert sorted(x.links.tolist()) == sorted(y.links.tolist())

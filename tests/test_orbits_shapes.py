"""W1's per-rank ids (``orbits._shapes``): a dict of each rank's bytes, checked against the
digest reference (``_shapes_reference``) id for id on generated workloads, on one whose ranks
all differ, and past the byte budget (where it is the reference)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from genie.sim import orbits
from genie.sim.adapter import compile_workload
from genie.sim.compiled import CompiledWorkload, MemberLists
from genie.workload.generators import data_parallel, llm, moe


def _workloads() -> list[CompiledWorkload]:
    out = [
        compile_workload(llm(32, tp=2, pp=2, layers=4, micro_batches=2)),
        compile_workload(data_parallel(16, layers=4)),
        compile_workload(moe(16, layers=2)),
    ]
    cw = out[0]  # every rank a little slower than the one before: no two alike
    slow = [
        dataclasses.replace(cr, duration=cr.duration * (1 + r * 1e-3))
        for r, cr in enumerate(cw.ranks)
    ]
    out.append(dataclasses.replace(cw, ranks=slow))
    return out


@pytest.mark.parametrize("budget", [orbits._W1_BYTES, 1000])
def test_rank_ids_are_the_digest_references(budget: int, monkeypatch) -> None:
    monkeypatch.setattr(orbits, "_W1_BYTES", budget)
    reference = orbits._shapes_reference
    hashed: list[int] = []

    def spy(cw: CompiledWorkload) -> np.ndarray:
        hashed.append(cw.n_ranks)
        return reference(cw)

    monkeypatch.setattr(orbits, "_shapes_reference", spy)
    kinds = []
    for cw in _workloads():
        ids = orbits._shapes(cw)
        assert ids.dtype == np.int64
        assert np.array_equal(ids, reference(cw))
        kinds.append(len(set(ids.tolist())))
    assert kinds[-1] == 32 and min(kinds) < 8  # all distinct, and some alike
    assert bool(hashed) == (budget < 10_000)  # past the budget: the digests


def test_distinct_is_numpys_unique() -> None:
    """W2's (group, image group) pairs: marked in a table where small, else np.unique."""
    rng = np.random.default_rng(3)
    for values, bound in (
        (rng.integers(0, 50, 300), 50),
        (np.zeros(0, np.int64), 10),
        (np.array([-1, 3, 3, 0]), 10),  # a negative value: np.unique's answer
        (rng.integers(0, 1 << 30, 100), 1 << 30),  # a bound past the table: np.unique
    ):
        got = orbits._distinct(np.asarray(values, np.int64), bound)
        want = np.unique(np.asarray(values, np.int64))
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_w2_and_w3_loops_are_their_references() -> None:
    """W2's group images and W3's closure, each against its member-by-member reference: the
    same first failure (or None) on rotations that hold and on broken inputs."""
    cw = compile_workload(llm(32, tp=2, pp=2, layers=4, micro_batches=2))
    found = orbits.find_orbits(cw)
    assert found is not None
    rng = np.random.default_rng(5)
    groups = cw.group_ranks
    pairs = [(a, a) for a in range(len(groups))] + [(a, (a + 1) % len(groups)) for a in range(8)]
    for orb in found.candidates:
        for perm in (orb.perm, rng.permutation(cw.n_ranks)):
            for ps in (pairs, pairs[: len(groups)]):
                assert orbits._unmapped_group(groups, perm, ps) == (
                    orbits._unmapped_group_reference(groups, perm, ps)
                )
        rep_of = [orb.reps[k] for k in orb.rank_rep.tolist()]
        members = cw.instances.members
        iids = [i for i, mem in enumerate(members) if any(rep_of[m] == m for m, _ in mem)]
        assert orbits._not_closed(members, iids, rep_of) is None  # W3 holds on these
        assert orbits._not_closed_reference(members, iids, rep_of) is None
        every = list(range(len(members)))  # not on all instances: the same first one named
        got = got0 = orbits._not_closed(members, every, rep_of)
        assert got is not None and got == orbits._not_closed_reference(members, every, rep_of)
        # drop a representative's member from a few instances: not closed, the same one first
        broken = [list(m) for m in members]
        for iid in rng.choice(iids, 5, replace=False).tolist():
            broken[iid] = [(m, nd) for m, nd in broken[iid] if rep_of[m] != m] + [(-1, -1)]
        got = orbits._not_closed(broken, iids, rep_of)
        assert got is not None and got == orbits._not_closed_reference(broken, iids, rep_of)
        # members held as columns (``MemberLists``): the same verdicts
        assert isinstance(members, MemberLists)
        gone = [[(m, nd) for m, nd in b if m >= 0] for b in broken]  # no negative rank
        for lists in (broken, gone):
            assert orbits._not_closed(_columns(lists), iids, rep_of) == (
                orbits._not_closed_reference(lists, iids, rep_of)
            )
        assert orbits._not_closed(_columns([list(m) for m in members]), every, rep_of) == got0
    assert orbits._not_closed([[]], [0], [0]) is None
    assert orbits._not_closed(_columns([[]]), [0], [0]) is None
    # an image past every member's rank must not alias the next instance's member (review)
    two = [[(0, 0)], [(0, 0)]]
    assert orbits._not_closed(_columns(two), [0, 1], [1]) == 0
    assert orbits._not_closed_reference(two, [0, 1], [1]) == 0


def _columns(lists: list[list[tuple[int, int]]]) -> MemberLists:
    """``lists`` as a ``MemberLists``."""
    lens = [len(x) for x in lists]
    flat = [p for x in lists for p in x]
    return MemberLists(
        np.array([p[0] for p in flat], np.int64),
        np.array([p[1] for p in flat], np.int64),
        np.r_[0, np.cumsum(lens)].astype(np.int64),
    )


def test_instance_orbits_refuse_two_representatives_in_one_orbit() -> None:
    # sigma_I: 0 -> 1 -> 2 -> 3 -> 0 (one orbit of four instances)
    sig = np.array([1, 2, 3, 0], np.int64)
    one = orbits.instance_orbits(sig, np.array([0], np.int64), 4, 4)
    assert not isinstance(one, str)
    rep, power = one
    assert rep.tolist() == [0, 0, 0, 0] and power.tolist() == [0, 1, 2, 3]
    # instances 0 and 2 both representatives' own: they would stand for the orbit twice
    two = orbits.instance_orbits(sig, np.array([0, 2], np.int64), 4, 4)
    assert two == "an instance orbit holds two representatives' instances"
    # two orbits (0 <-> 1, 2 <-> 3), one representative each: fine
    pairs = orbits.instance_orbits(np.array([1, 0, 3, 2], np.int64), np.array([0, 2]), 4, 2)
    assert not isinstance(pairs, str) and pairs[0].tolist() == [0, 0, 2, 2]
    # an orbit no representative's walk reaches
    lone = orbits.instance_orbits(np.array([1, 0, 2], np.int64), np.array([0], np.int64), 3, 2)
    assert lone == "an instance orbit holds no representative's instance"

"""Every (collective, algorithm) pair computes its collective: the data executor proves it."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genie.collectives import (
    ALGORITHMS,
    Op,
    Program,
    build_program,
    canonical_collective,
    program_from_bytes,
)
from genie.collectives.data_exec import check_races, run_data, verify
from genie.collectives.registry import (
    ROTATION_SYMMETRIC,
    XOR_SYMMETRIC,
    build_steps,
    max_steps_per_rank,
)
from genie.errors import CollectiveError, DeadlockError

PAIRS = [(c, a) for c, algos in ALGORITHMS.items() for a in algos]


def _rph(algo: str, n: int, want: int = 3) -> int:
    """A ranks-per-host that divides n (hierarchical needs one), else 1."""
    if algo != "hierarchical":
        return 1
    return next((k for k in (want, 4, 3, 2) if n % k == 0), 1)


@pytest.mark.parametrize(("coll", "algo"), PAIRS)
def test_every_pair_on_2_to_17_ranks_with_an_odd_size(coll, algo):
    for n in range(2, 18):
        size = 2 * n + 3  # odd, not divisible by n: uneven shards
        p = build_program(coll, algo, n, size, ranks_per_host=_rph(algo, n), root=n // 2)
        verify(p, seed=n)


@settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    n=st.integers(2, 17),
    size=st.integers(0, 300),
    chunks=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    extra=st.integers(0, 16),
)
@pytest.mark.parametrize(("coll", "algo"), PAIRS)
def test_every_pair_over_sizes_ranks_and_chunks(coll, algo, n, size, chunks, seed, extra):
    root = extra % n
    window = 1 + extra % max(1, n - 1) if algo == "direct" else None
    p = build_program(
        coll,
        algo,
        n,
        size,
        chunks=chunks,
        root=root,
        window=window,
        ranks_per_host=_rph(algo, n, 2 + extra % 3),
    )
    verify(p, seed=seed)


@pytest.mark.parametrize("coll", ["all_reduce", "reduce_scatter", "all_gather"])
def test_hierarchical_with_several_host_shapes(coll):
    for n, k in [(4, 2), (6, 3), (8, 4), (12, 3), (16, 4), (9, 9), (10, 1)]:
        verify(build_program(coll, "hierarchical", n, 97, chunks=2, ranks_per_host=k), seed=k)


def test_nccl_size_convention_all_gather_splits_the_whole_buffer():
    p = build_program("all_gather", "ring", 4, 10, size_convention="nccl")
    assert p.buffer_bytes() == 10
    assert [p.input_region(r) for r in range(4)] == [(0, 3), (3, 3), (6, 2), (8, 2)]
    verify(p)
    q = build_program("all_gather", "ring", 4, 10)
    assert q.buffer_bytes() == 40
    verify(q)


def test_element_size_keeps_shard_edges_on_elements():
    p = build_program("reduce_scatter", "ring", 3, 40, elem=4, chunks=2)
    for r in range(3):
        for st_ in p.steps(r):
            assert st_.offset % 4 == 0 and st_.nbytes % 4 == 0
    verify(p)
    with pytest.raises(CollectiveError, match="multiple of the element size"):
        build_program("all_reduce", "ring", 3, 41, elem=4)


def test_oneway_send_recv_moves_root_buffer_to_next_rank():
    p = build_program("send_recv", "pairwise", 2, 1000, oneway=True)
    assert [s.op for s in p.steps(0)] == [Op.SEND]
    assert [s.op for s in p.steps(1)] == [Op.RECV, Op.COPY]
    res = verify(p, seed=3)
    assert res.messages == 1


def test_ring_all_reduce_step_counts_and_bytes():
    n, size = 8, 8000
    p = build_program("all_reduce", "ring", n, size, chunks=2)
    sts = p.steps(3)
    sends = [s for s in sts if s.op == Op.SEND]
    assert len(sends) == 2 * (n - 1) * 2
    assert sum(s.nbytes for s in sends) == 2 * (n - 1) * size // n
    assert {s.peer for s in sends} == {4}
    assert {s.peer for s in sts if s.op == Op.RECV} == {2}


def test_program_is_small_and_serialisable():
    p = build_program("all_reduce", "ring", 1024, 64 << 20, chunks=4)
    blob = p.to_bytes()
    assert len(blob) < 200
    q = program_from_bytes(blob)
    assert q.spec == p.spec
    assert q.steps(17) == p.steps(17)
    # one rank's steps grow linearly with n, not with n^2
    assert len(p.steps(0)) == 4 * 2 * 1023 * 3
    with pytest.raises(CollectiveError, match="not a serialised program"):
        program_from_bytes(b"\x01garbage")


def test_rotation_symmetric_programs_are_rank_zero_rotated():
    """The cost shortcut relies on it: rank r = rank 0 with peers shifted by r."""
    for coll, algo in sorted(ROTATION_SYMMETRIC):
        for n in (2, 5, 8):
            p = build_program(coll, algo, n, 6 * n, chunks=2)  # equal shards and pieces
            base = p.steps(0)
            for r in range(1, n):
                got = p.steps(r)
                assert len(got) == len(base)
                for a, b in zip(base, got, strict=True):
                    assert (a.op, a.nbytes, a.tag, a.src, a.deps) == (
                        b.op,
                        b.nbytes,
                        b.tag,
                        b.src,
                        b.deps,
                    )
                    if a.op in (Op.SEND, Op.RECV):
                        assert b.peer == (a.peer + r) % n


def test_xor_symmetric_programs_are_rank_zero_with_peers_xored():
    """The cost shortcut for halving-doubling relies on it (n a power of two)."""
    for coll, algo in sorted(XOR_SYMMETRIC):
        for n in (2, 4, 8):
            p = build_program(coll, algo, n, 6 * n, chunks=3 if n == 4 else 1)
            base = p.steps(0)
            for r in range(1, n):
                got = p.steps(r)
                assert [(a.op, a.nbytes, a.tag, a.src, a.deps) for a in base] == [
                    (b.op, b.nbytes, b.tag, b.src, b.deps) for b in got
                ]
                assert [a.peer ^ r for a in base if a.op <= Op.RECV] == [
                    b.peer for b in got if b.op <= Op.RECV
                ]


def test_chakra_names_map_onto_collectives():
    assert canonical_collective("ALL_REDUCE") == "all_reduce"
    assert canonical_collective("REDUCE_SCATTER_BLOCK") == "reduce_scatter"
    assert canonical_collective(6) == "all_to_all"
    assert canonical_collective("AllGather") == "all_gather"
    with pytest.raises(CollectiveError, match="no plan"):
        canonical_collective("BARRIER")
    with pytest.raises(CollectiveError, match="unknown collective"):
        canonical_collective("allsum")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"collective": "all_reduce", "algorithm": "pairwise"}, "no algorithm"),
        ({"n_ranks": 0}, "n_ranks"),
        ({"size": -1}, "size"),
        ({"chunks": 0}, "chunks"),
        ({"root": 9}, "root"),
        ({"algorithm": "hierarchical", "n_ranks": 6, "ranks_per_host": 4}, "multiple"),
        ({"ranks": (1, 1, 2, 3)}, "distinct"),
        ({"size_convention": "mpi"}, "convention"),
    ],
)
def test_bad_input_is_a_one_line_collective_error(kwargs, match):
    args = {"collective": "all_reduce", "algorithm": "ring", "n_ranks": 4, "size": 64}
    args.update(kwargs)
    with pytest.raises(CollectiveError, match=match):
        build_program(
            args.pop("collective"), args.pop("algorithm"), args.pop("n_ranks"), args.pop("size"),
            **args,
        )  # fmt: skip


def _mutated(program: Program, fn) -> Program:
    return Program(program.spec, lambda spec, r: fn(r, build_steps(spec, r)))


def test_deadlock_names_ranks_and_steps():
    base = build_program("all_reduce", "ring", 4, 40)

    def drop_first_send_of_rank_2(r, sts):
        if r != 2:
            return sts
        i = next(i for i, s in enumerate(sts) if s.op == Op.SEND)
        return sts[:i]  # rank 2 stops before its first send

    with pytest.raises(DeadlockError) as ei:
        run_data(_mutated(base, drop_first_send_of_rank_2))
    msg = str(ei.value)
    assert msg.startswith("deadlock: ranks 0, 1, 3 cannot finish")
    assert "rank 3 step 1 RECV 10 B from 2 tag 0 (#0 on that channel) has no matching SEND" in msg


def test_a_missing_dependency_is_reported_as_a_race():
    base = build_program("all_to_all", "direct", 4, 40)

    def drop_war_deps(_r, sts):
        return [msgspec.structs.replace(s, deps=(s.src,)) if s.op == Op.COPY else s for s in sts]

    with pytest.raises(CollectiveError, match="race on rank 0"):
        check_races(_mutated(base, drop_war_deps), 0)


def test_a_wrong_offset_is_caught_as_a_wrong_result():
    base = build_program("all_reduce", "ring", 3, 30)

    def shift_a_copy(r, sts):
        if r != 1:
            return sts
        out = list(sts)
        i = max(i for i, s in enumerate(out) if s.op == Op.COPY)
        out[i] = msgspec.structs.replace(out[i], offset=0)
        return out

    with pytest.raises(CollectiveError, match="rank 1 byte"):
        verify(_mutated(base, shift_a_copy), races=False)


def test_size_mismatch_between_send_and_recv_is_reported():
    base = build_program("send_recv", "pairwise", 2, 10, oneway=True)

    def shrink(r, sts):
        if r != 0:
            return sts
        return [msgspec.structs.replace(sts[0], nbytes=9)]

    with pytest.raises(CollectiveError, match="expects 10 B"):
        run_data(_mutated(base, shrink))


def test_run_data_uses_given_inputs():
    p = build_program("broadcast", "tree", 5, 6, root=2)
    inputs = [np.arange(6, dtype=np.int64) * (r + 1) for r in range(5)]
    res = run_data(p, inputs)
    for b in res.buffers:
        assert np.array_equal(b, inputs[2])


@pytest.mark.parametrize(("collective", "algorithm"), PAIRS)
def test_step_bound_holds_for_every_algorithm(collective: str, algorithm: str) -> None:
    """Agents refuse programs by this bound before building them, so it must never undercount."""
    rph = 2 if algorithm == "hierarchical" else 1
    for n in (2, 3, 4, 8, 9, 16, 32):
        if n % rph:
            continue
        for chunks in (1, 3):
            prog = build_program(
                collective, algorithm, n, 3 * 4096 + 5, chunks=chunks, ranks_per_host=rph
            )
            most = max(len(prog.steps(r)) for r in range(n))
            assert most <= max_steps_per_rank(prog.spec), (n, chunks, most)

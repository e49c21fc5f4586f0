"""``genie emulate --mode overlapped``: op-list compilation, and the whole trace on live agents.

What the wire did is checked on ``genie.emulate``'s documents; one test checks what the command
prints."""

from __future__ import annotations

import statistics

import pytest

import genie
from genie.cli import main
from genie.controller.local import LocalCluster
from genie.errors import UsageError
from genie.live.plan import compile_oplists
from genie.sim.compiled import GraphBuilder
from genie.store import RunStore
from genie.workload import save_workload
from genie.workload.generators.builder import RankBuilder, finish
from genie.workload.model import CollectiveType

MS = 1e-3
SIZE = 4 << 20


def test_two_collectives_after_one_compute_have_no_deps_and_the_same_offset() -> None:
    b = GraphBuilder(2)
    for r in range(2):
        c = b.compute(r, 1 * MS)
        b.collective(r, "all_reduce", 1000, deps=[c])
        b.collective(r, "all_gather", 500, deps=[c])
    plan = compile_oplists(b.build())
    assert len(plan.programs) == 2
    assert {p.spec.collective for p in plan.programs} == {"all_reduce", "all_gather"}
    for r in range(2):
        ops = plan.rank_ops[r]
        assert [d for _, d, _ in ops] == [[], []]
        assert [g for _, _, g in ops] == [1_000_000, 1_000_000]
        assert sorted(p for p, _, _ in ops) == [0, 1]
        assert all(plan.programs[p].spec.ranks == (0, 1) for p, _, _ in ops)


def test_a_chain_gives_the_compute_gap_after_its_dependency() -> None:
    b = GraphBuilder(2)
    for r in range(2):
        c0 = b.compute(r, 1 * MS)
        a = b.collective(r, "all_reduce", 1000, deps=[c0])
        c1 = b.compute(r, 2 * MS, deps=[a])
        c2 = b.compute(r, 3 * MS, deps=[c1])
        b.collective(r, "all_reduce", 1000, deps=[c2])
    plan = compile_oplists(b.build())
    for r in range(2):
        (p0, d0, g0), (p1, d1, g1) = plan.rank_ops[r]
        assert (d0, g0) == ([], 1_000_000)
        assert (d1, g1) == ([0], 5_000_000)  # the two compute nodes after the first op
        assert plan.op_iid[r] == [p0, p1]


def test_only_the_nearest_dependencies_are_shipped() -> None:
    # A -> B -> C in a chain, and D after both A and C: C depends on B only, D on C only
    b = GraphBuilder(2)
    for r in range(2):
        a = b.collective(r, "all_reduce", 100)
        bb = b.collective(r, "all_reduce", 100, deps=[a])
        c = b.collective(r, "all_reduce", 100, deps=[bb])
        b.collective(r, "all_reduce", 100, deps=[a, c])
    plan = compile_oplists(b.build())
    for r in range(2):
        assert [d for _, d, _ in plan.rank_ops[r]] == [[], [0], [1], [2]]


def test_a_rank_that_arrives_late_waits_on_its_own_compute_only() -> None:
    # rank 1 computes 4 ms before the all-reduce, rank 0 1 ms: each rank's gap is its own
    b = GraphBuilder(2)
    for r, t in ((0, 1 * MS), (1, 4 * MS)):
        c = b.compute(r, t)
        a = b.collective(r, "all_reduce", 1000, deps=[c])
        c2 = b.compute(r, 1 * MS, deps=[a])
        b.collective(r, "all_reduce", 1000, deps=[c2])
    plan = compile_oplists(b.build())
    assert plan.rank_ops[0][0][2] == 1_000_000 and plan.rank_ops[1][0][2] == 4_000_000
    # after the first all-reduce (which ends when rank 1 arrives at 4 ms) both compute 1 ms
    assert plan.rank_ops[0][1][1:] == ([0], 1_000_000)
    assert plan.rank_ops[1][1][1:] == ([0], 1_000_000)


def test_send_recv_pairs_become_one_program_on_both_ranks() -> None:
    b = GraphBuilder(2)
    c = b.compute(0, 1 * MS)
    b.send(0, 1, 4096, tag=3, deps=[c])
    b.recv(1, 0, 4096, tag=3)
    plan = compile_oplists(b.build())
    (prog,) = plan.programs
    assert prog.spec.collective == "send_recv" and prog.spec.ranks == (0, 1)
    assert plan.rank_ops[0] == [(0, [], 1_000_000)] and plan.rank_ops[1] == [(0, [], 0)]
    assert plan.sent_bytes() == 4096


def _buckets(groups: list[str]):
    """Two ranks: one compute, then a collective per entry of ``groups`` (a group name each)."""
    b = GraphBuilder(2)
    for g in dict.fromkeys(groups):
        b.group(g, [0, 1])
    for r in range(2):
        c = b.compute(r, 1 * MS)
        for g in groups:
            b.collective(r, "all_reduce", 1000, deps=[c], group=g)
    return b.build()


def test_collectives_of_one_group_wait_for_the_previous_one_in_issue_order() -> None:
    cw = _buckets(["dp"] * 4)
    plan = compile_oplists(cw)  # default: one at a time per group, as NCCL's stream
    for r in range(2):
        assert [d for _, d, _ in plan.rank_ops[r]] == [[], [], [], []]  # no data deps
        assert plan.rank_after[r] == [[], [0], [1], [2]]
        # the list is in issue order (the group's sequence numbers)
        seqs = [int(cw.instances.seq[i]) for i in plan.op_iid[r]]
        assert seqs == sorted(seqs)
    assert "issue order, one at a time" in plan.describe_order()
    two = compile_oplists(cw, comm_concurrency=2)
    assert two.rank_after[0] == [[], [], [0], [1]]
    assert "at most 2" in two.describe_order()
    free = compile_oplists(cw, comm_concurrency=0)
    assert free.rank_after[0] == [[], [], [], []]


def test_issue_order_chains_each_group_apart() -> None:
    plan = compile_oplists(_buckets(["tp", "dp", "tp", "dp"]))
    names = ["tp", "dp", "tp", "dp"]
    for r in range(2):
        after = plan.rank_after[r]
        chained = {(plan.op_iid[r][a[0]], plan.op_iid[r][j]) for j, a in enumerate(after) if a}
        # each op waits for the previous op of its own group only
        assert len(chained) == 2
        assert all(names[x] == names[y] for x, y in chained)


def test_a_data_dependency_already_ordering_the_group_adds_no_order_dep() -> None:
    b = GraphBuilder(2)
    for r in range(2):
        a = b.collective(r, "all_reduce", 100)
        b.collective(r, "all_reduce", 100, deps=[a])
    plan = compile_oplists(b.build())
    assert plan.rank_ops[0][1][1] == [0] and plan.rank_after[0] == [[], []]


def test_repeated_instances_share_one_program_and_a_cap_is_the_users() -> None:
    b = GraphBuilder(2)
    for r in range(2):
        for _ in range(5):
            b.collective(r, "all_reduce", 100)
    plan = compile_oplists(b.build())  # no cap by default
    assert len(plan.iids) == 5 and len(plan.programs) == 1
    assert plan.instance_program == [0] * 5 and plan.op_iid[0] == [0, 1, 2, 3, 4]
    assert plan.sent_bytes() == 5 * plan.sent_bytes() // 5 > 0
    with pytest.raises(UsageError, match="more than --max-instances 4"):
        compile_oplists(b.build(), max_instances=4)


def _overlap_workload():
    """Two all-reduces issued together after 1 ms compute, then 5 ms compute and a third."""
    builders = [RankBuilder(r) for r in range(2)]
    for b in builders:
        c = b.compute("fwd", 1 * MS)
        a = b.collective("ar_a", CollectiveType.ALL_REDUCE, SIZE, [c])
        bb = b.collective("ar_b", CollectiveType.ALL_REDUCE, SIZE, [c])
        c2 = b.compute("bwd", 5 * MS, [a, bb])
        b.collective("ar_c", CollectiveType.ALL_REDUCE, SIZE, [c2])
    return finish("overlap", builders)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    with LocalCluster.start(2, d) as cl:
        yield cl


def _emulate(cluster, prefix, store, **changes) -> dict:
    """The document of ``genie emulate`` (2 iterations, no warm-up unless changed)."""
    spec = genie.EmulateSpec(
        testbed=str(cluster.testbed_path),
        workload=str(prefix),
        store=str(store),
        iterations=2,
        warmup=0,
    )
    return genie.emulate(spec.replace(**changes)).doc()


def test_overlapped_emulation_puts_overlapping_collectives_on_the_wire_together(
    cluster, tmp_path
) -> None:
    prefix = tmp_path / "ov"
    save_workload(_overlap_workload(), prefix)
    store = tmp_path / "runs.sqlite"
    # A and B are of one group: only with no issue-order limit may they share the wire
    doc = _emulate(cluster, prefix, store, iterations=3, warmup=1, comm_concurrency=0)
    assert doc["mode"] == "overlapped"
    a, b, c = sorted(doc["instances"], key=lambda x: x["iid"])
    assert all(x["collective"] == "all_reduce" and x["size"] == SIZE for x in (a, b, c))
    for ia, ib in zip(a["intervals_s"], b["intervals_s"], strict=True):
        # (first start, last arrival, end) from the common start: A and B overlap on the wire
        assert ia[0] < ib[2] and ib[0] < ia[2]
        # the 1 ms of compute before them (less the clock-offset estimate error)
        assert ia[0] >= 0.9 * MS and ib[0] >= 0.9 * MS
    runs = zip(a["rank_intervals_s"], b["rank_intervals_s"], c["rank_intervals_s"], strict=True)
    for ra, rb, rc in runs:
        for (r, _, ea), (_, _, eb), (_, sc, _) in zip(ra, rb, rc, strict=True):
            assert sc >= max(ea, eb) + 5 * MS - 1e-6, f"rank {r}: C before its deps + 5 ms"
    ring_bytes = SIZE  # a 2-rank ring all-reduce sends S/2 twice per rank
    for run in doc["runs"]:
        assert run["bytes_sent"] == 3 * 2 * ring_bytes
        assert run["messages_verified"] > 0
        # what each agent sent over the run's makespan: together, every byte of the run
        rate = sum(run["sent_Bps"].values())
        assert sorted(run["sent_Bps"]) == ["h0", "h1"]
        assert rate == pytest.approx(run["bytes_sent"] / run["makespan_s"], rel=1e-6)
    spans = [r["makespan_s"] for r in doc["runs"] if not r["warmup"]]
    assert len(spans) == 3 and doc["runs_spread"] == pytest.approx(max(spans) / min(spans) - 1)
    testbed, analytical = doc["reports"]
    assert testbed["backend"] == f"testbed:{doc['run_id']}"
    times = sorted(r["time"] for r in testbed["collectives"])
    assert times == pytest.approx(sorted(x["measured_p50_s"] for x in (a, b, c)))
    assert testbed["iteration_s"] > 6 * MS  # 1 ms + A/B + 5 ms + C
    assert analytical["backend"] == "analytical"
    with RunStore(store) as rs:
        info = rs.run(doc["run_id"])
        assert info.status == "ok"
        # the one run lifecycle (StoredRun) records what bench records: host facts, offsets
        assert sorted(info.host_facts) == sorted(info.clock_offsets) == ["h0", "h1"]
        assert info.host_facts["h0"]["cpus_logical"] >= 1
        assert abs(info.clock_offsets["h1"]["offset_ns"]) < 1e9
        assert len(rs.instances(info.run_id)) == 3 * 3  # 3 instances x 3 measured runs
        assert len(rs.instances(info.run_id, include_warmup=True)) == 3 * 4

    # the isolated mode measures the same all-reduce alone: the overlapped A and B are slower
    iso = _emulate(cluster, prefix, store, iterations=3, warmup=1, mode="isolated")
    assert iso["mode"] == "isolated"
    (coll,) = iso["collectives"]
    alone = coll["measured_p50_s"]
    c_alone = c["measured_p50_s"]
    together = statistics.median([a["measured_p50_s"], b["measured_p50_s"]])
    print(f"alone {alone * 1e3:.2f} ms, C {c_alone * 1e3:.2f} ms, A/B {together * 1e3:.2f} ms")
    # only the direction is asserted (a shared 2-core machine): sharing the wire costs time, next
    # to the same all-reduce alone (isolated mode, or C alone on the wire in the same runs)
    assert together > min(alone, c_alone)


def test_collectives_of_one_group_run_one_at_a_time_on_the_wire_by_default(
    cluster, tmp_path
) -> None:
    prefix = tmp_path / "ov"
    save_workload(_overlap_workload(), prefix)
    doc = _emulate(cluster, prefix, tmp_path / "r.sqlite")
    assert any("issue order, one at a time" in w for w in doc["wire"])
    a, b, _ = sorted(doc["instances"], key=lambda x: x["iid"])
    for ra, rb in zip(a["rank_intervals_s"], b["rank_intervals_s"], strict=True):
        for (r, sa, ea), (_, sb, eb) in zip(ra, rb, strict=True):
            # on every rank one of the two (issued together) starts only after the other ended
            assert sb >= ea or sa >= eb, f"rank {r}: A {sa:.4f}..{ea:.4f}, B {sb:.4f}..{eb:.4f}"


def test_text_output_of_overlapped_mode(cluster, tmp_path, capsys) -> None:
    # a 4-rank data-parallel step: the default is short (the answer, the breakdown, the model
    # error, what to try next); --detail prints the rest
    from genie.workload.generators import data_parallel

    prefix = tmp_path / "dp4"
    save_workload(data_parallel(4, layers=4, hidden=64, bucket_bytes=4 * 64 * 64 * 2), prefix)
    args = ["emulate", str(prefix), "--testbed", str(cluster.testbed_path)]
    args += ["--store", str(tmp_path / "r.sqlite"), "--iterations", "2", "--warmup", "0"]
    assert main(args) == 0
    short = capsys.readouterr().out
    assert len(short.splitlines()) <= 40, short
    assert "overlapped" in short and "trace on the wire" in short
    assert "over 2 runs" in short and "the runs lie" in short  # how far apart the runs lie
    assert "iteration (per-rank means)" in short and "blocked" in short
    assert "model error" in short and "MAPE nominal" in short and "more: --detail" in short
    assert "\non the wire: " not in short and "ranks over" not in short
    assert main([*args, "--detail"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) > 40
    assert "an agent sent at most" in out and "GB/s (10^9 B/s" in out
    assert "on the wire: collectives of one process group run in issue order" in out
    assert "ranks over" in out and "model error per collective" in out
    assert "more: --detail" not in out


def test_four_ranks_on_two_agents_run_their_op_lists_side_by_side(cluster, tmp_path):
    # ranks beyond hosts: two ranks per agent, each its own executor thread; two groups of two
    # all-reduce at once (ranks 0,2 and 1,3 with round-robin placement: across the agents)
    from genie.workload.generators import data_parallel

    prefix = tmp_path / "dp4"
    save_workload(data_parallel(4, layers=2, hidden=64, bucket_bytes=12 * 64 * 64 * 2), prefix)
    doc = _emulate(cluster, prefix, tmp_path / "r.sqlite", placement="round-robin")
    insts = doc["instances"]
    assert len(insts) == 2 and all(x["ranks"] == [0, 1, 2, 3] for x in insts)
    # ranks 0, 2 share h0 and 1, 3 share h1: their steps take the intra-host model, said so
    assert any("intra-host model" in w and "not sent" in w for w in doc["wire"])
    size = 12 * 64 * 64 * 2
    for run in doc["runs"]:  # ring all-reduce on 4: each rank sends 2 x 3/4 of the buffer
        assert run["bytes_sent"] == 2 * 4 * 2 * 3 * size // 4
    # the second bucket's all-reduce is issued after the first layer's backward compute
    a, b = sorted(insts, key=lambda x: x["intervals_s"][0][0])
    assert all(x["measured_p50_s"] > 0 for x in insts)
    assert b["intervals_s"][0][0] > a["intervals_s"][0][0]


def test_by_default_one_groups_collectives_take_turns_on_the_wire(cluster, tmp_path):
    # NCCL's stream order: A and B of the same group, issued together, run one after the other
    prefix = tmp_path / "ov"
    save_workload(_overlap_workload(), prefix)
    doc = _emulate(cluster, prefix, tmp_path / "r.sqlite")
    a, b, _c = sorted(doc["instances"], key=lambda x: x["iid"])
    for ra, rb in zip(a["rank_intervals_s"], b["rank_intervals_s"], strict=True):
        for (r, _sa, ea), (_, sb, _eb) in zip(ra, rb, strict=True):
            assert sb >= ea - 1e-6, f"rank {r}: B started before A ended on it"


def test_each_process_group_sends_on_a_connection_set_of_its_own() -> None:
    from genie.live.plan import MAX_CHANNELS, describe_connections, program_channels

    cw = _buckets(["tp", "dp", "tp", "dp"])
    plan = compile_oplists(cw)
    groups = [int(cw.instances.group[i]) for i in plan.iids]
    # one set per group: instances share a set exactly when they share a group
    assert len(set(groups)) == 2 and sorted(set(plan.channels)) == [0, 1]
    for a in range(4):
        for b in range(4):
            same = groups[a] == groups[b]
            assert (plan.channel_of(a) == plan.channel_of(b)) == same
    opts = plan.data_options(2)
    assert (opts.streams, opts.channels, opts.program_channels) == (4, 2, plan.channels)
    assert plan.n_channels == 2
    assert "for each of 2 sets of process groups (4 in all)" in describe_connections(2, 2)
    one = compile_oplists(_buckets(["dp"] * 3))
    assert {one.channel_of(i) for i in one.iids} == {0} and one.data_options(2).streams == 2
    assert one.n_channels == 1
    assert "2 TCP connection(s) per rank pair (the flows" in describe_connections(2)
    # send/recv (group -1) get a set of their own; groups beyond the limit share round-robin
    assert program_channels([3, -1, 3, 5]) == [0, 1, 0, 2]
    wide = program_channels(list(range(MAX_CHANNELS + 2)))
    assert wide == [k % MAX_CHANNELS for k in range(MAX_CHANNELS + 2)]

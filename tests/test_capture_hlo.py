# ruff: noqa: E501 (HLO text lines are as XLA prints them)
"""HLO text -> per-rank Chakra ETs, on hand-written HLO (no jax needed)."""

from __future__ import annotations

import pytest

from genie.capture.convert import CaptureCost, hlo_to_workload
from genie.capture.hlo import parse_hlo, parse_pairs, parse_replica_groups, parse_shape
from genie.errors import TraceFormatError
from genie.workload import CollectiveType, NodeType, load_workload, save_workload, summarize

HLO = """HloModule jit_step, is_scheduled=true, num_partitions=4

%fused_dot (p0: f32[8,32], p1: f32[32,16]) -> f32[8,16] {
  %p0 = f32[8,32]{1,0} parameter(0)
  %p1 = f32[32,16]{1,0} parameter(1)
  %d = f32[8,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %m = f32[8,16]{1,0} multiply(%d, %d)
}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%body (st: (s32[], f32[8,16])) -> (s32[], f32[8,16]) {
  %st = (s32[], f32[8,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%st), index=0
  %v = f32[8,16]{1,0} get-tuple-element(%st), index=1
  %ar = f32[8,16]{1,0} all-reduce(%v), channel_id=5, replica_groups=[2,2]<=[4], use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[8,16]{1,0}) tuple(%i, %ar)
}

%wrapped_rs (wp: f32[8,16]) -> f32[2,16] {
  %wp = f32[8,16]{1,0} parameter(0)
  ROOT %wrs = f32[2,16]{1,0} reduce-scatter(%wp), channel_id=7, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=%add
}

%cond (cs: (s32[], f32[8,16])) -> pred[] {
  %cs = (s32[], f32[8,16]{1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (a: f32[8,32], w: f32[32,16], k: bf16[3,3,4,8], img: bf16[2,10,10,4]) -> f32[8,16] {
  %a = f32[8,32]{1,0} parameter(0), sharding={replicated}, metadata={op_name="a, b"}
  %w = f32[32,16]{1,0} parameter(1)
  %k = bf16[3,3,4,8]{3,2,1,0} parameter(2)
  %img = bf16[2,10,10,4]{3,2,1,0} parameter(3)
  %ags = (f32[8,32]{1,0}, f32[32,32]{1,0}) all-gather-start(%a), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  %f = f32[8,16]{1,0} fusion(%a, %w), kind=kOutput, calls=%fused_dot
  %conv = bf16[2,8,8,8]{3,2,1,0} convolution(%img, %k), window={size=3x3}, dim_labels=b01f_01io->b01f
  %agd = f32[32,32]{1,0} all-gather-done(%ags)
  %after = f32[32,32]{1,0} negate(%agd)
  %rs = f32[2,16]{1,0} reduce-scatter(%f), channel_id=2, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true, to_apply=%add
  %a2a = (f32[4,16]{1,0}, f32[4,16]{1,0}) all-to-all(%f, %f), channel_id=3, replica_groups={{0,2},{1,3}}
  %g0 = f32[4,16]{1,0} get-tuple-element(%a2a), index=0
  %cp = f32[2,16]{1,0} collective-permute(%rs), channel_id=4, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  %zero = s32[] constant(0)
  %init = (s32[], f32[8,16]{1,0}) tuple(%zero, %f)
  %loop = (s32[], f32[8,16]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %res = f32[8,16]{1,0} get-tuple-element(%loop), index=1
  %rss = ((f32[8,16]{1,0}), f32[2,16]{1,0}, s32[]) async-start(%res), calls=%wrapped_rs
  %ars = f32[8,16]{1,0} all-reduce-start(%res), channel_id=8, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add
  %between = f32[8,16]{1,0} negate(%res)
  %rsd = f32[2,16]{1,0} async-done(%rss), calls=%wrapped_rs
  %ard = f32[8,16]{1,0} all-reduce-done(%ars)
  ROOT %out = f32[8,16]{1,0} add(%ard, %between)
}
"""


@pytest.fixture(scope="module")
def conv():
    return hlo_to_workload(parse_hlo(HLO), mesh=[("dp", 2), ("tp", 2)], cost=CaptureCost())


def _node(rg, name):
    return next(n for n in rg.nodes if n.name == name)


def test_shapes_with_tuples_layouts_and_comments():
    s, _ = parse_shape("f32[2,3]{1,0}")
    assert (s.dtype, s.dims, s.nbytes) == ("f32", (2, 3), 24)
    mod = parse_hlo(HLO)
    ags = mod.entry_computation.by_name["ags"]
    assert ags.shape.is_tuple and ags.shape.nbytes == (8 * 32 + 32 * 32) * 4
    assert mod.entry_computation.by_name["k"].shape.nbytes == 3 * 3 * 4 * 8 * 2
    assert mod.num_partitions == 4


def test_replica_group_forms():
    assert parse_replica_groups("{{0,1},{2,3}}", 4) == [(0, 1), (2, 3)]
    assert parse_replica_groups("{}", 4) == [(0, 1, 2, 3)]
    assert parse_replica_groups(None, 2) == [(0, 1)]
    assert parse_replica_groups("[2,2]<=[4]", 4) == [(0, 1), (2, 3)]
    assert parse_replica_groups("[2,2]<=[2,2]T(1,0)", 4) == [(0, 2), (1, 3)]
    assert parse_replica_groups("[4,2]<=[2,2,2]T(2,1,0)", 8) == [
        (0, 4), (2, 6), (1, 5), (3, 7)
    ]  # fmt: skip
    assert parse_replica_groups("mesh['a'=2,'b'=2] {'a'}", 4) == [(0, 2), (1, 3)]
    assert parse_replica_groups("mesh['a'=2,'b'=2] {'b'}", 4) == [(0, 1), (2, 3)]
    assert parse_replica_groups("mesh['axis_0'=4] {'axis_0'}", 4) == [(0, 1, 2, 3)]
    assert parse_pairs("{{0,1},{1,0}}") == [(0, 1), (1, 0)]
    with pytest.raises(TraceFormatError):
        parse_replica_groups("{{0,1}", 2)


def test_collectives_sizes_and_groups(conv):
    wl = conv.workload
    assert wl.n_ranks == 4
    r1 = wl.ranks[1]
    ag = _node(r1, "ags")
    assert ag.collective == CollectiveType.ALL_GATHER
    assert ag.comm_size == 8 * 32 * 4  # ASTRA-sim: all-gather size is the per-rank shard
    assert ag.pg_name == ""  # all ranks: the default group
    rs = _node(r1, "rs")
    assert rs.collective == CollectiveType.REDUCE_SCATTER and rs.comm_size == 8 * 16 * 4
    a2a = _node(r1, "a2a")
    assert a2a.collective == CollectiveType.ALL_TO_ALL and a2a.comm_size == 2 * 8 * 16 * 4
    assert wl.group(a2a.pg_name) == (1, 3)
    assert a2a.pg_name == "dp_tp1"  # spans dp at tp coordinate 1
    loops = [n for n in r1.nodes if n.name.startswith("ar@loop")]
    assert len(loops) == 3  # unrolled by known_trip_count
    assert all(wl.group(n.pg_name) == (0, 1) for n in loops)
    assert [n.pg_name for n in wl.ranks[2].nodes if n.name.startswith("ar@")] == ["tp_dp1"] * 3


def test_permute_becomes_matching_send_recv(conv):
    wl = conv.workload
    for r in range(4):
        sends = [n for n in wl.ranks[r].nodes if n.type == NodeType.COMM_SEND_NODE]
        recvs = [n for n in wl.ranks[r].nodes if n.type == NodeType.COMM_RECV_NODE]
        assert [(n.comm_dst, n.comm_size) for n in sends] == [((r + 1) % 4, 2 * 16 * 4)]
        assert [(n.comm_src, n.comm_size) for n in recvs] == [((r - 1) % 4, 2 * 16 * 4)]
        assert sends[0].tag == recvs[0].tag


def test_flops_from_dots_in_fusions_and_convolutions(conv):
    r0 = conv.workload.ranks[0]
    assert _node(r0, "f").num_ops == 2 * 8 * 16 * 32
    assert _node(r0, "conv").num_ops == 2 * (2 * 8 * 8 * 8) * (3 * 3 * 4)
    assert conv.stats[0].flops == 2 * 8 * 16 * 32 + 2 * 1024 * 36
    neg = _node(r0, "after")
    assert neg.num_ops is None and neg.tensor_size == 2 * 32 * 32 * 4


def test_async_pair_overlaps_and_done_is_a_wait(conv):
    r0 = conv.workload.ranks[0]
    ags = _node(r0, "ags").id
    assert ags not in _node(r0, "f").data_deps  # compute between start and done: no wait
    assert ags not in _node(r0, "conv").data_deps
    assert ags in _node(r0, "after").data_deps
    # a synchronous collective is waited for by the next compute node
    a2a = _node(r0, "a2a").id
    first_loop_compute = next(n for n in r0.nodes if n.id > a2a and n.type == NodeType.COMP_NODE)
    assert a2a in first_loop_compute.data_deps


def test_async_start_wrappers_and_all_reduce_start(conv):
    r2 = conv.workload.ranks[2]
    rss, ars = _node(r2, "rss"), _node(r2, "ars")
    assert (rss.collective, rss.comm_size, rss.pg_name) == (
        CollectiveType.REDUCE_SCATTER,
        8 * 16 * 4,
        "",
    )
    assert (ars.collective, ars.comm_size, ars.pg_name) == (
        CollectiveType.ALL_REDUCE,
        8 * 16 * 4,
        "tp_dp1",
    )
    between, out = _node(r2, "between"), _node(r2, "out")
    assert rss.id not in between.data_deps and ars.id not in between.data_deps
    assert {rss.id, ars.id} <= set(out.data_deps)


def test_durations_follow_the_roofline():
    cost = CaptureCost(peak_flops=1e12, efficiency=0.5, memory_bandwidth=1e9)
    wl = hlo_to_workload(parse_hlo(HLO), cost=cost).workload
    f = _node(wl.ranks[0], "f")
    nbytes = (8 * 32 + 32 * 16 + 8 * 16) * 4
    assert f.tensor_size == nbytes
    first = wl.ranks[0].nodes[: wl.ranks[0].nodes.index(f)]
    assert all(n.type != NodeType.COMP_NODE for n in first)  # f is rank 0's first compute
    assert f.duration_micros == round(max(f.num_ops / 0.5e12, nbytes / 1e9) * 1e6)
    # rounding error is carried: the rank's total is the exact sum to within 1 us
    exact = 0.0
    for n in wl.ranks[0].nodes:
        if n.type == NodeType.COMP_NODE:
            flops, size = n.num_ops or 0, n.tensor_size
            exact += max(flops / 0.5e12, size / 1e9) * 1e6
    total = sum(n.duration_micros for n in wl.ranks[0].nodes if n.type == NodeType.COMP_NODE)
    assert abs(total - exact) <= 1


def test_saved_workload_inspects_clean(tmp_path, conv):
    save_workload(conv.workload, tmp_path / "hand")
    wl = load_workload(tmp_path / "hand")
    s = summarize(wl)
    assert s["problems"] == []
    assert wl.groups["dp_tp1"] == (1, 3)


def test_bad_hlo_is_a_clear_error():
    with pytest.raises(TraceFormatError, match="HloModule"):
        parse_hlo("not hlo")
    with pytest.raises(TraceFormatError, match="not closed"):
        parse_hlo("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(0)\n")


def test_cli_converts_an_hlo_file(tmp_path, capsys):
    from genie import cli

    f = tmp_path / "step.hlo.txt"
    f.write_text(HLO)
    out = tmp_path / "et" / "step"
    assert cli.main(["capture", "hlo", str(f), "--mesh", "dp=2,tp=2", "--out", str(out)]) == 0
    assert "4 ranks" in capsys.readouterr().out
    wl = load_workload(out)
    assert wl.n_ranks == 4 and wl.groups["tp_dp1"] == (2, 3)
    assert summarize(wl)["problems"] == []
    assert cli.main(["capture", "hlo", str(f), "--mesh", "dp=3", "--out", str(out)]) == 2
    assert "--mesh" in capsys.readouterr().err

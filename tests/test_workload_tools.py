"""``genie workload replicate|scale|slice`` (genie.workload.transform) on real-style traces."""

from __future__ import annotations

import json

import pytest

from genie.cli import main
from genie.errors import WorkloadError
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.network import ZeroNetwork
from genie.workload import load_workload, save_workload
from genie.workload.generators.builder import RankBuilder, finish
from genie.workload.generators.pytorch_style import pytorch_style
from genie.workload.loader import load_rank
from genie.workload.model import NodeKind, NodeType
from genie.workload.transform import replicate

STEPS, LAYERS = 3, 4


@pytest.fixture
def pt(tmp_path):
    save_workload(pytorch_style(4, layers=LAYERS, steps=STEPS), tmp_path / "pt")
    return tmp_path / "pt"


def cli(args, capsys) -> tuple[int, str, str]:
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------------------- replicate


def test_replicate_one_rank_file_to_eight_ranks(pt, tmp_path, capsys):
    rc, out, err = cli(
        [
            "workload",
            "replicate",
            str(pt.with_name("pt.2.et")),
            "--ranks",
            "8",
            "--out",
            str(tmp_path / "r"),
        ],
        capsys,
    )
    assert rc == 0 and "wrote 8 rank files" in out and "rank 2's graph" in err
    wl = load_workload(tmp_path / "r")
    src = load_workload(pt).ranks[2]
    assert wl.n_ranks == 8
    assert [n.id for n in wl.ranks[5].nodes] == [n.id for n in src.nodes]  # ids as they were
    # parity groups of the 4-rank job become strided blocks of 8, named by integers
    assert wl.groups["0"] == tuple(range(8))
    named = {k: v for k, v in wl.groups.items() if k not in ("", "0")}
    assert sorted(named.values()) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert all(k.isdigit() for k in named)
    for r in range(8):
        ag = [n for n in wl.ranks[r].nodes if n.name.startswith("ncclDevKernel_AllGather")]
        assert {r} <= set(wl.groups[ag[0].pg_name]) and len(ag) == STEPS
    # every copy's process_group:init node, and the side file, carry the new groups
    side = json.loads(tmp_path.joinpath("r.comm_group.json").read_text())
    assert side["3"] == list(wl.groups["3"])
    (tmp_path / "r.comm_group.json").unlink()
    assert load_workload(tmp_path / "r").groups == wl.groups
    rep, _ = replay(compile_workload(wl), ZeroNetwork())
    assert rep.n_ranks == 8
    assert len(rep.collectives) == STEPS * (LAYERS // 2) + STEPS * 4


def test_replicate_shifts_send_and_recv_peers_with_the_rank(tmp_path):
    b = RankBuilder(1)
    b.send("to_next", 2, 64, tag=7)
    b.recv("from_prev", 0, 64, tag=7)  # independent: sends and recvs meet (rendezvous)
    rg = finish("ring", [b]).ranks[0]
    wl = replicate(rg, 1, {}, 5)
    for r, g in enumerate(wl.ranks):
        send, recv = g.nodes
        assert send.comm_dst == (r + 1) % 5 and send.comm_src == r
        assert recv.comm_src == (r - 1) % 5 and recv.comm_dst == r
    from genie.workload import validate_workload

    validate_workload(wl)  # every send meets its recv
    rep, _ = replay(compile_workload(wl), ZeroNetwork())
    assert len(rep.collectives) == 5


def test_replicate_refuses_what_it_cannot_place(pt, tmp_path):
    rg, groups = load_rank(pt, 1)
    with pytest.raises(Exception, match="not a multiple of 4"):
        replicate(rg, 1, groups, 6)
    groups["2"] = (1, 2)  # not a strided block
    with pytest.raises(WorkloadError, match="not a strided block"):
        replicate(rg, 1, groups, 8)
    del groups["2"]
    with pytest.raises(WorkloadError, match="'2' is used but its members are unknown"):
        replicate(rg, 1, groups, 8)


# ---------------------------------------------------------------------------- scale


def test_scale_multiplies_gpu_compute_only_unless_cpu(pt, tmp_path, capsys):
    rc, _out, err = cli(
        ["workload", "scale", str(pt), "--factor", "0.5", "--out", str(tmp_path / "s")], capsys
    )
    assert rc == 0 and "scaled" in err and "by 0.5" in err
    before, after = load_workload(pt), load_workload(tmp_path / "s")
    for a, b in zip(before.ranks[0].nodes, after.ranks[0].nodes, strict=True):
        if a.type == NodeType.COMP_NODE and not a.is_cpu_op:
            assert b.duration_micros == max(1, round(a.duration_micros * 0.5))
        else:
            assert b.duration_micros == a.duration_micros
    assert (
        main(["workload", "scale", str(pt), "--factor", "3", "--cpu", "--out", str(tmp_path / "c")])
        == 0
    )
    cpu = load_workload(tmp_path / "c")
    lin = [n for n in cpu.ranks[1].nodes if n.name == "aten::linear"]
    assert lin[0].duration_micros == 60  # 20 us x 3
    host = [n for n in cpu.ranks[1].nodes if n.kind is NodeKind.HOST]
    assert host[0].duration_micros == 12  # host launchers are COMM nodes: never scaled
    rc, _o, err = cli(["workload", "scale", str(pt), "--factor", "0", "--out", "x"], capsys)
    assert rc == 2 and "argument --factor: must be finite, > 0" in err


# ---------------------------------------------------------------------------- slice


def test_slice_first_iterations(pt, tmp_path, capsys):
    rc, _out, err = cli(
        ["workload", "slice", str(pt), "--iterations", "2", "--out", str(tmp_path / "i")], capsys
    )
    assert rc == 0
    full, cut = load_workload(pt), load_workload(tmp_path / "i")
    per_step = (len(full.ranks[0].nodes) - 1) // STEPS  # all but process_group:init
    assert len(cut.ranks[0].nodes) == 1 + 2 * per_step
    names = [n.name for n in cut.ranks[3].nodes if n.name.startswith("ProfilerStep#")]
    assert names == ["ProfilerStep#0", "ProfilerStep#1"]
    kernels = [n for n in cut.ranks[0].nodes if n.type == NodeType.COMM_COLL_NODE]
    assert (
        len(kernels)
        == 2 * len([n for n in full.ranks[0].nodes if n.type == NodeType.COMM_COLL_NODE]) // STEPS
    )
    assert cut.groups["1"] == (0, 2)
    rc, _o, err = cli(
        ["workload", "slice", str(pt), "--iterations", "9", "--out", str(tmp_path / "j")], capsys
    )
    assert rc == 0 and "fewer than 10: kept all" in err
    rc, _o, err = cli(
        ["workload", "slice", str(pt), "--iterations", "1", "--marker", "Nope#", "--out", "x"],
        capsys,
    )
    assert rc == 2 and "no iteration markers (nodes named Nope#...)" in err


def test_slice_node_range_drops_dependencies_on_nodes_outside(pt, tmp_path, capsys):
    rc, _o, err = cli(
        ["workload", "slice", str(pt), "--nodes", "10:30", "--out", str(tmp_path / "n")], capsys
    )
    assert rc == 0 and "removed" in err
    cut = load_workload(tmp_path / "n")  # loads: no dangling data_deps
    ids = [n.id for n in cut.ranks[0].nodes]
    assert ids[0] == 2 and all(10 <= i < 30 for i in ids[1:])  # process_group:init is kept
    assert cut.groups["2"] == (1, 3)
    rc, _o, err = cli(["workload", "slice", str(pt), "--nodes", "5", "--out", "x"], capsys)
    assert rc == 2 and "--nodes takes A:B" in err

"""The NCCL-like collective model: choices, limits, latencies, forcing, errors, and its wiring.

The model (``genie.collectives.nccl_model``) is checked on facts a broken model would get
wrong: NCCL's protocol by size, the bandwidth a ring reaches at large sizes (the narrower of the
link and the protocol's limit), the tree's advantage at small sizes on many nodes, the latency
of a ring counted in NCCL's constants, LL's flag bytes on the wire, and forcing as
NCCL_ALGO / NCCL_PROTO. Then ``genie simulate --collective-model nccl`` and ``genie nccl``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import genie
from genie.cli import main
from genie.collectives import gpu_presets as P
from genie.collectives import nccl_model as N
from genie.errors import CollectiveError, GenieError

REPO = Path(__file__).resolve().parents[1]
GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


def h100(nodes: int = 1, **kw) -> N.System:
    return N.system_from_preset("h100", nodes, **kw)


# -- choices ------------------------------------------------------------------------------------


def test_small_all_reduce_runs_LL_large_runs_Simple_on_several_nodes() -> None:
    sys4 = h100(4)
    assert N.choose("all_reduce", 8, sys4).protocol == "LL"
    assert N.choose("all_reduce", 4 * KiB, sys4).protocol == "LL"
    assert N.choose("all_reduce", 4 * GiB, sys4).protocol == "Simple"
    mid = N.choose("all_reduce", 4 * MiB, sys4)
    assert mid.protocol == "LL128", mid  # Hopper's middle sizes
    # the choice ranks first (here also the fastest), and each candidate is a distinct pair
    cands = N.candidates("all_reduce", 4 * MiB, sys4)
    assert cands[0] == mid and all(c.time_s >= mid.time_s for c in cands)
    assert len({c.label for c in cands}) == len(cands) == 7  # ring, tree x 3, nvlstree/Simple
    assert "nvlstree/Simple" in {c.label for c in cands}


def test_tree_beats_ring_at_small_sizes_on_many_nodes_not_on_one() -> None:
    many = h100(32)
    small = N.choose("all_reduce", 1 * KiB, many)
    ring = N.choose("all_reduce", 1 * KiB, many, algorithms="ring")
    assert small.algorithm == "tree" and ring.time_s > 3 * small.time_s
    assert N.choose("all_reduce", 1 * KiB, h100(1)).algorithm == "ring"


def test_only_all_reduce_has_a_tree_and_all_to_all_runs_as_p2p() -> None:
    sys2 = h100(2)
    for coll in ("all_gather", "reduce_scatter", "broadcast", "reduce"):
        assert {c.algorithm for c in N.candidates(coll, MiB, sys2)} == {"ring"}
    a2a_small = N.choose("all_to_all", 16 * 16 * KiB, sys2)  # 16 KiB per peer: LL
    a2a_large = N.choose("all_to_all", 16 * MiB, sys2)
    assert (a2a_small.algorithm, a2a_small.protocol) == ("p2p", "LL")
    assert (a2a_large.algorithm, a2a_large.protocol) == ("p2p", "Simple")
    # 8 of 16 peers are off the node: their bytes go over the GPU's share of the NICs
    net_share = sys2.node_net_bw / 8
    assert a2a_large.rate == pytest.approx(net_share)
    assert a2a_large.link_bytes == pytest.approx(16 * MiB / 16 * 8)
    one = N.choose("send_recv", GiB, h100(1, gpus_per_node=2))
    two = N.choose("send_recv", GiB, h100(2, gpus_per_node=1))
    assert one.time_s < two.time_s  # NVLink beats a NIC behind PCIe


# -- bandwidth and latency ----------------------------------------------------------------------


def test_ring_bus_bandwidth_approaches_the_link_or_the_protocol_cap() -> None:
    one = h100(1)
    big = 64 * GiB
    simple = N.choose("all_reduce", big, one, "ring", "Simple")
    ll = N.choose("all_reduce", big, one, "ring", "LL")
    ll128 = N.choose("all_reduce", big, one, "ring", "LL128")
    # the link's rate; busbw stays within the per-slice flag waits (< 8 %) of it
    assert simple.rate == pytest.approx(18 * 20.6e9, rel=1e-3)  # NCCL's NVLink figure
    assert ll.rate == pytest.approx(141e9, rel=1e-3)  # LL's limit on one Hopper node
    assert ll128.rate == pytest.approx(18 * 20.6e9 * 120 / 128, rel=1e-3)
    for p in (simple, ll, ll128):
        assert 0.92 * p.rate < p.busbw < p.rate
    # across nodes the NICs (less InfiniBand headers) are narrower than A100's NVLink
    a100 = N.system_from_preset("a100", 4)
    ring = N.choose("all_reduce", big, a100, "ring", "Simple")
    assert ring.rate == pytest.approx(8 * 25e9 * 4096 / 4122, rel=2e-3)
    assert 0.95 * ring.rate < ring.busbw < ring.rate
    # a GPU alone in its node is held to its PCIe link, however many NICs the node has
    lone = N.choose("all_reduce", big, h100(2, gpus_per_node=1), "ring", "Simple")
    assert lone.rate == pytest.approx(P.PCIE5_X16, rel=2e-3)


def test_ring_latency_is_counted_in_nccls_constants() -> None:
    one = N.choose("all_reduce", 0, h100(1), "ring", "LL")
    assert one.time_s == 0.0  # nothing to move
    # 8 GPUs on NVLink: base 6.6 us + 14 steps x 0.6 us
    tiny = N.candidates("all_reduce", 8, h100(1), "ring", "LL")[0]
    assert tiny.latency_s == pytest.approx(15.0e-6)
    # 2 nodes x 8: the slowest chain of 30 steps wraps round the ring and crosses both node
    # boundaries twice: 26 steps inside nodes at the CPU's post overhead (Intel 1 us), 4 at 2.7 us
    two = N.candidates("all_reduce", 8, h100(2), "ring", "LL")[0]
    assert two.latency_s == pytest.approx((6.6 + 26 * 1.0 + 4 * 2.7) * 1e-6)
    # the tree: base 6.8 + 2 x (7 x 0.6 + log2(32) x 5.0)
    tree = N.candidates("all_reduce", 8, h100(32), "tree", "LL")[0]
    assert tree.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 5 * 5.0)) * 1e-6)


def test_the_trees_latency_counts_the_hops_of_nccls_binary_tree() -> None:
    """NCCL's binary tree (trees.cc) gives the root one child, the highest power of two below
    the node count: 3 nodes are 0 - 2 - 1 (2 hops), 6 nodes 0 - 4 - 2 - 1 (3 hops), as deep as
    4 and 8 nodes; the tree's latency counts those hops each way."""
    assert [N.tree_depth(k) for k in (1, 2, 3, 4, 5, 6, 8, 9)] == [0, 1, 2, 2, 3, 3, 3, 4]
    for odd, even in ((3, 4), (6, 8)):
        for algo in ("tree", "nvlstree"):
            proto = "LL" if algo == "tree" else "Simple"
            a = N.candidates("all_reduce", 8, h100(odd), algo, proto)[0]
            b = N.candidates("all_reduce", 8, h100(even), algo, proto)[0]
            assert a.latency_s == pytest.approx(b.latency_s)
    two = N.candidates("all_reduce", 8, h100(2), "tree", "LL")[0]
    three = N.candidates("all_reduce", 8, h100(3), "tree", "LL")[0]
    assert three.latency_s - two.latency_s == pytest.approx(2 * 5.0e-6)  # one hop each way


def test_a_rings_slowest_chain_counts_the_node_boundaries_it_wraps_over() -> None:
    """Rank r's step s waits for rank r-1's step s-1: the last step waits on 2(n-1) hops that
    wrap round the ring, crossing ceil(2(n-1) N / n) node boundaries (NCCL's tuner counts
    2(N-1)); all-gather and reduce-scatter ceil((n-1) N / n); broadcast and reduce a chain from
    the root, N-1; one GPU per node NCCL's count."""
    assert N.ring_steps("all_reduce", 16, 2) == (30, 4)
    assert N.ring_steps("all_reduce", 64, 8) == (126, 16)
    assert N.ring_steps("all_reduce", 8, 4) == (14, 7)  # two GPUs per node: 2N - 1
    assert N.ring_steps("all_reduce", 4, 4) == (6, 6)  # one GPU per node: 2(N-1)
    assert N.ring_steps("all_gather", 16, 2) == (15, 2)
    assert N.ring_steps("reduce_scatter", 4, 4) == (3, 3)
    assert N.ring_steps("broadcast", 16, 2) == (15, 1)
    assert N.ring_steps("all_reduce", 8, 1) == (14, 0)
    # the latency takes them: 4 network steps at the EFA plugin's 20 us on two 8-GPU nodes
    efa = replace(h100(2), net_step_s=20e-6)
    p = N.candidates("all_reduce", 8, efa, "ring", "LL")[0]
    assert p.latency_s == pytest.approx((6.6 + 26 * 1.0 + 4 * 20.0) * 1e-6)


def test_a_simple_rings_later_passes_pay_their_steps_inside_the_node() -> None:
    one = h100(1)  # a pass moves 16 channels x 8 ranks x 2 MiB chunks = 256 MiB
    assert N.ring_loops("all_reduce", 256 * MiB, one, "Simple") == 1
    assert N.ring_loops("all_reduce", 256 * MiB + 1, one, "Simple") == 2
    assert N.ring_loops("all_reduce", 256 * MiB, one, "LL128") == 4  # 576,000-byte chunks
    assert N.ring_loops("broadcast", 8 * GiB, one, "Simple") == 1  # not a ring pattern

    def extra(size: int, system: N.System, proto: str = "Simple") -> float:
        p = N.candidates("all_reduce", size, system, "ring", proto)[0]
        q = N.candidates("all_reduce", 64, system, "ring", proto)[0]
        return p.latency_s - q.latency_s

    # one node: every slice (2 a step: SlicePerChunk) of every pass waits for its peer's flag,
    # where NCCL's tuner counts one wait per step of one pass; a chunk of at most 32 KiB (the
    # slice's floor) is one slice
    assert N.ring_slices("all_reduce", 4 * MiB, one) == 1  # 4 MiB / (16 x 8) = 32 KiB
    assert N.ring_slices("all_reduce", 8 * MiB, one) == 2
    assert N.ring_slices("broadcast", 8 * GiB, one) == 1
    assert extra(4 * MiB, one) == pytest.approx(0.0, abs=1e-12)
    assert extra(8 * MiB, one) == pytest.approx(14 * 3.4e-6)
    assert extra(256 * MiB, one) == pytest.approx(14 * 3.4e-6)
    # 4 passes of 2 slices: 7 more waits x 14 steps x NCCL's NVLink ring Simple latency (3.4 us)
    assert extra(GiB, one) == pytest.approx(7 * 14 * 3.4e-6)
    assert extra(GiB, one, "LL128") == pytest.approx(0.0, abs=1e-12)  # line flags: nothing
    # across nodes the later passes pay the NVLink step (the network's latency is paid once);
    # the first pass keeps NCCL's latency, plateau included
    two = h100(2)
    loops = N.ring_loops("all_reduce", 4 * GiB, two, "Simple")
    assert loops == 4 * GiB // (16 * 16 * 2 * MiB)
    p = N.candidates("all_reduce", 4 * GiB, two, "ring", "Simple")[0]
    first = (8.4 + 26 * max(3.4, 3 * 1.0) + 4 * 14.0) * 1.4  # 4 of its 30 steps cross nodes
    assert p.latency_s == pytest.approx((first + (loops - 1) * 30 * 3.4) * 1e-6)


def test_the_choice_does_not_see_a_simple_rings_later_flag_waits() -> None:
    # NCCL's tuner prices one pass, so the waits the model adds beyond it (later passes, slices)
    # stay in the time but do not steer the choice: on one H100 node a 16 GiB ring all-reduce
    # runs Simple, though its time with those waits is above LL128's
    one = h100(1)
    c = N.candidates("all_reduce", 16 * GiB, one, "ring")
    simple, ll128 = (next(p for p in c if p.protocol == q) for q in ("Simple", "LL128"))
    assert c[0] is simple and N.choose("all_reduce", 16 * GiB, one, "ring") == simple
    assert simple.time_s > ll128.time_s
    loops = N.ring_loops("all_reduce", 16 * GiB, one, "Simple")
    waits = (loops * 2 - 1) * 14 * 3.4e-6
    assert simple.time_s - waits < ll128.time_s


def test_protocols_put_their_flag_bytes_on_the_wire() -> None:
    c = {p.protocol: p for p in N.candidates("all_reduce", 64 * MiB, h100(2), "ring")}
    assert c["LL"].wire_bytes == pytest.approx(2 * c["LL"].link_bytes)
    assert c["LL128"].wire_bytes == pytest.approx(c["LL128"].link_bytes * 128 / 120)
    assert c["Simple"].wire_bytes == c["Simple"].link_bytes


# -- forcing and errors -------------------------------------------------------------------------


def test_forcing_mirrors_nccl_algo_and_nccl_proto() -> None:
    sys4 = h100(4)
    assert N.choose("all_reduce", 4 * GiB, sys4, algorithms="tree").algorithm == "tree"
    assert N.choose("all_reduce", 8, sys4, protocols="Simple").protocol == "Simple"
    assert N.choose("all_reduce", 8, sys4, protocols="^LL,LL128").protocol == "Simple"
    assert N.choose("all_reduce", 8, sys4, algorithms="Ring").algorithm == "ring"
    assert N.parse_choice("^tree", N.ALGORITHMS, "NCCL_ALGO") == ("ring", "nvls", "nvlstree", "pat")
    forced = N.choose("all_reduce", 8, sys4, algorithms="ring", protocols="ll128")
    assert forced.label == "ring/LL128"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: N.choose("all_gather", 8, h100(2), algorithms="tree"), "runs as ring$"),
        (lambda: N.choose("all_reduce", 8, h100(2), algorithms="collnetdirect"), "unknown 'coll"),
        (lambda: N.choose("all_reduce", 8, h100(2), algorithms="nvls"), "ring, tree, nvlstree$"),
        (lambda: N.choose("all_reduce", 8, h100(2), "nvlstree", "LL"), "Simple only"),
        (lambda: N.choose("all_reduce", 8, h100(2), protocols="LL256"), "NCCL_PROTO"),
        (lambda: N.choose("all_to_all", 8, h100(2), protocols="LL128"), "LL or Simple"),
        (lambda: N.choose("all_reduce", -1, h100(2)), "size"),
        (lambda: N.choose("barrier", 8, h100(2)), "collective 'barrier'"),
        (lambda: N.choose("send_recv", 8, h100(2)), "between 2 ranks"),
        (lambda: N.choose("all_reduce", 8, h100(1, gpus_per_node=1)), "at least 2 ranks"),
        (lambda: h100(0), "nodes"),
        (lambda: h100(1, channels=0), "channels"),
        (lambda: N.system_from_preset("tpu"), "unknown GPU preset 'tpu'"),
        (lambda: N.System(nodes=1, gpus_per_node=2, intra_bw=0.0, net_bw=1.0), "intra_bw"),
    ],
)
def test_bad_inputs_are_one_line_genie_errors(call, match) -> None:
    with pytest.raises(GenieError, match=match) as exc:
        call()
    assert "\n" not in str(exc.value)
    assert isinstance(exc.value, CollectiveError)


def test_presets_are_eight_gpu_servers_with_their_sources() -> None:
    assert set(P.PRESETS) == {"a100", "h100", "h200", "b200", "mi300x", "mi355x"}
    for p in P.PRESETS.values():
        assert p.gpus == 8 and p.nics == 8 and p.source
        assert 0 < p.intra_bw <= p.intra_line_bw and p.net_bw > 0 and p.gpu_nic_bw > 0
    assert P.preset("B200").intra_bw == pytest.approx(18 * 40.1e9)
    assert P.preset("a100").net_bw == pytest.approx(8 * 25e9)
    assert 0.97 < P.net_payload_fraction("roce") < P.net_payload_fraction("ib") < 1


def test_efa_prices_its_network_steps_at_the_plugins_published_latency() -> None:
    """aws-ofi-nccl's cost model: 20 us per network step, 3 us more with Simple, in place of
    NCCL's InfiniBand-derived network latency; steps inside a node keep NCCL's."""
    step, extra = P.net_step_latency("EFA")
    assert (step, extra) == (pytest.approx(20e-6), pytest.approx(3e-6))
    assert P.net_step_latency("ib") is None and P.net_step_latency("tcp") is None
    ib = N.System(nodes=2, gpus_per_node=8, intra_bw=370.8e9, net_bw=400e9)
    efa = replace(ib, net_step_s=step, net_simple_extra_s=extra)
    tree_ll = N.choose("all_reduce", 8, efa, "tree", "LL")
    assert tree_ll.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 20.0)) * 1e-6)
    tree_simple = N.choose("all_reduce", 8, efa, "tree", "Simple")
    assert tree_simple.latency_s == pytest.approx((8.4 + 2 * (7 * 4.0 + 23.0)) * 1e-6)
    ib_ll = N.choose("all_reduce", 8, ib, "tree", "LL")
    assert ib_ll.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 5.0)) * 1e-6)
    a2a = N.choose("all_to_all", 16 * 8, efa)  # one hop: the ring's base and a network step
    assert a2a.latency_s == pytest.approx((6.6 + 20.0) * 1e-6)
    with pytest.raises(CollectiveError, match="step latency"):
        replace(ib, net_step_s=-1e-6)


def test_published_efa_configurations_get_the_efa_step_latency() -> None:
    from genie.calibration.published_systems import system_of

    cfg = {
        "id": "t",
        "gpu": "H100-SXM",
        "intra": "nvswitch",
        "nic_kind": "efa",
        "nics_per_node": 32,
        "nic_gbps": 100,
        "model": {
            "hosts": 2,
            "ranks_per_host": 8,
            "link_rate": "3200Gb/s",
            "intra_bandwidth": "450GB/s",
        },
    }
    efa, _, _, _ = system_of(cfg)
    ib, _, _, _ = system_of({**cfg, "nic_kind": "ib"})
    assert efa.net_step_s == pytest.approx(20e-6) and efa.net_simple_extra_s == pytest.approx(3e-6)
    assert ib.net_step_s is None and ib.net_simple_extra_s == 0.0


def test_rccl_prices_a_network_step_at_its_own_latency_and_nothing_else() -> None:
    """RCCL 2.21.5's tuner prices a network step at its own ``hwLat[NET]`` (tree LL 11.8 us,
    NCCL 5.0): an AMD system's tree over two nodes pays 2 x (11.8 - 5.0) us more than the same
    system priced as NCCL; one node (no network step) and the base latency do not change."""
    amd = N.system_from_preset("mi300x", 2)
    assert amd.rccl and not N.system_from_preset("h100", 2).rccl
    nccl = replace(amd, rccl=False)
    a = N.candidates("all_reduce", 8, amd, "tree", "LL")[0]
    b = N.candidates("all_reduce", 8, nccl, "tree", "LL")[0]
    assert a.latency_s - b.latency_s == pytest.approx(2 * (11.8 - 5.0) * 1e-6)
    ring_a = N.candidates("all_reduce", 8, amd, "ring", "Simple")[0]
    ring_b = N.candidates("all_reduce", 8, nccl, "ring", "Simple")[0]
    assert ring_a.latency_s > ring_b.latency_s  # 15.1 us a network step, NCCL 14
    one = N.system_from_preset("mi300x", 1)
    assert (
        N.choose("all_reduce", 8, one).time_s
        == N.choose("all_reduce", 8, replace(one, rccl=False)).time_s
    )
    efa = replace(amd, net_step_s=20e-6)  # a plugin's own figure still wins
    t = N.candidates("all_reduce", 8, efa, "tree", "LL")[0]
    t0 = N.candidates("all_reduce", 8, replace(efa, rccl=False), "tree", "LL")[0]
    assert t.latency_s == pytest.approx(t0.latency_s)


def test_published_amd_configurations_are_priced_as_rccl() -> None:
    from genie.calibration.published_systems import system_of

    cfg = {
        "id": "t",
        "gpu": "MI355X",
        "intra": "xgmi",
        "nic_kind": "roce",
        "nics_per_node": 8,
        "nic_gbps": 400,
        "model": {"hosts": 2, "ranks_per_host": 8, "link_rate": "400GB/s"},
    }
    assert system_of(cfg)[0].rccl is True
    nv = {**cfg, "gpu": "H100-SXM", "intra": "nvswitch"}
    assert system_of(nv)[0].rccl is False


def test_published_configurations_take_the_librarys_ll128_rule() -> None:
    """A published MI250X node runs without LL128 (RCCL's default there), an MI300X or an H100
    node with it: ``system_of`` asks ``ll128_by_default``."""
    from genie.calibration.published_systems import system_of

    cfg = {
        "id": "t",
        "gpu": "MI250X",
        "intra": "xgmi",
        "nic_kind": "none",
        "model": {"hosts": 1, "ranks_per_host": 8, "link_rate": "400GB/s"},
    }
    assert system_of(cfg)[0].ll128 is False
    assert system_of({**cfg, "gpu": "MI300X"})[0].ll128 is True
    nv = {**cfg, "gpu": "H100-SXM", "intra": "nvswitch"}
    assert system_of(nv)[0].ll128 is True


def test_published_commands_bound_the_channels() -> None:
    """NCCL_MIN_CTAS / NCCL_MAX_CTAS in a published command bound the channels NCCL runs."""
    from genie.calibration.published_systems import system_of

    cfg = {
        "id": "t",
        "gpu": "H100-SXM",
        "intra": "nvswitch",
        "nic_kind": "ib",
        "nics_per_node": 8,
        "nic_gbps": 400,
        "command": "mpirun -x NCCL_ALGO=Ring ./all_reduce_perf",
        "model": {"hosts": 2, "ranks_per_host": 8, "link_rate": "400GB/s"},
    }
    base = system_of(cfg)[0].channels
    more = system_of({**cfg, "command": cfg["command"] + " -x NCCL_MIN_CTAS=24"})[0]
    fewer = system_of({**cfg, "command": "NCCL_MAX_NCHANNELS=4 " + cfg["command"]})[0]
    assert base < 24 and more.channels == 24 and fewer.channels == 4


# -- wiring: genie simulate, genie nccl, the published rows -------------------------------------


@pytest.fixture(scope="module")
def micro(tmp_path_factory) -> str:
    prefix = tmp_path_factory.mktemp("nccl") / "mb"
    gen = genie.generate(
        genie.Microbench(ranks=8, sizes=(1 * KiB, 256 * MiB), types=("all_reduce",))
    )
    genie.save_workload(gen.workload, prefix)
    return str(prefix)


FABRIC = ["--bandwidth", "400Gb/s", "--ranks-per-host", "4", "--gpu", "h100"]


def test_simulate_with_the_nccl_model_says_algorithm_and_protocol(micro, capsys) -> None:
    assert main(["simulate", micro, *FABRIC, "--collective-model", "nccl"]) == 0
    out = capsys.readouterr().out
    assert "NCCL-like model: algorithm and protocol per collective" in out
    assert "LL" in out and "Simple" in out
    assert main(["simulate", micro, *FABRIC, "--collective-model", "nccl", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    choices = {c["size"]: c for c in doc["nccl_choices"]}
    assert choices[KiB]["protocol"] == "LL" and choices[256 * MiB]["protocol"] == "Simple"
    assert {c["nodes"] for c in choices.values()} == {2}
    nccl_small = {r["size"]: r["time"] for r in doc["reports"][0]["collectives"]}[KiB]
    # the line-rate model (one option away) prints no choices, and prices the small one far lower
    assert main(["simulate", micro, *FABRIC, "--collective-model", "line-rate", "--json"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert "nccl_choices" not in line
    line_small = {r["size"]: r["time"] for r in line["reports"][0]["collectives"]}[KiB]
    assert nccl_small == pytest.approx(choices[KiB]["time_s"])  # alone: the model's time
    assert nccl_small != pytest.approx(line_small)
    # forcing, and options that need the model
    argv = [*FABRIC, "--collective-model", "nccl", "--nccl-proto", "Simple", "--json"]
    assert main(["simulate", micro, *argv]) == 0
    forced = json.loads(capsys.readouterr().out)
    assert {c["protocol"] for c in forced["nccl_choices"]} == {"Simple"}
    argv = [*FABRIC, "--collective-model", "line-rate", "--nccl-algo", "tree"]
    assert main(["simulate", micro, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--collective-model nccl" in err[0]


def test_nccl_version_option_prices_with_that_releases_constants(micro, capsys) -> None:
    """``--nccl-version`` (simulate and nccl): up to 2.22.3 a tree step with Simple costs 28 us
    and no base latency; the output names the constants; a bad release is one line, exit 2."""
    argv = ["nccl", "all_reduce", "64", "--gpu", "h100", "--nodes", "2", "--nccl-algo", "tree"]
    argv += ["--nccl-proto", "Simple", "--json"]
    assert main(argv) == 0
    latest = json.loads(capsys.readouterr().out)
    assert main([*argv, "--nccl-version", "2.22.3"]) == 0
    old = json.loads(capsys.readouterr().out)
    assert "NCCL 2.22.3 constants" in json.dumps(old["system"])
    assert old["rows"][0]["latency_s"] != pytest.approx(latest["rows"][0]["latency_s"])
    sim = ["simulate", micro, *FABRIC, "--nccl-algo", "tree", "--nccl-proto", "Simple", "--json"]
    assert main(sim) == 0
    a = json.loads(capsys.readouterr().out)
    assert main([*sim, "--nccl-version", "2.22.3"]) == 0
    b = json.loads(capsys.readouterr().out)
    assert "NCCL 2.22.3 constants" in b["network"] and "NCCL 2.22.3" not in a["network"]
    assert b["reports"][0]["iteration_s"] != pytest.approx(a["reports"][0]["iteration_s"])
    for bad in (
        ["nccl", "all_reduce", "64", "--nccl-version", "2.x"],
        [*sim, "--nccl-version", "3.0.1"],
    ):
        assert main(bad) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "NCCL release" in err[0], err
    amd = [
        "nccl",
        "all_reduce",
        "4M",
        "--gpu",
        "mi300x",
        "--nodes",
        "2",
        "--nccl-version",
        "2.21.5",
    ]
    assert main(amd) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RCCL" in err[0], err
    line_rate = ["simulate", micro, *FABRIC, "--collective-model", "line-rate"]
    assert main([*line_rate, "--nccl-version", "2.22.3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--collective-model nccl" in err[0], err


def test_the_nccl_model_is_simulates_default_unless_step_programs_are_asked_for(
    micro, capsys
) -> None:
    """Without --collective-model, simulate prices with the NCCL-like model; a forced
    --algorithm (or --pricer builtin) keeps genie's step programs at line rate, as before."""
    assert main(["simulate", micro, *FABRIC, "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert main(["simulate", micro, *FABRIC, "--collective-model", "nccl", "--json"]) == 0
    nccl = json.loads(capsys.readouterr().out)
    assert default["nccl_choices"] == nccl["nccl_choices"]
    assert default["reports"][0]["iteration_s"] == nccl["reports"][0]["iteration_s"]
    assert "NCCL-like model" in default["network"] and "GPU preset h100" in default["network"]
    assert main(["simulate", micro, *FABRIC, "--algorithm", "ring", "--json"]) == 0
    ring = json.loads(capsys.readouterr().out)
    assert "nccl_choices" not in ring and "NCCL-like" not in ring["network"]
    assert ring["reports"][0]["iteration_s"] == pytest.approx(default["line_rate"]["iteration_s"])
    assert main(["simulate", micro, "--bandwidth", "400Gb/s", "--ranks-per-host", "4"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no GPU preset (--gpu)" in out and "hopper constants" in out


def test_the_nccl_models_run_carries_the_line_rate_models_iteration(micro, capsys) -> None:
    """One option away and side by side: a run on the NCCL-like model carries the same replay
    on the line-rate model (its --json and a printed line), equal to a line-rate run's own."""
    assert main(["simulate", micro, *FABRIC, "--collective-model", "line-rate", "--json"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert "line_rate" not in line
    assert main(["simulate", micro, *FABRIC, "--collective-model", "nccl", "--json"]) == 0
    nccl = json.loads(capsys.readouterr().out)
    lr = nccl["line_rate"]
    assert lr["iteration_s"] == pytest.approx(line["reports"][0]["iteration_s"], rel=1e-12)
    assert lr["iteration_s"] != pytest.approx(nccl["reports"][0]["iteration_s"])
    assert main(["simulate", micro, *FABRIC, "--collective-model", "nccl"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    ratio = nccl["reports"][0]["iteration_s"] / lr["iteration_s"]
    assert "line-rate model on the same fabric" in out and f"{ratio:.2f}x" in out


def test_genie_nccl_prices_one_collective_over_sizes(capsys) -> None:
    argv = ["nccl", "all_reduce", "8,1GiB", "--gpu", "h100", "--nodes", "4", "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["protocol"] for r in rows] == ["LL", "Simple"]
    assert len(rows[0]["candidates"]) == 7
    assert main(["nccl", "all_gather", "1MiB", "--nccl-algo", "tree"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs as ring" in err[0]
    assert main(["nccl", "all_reduce", "1MiB", "--nodes", "2", "--all"]) == 0
    assert "ring" in capsys.readouterr().out


def test_the_nccl_model_is_closer_than_line_rate_on_small_published_rows(monkeypatch) -> None:
    path = REPO / "bench" / "nccl_model_vs_published.py"
    spec = importlib.util.spec_from_file_location("nccl_vs_published", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # its dataclasses look themselves up
    spec.loader.exec_module(mod)
    rows = [r for r in mod.price(mod.load_all(mod.DATA)) if r.healthy]
    for cls in mod.CLASSES:
        sel = [r for r in rows if r.size_class == cls]
        assert len(sel) >= 50, cls
        line = sum(abs(r.line_rate_err) for r in sel) / len(sel)
        nccl = sum(abs(r.nccl_err) for r in sel) / len(sel)
        # latencies and protocols matter most where messages are small
        assert nccl < line * (0.7 if cls == mod.CLASSES[0] else 1.0), (cls, nccl, line)


# -- pipeline fill ------------------------------------------------------------------------------


def test_pipeline_fill_follows_nccls_chunks_and_the_trees_depth() -> None:
    from genie.collectives import nccl_pipeline as F

    sys2 = h100(2)  # 2 nodes x 8 GPUs: Simple forwards chunks on 2 (7 + 1) = 16 tree stages,
    # LL and LL128 only on the 2 network hops (line by line inside a node); NVLSTree: scatter,
    # reduce and send up, receive and multicast, gather, and the 2 network hops
    assert F.depth(sys2, "tree", "Simple") == 16 and F.depth(sys2, "nvlstree", "Simple") == 6
    assert F.depth(sys2, "tree", "LL128") == F.depth(sys2, "tree", "LL") == 2
    assert F.depth(h100(1), "tree", "LL128") == 0
    # NVLS on one node: scatter, reduce and multicast, gather (all-gather: multicast, gather;
    # reduce-scatter: scatter, reduce)
    assert F.depth(h100(1), "nvls", "Simple") == 3 and F.depth(sys2, "ring", "Simple") == 1
    assert F.depth(h100(1), "nvls", "Simple", "all_gather") == 2
    assert F.depth(h100(1), "nvls", "Simple", "reduce_scatter") == 2
    assert F.depth(h100(4), "nvlstree", "Simple") == 4 + 2 * 2
    assert F.depth(h100(5), "tree", "Simple") == 2 * (7 + 3)  # ceil(log2 5) hops across
    # tree LL128: 576,000-byte chunks, halved (not below 128 KiB) while a channel holds fewer than
    # (1 + 1 + 0.8) x 64 / 8 = 22.4 of them, then (not below 32 KiB) fewer than 5.6
    ch = 16
    big = F.chunk_bytes(8 * GiB, sys2, "tree", "LL128", ch)
    assert big == 576000
    assert F.chunk_bytes(ch * 20 * 576000, sys2, "tree", "LL128", ch) == 288000
    assert F.chunk_bytes(4 * MiB, sys2, "tree", "LL128", ch) == 36000  # 576000 / 16
    # NVLS: 128 KiB chunks cut to 64 / 32 / 16 KiB below 64 / 8 / 2 per concurrent operation
    ops = ch * 8
    assert F.chunk_bytes(64 * ops * (128 << 10), h100(1), "nvls", "Simple", ch) == 128 << 10
    assert F.chunk_bytes(64 * ops * (128 << 10) - 1, h100(1), "nvls", "Simple", ch) == 65536
    assert F.chunk_bytes(1 * MiB, h100(1), "nvls", "Simple", ch) == 16384

    # priced: time = latency + bytes / rate + fill; no fill on a ring; the fill grows with the
    # chunk through the middle sizes and is one chunk-time per stage at the largest
    for size in (64, 1 * MiB, 64 * MiB, 4 * GiB):
        for p in N.candidates("all_reduce", size, sys2):
            bw = p.link_bytes / p.rate
            assert p.time_s == pytest.approx(p.latency_s + bw + p.fill_s, rel=1e-9), p
            assert (p.fill_s > 0.0) == (p.algorithm != "ring"), p
            assert p.fill_s < 1e-8 or size > 64, p  # a 64-byte message: no chunk to speak of
    fills = [N.choose("all_reduce", s, sys2, "tree", "LL128").fill_s for s in (KiB, MiB, GiB)]
    assert fills[0] < fills[1] < fills[2]
    top = N.choose("all_reduce", 8 * GiB, sys2, "tree", "LL128")
    # LL128 forwards whole chunks only on the two network hops: one chunk-time at the NICs' rate
    # as NCCL's tree prices it (x 0.92, then LL128's 120/128, within the per-channel caps)
    # NCCL's per-channel maxima count the search's 8 channels (16 run across 2 nodes)
    net = min(sys2.node_net_bw * 0.92, 8 * N.TREE_PER_CHANNEL["hopper"][1] * 1e9) * 120 / 128
    net = min(net, 8 * N.TREE_LL128_PER_CHANNEL["hopper"][1] * 1e9)
    assert top.fill_s == pytest.approx(576000 / (net / top.channels), rel=1e-9)
    # Simple: 14 stages along the chain inside the nodes at the NVLink rate (370.8 GB/s x 0.92),
    # 2 network hops at the NICs' (397 GB/s x 0.92), both within the tree's per-channel cap;
    # the slowest stage paces the stream, the other 15 add one chunk-time each
    simple = N.choose("all_reduce", 8 * GiB, sys2, "tree", "Simple")
    per = (512 << 10) * simple.channels  # a chunk on each channel
    cap = 8 * N.TREE_PER_CHANNEL["hopper"][1] * 1e9  # the search's 8 channels x 41.4 GB/s
    r_intra, r_net = min(sys2.intra_bw * 0.92, cap), min(sys2.node_net_bw * 0.92, cap)
    assert r_intra == r_net == cap  # the cap binds both: 15 equal stage-times
    want = 14 * per / r_intra + 2 * per / r_net - per / r_net
    assert simple.fill_s == pytest.approx(want, rel=1e-9)
    assert top.fill_s < 0.01 * top.time_s
    assert "pipeline_fill_s" in top.to_dict()


def test_an_nvls_stage_moves_a_chunk_for_every_head() -> None:
    """NVLS / NVLSTree: a channel scatters and gathers one chunk per NVLS head (the node's GPUs)
    each loop (NCCL's nchunksPerLoop = nHeads), so a stage's grain is 8 chunks on an HGX node."""
    from genie.collectives import nccl_pipeline as F

    one = h100(1)
    assert F.chunks_per_loop(one, "nvls") == 8 and F.chunks_per_loop(one, "tree") == 1
    assert F.chunks_per_loop(h100(2), "nvlstree") == 8
    p = N.choose("all_reduce", 8 * MiB, one, "nvls")
    # 8 MiB on 16 channels x 8 heads: 32 KiB chunks (8 MiB is not below 2 x 128 x 32 KiB);
    # scatter, reduce and multicast, gather: 2 stages of fill at the NVLS rate
    assert F.chunk_bytes(8 * MiB, one, "nvls", "Simple", 16) == 32768
    assert p.fill_s == pytest.approx(2 * 8 * 32768 / (p.rate / 16), rel=1e-9)
    # on one H100 node at 8 MiB the fill is a third of the time (nccl-tests: 80-85 us)
    assert 75e-6 < p.time_s < 90e-6 and p.fill_s > 0.3 * p.time_s
    # NVLSTree's chunk: nvlsChunkSize (128 KiB) on two nodes, nvlsTreeMaxChunkSize (64 KiB) from
    # four nodes on (src/transport/nvls.cc); a large message keeps it
    assert F.chunk_bytes(8 * GiB, h100(2), "nvlstree", "Simple", 16) == 128 << 10
    assert F.chunk_bytes(8 * GiB, h100(4), "nvlstree", "Simple", 16) == 64 << 10
    assert F.chunk_bytes(8 * GiB, h100(8), "nvlstree", "Simple", 16) == 64 << 10
    # a message smaller than one loop: the channel's share bounds the grain
    tiny = N.choose("all_reduce", 64 * KiB, one, "nvls")
    assert tiny.fill_s == pytest.approx(2 * (64 * KiB / 16) / (tiny.rate / 16), rel=1e-9)


def test_a_fill_through_unequal_stages_is_their_sum_less_the_slowest() -> None:
    """NVLSTree on two nodes behind one 400 Gb/s NIC each: the four NVLS stages run at the
    NVLink rate, the two network hops at the NIC's; the slowest (a hop) paces the stream, so
    the fill is the four fast stages and one hop, far below five hops."""
    from genie.collectives import nccl_pipeline as F

    slow = h100(2, net_bw=50e9)
    assert F.stages(slow, "nvlstree", "Simple") == (4, 2)
    size = 256 * MiB
    p = N.choose("all_reduce", size, slow, "nvlstree")
    grain = F.chunk_bytes(size, slow, "nvlstree", "Simple", 16) * 8 * 16  # a loop, all channels
    nvls = slow.intra_bw * N.NVLS_EFFICIENCY["hopper"]
    net = min(slow.node_net_bw, 16 * N.NVLSTREE_PER_CHANNEL["hopper"][1] * 1e9)
    assert p.fill_s == pytest.approx(4 * grain / nvls + grain / net, rel=1e-9)
    assert p.fill_s < 0.5 * (5 * grain / net)
    # equal rates: (D - 1) grain-times, as before
    even = F.fill_seconds(size, slow, "nvlstree", "Simple", 16, (net, net))
    assert even == pytest.approx(5 * grain / net, rel=1e-9)


def test_the_tree_runs_at_nccls_tree_rates() -> None:
    """NCCL's tuner (tuning.cc) prices a tree all-reduce at 0.92 of the link, LL at 1/3.8 of
    that (not LL's 1/2: the ring's), LL128 at 7/9 of it on one node; at 1 GiB and above no
    size correction applies, so the model's rate is exactly that."""
    one = h100(1)  # 370.8 GB/s NVLink per GPU
    rates = {p: N.choose("all_reduce", 4 * GiB, one, "tree", p).rate for p in N.PROTOCOLS}
    assert rates["Simple"] == pytest.approx(370.8e9 * 0.92)
    assert rates["LL"] == pytest.approx(370.8e9 * 0.92 / 3.8)  # under LL's 141 GB/s cap
    assert rates["LL128"] == pytest.approx(370.8e9 * 0.92 * 7 / 9)
    # the ring keeps the protocols' wire efficiency (LL 1/2, LL128 120/128)
    ring = N.choose("all_reduce", 4 * GiB, one, "ring", "LL128")
    assert ring.rate == pytest.approx(370.8e9 * 120 / 128)
    # across nodes the chain inside each node keeps the NVLink chain's 7/9 (its 2S bind on
    # two H100 nodes), and the network carries 120 of every 128 bytes after the 0.92
    # (within the tree's cap per search channel: 8 x 41.4 GB/s on two nodes)
    two = N.choose("all_reduce", 4 * GiB, h100(2), "tree", "LL128")
    assert two.rate == pytest.approx(min(370.8e9 * 0.92, 8 * 41.4e9) * 7 / 9)
    assert two.link_bytes == 2 * 4 * GiB
    thin = h100(2, net_bw=100e9)  # the NICs bind: S across at the network's factor
    net = N.choose("all_reduce", 4 * GiB, thin, "tree", "LL128")
    assert net.link_bytes == 4 * GiB
    assert net.rate == pytest.approx(thin.node_net_bw * 0.92 * 120 / 128)


def test_per_channel_maxima_count_the_searchs_channels_across_nodes() -> None:
    """NCCL's tuner multiplies its per-channel maxima by the channels its topology search found
    (tuning.cc), and connecting the rings doubles them (connect.cc): across nodes the 16
    channels an 8-NIC node runs (two per NIC) are 8 of the search's, so a tree on 4 H100 nodes
    with LL128 is capped at 8 x 29 GB/s, not 16 x 29; on one node the count is the search's."""
    four = h100(4)
    assert four.channels == 16 and four.search_channels == 8
    assert h100(1).search_channels == 16
    net = N._limit(four.node_net_bw, four, "tree", "LL128")  # the tree's NICs
    assert four.node_net_bw * 0.92 * 120 / 128 > 8 * 29.0e9  # the cap binds
    assert net == pytest.approx(8 * N.TREE_LL128_PER_CHANNEL["hopper"][2] * 1e9)
    tree = N.choose("all_reduce", 4 * GiB, four, "tree", "LL128")  # the chain: 8 x 36 x 7/9
    assert tree.rate == pytest.approx(8 * N.TREE_PER_CHANNEL["hopper"][2] * 1e9 * 7 / 9)
    ring = N.choose("all_reduce", 4 * GiB, four, "ring", "LL128")
    assert ring.rate == pytest.approx(min(four.node_net_bw * 120 / 128, 8 * 36.7e9))
    # had the cap counted the 16 channels NCCL runs, the tree would run at the network's rate
    assert four.node_net_bw * 0.92 * 120 / 128 < 16 * 29.0e9


def test_a_tree_with_one_gpu_per_node_runs_at_nccls_single_gpu_pattern() -> None:
    """With one GPU per node all of a node's NIC traffic goes to and from one GPU
    (NCCL_TOPO_PATTERN_TREE, search.cc), which NCCL's tuner prices at 0.85 of the tree's rate;
    two GPUs per node keep the full rate."""
    one = N.system_from_preset("h100", 2, 1, net_bw=400e9 / 8 * 4)
    for proto in N.PROTOCOLS:
        p = N.choose("all_reduce", 4 * GiB, one, "tree", proto)
        full = N._limit(one.node_net_bw, replace(one, gpus_per_node=2), "tree", proto)
        assert p.rate == pytest.approx(0.85 * full)
    ring = N.choose("all_reduce", 4 * GiB, one, "ring", "Simple")
    assert ring.rate == pytest.approx(one.node_net_bw)


def test_the_trees_size_correction_stops_where_nccls_does() -> None:
    """NCCL corrects the tree's rate for log2(bytes / 64) below 23 (512 MiB): a Simple tree at
    256 MiB runs at its table's 0.9, at 512 MiB at the full rate."""
    sys2 = h100(2)
    mid = N.choose("all_reduce", 256 * MiB, sys2, "tree", "Simple")
    big = N.choose("all_reduce", 512 * MiB, sys2, "tree", "Simple")
    assert N.TREE_CORRECTION[2][22] == 0.9 and N.TREE_CORRECTION[2][23] == 0.9
    assert mid.rate == pytest.approx(0.9 * big.rate)


def test_rccl_on_an_mi200_node_runs_no_ll128_unless_named() -> None:
    """RCCL 2.21.5 enables LL128 by default only on gfx90a nodes matching a tuned topology: an
    MI250X node prices LL, LL128 only when NCCL_PROTO names it; NVIDIA and MI300 keep it."""
    assert N.ll128_by_default("amd", "MI250X") is False
    assert N.ll128_by_default("amd", "MI210") is False
    assert N.ll128_by_default("amd", "MI300X") is True
    assert N.ll128_by_default("nvidia", "H100-SXM") is True
    mi250 = N.system_from_preset("mi300x", 4, intra_bw=252e9)
    on = N.choose("all_reduce", 8 * MiB, mi250)
    assert on.protocol == "LL128"
    off = replace(mi250, ll128=False)
    plain = N.candidates("all_reduce", 8 * MiB, off)
    assert plain and all(p.protocol != "LL128" for p in plain)
    assert N.choose("all_reduce", 8 * MiB, off).time_s > on.time_s
    forced = N.choose("all_reduce", 8 * MiB, off, protocols="LL128")
    assert forced.protocol == "LL128" and forced.time_s == pytest.approx(on.time_s)
    assert "LL128 only if NCCL_PROTO names it" in off.describe()


# -- NCCL's constants by release ----------------------------------------------------------------


def test_the_release_table_walks_back_from_the_latest_constants() -> None:
    from genie.collectives import nccl_releases as R

    latest = N.LATEST_CONSTANTS
    assert R.at(None, latest) is latest and R.at(R.LATEST, latest) is latest
    assert list(R.CHANGES) == sorted(R.CHANGES, key=lambda c: c.release, reverse=True)
    for ch in R.CHANGES:  # every entry is a change: its release's value is not the one before
        after = R.at(ch.release, latest)
        value: object = getattr(after, ch.table)
        for k in ch.key:
            value = value[k]  # type: ignore[index]
        assert value != ch.before, ch
        assert R.EARLIEST < ch.release <= R.LATEST and len(ch.commit) == 8


def test_tree_simple_and_nvls_steps_as_each_release_priced_them() -> None:
    def tree_simple(release: str) -> tuple[float, ...]:
        c = h100(nccl_release=release).constants
        return (c.base["tree"][2], *(c.hw[k]["tree"][2] for k in ("nvlink", "pci", "net")))

    assert tree_simple("2.18.1") == (0.0, 28.0, 28.0, 28.0)
    assert tree_simple("2.18.5") == (0.0, 4.0, 6.0, 14.0)  # 2.18.3, ea383122
    assert tree_simple("2.22.3") == (0.0, 28.0, 28.0, 28.0)  # 2.19.1 .. 2.22.3
    assert tree_simple("2.23.4") == tree_simple("2.30.7") == (8.4, 4.0, 4.0, 14.0)  # 68b54236
    nvls = {r: h100(nccl_release=r).constants for r in ("2.18.5", "2.20.5", "2.21.5", "2.28.9")}
    assert (nvls["2.18.5"].base["nvls"][2], nvls["2.18.5"].hw["nvlink"]["nvls"][2]) == (23.0, 0.0)
    assert nvls["2.20.5"].hw["nvlink"]["nvls"][2] == 23.0 and nvls["2.20.5"].base["nvls"][2] == 0
    assert nvls["2.21.5"].hw["nvlink"]["nvls"][2] == 25.0
    assert nvls["2.21.5"].hw["net"]["nvlstree"][2] == 14.0
    assert nvls["2.28.9"].hw["net"]["nvlstree"][2] == 20.9
    assert nvls["2.20.5"].ll_max_one_node["hopper"] == 87.7
    assert nvls["2.21.5"].ll_max_one_node["hopper"] == 141.0


def test_a_release_outside_the_table_takes_its_nearest_end_and_says_so() -> None:
    from genie.collectives import nccl_releases as R

    old = h100(nccl_release="2.9.9")
    assert old.constants.clamped and old.constants.hw["net"]["tree"][2] == 28.0
    assert "2.18.1 constants (the oldest known; 2.9.9 asked)" in old.describe()
    assert h100(nccl_release="2.31.0").constants.hw == N.HW_LATENCY_US
    assert R.parse_release("v2.21.5-1") == R.parse_release("2.21.5+cuda12.4") == (2, 21, 5)
    with pytest.raises(CollectiveError, match=r"2\.x\.y"):
        h100(nccl_release="latest")


def test_an_older_tuner_prices_the_tree_with_simple_dearer_and_picks_the_ring() -> None:
    # two H100 nodes, NCCL_ALGO=Ring,Tree NCCL_PROTO=Simple (TCPXO's profile): up to 2.22.3 a
    # tree step with Simple cost 28 us and no base, so the ring wins the smallest sizes
    new = N.choose("all_reduce", 8, h100(2), "ring,tree", "Simple")
    old = N.choose("all_reduce", 8, h100(2, nccl_release="2.21.5"), "ring,tree", "Simple")
    assert new.algorithm == "tree" and old.algorithm == "ring"
    tree_old = N.choose("all_reduce", 8, h100(2, nccl_release="2.21.5"), "tree", "Simple")
    # 2 x (7 NVLink steps x 28 us + 1 network step x 28 us), no base latency
    assert tree_old.latency_s == pytest.approx(2 * (7 * 28 + 28) * 1e-6)


def test_nvlstree_on_an_older_release_has_its_shorter_network_step_and_no_channel_limit() -> None:
    new = N.choose("all_reduce", 64, h100(2), "nvlstree")
    old = N.choose("all_reduce", 64, h100(2, nccl_release="2.21.5"), "nvlstree")
    assert new.latency_s - old.latency_s == pytest.approx(2 * (20.9 - 14.0) * 1e-6)
    assert h100(2, nccl_release="2.26.2").constants.nvlstree["hopper"] == (None, None, None)


def test_blackwell_before_2_25_took_hoppers_rows_and_no_ll128_and_pat_came_in_2_23_4() -> None:
    b200 = N.system_from_preset("b200", 1, nccl_release="2.24.3")
    assert b200.constants.row("blackwell") == "hopper"
    assert {p.protocol for p in N.candidates("all_reduce", 1 * MiB, b200)} == {"LL", "Simple"}
    b200_new = N.system_from_preset("b200", 1, nccl_release="2.25.1")
    assert "LL128" in {p.protocol for p in N.candidates("all_reduce", 1 * MiB, b200_new)}
    assert b200_new.constants.tree_ll128["blackwell"] == (73.4, 73.4, 58.0)  # 2 x Hopper's
    pairs = h100(1).with_ranks(4, 1)
    assert N.choose("all_gather", 1 * MiB, pairs, "pat").algorithm == "pat"
    with pytest.raises(CollectiveError):
        N.choose("all_gather", 1 * MiB, replace(pairs, nccl_release="2.22.3"), "pat")
    # NVLS ran all-gather from 2.19.1 (f9c3dc25); on 2.18 it was all-reduce only
    assert (
        N.choose("all_gather", 1 * MiB, h100(1, nccl_release="2.19.1"), "nvls").algorithm == "nvls"
    )
    with pytest.raises(CollectiveError):
        N.choose("all_gather", 1 * MiB, h100(1, nccl_release="2.18.5"), "nvls")
    assert (
        N.choose("all_reduce", 1 * MiB, h100(1, nccl_release="2.18.5"), "nvls").algorithm == "nvls"
    )


def test_the_ring_ll_rate_before_2_21_5_is_the_tuners_quarter() -> None:
    sys2 = replace(h100(2), net_bw=10e9)  # a slow network: LL's own limit does not bind
    old = replace(sys2, nccl_release="2.20.5")
    r_new = N.choose("all_reduce", 64 * KiB, sys2, "ring", "LL").rate
    r_old = N.choose("all_reduce", 64 * KiB, old, "ring", "LL").rate
    assert (r_new, r_old) == (pytest.approx(5e9), pytest.approx(2.5e9))


def test_a_configuration_is_priced_at_the_release_its_data_states() -> None:
    """``published_systems.system_of`` reads ``nccl_version`` (NVIDIA only): the H20 run's
    2.21.5 prices NVLSTree's network step at 14 us where the latest release says 20.9 us."""
    from genie.calibration import published_systems as PS
    from genie.calibration.published import load_all

    configs = load_all(REPO / "docs" / "validation")
    (h20,) = [c for c in configs if c["id"] == "H20-2x8-NDR-NVLSTree"]
    assert h20["nccl_version"] == "2.21.5"
    assert PS.system_of(h20)[0].nccl_release == "2.21.5"
    latest = {k: v for k, v in h20.items() if k != "nccl_version"}
    assert PS.system_of(latest)[0].nccl_release is None
    amd = {**h20, "gpu": "MI300X"}
    assert PS.vendor(amd) != "nvidia"
    with pytest.raises(CollectiveError, match="RCCL"):  # RCCL keeps its own constants
        PS.system_of(amd)
    for a, b in zip(PS.price_both(latest), PS.price_both(h20), strict=True):
        assert a.nccl.latency_s - b.nccl.latency_s == pytest.approx(2 * 6.9e-6)


def test_the_choice_ranks_by_the_time_ncclS_tuner_sees_not_by_flag_waits_it_misses() -> None:
    # one A100 node, 32 MiB: a Simple ring pays a flag wait per slice of every pass, which
    # NCCL's tuner (one pass priced) does not see: NCCL still picks it, and the model says so
    one = N.system_from_preset("a100", 1)
    cands = N.candidates("all_reduce", 32 << 20, one)
    chosen = N.choose("all_reduce", 32 << 20, one)
    assert chosen == cands[0] and chosen.label == "ring/Simple"
    faster = min(cands, key=lambda p: p.time_s)
    assert faster.label != chosen.label and faster.time_s < chosen.time_s
    waits = N._ring_pass_cost("all_reduce", 32 << 20, one, "Simple")
    assert waits > 0 and chosen.time_s - waits < faster.time_s  # what the tuner ranks by

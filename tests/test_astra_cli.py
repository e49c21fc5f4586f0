"""ASTRA-sim files in ``genie simulate``: reading them, refusing what is wrong in one line naming
the file and the key, ``--model astra-*`` end to end, and genie's own model set from them.

The models' figures are checked through ``genie.simulate``; the command line's refusals (exit 2,
one line) through ``genie simulate``."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import genie
from genie.cli import main
from genie.errors import ConfigError, GenieError
from genie.sim.adapter import compile_workload
from genie.sim.api import replay
from genie.sim.astra_config import AstraNetwork, load_comm_groups, load_network, load_system
from genie.sim.astra_events import bytes_per_ns
from genie.sim.astra_model import AstraBackend
from genie.workload import save_workload
from genie.workload.generators.builder import RankBuilder, finish
from genie.workload.model import CollectiveType

SYSTEM = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "all-reduce-implementation": ["ring"],
    "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"],
    "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware",
    "local-mem-bw": 1600,
}
NETWORK = "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"


def files(tmp_path, network=NETWORK, **system):
    """Write a network and a system file (system keys overridden, None deletes); their paths."""
    n = tmp_path / "net.yml"
    n.write_text(network)
    doc = {**SYSTEM, **system}
    doc = {k: v for k, v in doc.items() if v is not None}
    s = tmp_path / "sys.json"
    s.write_text(json.dumps(doc))
    return n, s


def collective_workload(tmp_path, ctype, size, ranks=4, name="wl"):
    """One collective per rank, saved as .et files; the prefix."""
    builders = [RankBuilder(r) for r in range(ranks)]
    for b in builders:
        b.collective("c", ctype, size)
    prefix = tmp_path / name / name
    save_workload(finish(name, builders), prefix)
    return str(prefix)


def astra_spec(wl, model, network, system, comm_group=None) -> genie.SimulateSpec:
    """A ``SimulateSpec`` of ``wl`` priced by ``model`` from ASTRA-sim's files."""
    m = genie.Model(
        kind=model, astra_network=str(network), astra_system=str(system), comm_group=comm_group
    )
    return genie.SimulateSpec(workload=str(wl), model=m)


def astra(wl, model, network, system) -> list[str]:
    """argv of ``genie simulate`` with an ASTRA-sim model and files."""
    return ["simulate", str(wl), "--model", model, "--astra-network", str(network),
            "--astra-system", str(system)]  # fmt: skip


def one_line_error(capsys, argv, *needles):
    """Run ``genie argv``: exit 2, one stderr line holding every needle."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("genie: error:"), err
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


# ---- reading the files ------------------------------------------------------------------------


def test_network_file_read_with_units(tmp_path):
    p = tmp_path / "n.yml"
    p.write_text(
        "topology: [ Ring, Switch ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50, 400.5 ]\n"
        "latency: [ 500, 936.25 ]  # ns\n"
    )
    net = load_network(p)
    assert net.topology == ("Ring", "Switch") and net.npus == (4, 2) and net.total_npus == 8
    assert net.bandwidth == (50.0, 400.5) and net.latency == (500.0, 936.25)
    assert net.address(5) == (1, 1)  # dimension 0 fastest, as ASTRA-sim numbers NPUs
    assert bytes_per_ns(50.0) == 50 * 2**30 / 1e9  # "GB/s" is 2^30 B/s


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("npus_count: [4]\nbandwidth: [1]\nlatency: [1]\n", "'topology'"),
        ("topology: [ Torus ]\nnpus_count: [4]\nbandwidth: [1]\nlatency: [1]\n", "'topology'"),
        (
            "topology: [ Ring, Ring ]\nnpus_count: [4]\nbandwidth: [1, 1]\nlatency: [1, 1]\n",
            "'npus_count'",
        ),
        ("topology: [ Ring ]\nnpus_count: [1]\nbandwidth: [1]\nlatency: [1]\n", "'npus_count'"),
        ("topology: [ Ring ]\nnpus_count: [4]\nbandwidth: [0]\nlatency: [1]\n", "'bandwidth'"),
        ("topology: [ Ring ]\nnpus_count: [4]\nbandwidth: [1]\nlatency: [-1]\n", "'latency'"),
        ("topology: [ Ring ]\nnpus_count: [4]\nbandwidth: [fast]\nlatency: [1]\n", "'bandwidth'"),
        ("topology: [ Ring\n", "YAML"),
        (
            "topology: [Ring,Ring,Ring,Ring,Ring]\nnpus_count: [2,2,2,2,2]\n"
            "bandwidth: [1,1,1,1,1]\nlatency: [1,1,1,1,1]\n",
            "'topology'",
        ),
    ],
)
def test_bad_network_file_names_file_and_key(tmp_path, text, key):
    p = tmp_path / "bad.yml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_network(p)
    msg = str(exc.value)
    assert str(p) in msg and key in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"all-reduce-implementation": ["doubleBinaryTree"]}, "'all-reduce-implementation'"),
        ({"all-reduce-implementation": ["butterfly"]}, "'all-reduce-implementation'"),
        ({"all-reduce-implementation": ["ring4"]}, "'all-reduce-implementation'"),
        ({"all-to-all-implementation": "direct"}, "'all-to-all-implementation'"),
        ({"all-reduce-implementation-custom": ["x.et"]}, "'all-reduce-implementation-custom'"),
        ({"preferred-dataset-splits": None}, "'preferred-dataset-splits'"),
        ({"preferred-dataset-splits": 0}, "'preferred-dataset-splits'"),
        ({"preferred-dataset-splits": 10**12}, "'preferred-dataset-splits'"),
        ({"active-chunks-per-dimension": 1.5}, "'active-chunks-per-dimension'"),
        ({"endpoint-delay": 0}, "'endpoint-delay'"),
        ({"local-mem-bw": -3}, "'local-mem-bw'"),
        ({"scheduling-policy": "RANDOM"}, "'scheduling-policy'"),
        ({"collective-optimization": "fast"}, "'collective-optimization'"),
        ({"model-shared-bus": 1}, "'model-shared-bus'"),
        ({"replay-only": 1}, "'replay-only'"),
        ({"roofline-enabled": 1}, "'roofline-enabled'"),
    ],
)
def test_bad_system_file_names_file_and_key(tmp_path, change, key):
    _, s = files(tmp_path, **change)
    with pytest.raises(ConfigError) as exc:
        load_system(s)
    msg = str(exc.value)
    assert str(s) in msg and key in msg and "\n" not in msg


def test_system_file_algorithms_and_windows(tmp_path):
    _, s = files(
        tmp_path,
        **{
            "all-reduce-implementation": ["direct8", "halvingDoubling"],
            "all-to-all-implementation": ["oneDirect"],
        },
    )
    system = load_system(s)
    ar = system.implementation("all_reduce", 2)
    assert [(i.algorithm, i.flat, i.window) for i in ar] == [
        ("direct", False, 8),
        ("halvingDoubling", False, -1),
    ]
    assert system.implementation("all_to_all", 3)[0].flat  # one* covers every dimension
    with pytest.raises(ConfigError, match="'all-reduce-implementation' has 2 entries"):
        system.implementation("all_reduce", 3)


def test_comm_group_file(tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{"1": [2, 0], "7": [1, 3]}')
    assert load_comm_groups(p, 4) == {"1": (2, 0), "7": (1, 3)}  # the ring order is kept
    for bad in ('{"1": [0, 4]}', '{"1": [0, 0]}', '{"1": []}', "[1]", "{"):
        p.write_text(bad)
        with pytest.raises(ConfigError, match=str(p)):
            load_comm_groups(p, 4)


# ---- the model's arithmetic --------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 9),
    size=st.integers(1, 8 * 2**20),
    lat=st.sampled_from([0.0, 500.0, 936.25]),
    bw=st.sampled_from([25.0, 50.0, 400.0]),
    e=st.integers(1, 1000),
    mem=st.sampled_from([1.0, 1600.0, 3350.0]),
    topo=st.sampled_from(["Ring", "Switch", "FullyConnected"]),
)
def test_ring_all_reduce_is_the_documented_closed_form(n, size, lat, bw, e, mem, topo):
    """docs/astra-sim.md: one split of a ring all-reduce takes
    2(n-1) floor(h a + m/B) + (n-1) 3 floor(m/M) + (2(n-1)+1) E, m = c/n."""
    sysdoc = {**SYSTEM, "preferred-dataset-splits": 1, "endpoint-delay": e, "local-mem-bw": mem}
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        n_path = Path(d) / "n.yml"
        n_path.write_text(
            f"topology: [{topo}]\nnpus_count: [{n}]\nbandwidth: [{bw}]\nlatency: [{lat}]\n"
        )
        s_path = Path(d) / "s.json"
        s_path.write_text(json.dumps(sysdoc))
        net, system = load_network(n_path), load_system(s_path)
    builders = [RankBuilder(r) for r in range(n)]
    for b in builders:
        b.collective("ar", CollectiveType.ALL_REDUCE, size)
    cw = compile_workload(finish("ar", builders))
    _, raw = replay(cw, AstraBackend(net, system, aware=False, per_member=True))
    c = max(size, n)  # a chunk is raised to the NPU count
    m = c // n
    hops = {"Ring": 1, "Switch": 2, "FullyConnected": 1}[topo]
    step = int(hops * lat + m / bytes_per_ns(bw))
    reduce = 3 * int(float(m) / (mem * 1e9) * 1e9)
    want = 2 * (n - 1) * step + (n - 1) * reduce + (2 * (n - 1) + 1) * e
    assert round(raw.makespan * 1e9) == want


def test_aware_model_refuses_multi_dimensional_networks(tmp_path):
    net = AstraNetwork("x.yml", ("Ring", "Switch"), (2, 2), (1.0, 1.0), (1.0, 1.0))
    _, s = files(tmp_path)
    with pytest.raises(ConfigError, match=r"x\.yml: key 'topology'"):
        AstraBackend(net, load_system(s), aware=True)


# ---- genie simulate ----------------------------------------------------------------------------


def test_simulate_astra_models_end_to_end(tmp_path):
    """Both ASTRA-sim models: 43.0 us, as ASTRA-sim 2.0 prints for its shipped 4-NPU 1 MiB ring
    all-reduce sample (Ring_4npus.yml, Ring_4chunks.json)."""
    wl = collective_workload(tmp_path, CollectiveType.ALL_REDUCE, 2**20)
    n, s = files(tmp_path)
    for model in ("astra-unaware", "astra-aware"):
        sim = genie.simulate(astra_spec(wl, model, n, s))
        (rep,) = sim.reports
        assert rep.backend == model
        assert rep.iteration_s == pytest.approx(43000e-9, abs=1e-12)
        assert "ASTRA-sim 2.0 analytical" in sim.network and "2^30 B/s" in sim.network


def test_astra_models_read_node_objects_past_the_columns_threshold(tmp_path, monkeypatch):
    """A trace big enough for genie's columns (``adapter.COLUMNS_BYTES``) still reads as Node
    objects for the ASTRA-sim models, which read nodes: same 43.0 us, no columns loaded."""
    from genie.sim import adapter
    from genie.workload import columnar

    wl = collective_workload(tmp_path, CollectiveType.ALL_REDUCE, 2**20)
    n, s = files(tmp_path)
    monkeypatch.setattr(adapter, "COLUMNS_BYTES", 0)
    monkeypatch.setattr(columnar, "load_columns", lambda *a, **k: pytest.fail("columns loaded"))
    for model in ("astra-unaware", "astra-aware"):
        (rep,) = genie.simulate(astra_spec(wl, model, n, s)).reports
        assert rep.iteration_s == pytest.approx(43000e-9, abs=1e-12)


@pytest.mark.parametrize("on", ["c", "x"])
def test_involved_dim_leaving_out_a_dimension_is_refused(tmp_path, on):
    """A node whose involved_dim leaves out a dimension is refused, read from its .et file (the
    reader keeps attrs as bytes: the check must still see them), on a collective or any node;
    an involved_dim of every dimension passes."""
    from genie.errors import ValidationError
    from genie.workload.model import Attr

    n, s = files(tmp_path)
    for dims, bad in (([True], False), ([True, False], True)):
        builders = [RankBuilder(r) for r in range(4)]
        for b in builders:
            c = b.collective("c", CollectiveType.ALL_REDUCE, 2**20)
            x = b.compute("x", 1e-6, [c])
            node = b.nodes[c if on == "c" else x]
            node.attrs.append(Attr("involved_dim", "bool_list", dims))
        prefix = tmp_path / f"{on}{len(dims)}" / "wl"
        save_workload(finish("wl", builders), prefix)
        if bad:
            with pytest.raises(ValidationError, match="involved_dim leaves out dimensions"):
                genie.simulate(astra_spec(prefix, "astra-unaware", n, s))
        else:
            assert genie.simulate(astra_spec(prefix, "astra-unaware", n, s)).iteration_s > 0


def test_simulate_genie_model_from_astra_files(tmp_path):
    """With --model genie the files set genie's own topology, bandwidth, latency, algorithm and
    chunks: the same figure as those options given by hand."""
    wl = collective_workload(tmp_path, CollectiveType.ALL_REDUCE, 2**20)
    n, s = files(tmp_path, **{"all-reduce-implementation": ["halvingDoubling"]})
    via_files = genie.simulate(astra_spec(wl, "genie", n, s)).iteration_s
    by_hand = genie.SimulateSpec(
        workload=wl,
        fabric=genie.Fabric(topology="ring", bandwidth="50GiB/s", latency="500ns"),
        model=genie.Model(chunks=4, algorithm="all_reduce=halvingDoubling"),
    )
    assert genie.simulate(by_hand).iteration_s == via_files
    ring = by_hand.replace(model=by_hand.model.replace(algorithm="all_reduce=ring"))
    assert genie.simulate(ring).iteration_s != via_files  # the algorithm did matter


def group_times(tmp_path, groups: dict, orders: list[dict], npus: int) -> list[float]:
    """Iteration time of one all-reduce per rank in ``groups`` for each comm-group file."""
    builders = [RankBuilder(r) for r in range(npus)]
    for b in builders:
        pg = next(g for g, members in groups.items() if b.rank in members)
        b.collective("ar", CollectiveType.ALL_REDUCE, 2**20, pg=pg)
    prefix = tmp_path / "g" / "g"
    save_workload(finish("g", builders, groups), prefix)
    n, s = files(tmp_path, network=NETWORK.replace("[ 4 ]", f"[ {npus} ]"))
    g = tmp_path / "cg.json"
    times = []
    for order in orders:
        g.write_text(json.dumps(order))
        spec = astra_spec(prefix, "astra-unaware", n, s, comm_group=str(g))
        times.append(genie.simulate(spec).iteration_s)
    return times


def test_simulate_comm_group_file(tmp_path):
    """--comm-group gives pg_name's ranks; a full-size group uses the network's own rings,
    whatever the listed order; a file that leaves out a calling rank is refused in one line."""
    orders = [{"5": [0, 1, 2, 3]}, {"5": [0, 2, 1, 3]}]
    times = group_times(tmp_path, {"5": (0, 1, 2, 3)}, orders, 4)
    assert times[0] == times[1] == pytest.approx(43000e-9, abs=1e-12)
    with pytest.raises(GenieError) as exc:
        group_times(tmp_path, {"5": (0, 1, 2, 3)}, [{"5": [0, 2]}], 4)
    err = str(exc.value)
    assert "\n" not in err and "group '5'" in err and "not a member" in err


def test_simulate_group_ring_order_matters(tmp_path):
    """A smaller comm group runs on a ring of its members in the listed order: on a Ring
    network 0-1-2-3 has 1-hop neighbours but 0-2-1-3 has 2-hop ones, so it is slower."""
    groups = {"1": (0, 1, 2, 3), "2": (4, 5, 6, 7)}
    orders = [{"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}, {"1": [0, 2, 1, 3], "2": [4, 5, 6, 7]}]
    times = group_times(tmp_path, groups, orders, 8)
    assert times[1] > times[0] * 1.1


def test_simulate_refusals_are_one_line(tmp_path, capsys):
    wl = collective_workload(tmp_path, CollectiveType.ALL_REDUCE, 2**20)
    n, s = files(tmp_path)
    base = ["simulate", wl, "--astra-network", str(n), "--astra-system", str(s)]
    one_line_error(capsys, ["simulate", wl, "--model", "astra-aware"], "--astra-network")
    one_line_error(capsys, ["simulate", wl, "--astra-network", str(n)], "together")
    one_line_error(capsys, [*base, "--topology", "ring"], "--topology")
    n8, _ = files(tmp_path, network=NETWORK.replace("[ 4 ]", "[ 8 ]"))
    one_line_error(capsys, astra(wl, "astra-unaware", n8, s), str(n8), "'npus_count'", "8 NPUs")
    two_d = tmp_path / "2d.yml"
    two_d.write_text("topology: [Ring, Switch]\nnpus_count: [2, 2]\nbandwidth: [50, 50]\n"
                     "latency: [500, 500]\n")  # fmt: skip
    one_line_error(capsys, astra(wl, "astra-aware", two_d, s), str(two_d), "'topology'", "1-D")
    one_line_error(capsys, astra(wl, "genie", two_d, s), str(two_d), "'topology'")
    _, s3 = files(tmp_path, **{"all-reduce-implementation": ["ring", "ring"]})
    one_line_error(
        capsys, astra(wl, "astra-unaware", n, s3), str(s3), "'all-reduce-implementation'"
    )
    _, s4 = files(tmp_path, **{"local-mem-bw": None})
    one_line_error(capsys, astra(wl, "astra-unaware", n, s4), str(s4), "'local-mem-bw'")
    red = collective_workload(tmp_path, CollectiveType.REDUCE, 2**20, name="red")
    one_line_error(capsys, astra(red, "astra-unaware", n, s), "ASTRA-sim 2.0 cannot run REDUCE")
    odd = collective_workload(tmp_path, CollectiveType.ALL_REDUCE, 2**20, ranks=3, name="odd")
    n3, s5 = files(
        tmp_path,
        network=NETWORK.replace("[ 4 ]", "[ 3 ]"),
        **{"all-reduce-implementation": ["halvingDoubling"]},
    )
    one_line_error(capsys, astra(odd, "astra-unaware", n3, s5), "power-of-two")


def test_broadcast_is_replayed_as_its_duration(tmp_path):
    """ASTRA-sim runs BROADCAST as the node's duration on each rank (0 us -> 1 ns)."""
    builders = [RankBuilder(r) for r in range(4)]
    for b in builders:
        b.collective("bc", CollectiveType.BROADCAST, 2**20)
    wl = finish("bc", builders)
    for rg in wl.ranks:
        rg.nodes[0].duration_micros = 7
    prefix = tmp_path / "bc" / "bc"
    save_workload(wl, prefix)
    n, s = files(tmp_path)
    sim = genie.simulate(astra_spec(prefix, "astra-aware", n, s))
    assert sim.iteration_s == pytest.approx(7e-6)


def test_one_comm_op_per_rank_at_a_time(tmp_path):
    """Two all-reduces ready together on every rank run one after another (ASTRA-sim's hardware
    resource), where genie's own model overlaps them."""
    builders = [RankBuilder(r) for r in range(4)]
    for b in builders:
        b.collective("a", CollectiveType.ALL_REDUCE, 2**20)
        b.collective("b", CollectiveType.ALL_REDUCE, 2**20)
    cw = compile_workload(finish("two", builders))
    n, s = files(tmp_path)
    be = AstraBackend(load_network(n), load_system(s), aware=False, per_member=True)
    _, raw = replay(cw, be)
    assert raw.makespan == pytest.approx(2 * 43000e-9, abs=1e-12)
    assert math.isclose(min(be.standalone.values()), 43000e-9, abs_tol=1e-12)

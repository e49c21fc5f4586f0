"""The testbed's ``[rdma]`` section: loaded and checked, written back, given to every RDMA job by
the controller, and (through the RDMA plane over the in-memory fabric) recorded as the run's
conditions."""

from __future__ import annotations

import msgspec
import pytest
from test_rdma_exec import Fabric
from test_rdma_plane import FabricPlane, _job

from genie.collectives.program import ProgramSpec
from genie.controller.local import options_for_testbed
from genie.errors import TestbedError
from genie.testbed import dumps_testbed, loads_testbed
from genie.testbed.model import MAX_QPS_PER_CONNECTION, RdmaSettings
from genie.wire.conditions import flatten
from genie.wire.messages import DataOptions, RdmaOptions
from genie.wire.tokens import new_token
from genie_agent.dataplane.rdma_conn import MAX_QPS, MAX_TRAFFIC_CLASS

BASE = (
    '[testbed]\nname = "lab"\nkind = "static"\ntransport = "rdma"\n'
    '[[hosts]]\nname = "a0"\ncontrol = "10.0.0.1:7000"\ndata_addr = "10.1.0.1"\n'
    '[[hosts]]\nname = "a1"\ncontrol = "10.0.0.2:7000"\ndata_addr = "10.1.0.2"\n'
    '[[switches]]\nname = "sw"\n'
    '[[links]]\na = "a0"\nb = "sw"\nrate = "100gbit"\n'
    '[[links]]\na = "a1"\nb = "sw"\nrate = "100gbit"\n'
)
LINE = len(BASE.splitlines()) + 2  # the key's line under [rdma]
RDMA = "[rdma]\nqps_per_connection = 4\nstall_s = 30\ntraffic_class = 106\n"


def test_the_rdma_section_loads_and_defaults_keep_todays_behaviour() -> None:
    tb = loads_testbed(BASE + RDMA)
    assert tb.rdma == RdmaSettings(qps_per_connection=4, stall_s=30.0, traffic_class=106)
    assert tb.rdma.priority == 3  # DSCP 26 -> priority 3 under DSCP trust
    plain = loads_testbed(BASE)
    assert plain.rdma == RdmaSettings() and plain.rdma.priority is None
    # the loader's bounds are the agents' (a testbed the loader takes, an agent takes too)
    assert MAX_QPS_PER_CONNECTION == MAX_QPS and MAX_TRAFFIC_CLASS == 255


@pytest.mark.parametrize(
    "line, key, words",
    [
        ("qps_per_connection = 0", "rdma.qps_per_connection", "must be 1..16, got 0"),
        ("qps_per_connection = 17", "rdma.qps_per_connection", "must be 1..16, got 17"),
        ('qps_per_connection = "4"', "rdma.qps_per_connection", "must be int"),
        ("stall_s = 0", "rdma.stall_s", "> 0"),
        ("stall_s = -2.5", "rdma.stall_s", "> 0"),
        ("stall_s = 100000", "rdma.stall_s", "<= 86400"),
        ("traffic_class = 256", "rdma.traffic_class", "must be 0..255"),
        ("traffic_class = -1", "rdma.traffic_class", "must be 0..255"),
        ("traffic_class = true", "rdma.traffic_class", "must be int"),
        ("qps = 2", "rdma.qps", "unknown key (known: qps_per_connection, stall_s, traffic_class)"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key(line: str, key: str, words: str) -> None:
    with pytest.raises(TestbedError) as got:
        loads_testbed(BASE + "[rdma]\n" + line + "\n", source="lab.toml")
    msg = str(got.value)
    assert "\n" not in msg and msg.startswith(f"lab.toml:{LINE}: {key}: ") and words in msg, msg


def test_the_section_is_written_back() -> None:
    tb = loads_testbed(BASE + RDMA)
    again = loads_testbed(dumps_testbed(tb))
    assert again.rdma == tb.rdma
    assert "[rdma]" not in dumps_testbed(loads_testbed(BASE))  # defaults: nothing written
    only_tc = loads_testbed(BASE + "[rdma]\ntraffic_class = 0\n")
    assert loads_testbed(dumps_testbed(only_tc)).rdma.traffic_class == 0  # set, even to 0


def test_the_controller_gives_every_job_the_testbed_settings() -> None:
    tb = loads_testbed(BASE + RDMA)
    opts = options_for_testbed(tb, DataOptions(transport="rdma"), ["a0", "a1"])
    assert (opts.rdma.qps, opts.rdma.stall_s, opts.rdma.traffic_class) == (4, 30.0, 106)
    # what the caller set is kept
    mine = DataOptions(rdma=RdmaOptions(qps=2, stall_s=5.0, traffic_class=34))
    kept = options_for_testbed(tb, mine, ["a0", "a1"]).rdma
    assert (kept.qps, kept.stall_s, kept.traffic_class) == (2, 5.0, 34)
    # no [rdma]: the options are those of before (stall_s 0: the run's timeout)
    plain = DataOptions(transport="rdma")
    assert options_for_testbed(loads_testbed(BASE), plain, ["a0", "a1"]) is plain


def test_a_run_on_the_testbed_records_its_queue_pairs_and_traffic_class() -> None:
    """testbed -> controller's options -> RDMA plane (in-memory verbs) -> Prepared conditions,
    flattened as a stored run shows them."""
    tb = loads_testbed(BASE + RDMA)
    opts = options_for_testbed(tb, DataOptions(token=new_token(), transport="rdma"), ["a0", "a1"])
    fab = Fabric()
    planes = [FabricPlane(fab), FabricPlane(fab)]
    try:
        s = ProgramSpec(collective="flow", algorithm="oneway", n_ranks=2, size=8192)
        prepared, _ = _job(planes, [s], ["a0", "a1"], opts, 1)
        assert all(e.kind == "prepared" for e in prepared), prepared
        assert all(len(vr.links) == 4 for dp in planes for vr in dp.made)  # 1 channel x 4 QPs
        held = {f"a{i}": msgspec.to_builtins(e.msg.conditions) for i, e in enumerate(prepared)}
        assert flatten(held) == {
            "RDMA queue pairs per connection": "4",
            "RDMA traffic class (GRH)": "106",
        }
    finally:
        for dp in planes:
            dp.close()


def test_the_lab_docs_rdma_section_loads_as_it_says() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "lab.md").read_text()
    block = re.search(r"```toml\n(\[rdma\].*?)```", text, re.S)
    assert block is not None
    rd = loads_testbed(BASE + block.group(1)).rdma
    assert (rd.qps_per_connection, rd.traffic_class, rd.priority) == (4, 106, 3)
    assert "DSCP = 106 >> 2 = 26, priority = 26 >> 3 = 3" in block.group(1)

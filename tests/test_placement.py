"""The one placement rule (genie.placement): every mode, its notes, and the testbed's use of it."""

from __future__ import annotations

import pytest

from genie.errors import UsageError
from genie.placement import MODES, job_blocks, parse_hosts, place, place_on
from genie.testbed import loads_testbed

TWO_BY_TWO = """
[testbed]
name = "t"
kind = "static"

[[hosts]]
name = "h0"
control = "127.0.0.1:7700"
ranks = 2

[[hosts]]
name = "h1"
control = "127.0.0.1:7701"
ranks = 2

[[switches]]
name = "sw0"

[[links]]
a = "h0"
b = "sw0"
rate = "10gbit"

[[links]]
a = "h1"
b = "sw0"
rate = "10gbit"
"""


def test_testbed_mode_fills_the_declared_slots_in_order() -> None:
    p = place(3, "testbed", slots=[2, 2])
    assert p.hosts == (0, 0, 1) and p.note == ""
    assert p.names(["h0", "h1"]) == ["h0", "h0", "h1"]


def test_testbed_slots_that_do_not_cover_the_workload_pack_and_say_so() -> None:
    p = place(5, "testbed", slots=[2, 2])
    assert p.hosts == (0, 0, 0, 1, 1)
    assert "3 per host on the testbed's 2 hosts" in p.note


def test_packed_and_round_robin() -> None:
    assert place(4, "packed", ranks_per_host=2).hosts == (0, 0, 1, 1)
    assert place(4, "round-robin", n_hosts=2).hosts == (0, 1, 0, 1)
    assert place(4, "round-robin", slots=[2, 2]).hosts == (0, 1, 0, 1)
    # packed onto too few hosts: more per host, said
    p = place(6, "packed", n_hosts=2)
    assert p.hosts == (0, 0, 0, 1, 1, 1) and "3 per host on 2 hosts" in p.note


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_ranks": 4, "mode": "ring"}, "unknown placement 'ring'"),
        ({"n_ranks": 0}, "at least one rank"),
        ({"n_ranks": 4, "mode": "testbed"}, "needs a testbed"),
        ({"n_ranks": 4, "slots": []}, "no hosts"),
        ({"n_ranks": 4, "ranks_per_host": 0}, "at least 1"),
    ],
)
def test_bad_placements_are_one_line_usage_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        place(**kwargs)


def test_every_mode_places_every_rank_on_a_valid_host() -> None:
    for mode in MODES:
        for n in (1, 3, 8, 17):
            p = place(n, mode, slots=[1, 3, 2])
            assert p.n_ranks == n and all(0 <= h < 3 for h in p.hosts), (mode, n, p)


def test_jobs_place_on_blocks_and_named_hosts() -> None:
    assert job_blocks([4, 2], 2) == [(0, 1), (2,)]
    assert place_on(4, (4, 5)).hosts == (4, 4, 5, 5)
    assert parse_hosts("0-2,7") == (0, 1, 2, 7)
    with pytest.raises(UsageError, match="do not fit"):
        place_on(8, (0, 1), 2)
    with pytest.raises(UsageError, match="name each host once"):
        parse_hosts("1,1")


def test_the_testbed_places_by_the_same_rule() -> None:
    tb = loads_testbed(TWO_BY_TWO)
    assert tb.rank_host_names() == ["h0", "h0", "h1", "h1"]
    rr = tb.place(4, "round-robin")
    assert tb.rank_host_names(rr) == ["h0", "h1", "h0", "h1"]
    assert tb.rank_hosts(tb.rank_host_names(rr)) == [0, 1, 0, 1]

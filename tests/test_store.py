"""Run store: schema, round trip of runs and instances, per-size times, durability per Go."""

from __future__ import annotations

import sqlite3

import pytest

from genie.collectives.program import ProgramSpec
from genie.controller.results import Instance
from genie.errors import StoreError
from genie.store import RunStore


def inst(i: int, t: float, warmup: bool = False) -> Instance:
    return Instance(
        iteration=i,
        warmup=warmup,
        start_ns=1000 * i,
        end_ns=1000 * i + int(t * 1e9),
        time_s=t,
        rank_start_ns=[1000 * i, 1000 * i + 5],
        rank_end_ns=[2, 3],
        ranks=[0, 1],
    )


def test_round_trip_and_size_times(tmp_path) -> None:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as st:
        rid = st.start_run(
            "genie bench x", testbed_name="loop", testbed_text="[testbed]", meta={"iters": 2}
        )
        st.update_run(rid, clock_offsets={"h0": {"offset_ns": 5}}, host_facts={"h0": {"cpus": 2}})
        for size in (1024, 4096):
            spec = ProgramSpec(collective="all_reduce", algorithm="ring", n_ranks=2, size=size)
            st.add_instances(
                rid,
                spec,
                [inst(0, 9.0, True), inst(1, size * 1e-9), inst(2, size * 2e-9)],
                streams=2,
            )
        st.finish_run(rid, "ok")
    with RunStore(path) as st:  # reopened: everything is on disk
        (info,) = st.list_runs()
        assert info.run_id == rid and info.status == "ok" and info.instances == 6
        assert info.clock_offsets == {"h0": {"offset_ns": 5}} and info.meta == {"iters": 2}
        assert info.testbed == "[testbed]" and info.finished_at >= info.created_at
        assert st.size_times(rid) == {1024: [1024e-9, 2048e-9], 4096: [4096e-9, 8192e-9]}
        assert st.size_times(rid, collective="all_gather") == {}
        rows = st.instances(rid[:10])  # a unique prefix works
        assert (
            len(rows) == 4 and rows[0]["streams"] == 2 and rows[0]["rank_times"][1] == [1, 1005, 3]
        )
        assert len(st.instances(rid, include_warmup=True)) == 6


def test_wal_mode_and_unknown_run(tmp_path) -> None:
    path = tmp_path / "r.sqlite"
    RunStore(path).close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with RunStore(path) as st, pytest.raises(StoreError, match="no run"):
        st.run("nope")


def test_rows_survive_an_unfinished_run(tmp_path) -> None:
    path = tmp_path / "r.sqlite"
    st = RunStore(path)
    rid = st.start_run("genie bench")
    spec = ProgramSpec(collective="all_reduce", algorithm="ring", n_ranks=2, size=8)
    st.add_instances(rid, spec, [inst(0, 1e-6)])
    # no finish_run, no close: another connection sees the committed rows
    other = RunStore(path)
    assert other.run(rid).status == "running" and other.size_times(rid) == {8: [1e-6]}
    other.close()
    st.close()


def test_unwritable_store_is_a_store_error(tmp_path) -> None:
    with pytest.raises(StoreError):
        RunStore(tmp_path / "missing-dir" / "x.sqlite")

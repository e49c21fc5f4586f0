"""``genie runs list|show|export`` over a store, and durability when the writer is killed."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from genie.collectives.program import ProgramSpec
from genie.controller.results import Instance
from genie.errors import GenieError
from genie.store import RunStore


def _inst(i: int, t: float, warmup: bool = False) -> Instance:
    return Instance(
        iteration=i,
        warmup=warmup,
        start_ns=10 * i,
        end_ns=10 * i + int(t * 1e9),
        time_s=t,
        rank_start_ns=[10 * i, 10 * i],
        rank_end_ns=[1, 2],
        ranks=[0, 1],
    )


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as st:
        rid = st.start_run(
            "genie bench --sizes 1KiB,4KiB",
            testbed_name="loop2",
            testbed_text="[testbed]\nname = 'loop2'\n",
            host_facts={"h0": {"hostname": "box", "cpus_logical": 2}},
            clock_offsets={"h0": {"offset_ns": 1234}},
            workload_hash="sha256:abc",
        )
        for size, t in ((1024, 1e-5), (4096, 3e-5)):
            spec = ProgramSpec(collective="all_reduce", algorithm="ring", n_ranks=2, size=size)
            st.add_instances(rid, spec, [_inst(0, 1.0, True), _inst(1, t), _inst(2, t)])
        st.finish_run(rid, "failed", "agent h1 lost during all_reduce")
    return path, rid


def genie_main(argv: list[str]) -> int:
    """Run ``genie runs ...`` through its own parser (as genie.cli does: GenieError -> code)."""
    import argparse

    from genie.commands import runs as runs_cmd

    parser = argparse.ArgumentParser(prog="genie")
    runs_cmd.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except GenieError as exc:
        print(f"genie: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = genie_main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_and_show(store, capsys) -> None:
    path, rid = store
    rc, out, _ = _run(["runs", "list", "--store", str(path), "--json"], capsys)
    assert rc == 0
    (row,) = json.loads(out)
    assert row["run_id"] == rid and row["status"] == "failed" and row["instances"] == 6
    rc, out, _ = _run(["runs", "show", rid[:-2], "--store", str(path)], capsys)
    assert rc == 0
    assert "failed (agent h1 lost during all_reduce)" in out
    assert "workload hash sha256:abc" in out and "clock offset 1234 ns" in out
    assert "size=1024 B: 2 x, p50 10.0 us" in out  # measured only: the warm-up is left out
    rc, out, _ = _run(["runs", "show", rid, "--store", str(path), "--json"], capsys)
    data = json.loads(out)
    assert data["testbed"].startswith("[testbed]") and len(data["summary"]) == 2
    assert data["genie_version"]


def test_export_csv_and_parquet(store, tmp_path, capsys) -> None:
    path, rid = store
    rc, out, _ = _run(["runs", "export", rid, "--store", str(path), "--csv", "-"], capsys)
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 6 and {r["size"] for r in rows} == {"1024", "4096"}
    assert [r["warmup"] for r in rows[:3]] == ["1", "0", "0"]
    assert float(rows[1]["time_s"]) == pytest.approx(1e-5)
    rc, _, _ = _run(
        [
            "runs",
            "export",
            rid,
            "--store",
            str(path),
            "--csv",
            str(tmp_path / "x.csv"),
            "--no-warmup",
        ],
        capsys,
    )
    assert rc == 0 and len((tmp_path / "x.csv").read_text().splitlines()) == 1 + 4
    rc, _, err = _run(
        ["runs", "export", rid, "--store", str(path), "--parquet", str(tmp_path / "x.pq")], capsys
    )
    try:
        import pyarrow.parquet as pq
    except ImportError:
        assert rc == 2 and "pip install pyarrow" in err and len(err.strip().splitlines()) == 1
    else:
        assert rc == 0 and pq.read_table(tmp_path / "x.pq").num_rows == 6


def test_unknown_run_and_missing_store_are_one_line_errors(store, tmp_path, capsys) -> None:
    path, _ = store
    rc, _, err = _run(["runs", "show", "nope", "--store", str(path)], capsys)
    assert rc != 0 and "no run 'nope'" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _run(["runs", "list", "--store", str(tmp_path / "none.sqlite")], capsys)
    assert rc != 0 and "no run store" in err


WRITER = textwrap.dedent(
    """
    import sys, time
    from genie.collectives.program import ProgramSpec
    from genie.controller.results import Instance
    from genie.store import RunStore

    st = RunStore(sys.argv[1])
    rid = st.start_run("writer")
    spec = ProgramSpec(collective="all_reduce", algorithm="ring", n_ranks=2, size=1024)
    for k in range(1_000_000):
        x = Instance(iteration=k, warmup=False, start_ns=0, end_ns=1, time_s=1e-9,
                     rank_start_ns=[0], rank_end_ns=[1], ranks=[0])
        st.add_instances(rid, spec, [x])
        if k == 20:
            print("20", flush=True)
    """
)


def test_killed_writer_keeps_every_committed_instance(tmp_path) -> None:
    path = tmp_path / "crash.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "20"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        proc.stdout.close()
    with RunStore(path) as st:
        (info,) = st.list_runs()
        assert info.status == "running"  # interrupted: never finished
        assert info.instances >= 21
        its = [x["iteration"] for x in st.instances(info.run_id)]
        assert its == list(range(len(its)))  # no gap, no torn row
